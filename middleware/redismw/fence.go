package redismw

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

type fenceCtxKey struct{}

// FencingToken returns the fencing token [Dedup] took with the lock of the message being
// handled, and whether there is one (false outside a Dedup handler, and for messages that
// passed through without a key or under fail open).
//
// The token is a positive integer: the Redis server's clock in microseconds when the lock
// was taken (TIME), or one more than the key's previous token when that is larger. So for
// one message key every holder gets a larger token than every earlier holder, including
// one whose lock expired while it was paused — as long as the fence key ([FenceKey], kept
// DoneTTL after each acquisition) survives or the Redis server's clock does not step back
// past the earlier token. A Redis restart without persistence loses the fence key; the
// clock part still orders holders that are more than a few microseconds apart.
//
// Make the downstream write conditional on the token, so a stale holder's late write is
// refused instead of overwriting (or repeating) its successor's:
//
//   - Redis: [FencedSet] (one Lua compare-and-set);
//
//   - PostgreSQL (any SQL database alike), with a column last_token BIGINT NOT NULL DEFAULT 0
//     on the row the handler changes:
//
//     UPDATE accounts SET balance = $2, last_token = $3 WHERE id = $1 AND last_token < $3
//
//     0 rows affected means a later holder already wrote: do nothing more and return
//     success (the later holder's write stands). For a row that may not exist yet:
//
//     INSERT INTO effects (key, value, last_token) VALUES ($1, $2, $3)
//     ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, last_token = EXCLUDED.last_token
//     WHERE effects.last_token < EXCLUDED.last_token
//
// Fencing orders the writers; it does not make a write idempotent. A holder that wrote
// and then lost its lock before the done marker was set leaves the message to run again,
// and the next holder's (larger) token passes the condition: write absolute values
// ("balance = 110", "status = paid") rather than increments, or use the inbox package,
// which commits the effect and the done record together.
func FencingToken(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(fenceCtxKey{}).(int64)
	return t, ok && t > 0
}

// fencedSetScript stores a value only under a larger fencing token.
//
// KEYS[1] the hash holding the value ("v") and its token ("t")
// ARGV[1] the value
// ARGV[2] the writer's fencing token (decimal)
// ARGV[3] TTL in ms, "0" for none
//
// Returns 1 when written, 0 when the stored token is equal or larger (refused).
var fencedSetScript = redis.NewScript(`
local cur = tonumber(redis.call("HGET", KEYS[1], "t") or "0")
local tok = tonumber(ARGV[2])
if cur >= tok then
  return 0
end
redis.call("HSET", KEYS[1], "v", ARGV[1], "t", ARGV[2])
if ARGV[3] ~= "0" then
  redis.call("PEXPIRE", KEYS[1], ARGV[3])
end
return 1
`)

// ErrStaleToken is returned by [FencedSet] when the write was refused because a holder
// with an equal or larger fencing token already wrote.
var ErrStaleToken = errors.New("fenced write refused: a later holder already wrote")

// FencedSet writes value into the Redis hash key (fields "v": the value, "t": the token)
// only if token is larger than the token stored with the current value — one Lua
// compare-and-set, so a holder whose Dedup lock expired cannot overwrite the write of the
// holder that took over. It returns nil when written, [ErrStaleToken] when refused, or the
// Redis error. ttl > 0 sets the hash's expiry (ms precision, at least 1 ms); 0 keeps it. token must be
// positive (use [FencingToken]).
func FencedSet(ctx context.Context, c redis.Scripter, key, value string, token int64, ttl time.Duration) error {
	if token <= 0 {
		return fmt.Errorf("redismw: FencedSet token %d: must be positive", token)
	}
	if ttl < 0 {
		return fmt.Errorf("redismw: FencedSet ttl %v: must not be negative", ttl)
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1 // a positive TTL under 1 ms still expires ("0" would mean none)
	}
	n, err := fencedSetScript.Run(ctx, c, []string{key}, value, token, ms).Int64()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrStaleToken
	}
	return nil
}
