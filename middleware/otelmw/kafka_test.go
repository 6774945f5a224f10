package otelmw_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/otelmw"
)

// TestTraceThroughKafka is TestTraceThroughBroker over Kafka (an in-process kfake
// cluster): the trace context travels as record headers (the kafka package maps
// properties to headers), and the consumer span is a child of the producer span.
func TestTraceThroughKafka(t *testing.T) {
	tp, sr := newTP(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.SeedTopics(1, "traced"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	var got []trace.SpanContext
	handler := middleware.ChainConsume(func(ctx context.Context, _ []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		got = append(got, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		return message.ConsumeSuccess, nil
	}, otelmw.Consume(otelmw.WithTracerProvider(tp), otelmw.WithSystem("kafka"), otelmw.WithConsumerGroup("traced-cg")))
	c, err := kafka.NewConsumer(kafka.Config{Brokers: brokers, Group: "traced-cg", Logger: testkit.Quiet(),
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second, RebalanceTimeout: 3 * time.Second,
		JoinGroupBackoff: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, CommitInterval: 50 * time.Millisecond,
		Timeout: 2 * time.Second, RetrySchedule: []time.Duration{50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("traced", "*", handler); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := c.Shutdown(sctx); err != nil {
			t.Error(err)
		}
	}()
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := p.Shutdown(sctx); err != nil {
			t.Error(err)
		}
	}()
	send := middleware.ChainSend(p.SendFunc(), otelmw.Send(otelmw.WithTracerProvider(tp), otelmw.WithSystem("kafka")))
	rctx, request := tp.Tracer("test").Start(ctx, "http request")
	if _, err := send(rctx, message.NewMessage("traced", []byte("hello")).SetTag("T")); err != nil {
		t.Fatal(err)
	}
	request.End()

	testkit.WaitFor(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 }, "the record consumed")
	var sendSpan, process sdktrace.ReadOnlySpan
	testkit.WaitFor(t, 5*time.Second, func() bool {
		for _, s := range sr.Ended() {
			switch s.SpanKind() {
			case trace.SpanKindProducer:
				sendSpan = s
			case trace.SpanKindConsumer:
				process = s
			}
		}
		return sendSpan != nil && process != nil
	}, "both spans ended")
	if sendSpan.Parent().SpanID() != request.SpanContext().SpanID() || attr(sendSpan, otelmw.AttrSystem) != "kafka" {
		t.Fatalf("send span parent %v attrs %v", sendSpan.Parent(), sendSpan.Attributes())
	}
	if process.Parent().SpanID() != sendSpan.SpanContext().SpanID() || process.SpanContext().TraceID() != request.SpanContext().TraceID() {
		t.Fatalf("process span parent %v, want a child of %v", process.Parent(), sendSpan.SpanContext())
	}
	mu.Lock()
	defer mu.Unlock()
	if got[0].SpanID() != process.SpanContext().SpanID() {
		t.Fatal("the handler ran outside the consumer span")
	}
}
