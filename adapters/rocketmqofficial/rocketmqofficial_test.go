package rocketmqofficial

// No goleak here: the official client keeps process-wide state by design (a global
// client map, a global logger, timers started by its package init), so its goroutines
// outlive every Shutdown.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/officialclient"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

func TestMain(m *testing.M) {
	rlog.SetLogger(silent{})
	os.Exit(m.Run())
}

// silent drops the official client's global log.
type silent struct{}

func (silent) Debug(string, map[string]interface{})   {}
func (silent) Info(string, map[string]interface{})    {}
func (silent) Warning(string, map[string]interface{}) {}
func (silent) Error(string, map[string]interface{})   {}
func (silent) Fatal(string, map[string]interface{})   {}
func (silent) Level(string)                           {}
func (silent) OutputPath(string) error                { return nil }

func startBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{})
	return b
}

// The official producer behind SendFunc, wrapped by Sluice's Keys middleware, sends to
// a real embedded Sluice broker; the official push consumer, through ConsumeHandler and
// a Sluice consume chain, receives every message with its tag, keys (the MD5 content
// key for the message sent without keys), properties and the id SendFunc assigned.
func TestSendAndConsumeThroughOfficialClient(t *testing.T) {
	b := startBroker(t)
	ns := b.NamesrvAddr()
	topic := "OfficialAdapter"
	p, err := rocketmq.NewProducer(
		producer.WithNameServer(primitive.NamesrvAddr{ns}),
		producer.WithGroupName("adapter_producer"),
		producer.WithInstanceName(t.Name()+"_p"),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(5*time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = Component(p).Shutdown(context.Background()) }()

	send := middleware.ChainSend(SendFunc(p), middleware.Keys())
	const n = 5
	type sentMsg struct {
		msgID, keys string
		body        string
	}
	sent := map[string]sentMsg{} // seq → what was sent
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		m := message.NewMessage(topic, []byte("payment-"+strconv.Itoa(i)))
		m.SetTag("Paid").SetProperty("seq", strconv.Itoa(i)).SetShardingKey("order-" + strconv.Itoa(i%2))
		if i > 0 {
			m.SetKeys("order-"+strconv.Itoa(i), "user-7")
		}
		res, err := send(ctx, m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		// Keys hands a copy on for the message without keys, so only the others carry
		// the UNIQ_KEY SendFunc set back to the caller.
		if res.Status != message.SendOK || res.MsgID == "" || (i > 0 && res.MsgID != m.UniqKey()) || res.Queue.Topic != topic || res.Queue.BrokerName == "" {
			t.Fatalf("send %d result %+v (UNIQ_KEY %q)", i, res, m.UniqKey())
		}
		keys := strings.Join(m.Keys(), " ")
		if i == 0 {
			keys = middleware.ContentKey(m)
		}
		sent[strconv.Itoa(i)] = sentMsg{msgID: res.MsgID, keys: keys, body: string(m.Body)}
	}
	if k := sent["0"].keys; !strings.HasPrefix(k, "Paid_") || len(k) != len("Paid_")+32 {
		t.Fatalf("content key %q, want Paid_<md5hex>", k)
	}

	var mu sync.Mutex
	got := map[string]*message.MessageExt{}
	var chainSaw int
	counting := func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			mu.Lock()
			chainSaw += len(msgs)
			mu.Unlock()
			return next(ctx, msgs)
		}
	}
	handler := middleware.ChainConsume(func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[m.Property("seq")] = m
		}
		return message.ConsumeSuccess, nil
	}, middleware.Recover(), counting)

	c, err := rocketmq.NewPushConsumer(
		consumer.WithNameServer(primitive.NamesrvAddr{ns}),
		consumer.WithGroupName("adapter_consumer"),
		consumer.WithInstance(t.Name()+"_c"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "Paid"}, ConsumeHandler(handler, testkit.Quiet())); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = Component(officialclient.Quiesced(c)).Shutdown(context.Background()) }()
	testkit.WaitFor(t, 60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == n }, func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprintf("%d of %d received", len(got), n) })
	mu.Lock()
	defer mu.Unlock()
	for seq, want := range sent {
		m := got[seq]
		if m.Topic != topic || m.Tag() != "Paid" || strings.Join(m.Keys(), " ") != want.keys || string(m.Body) != want.body ||
			m.MsgID != want.msgID || m.ShardingKey() == "" || m.QueueOffset < 0 || m.BrokerName == "" || !m.StoreHost.IsValid() {
			t.Fatalf("message %s: %+v, want %+v", seq, m, want)
		}
	}
	if chainSaw < n {
		t.Fatalf("the consume chain saw %d messages", chainSaw)
	}
}

// ConsumeHandler maps results: success acks; ReconsumeLater, an error and a panic ask
// for redelivery.
func TestConsumeHandlerResults(t *testing.T) {
	boom := errors.New("boom")
	msg := &primitive.MessageExt{Message: primitive.Message{Topic: "T", Body: []byte("x")}, MsgId: "id1",
		BornHost: "10.0.0.1:4000", StoreHost: "127.0.0.1:10911"}
	msg.WithProperty("TAGS", "A")
	msg.Queue = &primitive.MessageQueue{Topic: "T", BrokerName: "b1", QueueId: 3}
	cases := []struct {
		name string
		h    middleware.ConsumeFunc
		want consumer.ConsumeResult
	}{
		{"success", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
			return message.ConsumeSuccess, nil
		}, consumer.ConsumeSuccess},
		{"later", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
			return message.ReconsumeLater, nil
		}, consumer.ConsumeRetryLater},
		{"error", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
			return message.ConsumeSuccess, boom
		}, consumer.ConsumeRetryLater},
		{"panic", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) { panic("bad handler") }, consumer.ConsumeRetryLater},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var seen *message.MessageExt
			h := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				seen = msgs[0]
				return tc.h(ctx, msgs)
			}
			res, err := ConsumeHandler(h, testkit.Quiet())(context.Background(), msg)
			if res != tc.want || err != nil {
				t.Fatalf("got %v, %v; want %v, nil", res, err, tc.want)
			}
			if seen.Tag() != "A" || seen.QueueID != 3 || seen.BrokerName != "b1" || seen.MsgID != "id1" || seen.BornHost.String() != "10.0.0.1:4000" {
				t.Fatalf("converted message %+v", seen)
			}
		})
	}
}

// A send that fails (no broker behind the name server) returns a wrapped error, which
// redismw.Park would treat as retriable.
func TestSendFailure(t *testing.T) {
	p, err := rocketmq.NewProducer(
		producer.WithNameServer(primitive.NamesrvAddr{"127.0.0.1:1"}),
		producer.WithGroupName("adapter_producer_fail"),
		producer.WithInstanceName(t.Name()),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = Component(p).Shutdown(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = SendFunc(p)(ctx, message.NewMessage("Nowhere", []byte("x")))
	if err == nil || !strings.Contains(err.Error(), "rocketmqofficial: send to topic \"Nowhere\"") || !redismw.DefaultRetriable(err) {
		t.Fatalf("err %v, want a wrapped retriable send error", err)
	}
}
