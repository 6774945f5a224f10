package retrytask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/middleware/redismw"
)

// Inspection and operator actions, for consoles and tools: list what is parked, make a
// scheduled record due now, give a dead record another try.

// Where a parked record is ([Parked].State).
const (
	StatePending   = "pending"   // in the pending list, not yet taken in by a run
	StateScheduled = "scheduled" // waiting for its due time
	StateDead      = "dead"      // in the dead list
)

// MaxList bounds the n of the List methods.
const MaxList = 1000

// Parked is one parked record as found in Redis.
type Parked struct {
	State string
	// Record is the decoded record; nil when the stored JSON does not decode (Raw holds it).
	Record *redismw.ParkedRecord
	// Raw is the stored JSON.
	Raw string
	// DueMs is when a scheduled record is due (unix ms); 0 otherwise.
	DueMs int64
}

func decode(state, raw string, due int64) Parked {
	p := Parked{State: state, Raw: raw, DueMs: due}
	var r redismw.ParkedRecord
	if json.Unmarshal([]byte(raw), &r) == nil {
		p.Record = &r
	}
	return p
}

func checkRange(offset, n int) error {
	if offset < 0 {
		return fmt.Errorf("retrytask: offset %d is negative", offset)
	}
	if n < 1 || n > MaxList {
		return fmt.Errorf("retrytask: n %d is outside 1..%d", n, MaxList)
	}
	return nil
}

// ListPending returns up to n records of the pending list from offset (oldest first).
// Errors: an offset < 0 or n outside 1..MaxList, Redis errors.
func (t *Task) ListPending(ctx context.Context, offset, n int) ([]Parked, error) {
	return t.listList(ctx, t.keys.pending, StatePending, offset, n)
}

// ListDead returns up to n records of the dead list from offset (oldest first).
// Errors as [Task.ListPending].
func (t *Task) ListDead(ctx context.Context, offset, n int) ([]Parked, error) {
	return t.listList(ctx, t.keys.dead, StateDead, offset, n)
}

func (t *Task) listList(ctx context.Context, key, state string, offset, n int) ([]Parked, error) {
	if err := checkRange(offset, n); err != nil {
		return nil, err
	}
	raws, err := t.cfg.Client.LRange(ctx, key, int64(offset), int64(offset+n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("retrytask: list %s: %w", state, err)
	}
	out := make([]Parked, len(raws))
	for i, raw := range raws {
		out[i] = decode(state, raw, 0)
	}
	return out, nil
}

// ListScheduled returns up to n scheduled records from offset, soonest due first (one
// ZRANGE and one HMGET). A record claimed meanwhile is left out.
// Errors as [Task.ListPending].
func (t *Task) ListScheduled(ctx context.Context, offset, n int) ([]Parked, error) {
	if err := checkRange(offset, n); err != nil {
		return nil, err
	}
	zs, err := t.cfg.Client.ZRangeWithScores(ctx, t.keys.schedule, int64(offset), int64(offset+n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("retrytask: list scheduled: %w", err)
	}
	if len(zs) == 0 {
		return nil, nil
	}
	ids := make([]string, len(zs))
	for i, z := range zs {
		ids[i], _ = z.Member.(string)
	}
	raws, err := t.cfg.Client.HMGet(ctx, t.keys.records, ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("retrytask: list scheduled: %w", err)
	}
	out := make([]Parked, 0, len(zs))
	for i, raw := range raws {
		if s, ok := raw.(string); ok {
			out = append(out, decode(StateScheduled, s, int64(zs[i].Score)))
		}
	}
	return out, nil
}

// ErrNotFound is returned when the record an action names is not where it should be
// (resent, claimed or moved meanwhile).
var ErrNotFound = errors.New("retrytask: record not found")

// dueNowScript makes a scheduled record due now.
//
//	KEYS[1] schedule ZSET id -> due time (unix ms)
//	ARGV[1] id, ARGV[2] now (unix ms)
//
// Returns 1, or 0 when id is not scheduled.
var dueNowScript = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
`)

// reviveScript moves one dead record back into the schedule, due now.
//
//	KEYS[1] dead LIST, KEYS[2] records HASH, KEYS[3] schedule ZSET
//	ARGV[1] the record's raw JSON, ARGV[2] its id, ARGV[3] now (unix ms)
//
// Returns 1, or 0 when the dead list holds no such element. When the id is already
// scheduled (parked again meanwhile) the stored record is kept and made due now.
var reviveScript = redis.NewScript(`
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return 1
`)

// DueNow makes the scheduled record id due at once: the next run (RunOnce, or the
// scheduler) resends it, whatever its backoff or MinAge. A delayed or timed message
// still waits for its delivery time. Errors: [ErrNotFound] when id is not scheduled,
// Redis errors.
func (t *Task) DueNow(ctx context.Context, id string) error {
	n, err := dueNowScript.Run(ctx, t.cfg.Client, []string{t.keys.schedule}, id, t.nowMs()).Int()
	if err != nil {
		return fmt.Errorf("retrytask: due now %s: %w", id, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Revive moves a dead record (raw, as returned by ListDead) back into the schedule, due
// now: the next run resends it (a delayed or timed message still waits for its delivery
// time). It keeps its attempt count, so a resend that fails again sends it back to the
// dead list at once (a retriable failure below MaxAttempts is rescheduled as usual).
// Errors: an undecodable record (it cannot be resent), [ErrNotFound] when the dead list
// has no such element, Redis errors.
func (t *Task) Revive(ctx context.Context, raw string) error {
	p := decode(StateDead, raw, 0)
	if p.Record == nil || p.Record.ID == "" {
		return errors.New("retrytask: revive: the record does not decode (no id): it cannot be resent")
	}
	n, err := reviveScript.Run(ctx, t.cfg.Client, []string{t.keys.dead, t.keys.records, t.keys.schedule}, raw, p.Record.ID, t.nowMs()).Int()
	if err != nil {
		return fmt.Errorf("retrytask: revive: %w", err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Find reports where record id is: scheduled (with its record and due time), or not
// scheduled (ok false: never parked, resent and acknowledged, in the pending or dead
// list, or claimed by a resender right now). Errors: Redis errors.
func (t *Task) Find(ctx context.Context, id string) (p Parked, ok bool, err error) {
	pipe := t.cfg.Client.Pipeline()
	raw := pipe.HGet(ctx, t.keys.records, id)
	due := pipe.ZScore(ctx, t.keys.schedule, id)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Parked{}, false, fmt.Errorf("retrytask: find %s: %w", id, err)
	}
	if raw.Err() != nil || due.Err() != nil {
		return Parked{}, false, nil
	}
	return decode(StateScheduled, raw.Val(), int64(due.Val())), true, nil
}
