package retrytask

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// claimOneScript claims one given record, wherever it waits (the schedule or its ready
// list), for a resend now.
//
//	KEYS[1] processing LIST, KEYS[2] lease ZSET, KEYS[3] owner HASH, KEYS[4] records HASH,
//	KEYS[5] schedule ZSET, KEYS[6] the record's ready LIST
//	ARGV[1] id, ARGV[2] claim token, ARGV[3] lease expiry (unix ms)
//
// Returns the record, or nil when it is neither scheduled nor ready (sent, dead, pending,
// or claimed by a resender right now).
var claimOneScript = redis.NewScript(`
local removed = redis.call('ZREM', KEYS[5], ARGV[1]) + redis.call('LREM', KEYS[6], 0, ARGV[1])
if removed == 0 then return nil end
local raw = redis.call('HGET', KEYS[4], ARGV[1])
if not raw then return nil end
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return raw
`)

// ResendNow resends the one record id at once — no other record is touched — and
// reports what became of it in st (Sent, Retried or Dead is 1). A record still in the
// pending list is taken in first (the intake moves every pending record into the
// schedule, sending none); a dead record must be revived first ([Task.Revive]). Its
// backoff and MinAge are skipped; a delayed or timed message whose delivery time is
// ahead is rescheduled for it, as a run would. Errors: [ErrNotFound] when the record is
// neither pending, scheduled nor ready (sent, dead, or being resent by a run right now),
// Redis errors, ErrClosed.
func (t *Task) ResendNow(ctx context.Context, id string) (Stats, error) {
	var st Stats
	if err := t.enter(); err != nil {
		return st, err
	}
	defer t.active.Done()
	if err := t.intake(ctx, &st); err != nil {
		return st, err
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	c := &claimed{id: id, token: hex.EncodeToString(tok[:]), expiresMs: t.nowMs() + t.cfg.Lease.Milliseconds()}
	octx, cancel := opCtx(ctx)
	raw, err := claimOneScript.Run(octx, t.cfg.Client, []string{t.keys.processing, t.keys.lease, t.keys.owner, t.keys.records,
		t.keys.schedule, t.keys.ready[BucketOf(id)]}, id, c.token, c.expiresMs).Text()
	cancel()
	if errors.Is(err, redis.Nil) {
		return st, ErrNotFound
	}
	if err != nil {
		return st, fmt.Errorf("retrytask: claim %s: %w", id, err)
	}
	c.raw = raw
	st.Claimed++
	return st, t.process(ctx, c, &st)
}
