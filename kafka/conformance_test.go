package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/redisdedup"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/transport"
	"github.com/sluicemq/sluice/transporttest"
)

// kafkaFeatures is what the Kafka transport offers the conformance suite, and why the
// rest is off.
var kafkaFeatures = transporttest.Features{
	Tags:                true, // header TAGS, filtered on the client
	SQL92:               true, // headers as properties, filtered on the client
	OrderPerShardingKey: true, // sharding key → record key (Murmur2), Orderly consumer
	ConsumeRetry:        true, // <group>.retry.<n> topics
	DeadLetter:          true, // <group>.dlq
	ConsumerGroups:      true,
	Restart:             true,
	GracefulShutdown:    true,
	BatchConsume:        true, // Config.ConsumeMessageBatchMaxSize
	// Transactions: Kafka's transactions have no check-back of a local transaction
	// (RocketMQ's half message + CheckLocalTransaction); Producer.SendMessageInTransaction
	// returns ErrUnsupported.
	Transactions: false,
}

// kafkaTransport returns the conformance harness of package kafka against brokers.
func kafkaTransport(t *testing.T, brokers []string) transporttest.Transport {
	quiet := testkit.Quiet()
	cl := clientFor(t, brokers)
	return transporttest.Transport{
		Features: kafkaFeatures,
		CreateTopic: func(t testing.TB, topic string, shards int) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := EnsureTopics(ctx, cl, shards, -1, topic); err != nil {
				t.Fatalf("create topic %s: %v", topic, err)
			}
		},
		NewProducer: func(t testing.TB) transport.Producer {
			p, err := NewProducer(ProducerConfig{Brokers: brokers, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewConsumer: func(t testing.TB, cfg transporttest.ConsumerConfig) transport.Consumer {
			t.Helper()
			cc := Config{
				Brokers: brokers, Group: cfg.Group, Orderly: cfg.Orderly, Logger: quiet,
				HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 5 * time.Second,
				JoinGroupBackoff: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, CommitInterval: 100 * time.Millisecond,
				RetrySchedule: []time.Duration{200 * time.Millisecond}, SuspendCurrentQueueTime: 100 * time.Millisecond,
				ConsumeMessageBatchMaxSize: cfg.BatchSize,
			}
			if cfg.MaxReconsumeTimes >= 0 {
				cc.MaxReconsumeTimes = Retries(cfg.MaxReconsumeTimes)
			}
			c, err := NewConsumer(cc)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		DeadLetters: func(ctx context.Context, group, topic string) ([]*message.MessageExt, error) {
			l, err := ListDLQ(ctx, brokers, group)
			if err != nil {
				return nil, err
			}
			var out []*message.MessageExt
			for _, d := range l {
				if d.OriginTopic == topic {
					out = append(out, d.Record.ToMessageExt())
				}
			}
			return out, nil
		},
		Dedup:   redisdedup.Each,
		Timeout: 20 * time.Second,
	}
}

// The transport conformance suite against an in-process Kafka-protocol cluster (kfake).
func TestConformance(t *testing.T) {
	c := newCluster(t, 1)
	transporttest.Run(t, kafkaTransport(t, c.ListenAddrs()))
}
