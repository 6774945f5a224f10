// Package sdktest starts Sluice's SDK clients for tests that run them against a broker —
// Sluice's own (internal/compat) or Apache RocketMQ (internal/peers) — and holds the
// scenario steps those suites share, so that both check the same behaviour the same way.
// It imports the producer and consumer packages: their own tests cannot use it.
package sdktest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// Shutdown says what a test expects of a client's shutdown when the test ends.
type Shutdown int

const (
	// MustShutDown fails the test when the client's Shutdown returns an error.
	MustShutDown Shutdown = iota
	// MayFail ignores the error: for a client whose requests are meant to be refused
	// (with a wrong secret its unregistration is refused too).
	MayFail
)

// StartProducer creates and starts a producer with cfg and shuts it down (within 10 s)
// when the test ends, failing the test on a shutdown error unless sd is MayFail.
func StartProducer(t testing.TB, cfg producer.Config, sd Shutdown) *producer.Producer {
	t.Helper()
	p, err := producer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil && sd == MustShutDown {
			t.Errorf("producer shutdown: %v", err)
		}
	})
	return p
}

// StartPullConsumer creates and starts a pull consumer with cfg and shuts it down
// (within 10 s, its error ignored) when the test ends.
func StartPullConsumer(t testing.TB, cfg consumer.PullConfig) *consumer.PullConsumer {
	t.Helper()
	pc, err := consumer.NewPullConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = pc.Shutdown(ctx)
	})
	return pc
}

// PullEveryQueue pulls each queue of topic once with the tag expression expr, runs
// check on every message, commits the next offset and reads the committed offset back
// (the test fails if it differs); it returns how many messages the pulls returned.
func PullEveryQueue(ctx context.Context, t testing.TB, pc *consumer.PullConsumer, topic, expr string, check func(*message.MessageExt)) int {
	t.Helper()
	mqs, err := pc.MessageQueues(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, mq := range mqs {
		res, err := pc.Pull(ctx, consumer.PullRequest{Queue: mq, Expression: expr})
		if err != nil {
			t.Fatalf("pull of %v: %v", mq, err)
		}
		for _, m := range res.Messages {
			check(m)
		}
		got += len(res.Messages)
		if err := pc.CommitOffset(ctx, mq, res.NextBeginOffset); err != nil {
			t.Fatalf("offset commit of %v: %v", mq, err)
		}
		if off, err := pc.CommittedOffset(ctx, mq); err != nil || off != res.NextBeginOffset {
			t.Fatalf("committed offset of %v: %d %v, want %d", mq, off, err, res.NextBeginOffset)
		}
	}
	return got
}

// StartPushConsumer creates a push consumer with cfg, lets subscribe make its
// subscriptions, starts it, and shuts it down (within 15 s) when the test ends, failing
// the test on a shutdown error unless sd is MayFail.
func StartPushConsumer(t testing.TB, cfg consumer.Config, subscribe func(*consumer.PushConsumer) error, sd Shutdown) *consumer.PushConsumer {
	t.Helper()
	c, err := consumer.NewPushConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := subscribe(c); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx); err != nil && sd == MustShutDown {
			t.Errorf("push consumer shutdown: %v", err)
		}
	})
	return c
}

// PushReceives starts a push consumer with cfg subscribed to every tag of topic, runs
// check on every delivery, and waits up to timeout until it has received n messages with
// distinct bodies (the test fails otherwise). The consumer is shut down (within 15 s)
// when the test ends.
func PushReceives(t testing.TB, cfg consumer.Config, topic string, n int, timeout time.Duration, check func(*message.MessageExt)) {
	t.Helper()
	var mu sync.Mutex
	bodies := map[string]bool{}
	StartPushConsumer(t, cfg, func(c *consumer.PushConsumer) error {
		return c.Subscribe(topic, "*", func(_ context.Context, ms []*message.MessageExt) (message.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				check(m)
				bodies[string(m.Body)] = true
			}
			return message.ConsumeSuccess, nil
		})
	}, MayFail)
	testkit.WaitFor(t, timeout, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == n
	}, "the push consumer to receive every message")
}
