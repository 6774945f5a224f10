// Package otelmw carries OpenTelemetry trace context through messages, for both
// middleware shapes: [Send] starts a producer span and writes the W3C trace context
// (properties "traceparent" and "tracestate") into the message's properties, and
// [Consume] continues that trace around the handler with a consumer span, a child of the
// producer span (and linked to it). Over Kafka the properties travel as record headers,
// so the same two middlewares work there unchanged.
//
// It imports OpenTelemetry, which the SDK core (producer, consumer, message, remoting,
// middleware) never does.
package otelmw

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// ScopeName is the instrumentation scope of the spans (the tracer name).
const ScopeName = "github.com/sluicemq/sluice/middleware/otelmw"

// Span attribute keys (OpenTelemetry messaging semantic conventions, as plain keys so
// that no semconv version is pinned).
const (
	AttrSystem          = "messaging.system"               // "rocketmq" (WithSystem changes it)
	AttrDestination     = "messaging.destination.name"     // the topic
	AttrOperationName   = "messaging.operation.name"       // "send" or "process"
	AttrOperationType   = "messaging.operation.type"       // "send" or "process"
	AttrMessageID       = "messaging.message.id"           // the message id (UNIQ_KEY)
	AttrBatchCount      = "messaging.batch.message_count"  // messages in a consume batch (> 1)
	AttrConsumerGroup   = "messaging.consumer.group.name"  // WithConsumerGroup
	AttrTag             = "messaging.rocketmq.message.tag" // the message's tag
	AttrKeys            = "messaging.rocketmq.message.keys"
	AttrReconsumeTimes  = "messaging.rocketmq.message.reconsume_times"
	AttrConsumeResult   = "sluice.consume.result" // CONSUME_SUCCESS, RECONSUME_LATER, ...
	defaultSystemString = "rocketmq"
)

type config struct {
	tp     trace.TracerProvider
	prop   propagation.TextMapPropagator
	system string
	group  string
}

// Option configures [Send] and [Consume].
type Option func(*config)

// WithTracerProvider sets the tracer provider. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithPropagator sets how trace context is written to and read from message properties.
// Default: W3C Trace Context (propagation.TraceContext: traceparent, tracestate), whatever
// the global propagator is.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// WithSystem sets the messaging.system attribute, e.g. "kafka". Default: "rocketmq".
func WithSystem(system string) Option { return func(c *config) { c.system = system } }

// WithConsumerGroup sets the messaging.consumer.group.name attribute of consumer spans.
func WithConsumerGroup(group string) Option { return func(c *config) { c.group = group } }

