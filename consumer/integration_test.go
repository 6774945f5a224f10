package consumer

// End-to-end tests against the real Sluice broker (embedded name server, real TCP on
// 127.0.0.1, real files in t.TempDir()), with Sluice's producer sending.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

var quiet = testkit.Quiet()

type env struct {
	t       *testing.T
	broker  *broker.Broker
	namesrv []string
	admin   *admin.Admin
}

// newEnv starts a broker with an embedded name server. Delay levels are all 1 s so that
// consume retries (delay level 3 + reconsume count) come back quickly.
func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, nil) }

// newEnvWith is newEnv with the broker config changed by mod.
func newEnvWith(t *testing.T, mod func(*broker.Config)) *env {
	t.Helper()
	cfg := broker.Config{MessageDelayLevel: strings.TrimSpace(strings.Repeat("1s ", 18))}
	if mod != nil {
		mod(&cfg)
	}
	b, _ := testbroker.Start(t, cfg)
	ns := testbroker.Namesrv(b)
	a, err := admin.New(admin.Config{NamesrvAddrs: ns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return &env{t: t, broker: b, namesrv: ns, admin: a}
}

func (e *env) createTopic(topic string, queues int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.admin.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: queues}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.admin.WaitTopicRoute(ctx, topic); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) producer() *producer.Producer {
	e.t.Helper()
	p, err := producer.New(producer.Config{NamesrvAddrs: e.namesrv, Group: "pg", Logger: quiet})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

// consumer makes a started-later consumer with fast rebalance for tests.
func (e *env) consumer(group string, from ConsumeFromWhere) *PushConsumer {
	e.t.Helper()
	c, err := NewPushConsumer(Config{
		NamesrvAddrs:          e.namesrv,
		Group:                 group,
		ConsumeFromWhere:      from,
		RebalanceInterval:     500 * time.Millisecond,
		PersistOffsetInterval: 500 * time.Millisecond,
		Logger:                quiet,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { shutdown(e.t, c) })
	return c
}

func shutdown(t *testing.T, c *PushConsumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		t.Errorf("consumer shutdown: %v", err)
	}
}

// sent remembers what was sent: body → tag, and per queue the next offset.
type sent struct {
	bodies map[string]string
	ends   map[message.MessageQueue]int64
}

func send(t *testing.T, p *producer.Producer, topic string, n int, prefix string, tags ...string) sent {
	t.Helper()
	s := sent{bodies: map[string]string{}, ends: map[message.MessageQueue]int64{}}
	for i := 0; i < n; i++ {
		body := fmt.Sprintf("%s-%d", prefix, i)
		m := message.NewMessage(topic, []byte(body))
		tag := ""
		if len(tags) > 0 {
			tag = tags[i%len(tags)]
			m.SetTag(tag)
		}
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		s.bodies[body] = tag
		if r.QueueOffset+1 > s.ends[r.Queue] {
			s.ends[r.Queue] = r.QueueOffset + 1
		}
	}
	return s
}

// collector records deliveries.
type collector struct {
	mu    sync.Mutex
	got   map[string]int // body → deliveries
	by    map[string]string
	msgs  []*message.MessageExt
	count int
}

func newCollector() *collector { return &collector{got: map[string]int{}, by: map[string]string{}} }

func (c *collector) handler(name string) func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
	return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range msgs {
			c.got[string(m.Body)]++
			c.by[string(m.Body)] = name
			c.msgs = append(c.msgs, m)
			c.count++
		}
		return message.ConsumeSuccess, nil
	}
}

func (c *collector) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}

// committedAtLeast reports whether the consumers' committed offsets of topic have
// reached ends on every queue: every message below was handled or filtered out.
func committedAtLeast(topic string, ends map[message.MessageQueue]int64, cs ...*PushConsumer) bool {
	reached := map[message.MessageQueue]bool{}
	for _, c := range cs {
		c.mu.Lock()
		for mq, pq := range c.pqs {
			if mq.Topic == topic && pq.commitOffset() >= ends[mq] {
				reached[mq] = true
			}
		}
		c.mu.Unlock()
	}
	for mq := range ends {
		if !reached[mq] {
			return false
		}
	}
	return true
}

