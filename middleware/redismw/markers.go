package redismw

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
)

// DefaultMarkerPrefix is the default key prefix of [Dedup] and [Progress]; both use the
// same marker keys, so [ProgressTracker.ProgressState] also reads what Dedup wrote.
const DefaultMarkerPrefix = "sluice:dedup"

// MarkerState is the progress marker of a message key.
type MarkerState int

// Marker states, as stored in Redis (the marker key's value).
const (
	// MarkerFailed ("-1"): the last run failed or panicked; the message will run again.
	MarkerFailed MarkerState = -1
	// MarkerNone: no marker (never seen, or its TTL passed).
	MarkerNone MarkerState = 0
	// MarkerDone ("1"): the handler succeeded; later deliveries are duplicates.
	MarkerDone MarkerState = 1
)

// String returns "failed", "none" or "done".
func (s MarkerState) String() string {
	switch s {
	case MarkerFailed:
		return "failed"
	case MarkerNone:
		return "none"
	case MarkerDone:
		return "done"
	}
	return fmt.Sprintf("MarkerState(%d)", int(s))
}

// MarkerKey returns the Redis key of key's progress marker: "<prefix>:{<key>}:m". The
// message key is the hash tag, so the marker and the lock ([LockKey]) share a Redis
// Cluster slot and one Lua script can touch both. A key that is empty or starts with
// "}" would make an empty hash tag (Redis then hashes each whole key, and the three keys
// land on different slots): such a key is named by its SHA-256 instead,
// "<prefix>:{~<64 hex>}~:m" (see [keyTag]).
func MarkerKey(prefix, key string) string { return prefix + ":{" + keyTag(key) + ":m" }

// LockKey returns the Redis key of key's dedup lock: "<prefix>:{<key>}:lock". Its value is
// the holder's random token, the layout go-redsync uses, so a redsync mutex on this name
// (with the same token) can extend or release it.
func LockKey(prefix, key string) string { return prefix + ":{" + keyTag(key) + ":lock" }

// FenceKey returns the Redis key of key's fencing-token counter: "<prefix>:{<key>}:fence"
// (same hash tag as the marker and the lock). It holds the last token handed out, as a
// decimal integer, and lives DoneTTL after the last acquisition.
func FenceKey(prefix, key string) string { return prefix + ":{" + keyTag(key) + ":fence" }

// keyTag returns what follows "<prefix>:{" in key's Redis keys, up to the suffix: the
// key and the closing "}" — or, for a key whose hash tag would be empty (empty, or
// starting with "}"), "~<SHA-256 hex>}~". The hashed form cannot equal the plain form of
// another key: a plain form has "}" right before the suffix, the hashed form "~".
func keyTag(key string) string {
	if key != "" && key[0] != '}' {
		return key + "}"
	}
	sum := sha256.Sum256([]byte(key))
	return "~" + hex.EncodeToString(sum[:]) + "}~"
}

func validatePrefix(field, p string) error {
	if strings.ContainsAny(p, "{}") {
		return &config.Error{Package: "middleware", Field: field, Value: p, Reason: "must not contain '{' or '}' (the message key is the hash tag)"}
	}
	return nil
}

// readMarker reads key's marker.
func readMarker(ctx context.Context, c redis.UniversalClient, mk string) (MarkerState, error) {
	v, err := c.Get(ctx, mk).Result()
	if errors.Is(err, redis.Nil) {
		return MarkerNone, nil
	}
	if err != nil {
		return MarkerNone, err
	}
	return parseMarker(v), nil
}

func parseMarker(v string) MarkerState {
	switch v {
	case "1":
		return MarkerDone
	case "-1":
		return MarkerFailed
	}
	return MarkerNone
}

// markScript sets a progress marker without a lock.
//
// KEYS[1] the marker key
// ARGV[1] the new value: "1" (done) or "-1" (failed)
// ARGV[2] TTL in ms
//
// Returns 1 when written; 0 when ARGV[1] is "-1" and the marker already says "1" (a done
// marker is never downgraded to failed).
var markScript = redis.NewScript(`
if ARGV[1] == "-1" and redis.call("GET", KEYS[1]) == "1" then
  return 0
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return 1
`)

// single returns msgs[i:i+1] without allocating a new backing array.
func single(msgs []*message.MessageExt, i int) []*message.MessageExt { return msgs[i : i+1 : i+1] }

// scopeKey marks, in a handler's context, that a Dedup owns key's marker under prefix, so
// a Progress with the same prefix inside it does not write the markers again.
type scopeKey struct{}

type markerScope struct {
	prefix string
	key    string
}

func inScope(ctx context.Context, prefix, key string) bool {
	s, ok := ctx.Value(scopeKey{}).(*markerScope)
	return ok && s.prefix == prefix && s.key == key
}