func newConfig(opts []Option) *config {
	c := &config{system: defaultSystemString}
	for _, o := range opts {
		o(c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.prop == nil {
		c.prop = propagation.TraceContext{}
	}
	return c
}

// Carrier adapts a message's properties to propagation.TextMapCarrier: keys are
// property names as written (the W3C names are lowercase).
type Carrier struct{ M *message.Message }

// Get returns the property key ("" if absent).
func (c Carrier) Get(key string) string { return c.M.Property(key) }

// Set sets the property key.
func (c Carrier) Set(key, value string) { c.M.SetProperty(key, value) }

// Keys lists the property names.
func (c Carrier) Keys() []string {
	out := make([]string, 0, len(c.M.Properties))
	for k := range c.M.Properties {
		out = append(out, k)
	}
	return out
}

// Send returns a send middleware that starts a span "send <topic>" (kind producer) as a
// child of the span in ctx, writes its trace context into msg's properties (overwriting
// any earlier traceparent/tracestate), and ends it when the rest of the chain returns:
// the message id is recorded, an error sets the span's status. Put it before (outside)
// steps that may retry or park, so that one span covers the send as the caller sees it.
func Send(opts ...Option) middleware.SendMiddleware {
	c := newConfig(opts)
	tracer := c.tp.Tracer(ScopeName)
	return func(next middleware.SendFunc) middleware.SendFunc {
		return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
			if msg == nil {
				return next(ctx, msg)
			}
			attrs := []attribute.KeyValue{
				attribute.String(AttrSystem, c.system),
				attribute.String(AttrDestination, msg.Topic),
				attribute.String(AttrOperationName, "send"),
				attribute.String(AttrOperationType, "send"),
			}
			if tag := msg.Tag(); tag != "" {
				attrs = append(attrs, attribute.String(AttrTag, tag))
			}
			if keys := msg.Keys(); len(keys) > 0 {
				attrs = append(attrs, attribute.StringSlice(AttrKeys, keys))
			}
			ctx, span := tracer.Start(ctx, "send "+msg.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
			defer span.End()
			c.prop.Inject(ctx, Carrier{msg})
			res, err := next(ctx, msg)
			if res != nil && res.MsgID != "" {
				span.SetAttributes(attribute.String(AttrMessageID, res.MsgID))
			}
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return res, err
		}
	}
}

// Consume returns a consume middleware that continues the producers' traces around the
// rest of the chain. For one message (the default consume batch) the span "process
// <topic>" (kind consumer) is a child of the producer's span read from the message's
// properties, and linked to it; a message without trace context starts a new trace (or
// continues the span in ctx). For a batch of several messages the span is a child of
// the span in ctx with one link per message that carries a trace context. The handler's
// ctx holds the span. A handler error, a panic passing through (re-panicked) or a result
// other than ConsumeSuccess set the span's status to error.
func Consume(opts ...Option) middleware.ConsumeMiddleware {
	c := newConfig(opts)
	tracer := c.tp.Tracer(ScopeName)
	return func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (res message.ConsumeResult, err error) {
			if len(msgs) == 0 {
				return next(ctx, msgs)
			}
			topic := msgs[0].Topic
			if rt := msgs[0].Property(message.PropertyRetryTopic); rt != "" && message.IsRetryTopic(topic) {
				topic = rt
			}
			attrs := []attribute.KeyValue{
				attribute.String(AttrSystem, c.system),
				attribute.String(AttrDestination, topic),
				attribute.String(AttrOperationName, "process"),
				attribute.String(AttrOperationType, "process"),
			}
			if c.group != "" {
				attrs = append(attrs, attribute.String(AttrConsumerGroup, c.group))
			}
			var links []trace.Link
			parent := ctx
			for _, m := range msgs {
				mctx := c.prop.Extract(context.Background(), Carrier{&m.Message})
				if sc := trace.SpanContextFromContext(mctx); sc.IsValid() {
					links = append(links, trace.Link{SpanContext: sc})
					if len(msgs) == 1 {
						parent = c.prop.Extract(ctx, Carrier{&m.Message})
					}
				}
			}
			if len(msgs) == 1 {
				m := msgs[0]
				attrs = append(attrs, attribute.String(AttrMessageID, m.MsgID), attribute.Int(AttrReconsumeTimes, int(m.ReconsumeTimes)))
				if tag := m.Tag(); tag != "" {
					attrs = append(attrs, attribute.String(AttrTag, tag))
				}
				if keys := m.Keys(); len(keys) > 0 {
					attrs = append(attrs, attribute.StringSlice(AttrKeys, keys))
				}
			} else {
				attrs = append(attrs, attribute.Int(AttrBatchCount, len(msgs)))
			}
			ctx, span := tracer.Start(parent, "process "+topic, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(attrs...), trace.WithLinks(links...))
			defer func() {
				if p := recover(); p != nil {
					span.SetStatus(codes.Error, fmt.Sprintf("panic: %v", p))
					span.End()
					panic(p)
				}
				span.SetAttributes(attribute.String(AttrConsumeResult, res.String()))
				switch {
				case err != nil:
					span.RecordError(err)
					span.SetStatus(codes.Error, err.Error())
				case res != message.ConsumeSuccess:
					span.SetStatus(codes.Error, res.String())
				}
				span.End()
			}()
			return next(ctx, msgs)
		}
	}
}
