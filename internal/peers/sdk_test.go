package peers_test

// Sluice's own producer, push consumer and admin against Apache RocketMQ 4.9.7.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

type delivery struct {
	body, keys, tag string
	queue           int32
	offset          int64
	reconsume       int32
}

// log collects deliveries from a consumer handler.
type dlog struct {
	mu sync.Mutex
	ds []delivery
}

func (l *dlog) add(m *message.MessageExt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ds = append(l.ds, delivery{body: string(m.Body), keys: strings.Join(m.Keys(), " "), tag: m.Tag(), queue: m.QueueID, offset: m.QueueOffset, reconsume: m.ReconsumeTimes})
}

func (l *dlog) list() []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]delivery(nil), l.ds...)
}

func goConsumer(t *testing.T, ns, group, topic, expr string, orderly bool, handler func(m *message.MessageExt) message.ConsumeResult) {
	t.Helper()
	sdktest.StartPushConsumer(t, consumer.Config{NamesrvAddrs: []string{ns}, Group: group, Orderly: orderly,
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, SuspendCurrentQueueTime: 200 * time.Millisecond,
		MaxReconsumeTimes: consumer.Retries(3), Logger: testkit.Quiet()}, func(c *consumer.PushConsumer) error {
		return c.Subscribe(topic, expr, func(_ context.Context, ms []*message.MessageExt) (message.ConsumeResult, error) {
			for _, m := range ms {
				if r := handler(m); r != message.ConsumeSuccess {
					return r, nil
				}
			}
			return message.ConsumeSuccess, nil
		})
	}, sdktest.MayFail)
}

// Sluice's producer sends sync, async, one-way, batch and delayed messages to Apache
// RocketMQ; Sluice's concurrent push consumer (tag subscription) receives exactly the
// matching ones, and a message answered ReconsumeLater comes back through Apache's retry
// topic with growing reconsume times; the admin reads the group's offsets and finds a
// message by key.
func TestSluiceSDKAgainstApacheRocketMQ(t *testing.T) {
	r := apacheRocketMQ(t)
	tg := target{name: "apache", namesrv: r.NamesrvAddr, broker: r.BrokerAddr, adm: newAdmin(t, r.NamesrvAddr)}
	topic := topicFor(t, "SdkTopic")
	createTopic(t, tg, topic, 4)
	p := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Group: "sdk-producer", Logger: testkit.Quiet()}, sdktest.MustShutDown)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	want := []string{}
	for i := 0; i < 4; i++ {
		m := message.NewMessage(topic, []byte(fmt.Sprintf("sync-%d", i))).SetTag("keep").SetKeys(fmt.Sprintf("sk%d", i))
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatalf("sync send: %v", err)
		}
		want = append(want, fmt.Sprintf("sync-%d", i))
	}
	if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte("dropped-by-tag")).SetTag("drop")); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		if err := p.SendAsync(ctx, message.NewMessage(topic, []byte(fmt.Sprintf("async-%d", i))).SetTag("keep"), func(_ *message.SendResult, err error) { errs <- err }); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("async-%d", i))
	}
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("async send: %v", err)
		}
	}
	if err := p.SendOneway(ctx, message.NewMessage(topic, []byte("oneway-0")).SetTag("keep")); err != nil {
		t.Fatal(err)
	}
	batch := []*message.Message{message.NewMessage(topic, []byte("batch-0")).SetTag("keep"), message.NewMessage(topic, []byte("batch-1")).SetTag("keep")}
	if res, err := p.SendBatch(ctx, batch); err != nil {
		t.Fatalf("batch send: %v", err)
	} else if len(strings.Split(res.MsgID, ",")) != 2 {
		t.Fatalf("batch msg ids %q", res.MsgID)
	}
	if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte("delayed")).SetTag("keep").SetDelayLevel(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte("retry-me")).SetTag("keep").SetKeys("retry-me")); err != nil {
		t.Fatal(err)
	}
	want = append(want, "oneway-0", "batch-0", "batch-1", "delayed", "retry-me")
	sort.Strings(want)

	log := &dlog{}
	group := "sdk-group"
	goConsumer(t, r.NamesrvAddr, group, topic, "keep", false, func(m *message.MessageExt) message.ConsumeResult {
		log.add(m)
		if string(m.Body) == "retry-me" && m.ReconsumeTimes < 2 {
			return message.ReconsumeLater
		}
		return message.ConsumeSuccess
	})
	var retries []int32
	testkit.WaitFor(t, 90*time.Second, func() bool {
		seen := map[string]bool{}
		retries = nil
		for _, d := range log.list() {
			seen[d.body] = true
			if d.body == "retry-me" {
				retries = append(retries, d.reconsume)
			}
		}
		return len(seen) == len(want) && len(retries) == 3
	}, func() string {
		return fmt.Sprintf("deliveries %v, want bodies %v and retry-me 3 times", log.list(), want)
	})
	got := map[string]bool{}
	for _, d := range log.list() {
		got[d.body] = true
	}
	if got["dropped-by-tag"] {
		t.Fatalf("tag filter let %q through", "dropped-by-tag")
	}
	if fmt.Sprint(retries) != "[0 1 2]" {
		t.Fatalf("retry-me reconsume times %v, want [0 1 2]", retries)
	}

	// admin: the group's offsets reach the end of every queue; a key lookup finds a message.
	testkit.WaitFor(t, 30*time.Second, func() bool {
		offs, err := tg.adm.ConsumerOffsets(ctx, group, topic)
		if err != nil || len(offs) != 4 {
			return false
		}
		for _, o := range offs {
			if o.Committed != o.Max {
				return false
			}
		}
		return true
	}, func() string {
		offs, err := tg.adm.ConsumerOffsets(ctx, group, topic)
		return fmt.Sprintf("offsets %+v %v", offs, err)
	})
	ms, err := tg.adm.FindMessages(ctx, topic, "sk2", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "sync-2" {
		t.Fatalf("FindMessages sk2: %v %v", ms, err)
	}
	if _, err := tg.adm.ViewMessage(ctx, ms[0].OffsetMsgID); err != nil {
		t.Fatalf("ViewMessage %s: %v", ms[0].OffsetMsgID, err)
	}
}

