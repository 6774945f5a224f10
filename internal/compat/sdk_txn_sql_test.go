package compat_test

// Sluice's own SDK against the Sluice broker for transactions and SQL92, with the
// official client on the other side: Sluice's TransactionProducer consumed by both
// Sluice's and the official push consumer; Sluice's SQL92 subscription of messages the
// official producer sent.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// sdkTxnListener decides by body: "commit" and "rollback" at once; "unknown-then-commit"
// and "late-commit" unknown at once and commit when checked; anything else unknown
// forever.
type sdkTxnListener struct {
	mu     sync.Mutex
	checks map[string]int
}

func (l *sdkTxnListener) ExecuteLocalTransaction(_ context.Context, m *message.Message) producer.LocalTransactionState {
	switch string(m.Body) {
	case "commit":
		return producer.CommitMessage
	case "rollback":
		return producer.RollbackMessage
	}
	return producer.Unknown
}

func (l *sdkTxnListener) CheckLocalTransaction(_ context.Context, m *message.MessageExt) producer.LocalTransactionState {
	l.mu.Lock()
	l.checks[string(m.Body)]++
	l.mu.Unlock()
	switch string(m.Body) {
	case "unknown-then-commit", "late-commit":
		return producer.CommitMessage
	}
	return producer.Unknown
}

func (l *sdkTxnListener) count(body string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.checks[body]
}

// sluiceConsumerAt starts a Sluice push consumer (from the first offset) whose
// subscription subscribe sets up with the given handler; shut down by t.Cleanup.
func sluiceConsumerAt(t *testing.T, ns, group, instance string, subscribe func(*consumer.PushConsumer, func(context.Context, []*message.MessageExt) (message.ConsumeResult, error)) error, col *bodyCollector) {
	t.Helper()
	sdktest.StartPushConsumer(t, consumer.Config{
		NamesrvAddrs:          []string{ns},
		Group:                 group,
		InstanceName:          clientInstance(t, instance),
		ConsumeFromWhere:      consumer.ConsumeFromFirstOffset,
		PersistOffsetInterval: 100 * time.Millisecond,
		Logger:                testLogger(t),
	}, func(c *consumer.PushConsumer) error {
		return subscribe(c, func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			for _, m := range msgs {
				col.add(string(m.Body))
			}
			return message.ConsumeSuccess, nil
		})
	}, sdktest.MustShutDown)
}

