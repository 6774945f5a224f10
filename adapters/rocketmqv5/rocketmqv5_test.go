package rocketmqv5_test

// These tests run the official RocketMQ 5 Go client (v5.1.4) through the adapters against
// a real server: Sluice's gRPC front end over an embedded broker, and (TestApacheRocketMQ5)
// Apache RocketMQ 5.3.3. No goleak here: the official client keeps process-wide
// goroutines (its client manager, log writers) by design; the runner's own loops are
// checked by Shutdown returning nil.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	_ "modernc.org/sqlite"

	"github.com/sluicemq/sluice/adapters/rocketmqv5"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/grpcfront"
	"github.com/sluicemq/sluice/broker/pop"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/peers/peertest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/redisdedup"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/internal/testkit/testfront"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

func TestMain(m *testing.M) {
	cleanup, err := testfront.ClientEnv()
	if err != nil {
		panic(err)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// front starts a broker and its gRPC front end (1 s minimum invisible duration, 2 s long
// polling) and returns the front end.
func front(t *testing.T) *grpcfront.Server {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{})
	return testfront.Start(t, b, grpcfront.Config{MinInvisibleDuration: time.Second, LongPollingTimeout: 2 * time.Second,
		Pop: pop.Config{ReviveInterval: 50 * time.Millisecond}})
}

func newProducer(t *testing.T, ep string, topics ...string) rmq.Producer {
	t.Helper()
	p, err := rmq.NewProducer(&rmq.Config{Endpoint: ep, Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics(topics...),
		rmq.WithClientFunc(slowClient))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rocketmqv5.Component(p).Shutdown(testkit.Context(t, 30*time.Second)); err != nil {
			t.Errorf("producer stop: %v", err)
		}
	})
	return p
}

// slowClient makes the client's requests time out after 15 s instead of 3 s: the route
// queries of a client's start take longer from a reference broker just started on a
// loaded machine.
func slowClient(cfg *rmq.Config, opts ...rmq.ClientOption) (rmq.Client, error) {
	return rmq.NewClient(cfg, append(opts, rmq.WithQueryRouteTimeout(15*time.Second))...)
}

func newSimpleConsumer(t *testing.T, ep, group string, topics ...string) rmq.SimpleConsumer {
	t.Helper()
	subs := map[string]*rmq.FilterExpression{}
	for _, tp := range topics {
		subs[tp] = rmq.SUB_ALL
	}
	c, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: ep, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(2*time.Second), rmq.WithSimpleSubscriptionExpressions(subs), rmq.WithClientFuncForSimpleConsumer(slowClient))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.GracefulStop() })
	return c
}

// sent is what the scenario sent, by the key the consume side sees (StableKey).
type sent struct {
	msgID   string
	seq     string
	group   string // message group expected on delivery ("" for none)
	deliver int64  // lowest TIMER_DELIVER_MS expected on delivery (0 for none)
}

// topics of a scenario: normal messages, and (when the server's topics need a type, the
// FIFO and DELAY messages on their own topics).
type topics struct{ normal, fifo, delay string }

