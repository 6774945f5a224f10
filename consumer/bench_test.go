package consumer

// Consume throughput: a fresh push consumer group drains b.N prefilled 1 KiB messages of
// an 8-queue topic from an embedded broker in the same process (so broker and consumer
// share the CPUs), with a no-op handler and ConsumeMessageBatchMaxSize 32.
//
//	go test -run '^$' -bench 'Consume' -benchtime 200000x ./consumer/
//
// The prefill (batch sends) is outside the timed part.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

const benchBodySize = 1024

func BenchmarkConsumeConcurrent(b *testing.B) { benchConsume(b, false) }

func BenchmarkConsumeOrderly(b *testing.B) { benchConsume(b, true) }

func benchConsume(b *testing.B, orderly bool) {
	br, _ := testbroker.Start(b, broker.Config{})
	ns := []string{br.NamesrvAddr()}
	a, err := admin.New(admin.Config{NamesrvAddrs: ns, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	const topic = "BenchConsume"
	ctx := context.Background()
	if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 8}); err != nil {
		b.Fatal(err)
	}
	if _, err := a.WaitTopicRoute(ctx, topic); err != nil {
		b.Fatal(err)
	}
	p, err := producer.New(producer.Config{NamesrvAddrs: ns, Group: "bench-pg", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, benchBodySize)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	const batch = 64
	for sent := 0; sent < b.N; {
		n := min(batch, b.N-sent)
		msgs := make([]*message.Message, n)
		for i := range msgs {
			msgs[i] = message.NewMessage(topic, body)
		}
		if _, err := p.SendBatch(ctx, msgs); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	_ = p.Shutdown(ctx)

	var got atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	c, err := NewPushConsumer(Config{NamesrvAddrs: ns, Group: fmt.Sprintf("bench-cg-%t", orderly), ConsumeFromWhere: ConsumeFromFirstOffset,
		ConsumeMessageBatchMaxSize: 32, Orderly: orderly, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if got.Add(int64(len(msgs))) == target {
			close(done)
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(benchBodySize)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("consumed %d of %d", got.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Shutdown(sctx); err != nil {
		b.Fatal(err)
	}
}
