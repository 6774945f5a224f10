package middleware

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"strings"

	"github.com/sluicemq/sluice/message"
)

// KeyFunc returns the key for a message, "" for none. Keys must not contain spaces (the
// KEYS property separator); [Keys] replaces spaces and the property separators 0x01/0x02
// with '_'.
type KeyFunc func(msg *message.Message) string

// ContentKey is the default [KeyFunc]: "<tag>_<md5hex(body)>" (32 lowercase hex digits
// over the body as handed to Send, i.e. before the producer compresses it), or just
// "<md5hex(body)>" when the message has no tag.
//
// Two distinct messages with the same tag and body get the same key, and
// [github.com/sluicemq/sluice/middleware/redismw.Dedup] treats the second as a duplicate
// of the first: two identical refunds of 10.00 to one account, two "+1 point" events.
// When equal content can be two business events, supply a business key instead: set the
// keys yourself (msg.SetKeys(orderID+"-refund-"+refundID); Keys never overwrites keys the
// caller set) or pass WithKeyFunc.
func ContentKey(msg *message.Message) string {
	sum := md5.Sum(msg.Body)
	h := hex.EncodeToString(sum[:])
	if tag := msg.Tag(); tag != "" {
		return tag + "_" + h
	}
	return h
}

// KeysOption configures [Keys] and [ConsumeKeys].
type KeysOption func(*keysOptions)

type keysOptions struct {
	fn KeyFunc
}

// WithKeyFunc replaces [ContentKey] with f (for example one that reads a business id from
// the body or a property). A nil f is ignored; f returning "" leaves the message without a
// key.
func WithKeyFunc(f KeyFunc) KeysOption {
	return func(o *keysOptions) {
		if f != nil {
			o.fn = f
		}
	}
}

func newKeysOptions(opts []KeysOption) keysOptions {
	o := keysOptions{fn: ContentKey}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

var keyCleaner = strings.NewReplacer(" ", "_", "\x01", "_", "\x02", "_", "\t", "_", "\n", "_", "\r", "_")

// Keys returns a send middleware that sets the message key (property KEYS) to the key
// function's result ([ContentKey] by default) unless the caller already set keys. The key
// travels with the message (RocketMQ KEYS property, indexed by the broker for queries; a
// Kafka header) and is what [github.com/sluicemq/sluice/middleware/redismw.Dedup] and
// [github.com/sluicemq/sluice/middleware/redismw.Progress] use on the consume side
// ([KeyOf]).
//
// The caller's message is not modified: next gets a shallow copy with its own properties
// map (the body is shared, not copied).
func Keys(opts ...KeysOption) SendMiddleware {
	o := newKeysOptions(opts)
	return func(next SendFunc) SendFunc {
		return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
			if msg == nil || msg.Property(message.PropertyKeys) != "" {
				return next(ctx, msg)
			}
			k := keyCleaner.Replace(o.fn(msg))
			if k == "" {
				return next(ctx, msg)
			}
			cp := *msg
			cp.Properties = make(map[string]string, len(msg.Properties)+1)
			for name, v := range msg.Properties {
				cp.Properties[name] = v
			}
			cp.Properties[message.PropertyKeys] = k
			return next(ctx, &cp)
		}
	}
}

// ConsumeKeys returns a consume middleware that gives every received message without keys
// the key the send side's [Keys] would have set (same options), so
// [github.com/sluicemq/sluice/middleware/redismw.Dedup] and
// [github.com/sluicemq/sluice/middleware/redismw.Progress] also cover messages from
// producers that did not use Keys. The body a consumer receives is already decompressed,
// so the content key matches the producer's. Messages that carry keys are left alone. It
// modifies the received messages' properties in place.
func ConsumeKeys(opts ...KeysOption) ConsumeMiddleware {
	o := newKeysOptions(opts)
	return func(next ConsumeFunc) ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			for _, m := range msgs {
				if m == nil || m.Property(message.PropertyKeys) != "" {
					continue
				}
				if k := keyCleaner.Replace(o.fn(&m.Message)); k != "" {
					m.SetProperty(message.PropertyKeys, k)
				}
			}
			return next(ctx, msgs)
		}
	}
}

// KeyOf returns the message's first key (property KEYS), "" when it has none or msg is nil.
// It is the default key of [github.com/sluicemq/sluice/middleware/redismw.Dedup] and
// [github.com/sluicemq/sluice/middleware/redismw.Progress].
func KeyOf(msg *message.MessageExt) string {
	if msg == nil {
		return ""
	}
	k := strings.TrimLeft(msg.Property(message.PropertyKeys), " ")
	if i := strings.IndexByte(k, ' '); i >= 0 {
		k = k[:i]
	}
	return k
}
