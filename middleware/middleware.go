// Package middleware defines the two transport-agnostic function shapes Sluice's
// reliability steps wrap: a send ([SendFunc]) and a consume handler ([ConsumeFunc]).
//
// Any producer that can be put behind a SendFunc (Sluice's producer, the official
// RocketMQ Go client, a kafka-go Writer) gets the whole producer chain, and any handler
// gets the consumer chain. Chains compose first-listed-outermost: in
// ChainSend(f, a, b) a call runs a, then b, then f, and results travel back through b
// and then a.
//
// This package imports only [message] (plus, in the reliability middlewares, their
// storage clients); it never imports the producer or consumer packages.
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
