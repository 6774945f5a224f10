package otelmw_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/otelmw"
	"github.com/sluicemq/sluice/producer"
)

func newTP(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

func TestSendInjectsAndRecords(t *testing.T) {
	tp, sr := newTP(t)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	var seen *message.Message
	ok := func(_ context.Context, m *message.Message) (*message.SendResult, error) {
		seen = m
		return &message.SendResult{MsgID: "ID1"}, nil
	}
	msg := message.NewMessage("Orders", []byte("x")).SetTag("Paid").SetKeys("k1")
	if _, err := otelmw.Send(otelmw.WithTracerProvider(tp))(ok)(ctx, msg); err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans := sr.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	send := spans[0]
	if send.Name() != "send Orders" || send.SpanKind() != trace.SpanKindProducer || send.Parent().SpanID() != parent.SpanContext().SpanID() ||
		attr(send, otelmw.AttrMessageID) != "ID1" || attr(send, otelmw.AttrDestination) != "Orders" || attr(send, otelmw.AttrTag) != "Paid" {
		t.Fatalf("send span %s kind %v parent %v attrs %v", send.Name(), send.SpanKind(), send.Parent(), send.Attributes())
	}
	tp0 := seen.Property("traceparent")
	want := "00-" + send.SpanContext().TraceID().String() + "-" + send.SpanContext().SpanID().String() + "-01"
	if tp0 != want {
		t.Fatalf("traceparent %q, want %q", tp0, want)
	}

	// A failed send: error status, the error recorded.
	fail := func(context.Context, *message.Message) (*message.SendResult, error) {
		return nil, errors.New("broker down")
	}
	if _, err := otelmw.Send(otelmw.WithTracerProvider(tp))(fail)(context.Background(), message.NewMessage("T", []byte("y"))); err == nil {
		t.Fatal("error lost")
	}
	last := sr.Ended()[2]
	if last.Status().Code != codes.Error || last.Status().Description != "broker down" || len(last.Events()) != 1 {
		t.Fatalf("failed send span: %+v", last.Status())
	}
}

func TestConsumeContinuesTrace(t *testing.T) {
	tp, sr := newTP(t)
	// A producer side: inject the context of span P into two messages.
	pctx, p := tp.Tracer("test").Start(context.Background(), "P")
	var msgs []*message.MessageExt
	for i := range 2 {
		m := testkit.NewExt("Orders", "Paid", "k"+string(rune('0'+i)), "body")
		propagation.TraceContext{}.Inject(pctx, otelmw.Carrier{M: &m.Message})
		msgs = append(msgs, m)
	}
	p.End()
	var handlerSpan trace.SpanContext
	h := func(ctx context.Context, _ []*message.MessageExt) (message.ConsumeResult, error) {
		handlerSpan = trace.SpanContextFromContext(ctx)
		return message.ConsumeSuccess, nil
	}
	mw := otelmw.Consume(otelmw.WithTracerProvider(tp), otelmw.WithConsumerGroup("billing"))
	if _, err := mw(h)(context.Background(), msgs[:1]); err != nil {
		t.Fatal(err)
	}
	c := sr.Ended()[1]
	if c.Name() != "process Orders" || c.SpanKind() != trace.SpanKindConsumer || c.Parent().SpanID() != p.SpanContext().SpanID() ||
		c.SpanContext().TraceID() != p.SpanContext().TraceID() || len(c.Links()) != 1 || c.Links()[0].SpanContext.SpanID() != p.SpanContext().SpanID() ||
		attr(c, otelmw.AttrConsumerGroup) != "billing" || attr(c, otelmw.AttrConsumeResult) != "CONSUME_SUCCESS" {
		t.Fatalf("consumer span %s parent %v links %v attrs %v", c.Name(), c.Parent(), c.Links(), c.Attributes())
	}
	if handlerSpan.SpanID() != c.SpanContext().SpanID() {
		t.Fatal("the handler's ctx does not hold the consumer span")
	}

	// A batch: a new trace (no span in ctx) linked to both messages; a retry result is an error.
	later := func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ReconsumeLater, nil
	}
	if _, err := mw(later)(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	b := sr.Ended()[2]
	if b.Parent().IsValid() || len(b.Links()) != 2 || attr(b, otelmw.AttrBatchCount) != "2" || b.Status().Code != codes.Error {
		t.Fatalf("batch span parent %v links %d attrs %v status %v", b.Parent(), len(b.Links()), b.Attributes(), b.Status())
	}

	// A message without trace context starts a new trace; a panic is recorded and passed on.
	plain := testkit.NewExt("Orders", "", "k", "b")
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_, _ = mw(func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) { panic("boom") })(context.Background(), []*message.MessageExt{plain})
	}()
	pn := sr.Ended()[3]
	if pn.Parent().IsValid() || len(pn.Links()) != 0 || pn.Status().Code != codes.Error || !strings.Contains(pn.Status().Description, "boom") {
		t.Fatalf("panic span: parent %v status %v", pn.Parent(), pn.Status())
	}
}

// TestTraceThroughBroker sends through an ephemeral broker with Send and consumes with
// Consume: the consumer span is a child of the producer span, in the same trace.
func TestTraceThroughBroker(t *testing.T) {
	tp, sr := newTP(t)
	quiet := testkit.Quiet()
	b, stop, err := broker.StartEphemeral(broker.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop(context.Background()) })
	ns := []string{b.NamesrvAddr()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := admin.New(admin.Config{NamesrvAddrs: ns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: "Traced", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitTopicRoute(ctx, "Traced"); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var got []trace.SpanContext
	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: ns, Group: "traced-cg", Logger: quiet,
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		Middlewares:      []middleware.ConsumeMiddleware{otelmw.Consume(otelmw.WithTracerProvider(tp), otelmw.WithConsumerGroup("traced-cg"))}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("Traced", "*", func(ctx context.Context, _ []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		got = append(got, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Shutdown(context.Background()) }()

	p, err := producer.New(producer.Config{NamesrvAddrs: ns, Group: "traced-pg", Logger: quiet,
		Middlewares: []middleware.SendMiddleware{otelmw.Send(otelmw.WithTracerProvider(tp))}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	rctx, request := tp.Tracer("test").Start(ctx, "http request")
	res, err := p.SendSync(rctx, message.NewMessage("Traced", []byte("hello")).SetTag("T"))
	if err != nil {
		t.Fatal(err)
	}
	request.End()

	testkit.WaitFor(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 1 }, "the message consumed")
	var send, process sdktrace.ReadOnlySpan
	testkit.WaitFor(t, 5*time.Second, func() bool {
		for _, s := range sr.Ended() {
			switch s.SpanKind() {
			case trace.SpanKindProducer:
				send = s
			case trace.SpanKindConsumer:
				process = s
			}
		}
		return send != nil && process != nil
	}, "both spans ended")
	if send.Parent().SpanID() != request.SpanContext().SpanID() || attr(send, otelmw.AttrMessageID) != res.MsgID {
		t.Fatalf("send span parent %v attrs %v", send.Parent(), send.Attributes())
	}
	if process.Parent().SpanID() != send.SpanContext().SpanID() || process.SpanContext().TraceID() != request.SpanContext().TraceID() ||
		attr(process, otelmw.AttrMessageID) != res.MsgID {
		t.Fatalf("process span parent %v trace %v, want child of %v", process.Parent(), process.SpanContext().TraceID(), send.SpanContext())
	}
	mu.Lock()
	defer mu.Unlock()
	if got[0].SpanID() != process.SpanContext().SpanID() {
		t.Fatal("the handler ran outside the consumer span")
	}
}
