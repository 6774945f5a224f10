// Package middleware defines the two transport-agnostic function shapes Sluice's
// reliability steps wrap: a send ([SendFunc]) and a consume handler ([ConsumeFunc]), and
// the steps themselves.
//
// Any producer that can be put behind a SendFunc (Sluice's producer, the official
// RocketMQ Go client, a kafka-go Writer) gets the whole producer chain, and any handler
// gets the consumer chain. Chains compose first-listed-outermost: in
// ChainSend(f, a, b) a call runs a, then b, then f, and results travel back through b
// and then a.
//
// # Send side
//
//   - [Keys]: sets the message key "<tag>_<md5hex(body)>" unless the caller set keys.
//   - [Park]: a send that still fails with a retriable error after the producer's own
//     retries is kept as a [ParkedRecord] in a Redis list (or a local fsynced spool file
//     when Redis is down too) and the caller gets a [*ParkedError]; package retrytask
//     resends it.
//   - [SendMetrics]: Prometheus counters by outcome (ok, error, parked, spooled).
//
// Recommended order: ChainSend(p.AsSendFunc(), SendMetrics, Keys, Park) — Keys before
// Park so a parked record carries its key, Park innermost so it sees the producer's
// final error.
//
// # Consume side
//
//   - [Logging] and [Metrics]: one log line / metric update per call, including the
//     [Reason]s the steps inside noted (duplicate, lock_held, lock_lost, ...).
//   - [ConsumeKeys]: gives messages without keys the content key the send side would have.
//   - [Dedup]: a done marker plus a go-redsync lock per message key, so one business
//     effect happens once; failures and crashes lead to a rerun, never to a silent ack.
//   - [Progress]: the same markers without the lock.
//   - [Recover]: a panic becomes an error and ReconsumeLater.
//
// Recommended order: ChainConsume(handler, Logging(l), Metrics(reg), ConsumeKeys(),
// Dedup(cfg), Recover()) — observers outermost so they see duplicates and lock reasons,
// Recover innermost so every step outside it (Dedup's marker, Metrics' result) sees a
// panic as a failure. Progress goes where Dedup would when the lock is not wanted; inside
// a Dedup with the same prefix it does nothing extra.
//
// Redis state changes that must be atomic are Lua scripts (each with a comment listing
// KEYS, ARGV and return values); keys are hash-tagged so related keys share a Redis
// Cluster slot. The middlewares accept a redis.UniversalClient and never close it.
//
// This package imports only [message] (plus go-redis, go-redsync and the Prometheus
// client); it never imports the producer or consumer packages.
package middleware

import (
	"context"

	"github.com/sluicemq/sluice/message"
)

// SendFunc sends one message and returns where it was stored. A nil error means the
// broker stored the message (the result's Status may still report a flush or
// replication problem); a non-nil error means the message may not have been stored.
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
