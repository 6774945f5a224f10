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
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
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

	p, err := producer.New(producer.Config{NamesrvAddrs: ns, Group: "tt_producer", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := producer.NewTransactionProducer(producer.Config{NamesrvAddrs: ns, Group: "tt_txn_producer", Logger: quiet}, listener{})
	if err != nil {
		t.Fatal(err)
	}
	for _, start := range []func() error{p.Start, tp.Start} {
		if err := start(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
		_ = tp.Shutdown(ctx)
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
		Send: func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
			if msg.ShardingKey() != "" {
				return p.SendSync(ctx, msg, producer.WithSelector(producer.HashSelector()))
			}
			return p.SendSync(ctx, msg)
		},
		StartConsumer: func(t testing.TB, cfg transporttest.ConsumerConfig) transporttest.Consumer {
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
			if cfg.SQL != "" {
				err = c.SubscribeSQL(cfg.Topic, cfg.SQL, cfg.Handler)
			} else {
				err = c.Subscribe(cfg.Topic, cfg.Tags, cfg.Handler)
			}
			if err == nil {
				err = c.Start()
			}
			if err != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = c.Shutdown(ctx)
				t.Fatalf("start consumer of %s: %v", cfg.Group, err)
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
		Timeout: 20 * time.Second,
	})
}