// TestSluiceTransactionProducer: Sluice's TransactionProducer with commit, rollback,
// unknown-then-commit-on-check and unknown forever (check max 2): Sluice's and the
// official push consumer each receive exactly the committed messages, once; the
// check-max one lands in TRANS_CHECK_MAX_TIME_TOPIC and is never delivered; a delayed
// transactional message is refused before reaching the broker.
func TestSluiceTransactionProducer(t *testing.T) {
	b, _ := brokerWith(t, "SdkTx", func(c *broker.Config) {
		c.TransactionTimeOut = 200
		c.TransactionCheckInterval = 200
		c.TransactionCheckMax = 2
	})
	ns := b.NamesrvAddr()
	official, sluice := &bodyCollector{}, &bodyCollector{}
	officialConsumerAt(t, ns, "compat_sdk_tx_official", "txo", "SdkTx", rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: "*"}, official)
	sluiceConsumerAt(t, ns, "compat_sdk_tx_sluice", "txs", func(c *consumer.PushConsumer, h func(context.Context, []*message.MessageExt) (message.ConsumeResult, error)) error {
		return c.Subscribe("SdkTx", "*", h)
	}, sluice)

	l := &sdkTxnListener{checks: map[string]int{}}
	tp, err := producer.NewTransactionProducer(producer.Config{
		NamesrvAddrs: []string{ns}, Group: "compat_sdk_tx_producer", InstanceName: clientInstance(t, "txp"), Logger: testLogger(t),
	}, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			t.Errorf("transaction producer shutdown: %v", err)
		}
	})

	send := func(body string, want producer.LocalTransactionState) {
		t.Helper()
		r, err := tp.SendMessageInTransaction(context.Background(), message.NewMessage("SdkTx", []byte(body)))
		if err != nil || r.Status != message.SendOK || r.State != want || r.EndTransactionErr != nil {
			t.Fatalf("send %s: %+v %v", body, r, err)
		}
	}
	send("commit", producer.CommitMessage)
	send("rollback", producer.RollbackMessage)
	send("unknown-then-commit", producer.Unknown)
	send("unknown-forever", producer.Unknown)

	_, err = tp.SendMessageInTransaction(context.Background(), message.NewMessage("SdkTx", []byte("delayed")).SetDelayLevel(1))
	var ve *message.ValidationError
	if !errors.As(err, &ve) || ve.Field != "delay level" {
		t.Fatalf("delayed transactional message: %v", err)
	}
	if n := maxOffsetOf(t, b.Addr(), message.TransHalfTopic); n != 4 {
		t.Fatalf("%d half messages stored, want 4 (the delayed one must not reach the broker)", n)
	}

	both := func(want string) bool {
		return strings.Join(official.bodies(), ",") == want && strings.Join(sluice.bodies(), ",") == want
	}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return both("commit,unknown-then-commit") && maxOffsetOf(t, b.Addr(), message.TransCheckMaxTimeTopic) == 1
	}, func() string {
		return "committed messages at both consumers and the check-max discard: official " + strings.Join(official.bodies(), ",") +
			"; sluice " + strings.Join(sluice.bodies(), ",")
	})
	// A later transaction committed on check: once both consumers have it, the check
	// service has scanned the half queue again after every decision above, so nothing
	// else can still come.
	send("late-commit", producer.Unknown)
	testkit.WaitFor(t, 20*time.Second, func() bool { return both("commit,late-commit,unknown-then-commit") }, func() string {
		return "late-commit at both consumers: official " + strings.Join(official.bodies(), ",") + "; sluice " + strings.Join(sluice.bodies(), ",")
	})
	for body, want := range map[string]int{"commit": 0, "rollback": 0, "unknown-then-commit": 1, "unknown-forever": 2, "late-commit": 1} {
		if n := l.count(body); n != want {
			t.Errorf("%s checked %d times, want %d", body, n, want)
		}
	}
}

// TestSluiceSQL92ConsumerWithOfficialProducer: messages from the official producer;
// Sluice's SQL92 push consumer receives exactly the matching ones, once each (checked
// once its committed offsets reach the end of every queue), as does the official
// consumer with the same selector in another group.
func TestSluiceSQL92ConsumerWithOfficialProducer(t *testing.T) {
	b, adm := brokerWith(t, "SdkPoints", func(c *broker.Config) { c.EnablePropertyFilter = true })
	ns := b.NamesrvAddr()
	p := newOfficialProducerAt(t, ns, "sdksqlp")
	for i := 1; i <= 20; i++ {
		m := primitive.NewMessage("SdkPoints", []byte("p"+strconv.Itoa(i)))
		m.WithProperty("amount", strconv.Itoa(i*10))
		if i%2 == 0 {
			m.WithProperty("vip", "true")
		}
		if i%4 == 0 {
			m.WithTag("gold")
		}
		if res, err := p.SendSync(context.Background(), m); err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, res, err)
		}
	}
	const expr = "(amount >= 150 AND vip = 'true') OR (TAGS = 'gold' AND amount < 50)"
	const want = "p16,p18,p20,p4" // sorted as strings
	sluice, official := &bodyCollector{}, &bodyCollector{}
	sluiceConsumerAt(t, ns, "compat_sdk_sql_sluice", "sqls", func(c *consumer.PushConsumer, h func(context.Context, []*message.MessageExt) (message.ConsumeResult, error)) error {
		return c.SubscribeSQL("SdkPoints", expr, h)
	}, sluice)
	officialConsumerAt(t, ns, "compat_sdk_sql_official", "sqlo", "SdkPoints", rmqconsumer.MessageSelector{Type: rmqconsumer.SQL92, Expression: expr}, official)

	caughtUp := func(group string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		offs, err := adm.ConsumerOffsets(ctx, group, "SdkPoints")
		if err != nil || len(offs) == 0 {
			return false
		}
		for _, o := range offs {
			if o.Committed < o.Max {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return caughtUp("compat_sdk_sql_sluice") && strings.Join(sluice.bodies(), ",") == want && strings.Join(official.bodies(), ",") == want
	}, func() string {
		return "SQL92 matches: sluice " + strings.Join(sluice.bodies(), ",") + "; official " + strings.Join(official.bodies(), ",")
	})
}