func assigned(c *PushConsumer, topic string) map[message.MessageQueue]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[message.MessageQueue]bool{}
	for mq := range c.pqs {
		if mq.Topic == topic {
			out[mq] = true
		}
	}
	return out
}

// queueState describes c's queues of topic for a failure message: per queue its
// committed offset, the end it should reach, and its cached (unfinished) messages, so a
// stall names the queue and where it stands.
func queueState(c *PushConsumer, topic string, ends map[message.MessageQueue]int64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d queues assigned:", len(c.pqs))
	for mq, pq := range c.pqs {
		if mq.Topic == topic {
			n, _ := pq.load()
			fmt.Fprintf(&sb, " q%d committed %d of %d (%d cached)", mq.QueueID, pq.commitOffset(), ends[mq], n)
		}
	}
	return sb.String()
}

func TestRoundTripWithTags(t *testing.T) {
	e := newEnv(t)
	e.createTopic("Orders", 4)
	p := e.producer()
	s := send(t, p, "Orders", 40, "m", "TagA", "TagB", "TagC", "")

	c := e.consumer("cg-tags", ConsumeFromFirstOffset)
	col := newCollector()
	if err := c.Subscribe("Orders", "TagA || TagC", col.handler("c")); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, tag := range s.bodies {
		if tag == "TagA" || tag == "TagC" {
			want++
		}
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= want }, "all TagA and TagC messages")
	// Every queue's committed offset reached its end: nothing else is still to come.
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Orders", s.ends, c) }, "committed offsets at the queue ends")

	col.mu.Lock()
	defer col.mu.Unlock()
	if col.count != want {
		t.Fatalf("%d deliveries, want %d", col.count, want)
	}
	for body, n := range col.got {
		tag := s.bodies[body]
		if n != 1 || (tag != "TagA" && tag != "TagC") {
			t.Fatalf("body %q (tag %q) delivered %d times", body, tag, n)
		}
	}
	for _, m := range col.msgs {
		if m.Topic != "Orders" || m.ReconsumeTimes != 0 || m.MsgID != m.UniqKey() || len(m.MsgID) != 32 ||
			m.Property(message.PropertyMaxOffset) == "" || m.BrokerName != e.broker.Name() || m.Tag() != s.bodies[string(m.Body)] {
			t.Fatalf("delivered message %+v", m)
		}
	}
}

func TestTwoConsumersShareQueuesExactlyOnce(t *testing.T) {
	e := newEnv(t)
	e.createTopic("Payments", 8)
	p := e.producer()

	col := newCollector()
	c1 := e.consumer("cg-share", ConsumeFromFirstOffset)
	c2 := e.consumer("cg-share", ConsumeFromFirstOffset)
	if err := c1.Subscribe("Payments", "*", col.handler("c1")); err != nil {
		t.Fatal(err)
	}
	if err := c2.Subscribe("Payments", "*", col.handler("c2")); err != nil {
		t.Fatal(err)
	}
	if err := c1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return len(assigned(c1, "Payments")) == 8 }, "c1 owns all 8 queues")
	if err := c2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, func() bool {
		a1, a2 := assigned(c1, "Payments"), assigned(c2, "Payments")
		if len(a1) != 4 || len(a2) != 4 {
			return false
		}
		for mq := range a1 {
			if a2[mq] {
				return false
			}
		}
		return true
	}, "4 queues each, disjoint")
	s := send(t, p, "Payments", 120, "pay")
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 120 }, "all 120 messages")
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Payments", s.ends, c1, c2) }, "committed offsets at the queue ends")

	col.mu.Lock()
	defer col.mu.Unlock()
	if col.count != 120 || len(col.got) != 120 {
		t.Fatalf("%d deliveries of %d distinct messages, want 120 exactly once", col.count, len(col.got))
	}
	per := map[string]int{}
	for body := range s.bodies {
		if col.got[body] != 1 {
			t.Fatalf("%q delivered %d times", body, col.got[body])
		}
		per[col.by[body]]++
	}
	if per["c1"] == 0 || per["c2"] == 0 {
		t.Fatalf("one consumer got nothing: %v", per)
	}
	col.mu.Unlock()

	// c2 leaves: c1 takes over its queues from the offsets c2 persisted — nothing old comes
	// again, nothing new is missed.
	shutdown(t, c2)
	testkit.WaitFor(t, 15*time.Second, func() bool { return len(assigned(c1, "Payments")) == 8 }, "c1 owns all 8 queues again")
	s2 := send(t, p, "Payments", 40, "late")
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 160 }, "the 40 later messages")
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Payments", s2.ends, c1) }, "committed offsets at the queue ends")
	col.mu.Lock()
	if col.count != 160 {
		t.Fatalf("%d deliveries after c2 left, want 160", col.count)
	}
	for body := range s2.bodies {
		if col.got[body] != 1 || col.by[body] != "c1" {
			t.Fatalf("%q delivered %d times, last to %s", body, col.got[body], col.by[body])
		}
	}
}