// Sluice's orderly push consumer against Apache RocketMQ: it locks the queue on the
// Apache broker, consumes in queue order, and a suspended message is retried in place.
func TestSluiceOrderlyConsumerAgainstApacheRocketMQ(t *testing.T) {
	r := apacheRocketMQ(t)
	tg := target{name: "apache", namesrv: r.NamesrvAddr, broker: r.BrokerAddr, adm: newAdmin(t, r.NamesrvAddr)}
	topic := topicFor(t, "SdkOrderly")
	createTopic(t, tg, topic, 2)
	p := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Group: "sdk-producer", Logger: testkit.Quiet()}, sdktest.MustShutDown)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mq := message.MessageQueue{Topic: topic, BrokerName: r.BrokerName, QueueID: 1}
	for i := 0; i < 5; i++ {
		if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte(fmt.Sprintf("o%d", i))), producer.WithQueue(mq)); err != nil {
			t.Fatal(err)
		}
	}
	log := &dlog{}
	suspended := 0
	goConsumer(t, r.NamesrvAddr, "sdk-orderly", topic, "*", true, func(m *message.MessageExt) message.ConsumeResult {
		log.add(m)
		if string(m.Body) == "o2" && suspended < 2 {
			suspended++
			return message.SuspendCurrentQueueAMoment
		}
		return message.ConsumeSuccess
	})
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(log.list()) >= 7 }, func() string { return fmt.Sprintf("deliveries %v", log.list()) })
	var seq []string
	for _, d := range log.list() {
		seq = append(seq, fmt.Sprintf("%s@%d", d.body, d.queue))
	}
	if got := strings.Join(seq, ","); got != "o0@1,o1@1,o2@1,o2@1,o2@1,o3@1,o4@1" {
		t.Fatalf("orderly sequence %s", got)
	}
}

// Sluice's transaction producer against Apache RocketMQ: commit and rollback at once,
// and an unknown outcome resolved by Apache's check-back.
func TestSluiceTransactionsAgainstApacheRocketMQ(t *testing.T) {
	r := apacheRocketMQ(t)
	tg := target{name: "apache", namesrv: r.NamesrvAddr, broker: r.BrokerAddr, adm: newAdmin(t, r.NamesrvAddr)}
	topic := topicFor(t, "SdkTxn")
	createTopic(t, tg, topic, 2)
	l := &txnListener{checked: map[string]int{}}
	tp, err := producer.NewTransactionProducer(producer.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Group: "sdk-txn", Logger: testkit.Quiet()}, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, body := range []string{"commit", "rollback", "unknown-commit"} {
		res, err := tp.SendMessageInTransaction(ctx, message.NewMessage(topic, []byte(body)).SetKeys(body))
		if err != nil || res.EndTransactionErr != nil {
			t.Fatalf("%s: %+v %v", body, res, err)
		}
	}
	log := &dlog{}
	goConsumer(t, r.NamesrvAddr, "sdk-txn-consumer", topic, "*", false, func(m *message.MessageExt) message.ConsumeResult {
		log.add(m)
		return message.ConsumeSuccess
	})
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(log.list()) >= 2 && l.count("unknown-commit") > 0 },
		func() string { return fmt.Sprintf("deliveries %v, checks %v", log.list(), l.checked) })
	var bodies []string
	for _, d := range log.list() {
		bodies = append(bodies, d.body)
	}
	sort.Strings(bodies)
	if got := strings.Join(bodies, ","); got != "commit,unknown-commit" {
		t.Fatalf("delivered %s, want commit,unknown-commit", got)
	}
	if l.count("commit") != 0 || l.count("rollback") != 0 {
		t.Fatalf("decided transactions were checked: %v", l.checked)
	}
}

type txnListener struct {
	mu      sync.Mutex
	checked map[string]int
}

