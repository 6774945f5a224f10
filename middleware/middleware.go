// Package middleware defines the two transport-agnostic function shapes Sluice's
// reliability steps wrap: a send ([SendFunc]) and a consume handler ([ConsumeFunc]), the
// chains that compose them, and the steps that need nothing outside the standard library.
//
// Any producer that can be put behind a SendFunc (Sluice's producer, the official
// RocketMQ Go client, a kafka-go Writer) gets the whole producer chain, and any handler
// gets the consumer chain. Chains compose first-listed-outermost: in
// ChainSend(f, a, b) a call runs a, then b, then f, and results travel back through b
// and then a.
//
// Steps in this package (standard library only):
//
//   - [Keys] (send side): sets the message key "<tag>_<md5hex(body)>" unless the caller
//     set keys. [ConsumeKeys] gives received messages without keys the same key.
//   - [Recover]: a panic becomes an error and ReconsumeLater.
//   - [Logging]: one log line per call, including the [Reason]s the steps inside noted.
//   - [IdempotencyKeys]: the message's [StableKey] in the handler's context
//     ([IdempotencyKey]), for downstream APIs that deduplicate by a caller-given key.
//
// Steps that need third-party modules live in sub-packages, so the SDK core
// (producer, consumer) compiles none of them unless a program imports them:
//
//   - [github.com/sluicemq/sluice/middleware/redismw]: Dedup (done marker + go-redsync
//     lock), Progress (markers alone), Park (failed sends kept in Redis or a local spool
//     for package retrytask to resend).
//   - [github.com/sluicemq/sluice/middleware/prommw]: Prometheus metrics for both sides.
//   - [github.com/sluicemq/sluice/inbox]: the transactional inbox over database/sql, the
//     innermost step, exactly once for effects in that database.
//
// Recommended consume order: ChainConsume(handler, Logging(l), prommw.Metrics(reg),
// ConsumeKeys(), redismw.Dedup(cfg), Recover()) — observers outermost so they see
// duplicates and lock reasons, Recover innermost so every step outside it sees a panic as
// a failure. Recommended send order: ChainSend(p.SendFunc(), prommw.SendMetrics(reg),
// Keys(), redismw.Park(cfg)) — Keys before Park so a parked record carries its key, Park
// innermost so it sees the producer's final error.
//
// This package imports only [message] and the standard library; it never imports the
// producer or consumer packages.
package middleware

import (
	"context"

	"github.com/sluicemq/sluice/message"
)

// SendFunc sends one message and returns where it was stored. A nil error means the
// broker stored the message (the result's Status may still report a flush or
// replication problem); a non-nil error means the message may not have been stored.
// One exception: around a one-way send (producer.SendOneway) the innermost SendFunc
// returns a nil result with a nil error, meaning "queued on the connection", so a step
// must not dereference a nil result.
type SendFunc func(ctx context.Context, msg *message.Message) (*message.SendResult, error)

// SendMiddleware wraps a SendFunc with extra behaviour (keys, parking, tracing, ...).
// It must call next at most as often as it documents and must not keep msg after
// returning.
type SendMiddleware func(next SendFunc) SendFunc

// ConsumeFunc handles a batch of received messages (by default one message, see the
// consumer's ConsumeMessageBatchMaxSize). It returns message.ConsumeSuccess to
// acknowledge the batch, or message.ReconsumeLater (or a non-nil error, which counts as
// ReconsumeLater) to have the whole batch delivered again later.
type ConsumeFunc func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error)

// ConsumeMiddleware wraps a ConsumeFunc with extra behaviour (dedup, progress markers,
// panic recovery, ...).
type ConsumeMiddleware func(next ConsumeFunc) ConsumeFunc

// ChainSend returns next wrapped by mws, the first listed outermost: ChainSend(f, a, b)
// is a(b(f)). Nil middlewares are skipped. With no middlewares it returns next itself.
func ChainSend(next SendFunc, mws ...SendMiddleware) SendFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			next = mws[i](next)
		}
	}
	return next
}

// ChainConsume returns next wrapped by mws, the first listed outermost:
// ChainConsume(h, a, b) is a(b(h)). Nil middlewares are skipped. With no middlewares it
// returns next itself.
func ChainConsume(next ConsumeFunc, mws ...ConsumeMiddleware) ConsumeFunc {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			next = mws[i](next)
		}
	}
	return next
}