// sendScenario sends, through SendFunc wrapped by middleware.Keys, five messages: one
// without keys (Keys gives it its content key) and its duplicate (same tag and body: the
// same content key), "order-1" (which the handlers fail once), "order-2" with a sharding
// key (a FIFO message of message group user-7) and "order-3" with delay level 1 (a DELAY
// message due 1 s later). It returns what was sent by key, and the content key.
func sendScenario(t *testing.T, p rmq.Producer, tp topics) (map[string]sent, string) {
	t.Helper()
	send := middleware.ChainSend(rocketmqv5.SendFunc(p), middleware.Keys())
	want := map[string]sent{}
	var contentKey string
	for i := range 5 {
		topic := tp.normal
		m := message.NewMessage(topic, []byte("payment-"+strconv.Itoa(i)))
		m.SetTag("Paid").SetProperty("seq", strconv.Itoa(i))
		key := ""
		var w sent
		switch i {
		case 0, 1: // no keys: the content key; the second is a duplicate of the first
			m.Body = []byte("payment-0")
			key = middleware.ContentKey(m)
			contentKey = key
		case 2:
			key = "order-1"
		case 3:
			key = "order-2"
			m.Topic = tp.fifo
			m.SetShardingKey("user-7")
			w.group = "user-7"
		case 4:
			key = "order-3"
			m.Topic = tp.delay
			m.SetDelayLevel(1)
			w.deliver = time.Now().Add(time.Second).UnixMilli()
		}
		if i >= 2 {
			m.SetKeys(key, "user-7")
		}
		res, err := send(testkit.Context(t, 20*time.Second), m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if res.Status != message.SendOK || res.MsgID == "" || res.Queue.Topic != m.Topic || res.Queue.QueueID != -1 || res.TransactionID != "" {
			t.Fatalf("send %d: result %+v", i, res)
		}
		if m.UniqKey() != "" {
			t.Fatalf("send %d: SendFunc modified the message (UNIQ_KEY %q)", i, m.UniqKey())
		}
		w.msgID, w.seq = res.MsgID, strconv.Itoa(i)
		if i == 1 {
			key += "#dup" // the duplicate is checked by its own id
		}
		want[key] = w
	}
	if !strings.HasPrefix(contentKey, "Paid_") || len(contentKey) != len("Paid_")+32 {
		t.Fatalf("content key %q, want Paid_<md5hex>", contentKey)
	}
	return want, contentKey
}

// delivery is one message the consume chain saw.
type delivery struct {
	m  *message.MessageExt
	at int64 // unix ms when the chain saw it
}

// recorder is the outermost consume step: it records every delivery the chain sees.
type recorder struct {
	mu   sync.Mutex
	seen []delivery
}

func (r *recorder) step(next middleware.ConsumeFunc) middleware.ConsumeFunc {
	return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		r.mu.Lock()
		for _, m := range msgs {
			r.seen = append(r.seen, delivery{m: m, at: time.Now().UnixMilli()})
		}
		r.mu.Unlock()
		return next(ctx, msgs)
	}
}

// byID returns the deliveries of message id.
func (r *recorder) byID(id string) []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivery
	for _, d := range r.seen {
		if d.m.MsgID == id {
			out = append(out, d)
		}
	}
	return out
}

// failOnce fails the first delivery of key "order-1".
type failOnce struct {
	mu     sync.Mutex
	failed bool
}

func (f *failOnce) fail(m *message.MessageExt) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if middleware.StableKey(m) == "order-1" && !f.failed {
		f.failed = true
		return true
	}
	return false
}

// checkDeliveries checks what the chain saw against what was sent: each message
// delivered with its topic, tag, keys, seq property, id (as MsgID and UNIQ_KEY), message
// group and delivery time; "order-1" a second time with attempt 2; the delay message not
// before it was due.
func checkDeliveries(t *testing.T, rec *recorder, want map[string]sent, contentKey string) {
	t.Helper()
	for key, w := range want {
		ds := rec.byID(w.msgID)
		wantKey := strings.TrimSuffix(key, "#dup")
		switch {
		case wantKey == contentKey && len(ds) == 0,
			wantKey != contentKey && key == "order-1" && len(ds) != 2,
			wantKey != contentKey && key != "order-1" && len(ds) != 1:
			// The two copies with the content key may be delivered again: under
			// redismw.Dedup, a copy that finds the other's lock held is given back.
			var seen []string
			for _, d := range ds {
				seen = append(seen, fmt.Sprintf("attempt %d at %d", d.m.ReconsumeTimes+1, d.at))
			}
			t.Errorf("%s (%s): %d deliveries (%s), want 2 for order-1, 1 for the others", key, w.msgID, len(ds), strings.Join(seen, ", "))
			continue
		}
		for i, d := range ds {
			m := d.m
			if m.Tag() != "Paid" || middleware.StableKey(m) != wantKey || m.Property("seq") != w.seq || m.UniqKey() != w.msgID ||
				m.Property(rocketmqv5.PropertyMessageGroup) != w.group || m.ReconsumeTimes != int32(i) || m.QueueID != -1 || m.BornTimestamp == 0 {
				t.Errorf("%s delivery %d: %+v", key, i+1, m)
			}
			if wantKey != contentKey && strings.Join(m.Keys(), " ") != wantKey+" user-7" {
				t.Errorf("%s: keys %q", key, m.Keys())
			}
			if w.deliver != 0 {
				at, err := strconv.ParseInt(m.Property(message.PropertyTimerDeliverMs), 10, 64)
				// Set from the time of the send: a little after w.deliver, within the send's duration.
				if err != nil || at < w.deliver || at > w.deliver+20_000 {
					t.Errorf("%s: TIMER_DELIVER_MS %q, want about %d", key, m.Property(message.PropertyTimerDeliverMs), w.deliver)
				} else if d.at < at {
					t.Errorf("%s: delivered at %d, before it was due at %d", key, d.at, at)
				}
			} else if m.Property(message.PropertyTimerDeliverMs) != "" {
				t.Errorf("%s: TIMER_DELIVER_MS %q on a message sent without delay", key, m.Property(message.PropertyTimerDeliverMs))
			}
		}
	}
}

