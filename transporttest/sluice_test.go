package transporttest_test

// The conformance suite against Sluice's own transport: the producer, the push consumer
// and an embedded broker (with its name server) on loopback ports.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/redisdedup"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
	"github.com/sluicemq/sluice/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// decision is the user property that tells the test's transaction listener what to do.
const decision = "TT_DECISION"

type listener struct{}

func (listener) ExecuteLocalTransaction(_ context.Context, msg *message.Message) producer.LocalTransactionState {
	if msg.Property(decision) == "commit" {
		return producer.CommitMessage
	}
	return producer.RollbackMessage
}

func (listener) CheckLocalTransaction(_ context.Context, msg *message.MessageExt) producer.LocalTransactionState {
	return listener{}.ExecuteLocalTransaction(context.Background(), &msg.Message)
}

func TestConformance(t *testing.T) {
	quiet := testkit.Quiet()
	// Every delay level 200 ms: a retry (delay level 3 + reconsume count) comes back in
	// 200 ms instead of 10 s and more.
	b, _ := testbroker.Start(t, broker.Config{
		MessageDelayLevel:    strings.TrimSpace(strings.Repeat("200ms ", 18)),
		EnablePropertyFilter: true,
	})
	ns := testbroker.Namesrv(b)
	adm, err := admin.New(admin.Config{NamesrvAddrs: ns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Close() })

	tp, err := producer.NewTransactionProducer(producer.Config{NamesrvAddrs: ns, Group: "tt_txn_producer", Logger: quiet}, listener{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	})
	// Messages with a sharding key go to the queue of their key's hash, the others round
	// robin: the shard-per-key promise the suite relies on (package doc).
	roundRobin := producer.RoundRobinSelector()
	bySharding := producer.SelectorFunc(func(msg *message.Message, queues []message.MessageQueue, lastBroker string) (message.MessageQueue, error) {
		if msg.ShardingKey() != "" {
			return producer.HashSelector().Select(msg, queues, lastBroker)
		}
		return roundRobin.Select(msg, queues, lastBroker)
	})

	transporttest.Run(t, transporttest.Transport{
		Features: transporttest.Features{
			Tags: true, SQL92: true, OrderPerShardingKey: true, ConsumeRetry: true, DeadLetter: true,
			BatchConsume: true, ConsumerGroups: true, Restart: true, GracefulShutdown: true, Transactions: true,
		},
		CreateTopic: func(t testing.TB, topic string, shards int) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: shards}); err != nil {
				t.Fatalf("create topic %s: %v", topic, err)
			}
			if _, err := adm.WaitTopicRoute(ctx, topic); err != nil {
				t.Fatalf("route of %s: %v", topic, err)
			}
		},
		NewProducer: func(t testing.TB) transport.Producer {
			p, err := producer.New(producer.Config{NamesrvAddrs: ns, Group: "tt_producer", Selector: bySharding, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewConsumer: func(t testing.TB, cfg transporttest.ConsumerConfig) transport.Consumer {
			t.Helper()
			cc := consumer.Config{
				NamesrvAddrs:               ns,
				Group:                      cfg.Group,
				Orderly:                    cfg.Orderly,
				ConsumeFromWhere:           consumer.ConsumeFromFirstOffset,
				ConsumeMessageBatchMaxSize: cfg.BatchSize,
				RebalanceInterval:          300 * time.Millisecond,
				PersistOffsetInterval:      100 * time.Millisecond,
				SuspendCurrentQueueTime:    100 * time.Millisecond,
				Logger:                     quiet,
			}
			if cfg.MaxReconsumeTimes >= 0 {
				cc.MaxReconsumeTimes = consumer.Retries(cfg.MaxReconsumeTimes)
			}
			c, err := consumer.NewPushConsumer(cc)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		DeadLetters: func(ctx context.Context, group, topic string) ([]*message.MessageExt, error) {
			l, err := adm.ListDLQ(ctx, group, admin.DLQListOptions{})
			if err != nil {
				return nil, err
			}
			var out []*message.MessageExt
			for _, d := range l {
				if d.OriginTopic == topic {
					out = append(out, d.Message)
				}
			}
			return out, nil
		},
		SendInTransaction: func(ctx context.Context, msg *message.Message, commit bool) error {
			msg.SetProperty(decision, map[bool]string{true: "commit", false: "rollback"}[commit])
			r, err := tp.SendMessageInTransaction(ctx, msg)
			if err != nil {
				return err
			}
			if r.EndTransactionErr != nil {
				return fmt.Errorf("end transaction: %w", r.EndTransactionErr)
			}
			return nil
		},
		Dedup:   redisdedup.Each,
		Timeout: 20 * time.Second,
	})
}
