package compat_test

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/officialclient"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// brokerWith starts an embedded broker with a modified config and creates topic.
func brokerWith(t *testing.T, topic string, mod func(*broker.Config)) (*broker.Broker, *admin.Admin) {
	t.Helper()
	log := testLogger(t)
	cfg := broker.Config{Logger: log}
	mod(&cfg)
	b, _ := testbroker.Start(t, cfg)
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.WaitTopicRoute(ctx, topic); err != nil {
		t.Fatal(err)
	}
	return b, adm
}

// txnListener decides each transaction by the message body: "commit", "rollback",
// "unknown-then-commit" (unknown at once, commit when checked) or "unknown-forever".
type txnListener struct {
	mu     sync.Mutex
	checks map[string]int
}

func (l *txnListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	switch string(m.Body) {
	case "commit":
		return primitive.CommitMessageState
	case "rollback":
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (l *txnListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	l.checks[string(m.Body)]++
	l.mu.Unlock()
	if string(m.Body) == "unknown-then-commit" {
		return primitive.CommitMessageState
	}
	return primitive.UnkonwnState
}

func (l *txnListener) count(body string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checks[body]
}

// TestOfficialTransactionProducer: the official client's transaction producer with
// commit, rollback, unknown-then-commit-on-check and unknown forever; exactly the
// committed messages are consumed, each once; the rolled-back and the check-max ones never.
func TestOfficialTransactionProducer(t *testing.T) {
	b, _ := brokerWith(t, "TxOrders", func(c *broker.Config) {
		c.TransactionTimeOut = 200
		c.TransactionCheckInterval = 200
		c.TransactionCheckMax = 2
	})
	l := &txnListener{checks: map[string]int{}}
	p, err := rocketmq.NewTransactionProducer(l,
		rmqproducer.WithNameServer(primitive.NamesrvAddr{b.NamesrvAddr()}),
		rmqproducer.WithGroupName("compat_tx_producer"),
		rmqproducer.WithInstanceName(clientInstance(t, "txp")),
		rmqproducer.WithRetry(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })

	col := &bodyCollector{}
	officialConsumerAt(t, b.NamesrvAddr(), "compat_tx_group", "txc", "TxOrders", rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: "*"}, col)

	for _, body := range []string{"commit", "rollback", "unknown-then-commit", "unknown-forever"} {
		res, err := p.SendMessageInTransaction(context.Background(), primitive.NewMessage("TxOrders", []byte(body)))
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %s: %v %v", body, res, err)
		}
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return len(col.bodies()) == 2 && l.count("unknown-forever") >= 2 }, func() string {
		return "committed messages and the check-max discard: got " + strings.Join(col.bodies(), ",")
	})
	testkit.WaitFor(t, 10*time.Second, func() bool { return maxOffsetOf(t, b.Addr(), message.TransCheckMaxTimeTopic) == 1 }, func() string { return "unknown-forever in TRANS_CHECK_MAX_TIME_TOPIC" })
	got := col.bodies()
	if strings.Join(got, ",") != "commit,unknown-then-commit" {
		t.Fatalf("consumed %v, want exactly commit and unknown-then-commit, once each", got)
	}
	if n := l.count("commit"); n != 0 {
		t.Fatalf("an at-once commit was checked %d times", n)
	}
	if n := l.count("unknown-then-commit"); n != 1 {
		t.Fatalf("unknown-then-commit checked %d times, want 1", n)
	}
}

// maxOffsetOf reads a queue's max offset with GET_MAX_OFFSET (30).
func maxOffsetOf(t *testing.T, brokerAddr, topic string) int64 {
	t.Helper()
	rc, err := remoting.NewClient(remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rc.InvokeSync(ctx, brokerAddr, remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": topic, "queueId": "0"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	off, _ := resp.ExtInt64("offset", false)
	return off
}

// bodyCollector records the bodies an official consumer received, sorted.
type bodyCollector struct {
	mu  sync.Mutex
	got []string
}

func (c *bodyCollector) add(b string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, b)
}

func (c *bodyCollector) bodies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]string(nil), c.got...)
	sort.Strings(out)
	return out
}

// officialConsumerAt starts an official push consumer with any selector.
func officialConsumerAt(t *testing.T, ns, group, instance, topic string, sel rmqconsumer.MessageSelector, col *bodyCollector) {
	t.Helper()
	c, err := rocketmq.NewPushConsumer(
		rmqconsumer.WithNameServer(primitive.NamesrvAddr{ns}),
		rmqconsumer.WithGroupName(group),
		rmqconsumer.WithInstance(clientInstance(t, instance)),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, sel, func(_ context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
		for _, m := range msgs {
			col.add(string(m.Body))
		}
		return rmqconsumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = officialclient.ShutdownConsumer(c) })
}

// TestOfficialSQL92Selector: the official client's SQL92 selector receives exactly the
// matching messages.
func TestOfficialSQL92Selector(t *testing.T) {
	b, _ := brokerWith(t, "Points", func(c *broker.Config) { c.EnablePropertyFilter = true })
	p := newOfficialProducerAt(t, b.NamesrvAddr(), "sqlp")
	for i := 1; i <= 20; i++ {
		m := primitive.NewMessage("Points", []byte("p"+strconv.Itoa(i)))
		m.WithProperty("amount", strconv.Itoa(i*10))
		if i%2 == 0 {
			m.WithProperty("vip", "true")
		}
		if res, err := p.SendSync(context.Background(), m); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, res, err)
		}
	}
	col := &bodyCollector{}
	officialConsumerAt(t, b.NamesrvAddr(), "compat_sql_group", "sqlc", "Points",
		rmqconsumer.MessageSelector{Type: rmqconsumer.SQL92, Expression: "amount >= 150 AND vip = 'true'"}, col)
	want := "p16,p18,p20" // sorted as strings
	testkit.WaitFor(t, 20*time.Second, func() bool { return strings.Join(col.bodies(), ",") == want }, func() string { return "SQL92 matches: got " + strings.Join(col.bodies(), ",") })
}

func newOfficialProducerAt(t *testing.T, ns, instance string) rocketmq.Producer {
	t.Helper()
	p, err := rocketmq.NewProducer(
		rmqproducer.WithNameServer(primitive.NamesrvAddr{ns}),
		rmqproducer.WithGroupName("compat_official_producer"),
		rmqproducer.WithInstanceName(clientInstance(t, instance)),
		rmqproducer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}
