// Package transport is the contract every Sluice engine implements: the RocketMQ-protocol
// producer and push consumer (packages producer and consumer, over a Sluice broker or
// Apache RocketMQ) and the Kafka producer and consumer (package kafka). Code that only
// sends and consumes — examples, the middleware chains, the conformance suite
// (package transporttest) — holds a [Producer] and a [Consumer] and runs unchanged on
// either engine. What only one engine offers (RocketMQ's send options and selectors,
// batches, transactions; Kafka's DelayForwarder) stays on the engine's own types.
//
// The package imports only the standard library, message and middleware, so the SDK core
// may depend on it.
//
// # What every engine promises
//
// Life cycle, the same on both engines:
//
//   - New… builds a client from its configuration and opens no connection; an invalid
//     configuration fails there, with an error naming the field.
//   - Start(ctx) makes it ready: ctx bounds what Start itself waits for (a first contact
//     with the cluster), not the life of the client, which lasts until Shutdown. A second
//     Start on a started client does nothing and returns nil. Start after Shutdown returns
//     an error matching [ErrClosed].
//   - Shutdown(ctx) is idempotent and safe to call concurrently with sends and handler
//     calls. Once it has begun, no new work starts: a send returns an error matching
//     [ErrClosed] and its callback never runs, a consumer fetches no more messages. It waits,
//     bounded by ctx, for what is in flight (sends and their callbacks, handler calls and
//     their commits), releases every connection and goroutine, and returns ctx's error
//     (wrapped) when ctx ended first. A later call does no work again (it returns nil or
//     the first call's result).
//
// Producer:
//
//   - An invalid message fails first, before any network traffic, with a
//     *message.ValidationError naming the field (or the engine's typed refusal of what it
//     cannot carry, e.g. kafka.UnsupportedError). A valid one sent before Start fails with
//     an error matching [ErrNotStarted] and is not sent.
//   - Send stores one message and returns once the cluster acknowledged it. The
//     [message.SendResult]'s MsgID is the message's UNIQ_KEY (set on msg when missing),
//     the id a consumer sees again as the delivered message's MsgID. With an error the
//     message may or may not be stored. Which shard (queue, partition) a message goes to
//     is engine configuration: Kafka hashes the sharding key (one partition per key); the
//     RocketMQ producer asks its producer.Config.Selector (round robin by default, one
//     queue per key with producer.HashSelector).
//   - SendAsync queues msg and returns. When it returns nil, cb runs exactly once, later,
//     with the result or the error — also when Shutdown cuts the send short; a panicking
//     cb is recovered and logged. When it returns an error (nil cb, invalid message, not
//     started, shut down, ctx ended while waiting for room), cb never runs.
//   - SendFunc returns Send as a [middleware.SendFunc] (with the engine's configured send
//     middlewares inside), for [middleware.ChainSend].
//
// Consumer:
//
//   - Subscribe and SubscribeSQL register one handler per topic before Start: tagExpr is
//     "*" (or "") for every message or "TagA || TagB"; expr is a SQL92 selector over the
//     user properties (RocketMQ syntax). Subscribing after Start returns an error matching
//     [ErrStarted], after Shutdown one matching [ErrClosed]; a topic subscribed twice, a nil
//     handler or a malformed expression fail with an error saying so.
//   - The consumer's configured middlewares (Config.Middlewares on both engines) wrap every
//     handler, the first listed outermost.
//   - A handler result of [message.ConsumeSuccess] with a nil error commits the messages;
//     [message.ReconsumeLater] or an error has them delivered again later, with
//     ReconsumeTimes one higher, until the maximum, then they become dead letters.
//   - Start with no subscription fails; Start returns once the consumer is running.
//   - Shutdown lets the handler calls in flight finish (until ctx ends; their context is
//     cancelled then) and commits what finished.
package transport

import (
	"context"
	"errors"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Producer sends messages; see the package doc for what each method promises. Both
// *producer.Producer and *kafka.Producer implement it.
type Producer interface {
	// Start makes the producer ready to send; ctx bounds Start itself.
	Start(ctx context.Context) error
	// Send stores msg and waits for the cluster's acknowledgement.
	Send(ctx context.Context, msg *message.Message) (*message.SendResult, error)
	// SendAsync queues msg; cb runs exactly once if and only if it returns nil.
	SendAsync(ctx context.Context, msg *message.Message, cb func(*message.SendResult, error)) error
	// SendFunc returns Send as a middleware.SendFunc.
	SendFunc() middleware.SendFunc
	// Shutdown stops new sends, waits (bounded by ctx) for those in flight and releases
	// everything. Idempotent.
	Shutdown(ctx context.Context) error
}

// Consumer delivers the messages of its subscriptions to their handlers; see the package
// doc for what each method promises. Both *consumer.PushConsumer and *kafka.Consumer
// implement it.
type Consumer interface {
	// Subscribe registers handler for the messages of topic whose tag matches tagExpr
	// ("*" or "TagA || TagB"). Before Start only.
	Subscribe(topic, tagExpr string, handler middleware.ConsumeFunc) error
	// SubscribeSQL registers handler for the messages of topic whose user properties match
	// the SQL92 selector expr. Before Start only.
	SubscribeSQL(topic, expr string, handler middleware.ConsumeFunc) error
	// Start starts consuming; ctx bounds Start itself.
	Start(ctx context.Context) error
	// Shutdown stops fetching, waits (bounded by ctx) for the handler calls in flight,
	// commits what finished and releases everything. Idempotent.
	Shutdown(ctx context.Context) error
}

// The life-cycle errors every engine's errors match with errors.Is (each engine wraps
// them with its own prefix, e.g. producer.ErrNotStarted is "producer: not started").
var (
	// ErrNotStarted: a send (or another call that needs a started client) before Start.
	ErrNotStarted = errors.New("not started")
	// ErrStarted: a call allowed only before Start (Subscribe) after Start.
	ErrStarted = errors.New("already started")
	// ErrClosed: a call after Shutdown began.
	ErrClosed = errors.New("shut down")
)
