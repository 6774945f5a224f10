package middleware

import (
	"context"

	"github.com/sluicemq/sluice/message"
)

// StableKey returns the key that identifies msg's business event across every copy of it
// a consumer can see: the first entry of property KEYS ([KeyOf]; set by the producer or by
// [Keys]), or else the client message id (property UNIQ_KEY), or "" when the message has
// neither (or msg is nil).
//
// Which copies share it:
//
//   - consume retries (the %RETRY%<group> copy the broker makes when a handler returns
//     ReconsumeLater): all properties are kept, so KEYS and UNIQ_KEY are the same;
//   - dead letters re-driven with admin.ResendDLQ (sluice admin dlq resend): KEYS and
//     UNIQ_KEY are kept;
//   - sends parked by redismw.Park and resent by package retrytask: KEYS is kept; the
//     producer may give the resent copy a new UNIQ_KEY, so messages that must stay
//     deduplicated across a park need KEYS (use [Keys] on the send side);
//   - a producer that sends the same business event twice (a retry after a lost answer, an
//     upstream replay) gives each send its own UNIQ_KEY: only KEYS makes those the same.
//
// So with [Keys] (or caller-set keys) on the send side, StableKey is the same for every
// copy; without keys it is the UNIQ_KEY, the same for broker retries and DLQ re-drives only.
func StableKey(msg *message.MessageExt) string {
	if k := KeyOf(msg); k != "" {
		return k
	}
	if msg == nil {
		return ""
	}
	return msg.UniqKey()
}

type idempotencyKeyCtx struct{}

// WithIdempotencyKey returns ctx carrying key as the idempotency key of the message being
// handled (see [IdempotencyKey]). An empty key returns ctx unchanged.
func WithIdempotencyKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, idempotencyKeyCtx{}, key)
}

// IdempotencyKey returns the stable key of the message a handler is running for, "" when
// no step put one in ctx. Pass it to downstream systems that deduplicate by a caller-given
// key (a payment API's Idempotency-Key header, a database unique column): every copy of
// the message — consume retries, dead letters re-driven, parked sends resent — carries the
// same key (see [StableKey] for which copies need KEYS), so the downstream applies the
// effect once even when the handler runs twice.
//
// It is set by [IdempotencyKeys], and by the steps that hand the handler one message at a
// time: redismw.Dedup (its dedup key) and the inbox package (for a batch of one). For a
// batch of several messages there is no single key: use StableKey on each message.
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(idempotencyKeyCtx{}).(string)
	return k
}

// IdempotencyKeys returns a consume middleware that puts the [StableKey] of a batch of one
// message into the handler's context ([IdempotencyKey]). A batch of several messages is
// passed on unchanged (the handler reads StableKey per message). A key already in ctx (set
// by an outer step) is kept.
func IdempotencyKeys() ConsumeMiddleware {
	return func(next ConsumeFunc) ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if len(msgs) == 1 && IdempotencyKey(ctx) == "" {
				ctx = WithIdempotencyKey(ctx, StableKey(msgs[0]))
			}
			return next(ctx, msgs)
		}
	}
}
