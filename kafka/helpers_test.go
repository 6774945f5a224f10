package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newCluster starts an in-process Kafka (kfake) with topic seeded (partitions each)
// and short group session limits, closed when the test ends.
func newCluster(t *testing.T, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// fastConfig is a consumer config whose timings suit tests (seconds at most).
func fastConfig(t *testing.T, brokers []string, group string) Config {
	return Config{
		Brokers: brokers, Group: group,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second, RebalanceTimeout: 3 * time.Second,
		JoinGroupBackoff: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, CommitInterval: 50 * time.Millisecond,
		Timeout: 2 * time.Second, RetrySchedule: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond},
		SuspendCurrentQueueTime: 20 * time.Millisecond,
		Logger:                  testkit.Logger(t),
	}
}

func newProducer(t *testing.T, brokers []string, mod func(*ProducerConfig)) *Producer {
	t.Helper()
	cfg := ProducerConfig{Brokers: brokers, Logger: testkit.Logger(t)}
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return p
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// shutdown stops c within d and fails the test if it errs or takes longer.
func shutdown(t *testing.T, c interface{ Shutdown(context.Context) error }, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// seen collects handled messages; safe for concurrent use.
type seen struct {
	mu   sync.Mutex
	msgs []*message.MessageExt
}

func (s *seen) add(m *message.MessageExt) {
	s.mu.Lock()
	s.msgs = append(s.msgs, m)
	s.mu.Unlock()
}

func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

func (s *seen) all() []*message.MessageExt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*message.MessageExt(nil), s.msgs...)
}

// committed returns the group's committed offset of topic/partition (-1 when none).
func committed(t *testing.T, brokers []string, group, topic string, partition int) int64 {
	t.Helper()
	cl := &kafkago.Client{Addr: kafkago.TCP(brokers...), Timeout: 5 * time.Second, Transport: &kafkago.Transport{}}
	defer cl.Transport.(*kafkago.Transport).CloseIdleConnections()
	res, err := cl.OffsetFetch(ctxT(t, 10*time.Second), &kafkago.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {partition}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Topics[topic] {
		if p.Partition == partition {
			return p.CommittedOffset
		}
	}
	return -1
}

// readTopic reads every record of topic (all partitions, from the start to the high
// watermark) without a group.
func readTopic(t *testing.T, brokers []string, topic string) []*Record {
	t.Helper()
	recs, err := ReadAll(ctxT(t, 10*time.Second), brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// clientFor returns a kafka-go client for brokers whose connections close with the test.
func clientFor(t *testing.T, brokers []string) *kafkago.Client {
	tr := &kafkago.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &kafkago.Client{Addr: kafkago.TCP(brokers...), Timeout: 5 * time.Second, Transport: tr}
}