func (l *txnListener) ExecuteLocalTransaction(_ context.Context, m *message.Message) producer.LocalTransactionState {
	switch string(m.Body) {
	case "commit":
		return producer.CommitMessage
	case "rollback":
		return producer.RollbackMessage
	}
	return producer.Unknown
}

func (l *txnListener) CheckLocalTransaction(_ context.Context, m *message.MessageExt) producer.LocalTransactionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checked[string(m.Body)]++
	return producer.CommitMessage
}

func (l *txnListener) count(body string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checked[body]
}

// Sluice's push consumer against Apache RocketMQ's DLQ: a message answered ReconsumeLater
// beyond MaxReconsumeTimes is moved by Apache to %DLQ%<group>, where the admin finds it
// by key (QUERY_MESSAGE). Listing the DLQ (admin.ListDLQ) uses Sluice's own admin
// request READ_QUEUE (7001), which Apache answers REQUEST_CODE_NOT_SUPPORTED (3).
func TestSluiceDLQAgainstApacheRocketMQ(t *testing.T) {
	r := apacheRocketMQ(t)
	tg := target{name: "apache", namesrv: r.NamesrvAddr, broker: r.BrokerAddr, adm: newAdmin(t, r.NamesrvAddr)}
	topic := topicFor(t, "SdkDLQ")
	group := fmt.Sprintf("sdk-dlq-%d", time.Now().UnixNano()%1e6)
	createTopic(t, tg, topic, 1)
	p := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Group: "sdk-producer", Logger: testkit.Quiet()}, sdktest.MustShutDown)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte("doomed")).SetKeys("doomed")); err != nil {
		t.Fatal(err)
	}
	log := &dlog{}
	goConsumer(t, r.NamesrvAddr, group, topic, "*", false, func(m *message.MessageExt) message.ConsumeResult {
		log.add(m)
		return message.ReconsumeLater
	})
	var found []*message.MessageExt
	testkit.WaitFor(t, 60*time.Second, func() bool {
		var err error
		found, err = tg.adm.FindMessages(ctx, "%DLQ%"+group, "doomed", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		return err == nil && len(found) == 1
	}, func() string { return fmt.Sprintf("the dead letter in %%DLQ%%%s; deliveries %v", group, log.list()) })
	var seq []int32
	for _, d := range log.list() {
		seq = append(seq, d.reconsume)
	}
	// MaxReconsumeTimes 3 (goConsumer): deliveries with reconsume times 0..3, then the DLQ
	if fmt.Sprint(seq) != "[0 1 2 3]" || string(found[0].Body) != "doomed" || found[0].Property("RETRY_TOPIC") != topic {
		t.Fatalf("deliveries %v, dead letter %+v", seq, found[0])
	}
	_, err := tg.adm.ListDLQ(ctx, group, admin.DLQListOptions{})
	var re *remoting.ResponseError
	if !errors.As(err, &re) || re.Code != remoting.RequestCodeNotSupported {
		t.Fatalf("ListDLQ against Apache RocketMQ: %v, want a *remoting.ResponseError with code 3 (REQUEST_CODE_NOT_SUPPORTED)", err)
	}
}

// Sluice's push consumer with a SQL92 subscription against Apache RocketMQ
// (enablePropertyFilter=true): the broker filters by the messages' properties.
func TestSluiceSQL92ConsumerAgainstApacheRocketMQ(t *testing.T) {
	r := apacheRocketMQ(t)
	tg := target{name: "apache", namesrv: r.NamesrvAddr, broker: r.BrokerAddr, adm: newAdmin(t, r.NamesrvAddr)}
	topic := topicFor(t, "SdkSQL")
	createTopic(t, tg, topic, 2)
	p := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Group: "sdk-producer", Logger: testkit.Quiet()}, sdktest.MustShutDown)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 1; i <= 6; i++ {
		m := message.NewMessage(topic, []byte(fmt.Sprintf("m%d", i))).SetProperty("n", fmt.Sprint(i)).SetProperty("region", map[bool]string{true: "eu", false: "us"}[i%2 == 0])
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	log := &dlog{}
	sdktest.StartPushConsumer(t, consumer.Config{NamesrvAddrs: []string{r.NamesrvAddr}, Group: "sdk-sql",
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: testkit.Quiet()}, func(c *consumer.PushConsumer) error {
		return c.SubscribeSQL(topic, "n > 2 AND region = 'eu'", func(_ context.Context, ms []*message.MessageExt) (message.ConsumeResult, error) {
			for _, m := range ms {
				log.add(m)
			}
			return message.ConsumeSuccess, nil
		})
	}, sdktest.MayFail)
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(log.list()) >= 2 }, func() string { return fmt.Sprintf("deliveries %v", log.list()) })
	// the unmatched messages sit before and between the matched ones in the same queues:
	// once both matches arrived, the pulls have passed them
	var bodies []string
	for _, d := range log.list() {
		bodies = append(bodies, d.body)
	}
	sort.Strings(bodies)
	if got := strings.Join(bodies, ","); got != "m4,m6" {
		t.Fatalf("SQL92 deliveries %s, want m4,m6", got)
	}
}