func TestOffsetsCommittedOnShutdownAndResumed(t *testing.T) {
	e := newEnv(t)
	e.createTopic("Points", 4)
	p := e.producer()
	first := send(t, p, "Points", 30, "old")

	col1 := newCollector()
	c1 := e.consumer("cg-resume", ConsumeFromFirstOffset)
	if err := c1.Subscribe("Points", "*", col1.handler("c1")); err != nil {
		t.Fatal(err)
	}
	if err := c1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return col1.total() >= 30 }, "the first 30 messages: ",
		func() string {
			return fmt.Sprintf("%d delivered; c1 ", col1.total()) + queueState(c1, "Points", first.ends)
		})
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Points", first.ends, c1) }, "committed offsets at the queue ends: ",
		func() string { return queueState(c1, "Points", first.ends) })
	shutdown(t, c1)

	second := send(t, p, "Points", 20, "new")
	col2 := newCollector()
	c2 := e.consumer("cg-resume", ConsumeFromFirstOffset) // stored offsets win over FirstOffset
	if err := c2.Subscribe("Points", "*", col2.handler("c2")); err != nil {
		t.Fatal(err)
	}
	if err := c2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return col2.total() >= 20 }, "the 20 new messages: ",
		func() string {
			return fmt.Sprintf("%d delivered; c2 ", col2.total()) + queueState(c2, "Points", second.ends)
		})
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Points", second.ends, c2) }, "committed offsets at the queue ends: ",
		func() string { return queueState(c2, "Points", second.ends) })
	col2.mu.Lock()
	defer col2.mu.Unlock()
	if col2.count != 20 {
		t.Fatalf("restarted consumer got %d messages, want the 20 new ones", col2.count)
	}
	for body, n := range col2.got {
		if !strings.HasPrefix(body, "new-") || n != 1 {
			t.Fatalf("restarted consumer got %q %d times", body, n)
		}
	}
}

func TestFailedMessageRedeliveredThroughRetryTopic(t *testing.T) {
	e := newEnv(t)
	e.createTopic("Refunds", 2)
	p := e.producer()

	var mu sync.Mutex
	var deliveries []*message.MessageExt
	handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			deliveries = append(deliveries, m)
		}
		switch {
		case msgs[0].ReconsumeTimes > 0:
			return message.ConsumeSuccess, nil
		case string(msgs[0].Body) == "fail-by-result":
			return message.ReconsumeLater, nil
		case string(msgs[0].Body) == "fail-by-error":
			return message.ConsumeSuccess, fmt.Errorf("handler error")
		case string(msgs[0].Body) == "fail-by-panic":
			panic("handler panic")
		}
		return message.ConsumeSuccess, nil
	}
	c := e.consumer("cg-retry", ConsumeFromFirstOffset)
	if err := c.Subscribe("Refunds", "*", handler); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ids = map[string]string{}
	for _, body := range []string{"ok", "fail-by-result", "fail-by-error", "fail-by-panic"} {
		m := message.NewMessage("Refunds", []byte(body)).SetTag("T1").SetKeys("k-" + body)
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		ids[body] = r.MsgID
	}
	// Each failing message comes back once from %RETRY%cg-retry (delay level 3 = 1 s here).
	testkit.WaitFor(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, m := range deliveries {
			if m.ReconsumeTimes == 1 {
				n++
			}
		}
		return n == 3
	}, "3 redeliveries")
	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	for _, m := range deliveries {
		body := string(m.Body)
		count[body]++
		if m.ReconsumeTimes == 0 {
			continue
		}
		if m.Topic != "Refunds" || m.Property(message.PropertyRetryTopic) != "Refunds" || m.Tag() != "T1" || m.Keys()[0] != "k-"+body {
			t.Fatalf("redelivered %q: topic %q, RETRY_TOPIC %q, tag %q, keys %v", body, m.Topic, m.Property(message.PropertyRetryTopic), m.Tag(), m.Keys())
		}
		if m.MsgID != ids[body] {
			t.Fatalf("redelivered %q with MsgID %q, first sent as %q", body, m.MsgID, ids[body])
		}
	}
	if count["ok"] != 1 || count["fail-by-result"] != 2 || count["fail-by-error"] != 2 || count["fail-by-panic"] != 2 {
		t.Fatalf("deliveries %v", count)
	}
}