// settle waits, when the server's in-flight count cannot be read (inflight nil), until
// no delivery has come for a while (longer than the scenario's invisibility plus the
// reference's redelivery lag), so that a message left unacknowledged shows up as a
// second delivery.
func settle(t *testing.T, rec *recorder, inflight func() int) {
	t.Helper()
	if inflight != nil {
		return
	}
	if _, ok := testkit.Settle(60*time.Second, 12*time.Second, func() int { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.seen) }, nil); !ok {
		t.Fatal("deliveries kept coming for 60 s")
	}
}

// openInbox opens a SQLite database with the inbox table and a business table.
func openInbox(t *testing.T, group string) (*sql.DB, *inbox.Inbox) {
	t.Helper()
	db, err := sql.Open("sqlite", inbox.SQLiteDSN(filepath.Join(t.TempDir(), "inbox.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: inbox.SQLite, Group: group, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 10*time.Second)
	if err := ib.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (msg_key TEXT NOT NULL, body TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db, ib
}

// effects counts the business table's rows by key.
func effects(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.QueryContext(testkit.Context(t, 10*time.Second), `SELECT msg_key, COUNT(*) FROM effects GROUP BY msg_key`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// runSimple runs the scenario with a SimpleRunner over a SimpleConsumer, the chain being
// recorder → inbox (SQLite) → handler; it returns when every key has its one effect and
// every delivery was seen.
func runSimple(t *testing.T, ep string, tp topics, group string, inflight func() int) {
	p := newProducer(t, ep, tp.normal, tp.fifo, tp.delay)
	want, contentKey := sendScenario(t, p, tp)
	db, ib := openInbox(t, group)
	rec := &recorder{}
	var fo failOnce
	handler := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		for _, m := range msgs {
			if fo.fail(m) {
				return errors.New("business failure, first attempt")
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (msg_key, body) VALUES (?, ?)`, middleware.StableKey(m), string(m.Body)); err != nil {
				return err
			}
		}
		return nil
	})
	c := newSimpleConsumer(t, ep, group, tp.normal, tp.fifo, tp.delay)
	r, err := rocketmqv5.NewSimpleRunner(rocketmqv5.SimpleConfig{Consumer: c, Handler: middleware.ChainConsume(handler, rec.step),
		InvisibleDuration: 3 * time.Second, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if err := r.Shutdown(testkit.Context(t, 30*time.Second)); err != nil {
			t.Errorf("runner shutdown: %v", err)
		}
	}
	defer stop()
	wantEffects := map[string]int{contentKey: 1, "order-1": 1, "order-2": 1, "order-3": 1}
	testkit.WaitFor(t, 90*time.Second, func() bool {
		return fmt.Sprint(effects(t, db)) == fmt.Sprint(wantEffects) && len(rec.byID(want[contentKey+"#dup"].msgID)) > 0 &&
			(inflight == nil || inflight() == 0)
	}, func() string {
		return fmt.Sprintf("effects %v (want %v), %d deliveries", effects(t, db), wantEffects, len(rec.seen))
	})
	settle(t, rec, inflight)
	stop()
	checkDeliveries(t, rec, want, contentKey)
	if e := effects(t, db); fmt.Sprint(e) != fmt.Sprint(wantEffects) {
		t.Errorf("effects %v after all acknowledgements, want %v", e, wantEffects)
	}
}

// The SimpleRunner over the official SimpleConsumer, against Sluice's front end: every
// message is delivered with its fields; the handler's failure leaves "order-1" invisible
// and it comes back (attempt 2) after its invisibility; the duplicate (same content key)
// has no second effect in the inbox; every delivery is acknowledged (none in flight).
func TestSimpleRunnerInbox(t *testing.T) {
	s := front(t)
	const group = "V5AdapterSimple"
	runSimple(t, s.Addr(), topics{"V5AdSimple", "V5AdSimple", "V5AdSimple"}, group, func() int { return s.Pop().Inflight(group) })
}

// The push consumer with Listener, against Sluice's front end, with redismw.Dedup in the
// chain (miniredis, and a real Redis when SLUICE_REDIS_ADDR is set): each key has one
// effect, "order-1" comes back after the client gives it back (FAILURE), and every
// delivery is acknowledged.
func TestPushListenerDedup(t *testing.T) {
	s := front(t)
	redisdedup.Each(t, func(t *testing.T, dedup middleware.ConsumeMiddleware) {
		// A topic and group per subtest: a new group starts at the queue's first message.
		id := strconv.FormatInt(time.Now().UnixNano(), 36)
		group, topic := "V5AdapterPush"+id, "V5AdPush"+id
		runPush(t, s.Addr(), topics{topic, topic, topic}, group, dedup, func() int { return s.Pop().Inflight(group) })
	})
}

func runPush(t *testing.T, ep string, tp topics, group string, dedup middleware.ConsumeMiddleware, inflight func() int) {
	p := newProducer(t, ep, tp.normal, tp.fifo, tp.delay)
	want, contentKey := sendScenario(t, p, tp)
	rec := &recorder{}
	var fo failOnce
	eff := testkit.NewEffects()
	handler := middleware.ChainConsume(func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			if fo.fail(m) {
				return message.ReconsumeLater, errors.New("business failure, first attempt")
			}
			eff.Add(middleware.StableKey(m))
		}
		return message.ConsumeSuccess, nil
	}, rec.step, dedup, middleware.Recover())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var err error
	subs := map[string]*rmq.FilterExpression{tp.normal: rmq.SUB_ALL, tp.fifo: rmq.SUB_ALL, tp.delay: rmq.SUB_ALL}
	// The push consumer takes no client options (its requests time out after 3 s): its
	// start is tried three times, for a reference broker that answers slowly at first.
	var pc rmq.PushConsumer
	for try := 1; ; try++ {
		pc, err = rmq.NewPushConsumer(&rmq.Config{Endpoint: ep, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}},
			rmq.WithPushAwaitDuration(2*time.Second), rmq.WithPushSubscriptionExpressions(subs),
			rmq.WithPushMessageListener(rocketmqv5.Listener(ctx, handler, testkit.Quiet())))
		if err != nil {
			t.Fatal(err)
		}
		if err = pc.Start(); err == nil {
			break
		}
		if try == 3 {
			t.Fatalf("push consumer start, %d tries: %v", try, err)
		}
		t.Logf("push consumer start, try %d: %v", try, err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		// GracefulStop waits for the consumer's held receive: up to the server's long
		// polling (2 s on the front end here, 30 s on Apache RocketMQ 5) + 4 s.
		if err := rocketmqv5.Component(pc).Shutdown(testkit.Context(t, 90*time.Second)); err != nil {
			t.Errorf("push consumer stop: %v", err)
		}
	}
	defer stop()
	keys := []string{contentKey, "order-1", "order-2", "order-3"}
	testkit.WaitFor(t, 90*time.Second, func() bool {
		for _, k := range keys {
			if eff.Get(k) != 1 {
				return false
			}
		}
		return len(rec.byID(want[contentKey+"#dup"].msgID)) > 0 && len(rec.byID(want["order-1"].msgID)) == 2 && (inflight == nil || inflight() == 0)
	}, func() string {
		return fmt.Sprintf("effects %d %d %d %d, %d deliveries", eff.Get(keys[0]), eff.Get(keys[1]), eff.Get(keys[2]), eff.Get(keys[3]), len(rec.seen))
	})
	settle(t, rec, inflight)
	stop()
	checkDeliveries(t, rec, want, contentKey)
	for _, k := range keys {
		if n := eff.Get(k); n != 1 {
			t.Errorf("key %s: %d effects, want 1", k, n)
		}
	}
}

// SimpleConfig.RetryDelay gives a failed message back sooner than its invisibility:
// with a 30 s invisible duration and a 1 s retry delay, the second attempt comes within
// seconds; the runner stops with its loops ended.
func TestSimpleRunnerRetryDelay(t *testing.T) {
	s := front(t)
	const topic, group = "V5AdRetry", "V5AdapterRetry"
	p := newProducer(t, s.Addr(), topic)
	if _, err := rocketmqv5.SendFunc(p)(testkit.Context(t, 20*time.Second), message.NewMessage(topic, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var at []time.Time
	var attempts []int32
	h := func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		attempts = append(attempts, msgs[0].ReconsumeTimes+1)
		if len(at) == 1 {
			return message.ReconsumeLater, nil
		}
		return message.ConsumeSuccess, nil
	}
	var delayAsked []int32
	c := newSimpleConsumer(t, s.Addr(), group, topic)
	r, err := rocketmqv5.NewSimpleRunner(rocketmqv5.SimpleConfig{Consumer: c, Handler: h, InvisibleDuration: 30 * time.Second,
		RetryDelay: func(attempt int32) time.Duration {
			mu.Lock()
			delayAsked = append(delayAsked, attempt)
			mu.Unlock()
			return time.Second
		}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 25*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(at) >= 2 && s.Pop().Inflight(group) == 0 },
		"the message to come back after its 1 s retry delay (well before its 30 s invisibility) and be acknowledged")
	if err := r.Shutdown(testkit.Context(t, 30*time.Second)); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := r.Shutdown(testkit.Context(t, time.Second)); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
	if err := r.Start(); err == nil {
		t.Fatal("Start after Shutdown: no error")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(at) != 2 || attempts[0] != 1 || attempts[1] != 2 || fmt.Sprint(delayAsked) != "[1]" {
		t.Fatalf("deliveries at %v attempts %v, retry delay asked for %v; want 2 deliveries, attempts 1 and 2, delay asked for attempt 1", at, attempts, delayAsked)
	}
	if gap := at[1].Sub(at[0]); gap < 900*time.Millisecond {
		t.Fatalf("second attempt %v after the first, before the 1 s retry delay", gap)
	}
}

// ToV5 maps the fields and refuses what a v5 message cannot carry with a
// *message.ValidationError naming the field, which redismw.Park does not park.
func TestToV5(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	m := message.NewMessage("T", []byte("body"))
	m.SetTag("A").SetKeys("k1", "k2").SetProperty("p", "v").SetProperty("empty", "").
		SetProperty(message.PropertyUniqClientMessageIDKeyIdx, "ID").SetProperty(message.PropertyWaitStoreMsgOK, "true").SetDelayLevel(3)
	v, err := rocketmqv5.ToV5(m, now, message.DefaultDelayLevels())
	if err != nil {
		t.Fatal(err)
	}
	if v.Topic != "T" || string(v.Body) != "body" || *v.GetTag() != "A" || fmt.Sprint(v.GetKeys()) != "[k1 k2]" ||
		fmt.Sprint(v.GetProperties()) != "map[p:v]" || v.GetMessageGroup() != nil || !v.GetDeliveryTimestamp().Equal(now.Add(10*time.Second)) {
		t.Fatalf("converted %+v, tag %v keys %v props %v group %v at %v", v, v.GetTag(), v.GetKeys(), v.GetProperties(), v.GetMessageGroup(), v.GetDeliveryTimestamp())
	}
	// Levels past the table's end wait its last entry; the timer properties as the broker reads them.
	for _, tc := range []struct {
		prop, val string
		want      time.Time
	}{
		{message.PropertyDelayTimeLevel, "99", now.Add(2 * time.Hour)},
		{message.PropertyTimerDeliverMs, "1800000005000", now.Add(5 * time.Second)},
		{message.PropertyTimerDelaySec, "7", now.Add(7 * time.Second)},
		{message.PropertyTimerDelayMs, "1500", now.Add(1500 * time.Millisecond)},
	} {
		v, err := rocketmqv5.ToV5(message.NewMessage("T", []byte("x")).SetProperty(tc.prop, tc.val), now, message.DefaultDelayLevels())
		if err != nil || v.GetDeliveryTimestamp() == nil || !v.GetDeliveryTimestamp().Equal(tc.want) || len(v.GetProperties()) != 0 {
			t.Fatalf("%s=%s: %v, %+v", tc.prop, tc.val, err, v)
		}
	}
	for _, g := range []string{message.PropertyShardingKey, rocketmqv5.PropertyMessageGroup} {
		v, err := rocketmqv5.ToV5(message.NewMessage("T", []byte("x")).SetProperty(g, "g1"), now, nil)
		if err != nil || v.GetMessageGroup() == nil || *v.GetMessageGroup() != "g1" || len(v.GetProperties()) != 0 {
			t.Fatalf("%s: %v, %+v", g, err, v)
		}
	}
	refused := []struct {
		name  string
		msg   *message.Message
		field string
	}{
		{"flag", &message.Message{Topic: "T", Body: []byte("x"), Flag: 3}, "flag"},
		{"system property", message.NewMessage("T", []byte("x")).SetProperty(message.PropertyRetryTopic, "U"), "properties"},
		{"group and delay", message.NewMessage("T", []byte("x")).SetShardingKey("g").SetDelayLevel(1), "properties"},
		{"bad timer", message.NewMessage("T", []byte("x")).SetProperty(message.PropertyTimerDeliverMs, "soon"), "properties"},
		{"timer too far", message.NewMessage("T", []byte("x")).SetProperty(message.PropertyTimerDelaySec, "300000"), "properties"},
		{"deliver too far", message.NewMessage("T", []byte("x")).SetProperty(message.PropertyTimerDeliverMs, strconv.FormatInt(now.Add(73*time.Hour).UnixMilli(), 10)), "properties"},
		{"empty body", message.NewMessage("T", nil), "body"},
		{"bad topic", message.NewMessage("a b", []byte("x")), "topic"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rocketmqv5.ToV5(tc.msg, now, message.DefaultDelayLevels())
			var ve *message.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field {
				t.Fatalf("err %v, want a ValidationError of field %q", err, tc.field)
			}
			// Through SendFunc (no server needed: refused before the client is called).
			_, err = rocketmqv5.SendFunc(nil)(context.Background(), tc.msg)
			if !errors.As(err, &ve) || redismw.DefaultRetriable(err) {
				t.Fatalf("SendFunc: %v, want a ValidationError Park does not retry", err)
			}
		})
	}
	_, err = rocketmqv5.SendFunc(nil, rocketmqv5.WithMaxBodySize(3))(context.Background(), message.NewMessage("T", []byte("four")))
	var ve *message.ValidationError
	if !errors.As(err, &ve) || ve.Field != "body" || ve.Limit != 3 || ve.Value != 4 {
		t.Fatalf("over WithMaxBodySize: %v", err)
	}
}

// Refusals by the server come back as *SendError with the status code; a refusal of the
// message itself also as the ValidationError naming its field (not retryable); a send
// whose context was cancelled wraps context.Canceled.
func TestSendErrors(t *testing.T) {
	s := front(t)
	const topic = "V5AdErrors"
	p := newProducer(t, s.Addr(), topic)
	send := rocketmqv5.SendFunc(p)
	_, err := send(testkit.Context(t, 20*time.Second), message.NewMessage(topic, []byte("x")).SetTag("a|b"))
	var se *rocketmqv5.SendError
	var ve *message.ValidationError
	if !errors.As(err, &se) || se.Code != v2.Code_ILLEGAL_MESSAGE_TAG || se.Retryable() || !errors.As(err, &ve) || ve.Field != "tag" ||
		redismw.DefaultRetriable(err) || !strings.Contains(err.Error(), `rocketmqv5: send to topic "V5AdErrors"`) {
		t.Fatalf("err %v, want a SendError ILLEGAL_MESSAGE_TAG with a ValidationError of the tag", err)
	}
	if _, ok := rmq.AsErrRpcStatus(se.Err); !ok {
		t.Fatalf("SendError.Err %T, want the client's *ErrRpcStatus", se.Err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = send(ctx, message.NewMessage(topic, []byte("x")))
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) || redismw.DefaultRetriable(err) {
		t.Fatalf("cancelled send: %v, want a SendError wrapping context.Canceled", err)
	}
	for code, want := range map[v2.Code]bool{0: true, v2.Code_TOO_MANY_REQUESTS: true, v2.Code_INTERNAL_SERVER_ERROR: true,
		v2.Code_MASTER_PERSISTENCE_TIMEOUT: true, v2.Code_TOPIC_NOT_FOUND: true, v2.Code_FORBIDDEN: false,
		v2.Code_UNAUTHORIZED: false, v2.Code_BAD_REQUEST: false, v2.Code_NOT_IMPLEMENTED: false} {
		if got := (&rocketmqv5.SendError{Code: code}).Retryable(); got != want {
			t.Errorf("code %v: Retryable %v, want %v", code, got, want)
		}
	}
}

// NewSimpleRunner refuses a bad configuration with a *config.Error naming the field.
func TestSimpleConfigValidate(t *testing.T) {
	h := func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ConsumeSuccess, nil
	}
	for field, cfg := range map[string]rocketmqv5.SimpleConfig{
		"Consumer":          {Handler: h},
		"Handler":           {Consumer: fakeConsumer{}},
		"BatchSize":         {Consumer: fakeConsumer{}, Handler: h, BatchSize: 33},
		"InvisibleDuration": {Consumer: fakeConsumer{}, Handler: h, InvisibleDuration: 13 * time.Hour},
		"Receivers":         {Consumer: fakeConsumer{}, Handler: h, Receivers: -1},
		"ReceiveBackoff":    {Consumer: fakeConsumer{}, Handler: h, ReceiveBackoff: -time.Second},
	} {
		_, err := rocketmqv5.NewSimpleRunner(cfg)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// fakeConsumer only fills SimpleConfig.Consumer for the validation test; it is never called.
type fakeConsumer struct{ rmq.SimpleConsumer }

// apacheTopics are the topics of TestApacheRocketMQ5, with the message type Apache
// RocketMQ 5 checks, per scenario: the SimpleRunner's and one per Redis target of the
// push consumer's (redistest.Each runs "miniredis" and, with SLUICE_REDIS_ADDR, "redis").
func apacheTopics(scenario string) topics {
	return topics{"V5Ad" + scenario + "Normal", "V5Ad" + scenario + "Fifo", "V5Ad" + scenario + "Delay"}
}

// apacheStoreConfig is the reference broker's topics.json with apacheTopics' topics.
func apacheStoreConfig(t *testing.T) map[string]string {
	t.Helper()
	cfg := map[string]any{}
	for _, sc := range []string{"Simple", "Pushminiredis", "Pushredis"} {
		tp := apacheTopics(sc)
		for name, typ := range map[string]string{tp.normal: "NORMAL", tp.fifo: "FIFO", tp.delay: "DELAY"} {
			cfg[name] = map[string]any{"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
				"topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": false, "attributes": map[string]string{"message.type": typ}}
		}
	}
	tj, err := json.Marshal(map[string]any{"topicConfigTable": cfg, "dataVersion": map[string]any{"timestamp": 1, "counter": 1}})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"topics.json": string(tj)}
}

// The same scenarios against Apache RocketMQ 5.3.3 (proxy in LOCAL mode, from Maven;
// skips without Java or the jars, and with -short): the adapters behave the same over the
// reference. Its in-flight count cannot be read, so each scenario waits until no delivery
// has come for longer than a redelivery would take before it checks that each message
// came exactly as often as expected.
func TestApacheRocketMQ5(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs two JVMs (Apache RocketMQ 5.3 name server and proxy+broker); run without -short")
	}
	if err := peers.Available("rocketmq5"); err != nil {
		t.Skipf("apache rocketmq 5: %v", err)
	}
	testkit.SkipGoV5AgainstApacheUnderRace(t)
	// A start of up to 5 minutes: the two JVMs start in 15–20 s on an idle 2-core machine,
	// and much slower on a loaded one.
	apache := peertest.StartRocketMQ5(t, peers.RocketMQ5Options{StoreConfigFiles: apacheStoreConfig(t),
		ProxyConf: map[string]any{"minInvisibleTimeMillsForRecv": 1000}, StartTimeout: 5 * time.Minute})
	t.Run("SimpleRunnerInbox", func(t *testing.T) {
		runSimple(t, apache.GRPCAddr, apacheTopics("Simple"), "V5AdApacheSimple", nil)
	})
	t.Run("PushListenerDedup", func(t *testing.T) {
		redisdedup.Each(t, func(t *testing.T, dedup middleware.ConsumeMiddleware) {
			runPush(t, apache.GRPCAddr, apacheTopics("Push"+t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]), "V5AdApachePush"+strconv.FormatInt(time.Now().UnixNano(), 36), dedup, nil)
		})
	})
}