func TestShutdownNeverCommitsPastUnfinishedHandler(t *testing.T) {
	e := newEnv(t)
	e.createTopic("Ledger", 1)
	p := e.producer()
	send(t, p, "Ledger", 5, "l")

	release := make(chan struct{})
	col := newCollector()
	record := col.handler("c1")
	handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if string(msgs[0].Body) == "l-2" {
			<-release // ignores ctx on purpose: a handler that outlives Shutdown's deadline
		}
		return record(ctx, msgs)
	}
	c1 := e.consumer("cg-unfinished", ConsumeFromFirstOffset)
	if err := c1.Subscribe("Ledger", "*", handler); err != nil {
		t.Fatal(err)
	}
	if err := c1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() == 4 }, "l-0, l-1, l-3, l-4")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := c1.Shutdown(ctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "handlers still running") {
		t.Fatalf("Shutdown with a stuck handler: %v", err)
	}
	close(release) // let the stuck handler return so no goroutine is left behind

	// The stored offset is l-2's: a new member starts there (l-3 and l-4 come again:
	// at-least-once), never after it.
	col2 := newCollector()
	c2 := e.consumer("cg-unfinished", ConsumeFromLastOffset)
	if err := c2.Subscribe("Ledger", "*", col2.handler("c2")); err != nil {
		t.Fatal(err)
	}
	if err := c2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return col2.total() >= 3 }, "l-2..l-4 again")
	col2.mu.Lock()
	defer col2.mu.Unlock()
	if col2.got["l-2"] != 1 || col2.got["l-0"] != 0 || col2.got["l-1"] != 0 {
		t.Fatalf("after restart got %v", col2.got)
	}
}

// The fallback of a refused CONSUMER_SEND_MSG_BACK: the consumer publishes the message to
// %RETRY%<group> itself, and it comes back with ReconsumeTimes 1 under its own topic.
func TestSendToRetryTopicFallback(t *testing.T) {
	e := newEnv(t)
	e.createTopic("Coupons", 1)
	p := e.producer()

	var mu sync.Mutex
	var got []*message.MessageExt
	c := e.consumer("cg-fallback", ConsumeFromFirstOffset)
	if err := c.Subscribe("Coupons", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, msgs...)
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r, err := p.SendSync(context.Background(), message.NewMessage("Coupons", []byte("coupon-1")).SetTag("Gold"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 }, "first delivery")
	mu.Lock()
	first := got[0]
	mu.Unlock()
	testkit.WaitFor(t, 10*time.Second, func() bool { return c.cl.CachedRoute(c.retryTopic) != nil }, "route of the retry topic")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.sendToRetryTopic(ctx, first); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 }, "redelivery from the retry topic")
	mu.Lock()
	defer mu.Unlock()
	m := got[1]
	if m.Topic != "Coupons" || m.ReconsumeTimes != 1 || string(m.Body) != "coupon-1" || m.Tag() != "Gold" ||
		m.MsgID != r.MsgID || m.Property(message.PropertyOriginMessageID) != r.MsgID || m.Property(message.PropertyRetryTopic) != "Coupons" {
		t.Fatalf("redelivered %+v props %v", m, m.Properties)
	}
}
