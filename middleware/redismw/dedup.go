package redismw

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Dedup defaults.
const (
	// DefaultDoneTTL is how long a done (or failed) marker lives: 72 h, the broker's
	// default retention (fileReservedTime), so any redelivery of retained data — consume
	// retries (the 16 retry levels span about 4 h 46 min), offset resets, replays — still
	// finds the marker.
	DefaultDoneTTL = 72 * time.Hour
	// DefaultLockExpiry is the dedup lock's expiry: 30 s, renewed every third of it while
	// the handler runs, so a crashed holder blocks the message for at most 30 s.
	DefaultLockExpiry = 30 * time.Second
)

// Errors of Dedup, matched with errors.Is; the returned error is a *DedupError that wraps
// one of them (and the underlying cause).
var (
	// ErrLockHeld: another holder (another consumer, goroutine or process) has the
	// message's lock, so the same content is in flight elsewhere. The message comes back
	// later; it is never acknowledged silently, since the other holder may still fail.
	ErrLockHeld = errors.New("dedup lock held by another holder")
	// ErrLockLost: our lock expired or was taken over while the handler ran (found by a
	// renewal or when finishing). Another holder may have run the message concurrently.
	ErrLockLost = errors.New("dedup lock lost while handling (expired or taken over)")
	// ErrRenewFailed: renewing our lock failed with a Redis error long enough that it may
	// expire; the handler's context was cancelled.
	ErrRenewFailed = errors.New("dedup lock renewal failed")
	// ErrRedisUnavailable: a Redis call of Dedup or Progress failed (network, timeout,
	// server error).
	ErrRedisUnavailable = errors.New("redis unavailable")
)

// DedupError is the error Dedup returns (alone or joined with the handler's error) when it
// asks for ReconsumeLater, or when its bookkeeping failed. errors.Is(err, ErrLockHeld)
// etc. select the kind; Reason is the same kind as a metric label.
type DedupError struct {
	// Key is the message key.
	Key string
	// Reason is the outcome label (ReasonLockHeld, ReasonLockLost, ReasonRenewFailed,
	// ReasonRedisUnavailable, ReasonMarkerNotSaved).
	Reason middleware.Reason
	// Kind is the sentinel: ErrLockHeld, ErrLockLost, ErrRenewFailed or ErrRedisUnavailable.
	Kind error
	// HeldFor is, for ErrLockHeld, the other holder's remaining lock time (ms precision;
	// 0 when unknown).
	HeldFor time.Duration
	// Cause is the underlying error (a Redis error), nil when there is none.
	Cause error
}

// Error returns "middleware: dedup key <key>: <kind>[: <cause>]".
func (e *DedupError) Error() string {
	s := fmt.Sprintf("middleware: dedup key %q: %v", e.Key, e.Kind)
	if e.HeldFor > 0 {
		s += fmt.Sprintf(" (for %v more)", e.HeldFor)
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns Kind and Cause.
func (e *DedupError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Cause}
}

// DedupConfig configures [Dedup]. The zero value is not usable: Client is required.
type DedupConfig struct {
	// Client is the Redis (standalone, cluster or failover client). Required. Dedup never
	// closes it.
	Client redis.UniversalClient
	// Prefix starts every key ("<prefix>:{<key>}:m" marker, "<prefix>:{<key>}:lock" lock;
	// see MarkerKey and LockKey). Default DefaultMarkerPrefix ("sluice:dedup"). Use one
	// prefix per consumer group: two groups consuming the same topic must each handle the
	// message once, so they must not share markers. It must not contain '{' or '}'.
	Prefix string
	// DoneTTL is how long the done (1) and failed (-1) markers live. Default DefaultDoneTTL
	// (72 h). A duplicate arriving after the TTL runs the handler again.
	DoneTTL time.Duration
	// LockExpiry is the lock's expiry; it is renewed every LockExpiry/3 while the handler
	// runs (go-redsync Mutex.Extend). Default DefaultLockExpiry (30 s); at least 30 ms.
	LockExpiry time.Duration
	// FailOpen decides what happens when Redis fails before the handler runs: false (the
	// default, fail closed) returns ReconsumeLater and an ErrRedisUnavailable error, so no
	// message runs without dedup; true runs the handler without dedup (logged, noted as
	// ReasonFailOpen), accepting possible double effects while Redis is down.
	FailOpen bool
	// KeyFunc returns a received message's dedup key; "" means "no key": the message passes
	// through Dedup unchecked (noted as ReasonNoKey). Default KeyOf (the first KEYS entry,
	// which the send side's Keys sets). Scope it (for example prefix the topic) when equal
	// keys on different topics are different work.
	KeyFunc func(*message.MessageExt) string
	// Logger receives warnings (fail open, lost lock, markers not saved). Default
	// slog.Default().
	Logger *slog.Logger
}

func (c *DedupConfig) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultMarkerPrefix
	}
	if c.DoneTTL == 0 {
		c.DoneTTL = DefaultDoneTTL
	}
	if c.LockExpiry == 0 {
		c.LockExpiry = DefaultLockExpiry
	}
	if c.KeyFunc == nil {
		c.KeyFunc = middleware.KeyOf
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration after defaults: Client set, DoneTTL >= 1 ms,
// LockExpiry >= 30 ms, Prefix without braces.
func (c *DedupConfig) Validate() error {
	if c.Client == nil {
		return &config.Error{Package: "middleware", Field: "Client", Reason: "is nil"}
	}
	if c.DoneTTL < time.Millisecond {
		return &config.Error{Package: "middleware", Field: "DoneTTL", Value: c.DoneTTL, Reason: "must be at least 1ms"}
	}
	if c.LockExpiry < 30*time.Millisecond {
		return &config.Error{Package: "middleware", Field: "LockExpiry", Value: c.LockExpiry, Reason: "must be at least 30ms"}
	}
	return validatePrefix("Prefix", c.Prefix)
}

// Deduper runs the dedup rule for one prefix; see [Dedup]. It is safe for concurrent use.
type Deduper struct {
	cfg DedupConfig
	rs  *redsync.Redsync
}

// NewDeduper returns a Deduper for cfg (defaults applied), or an error naming the bad field.
func NewDeduper(cfg DedupConfig) (*Deduper, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Deduper{cfg: cfg, rs: redsync.New(goredis.NewPool(cfg.Client))}, nil
}

// Dedup returns the consume middleware of [NewDeduper](cfg).
//
// Per message key ([middleware.KeyOf] unless KeyFunc says otherwise):
//
//  1. done marker ("1") → the handler is skipped and the message acknowledged (a
//     duplicate, ReasonDuplicate);
//  2. otherwise take the lock (a random token per attempt, expiry LockExpiry, renewed every
//     LockExpiry/3 with go-redsync's Mutex.Extend). Held by another holder → ReconsumeLater
//     with ErrLockHeld: never a silent ack, since that holder may still fail;
//  3. handler succeeds → done marker with DoneTTL and the lock released, atomically (one
//     Lua script that first checks our token); handler fails (error, ReconsumeLater or
//     panic) → failed marker ("-1") and release, ReconsumeLater.
//
// A holder that crashes leaves the lock to expire (at most LockExpiry); the marker is
// absent or "-1", so the message runs again when it is redelivered. A renewal that finds
// the lock gone or re-taken cancels the handler's context with ErrLockLost as the cause;
// a renewal that keeps failing with Redis errors until the lock is about to expire
// cancels it with ErrRenewFailed. A handler that succeeds anyway still sets the done
// marker (its effect happened) and the message is acknowledged, with ReasonLockLost noted.
//
// Redis failing before the handler runs → FailOpen decides (default: fail closed,
// ReconsumeLater). Redis failing after a successful handler → the message is still
// acknowledged (ReasonMarkerNotSaved, logged): re-running it would repeat its effect.
//
// Messages without a key pass straight through (ReasonNoKey). A batch (more than one
// message) is handled one message at a time through the rest of the chain, in order,
// stopping at the first message that does not succeed; the batch result is then
// ReconsumeLater and, when the batch is delivered again, the messages already done are
// skipped as duplicates. So the inner handler always sees batches of one.
//
// Fencing: when the lock is taken, the same script hands out a fencing token for the key,
// an integer that only grows (see [FencingToken]); the handler reads it from its context
// and makes its downstream write conditional on it (see [FencedSet] and the PostgreSQL
// recipe there). A holder whose lock expired — a long GC pause, a stopped process — holds a
// lower token than the holder that took the lock after it, so its late write is refused.
// The handler's context also carries the key as [middleware.IdempotencyKey].
//
// Round trips: two per message on the happy path (one script checks the marker and takes
// the lock, one sets the marker and releases), plus one per renewal (a handler shorter
// than LockExpiry/3 has none). go-redsync's own Lock would cost an extra GET of the marker
// first and could not hand out a fencing token in the same round trip, so the lock is taken
// by our script with redsync's token layout (a random value, SET NX PX; the fencing token
// lives in a key of its own) and handed to a redsync Mutex (WithValue) for renewal.
func Dedup(cfg DedupConfig) (middleware.ConsumeMiddleware, error) {
	d, err := NewDeduper(cfg)
	if err != nil {
		return nil, err
	}
	return d.Middleware(), nil
}

// Middleware returns the consume middleware; see [Dedup].
func (d *Deduper) Middleware() middleware.ConsumeMiddleware {
	return func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if len(msgs) == 1 {
				return d.handle(ctx, msgs, next)
			}
			for i := range msgs {
				if res, err := d.handle(ctx, single(msgs, i), next); res != message.ConsumeSuccess || err != nil {
					return message.ReconsumeLater, err
				}
			}
			return message.ConsumeSuccess, nil
		}
	}
}

// MarkerKey returns the marker key of message key.
func (d *Deduper) MarkerKey(key string) string { return MarkerKey(d.cfg.Prefix, key) }

// LockKey returns the lock key of message key.
func (d *Deduper) LockKey(key string) string { return LockKey(d.cfg.Prefix, key) }

// FenceKey returns the fencing-token key of message key.
func (d *Deduper) FenceKey(key string) string { return FenceKey(d.cfg.Prefix, key) }

// ProgressState returns key's marker (one GET).
func (d *Deduper) ProgressState(ctx context.Context, key string) (MarkerState, error) {
	return readMarker(ctx, d.cfg.Client, d.MarkerKey(key))
}

// acquireScript checks the marker, takes the lock and the fencing token in one round trip.
//
// KEYS[1] the marker key
// KEYS[2] the lock key
// KEYS[3] the fence key
// ARGV[1] our lock token (random, unique per attempt)
// ARGV[2] lock expiry in ms
// ARGV[3] fence key TTL in ms
//
// Returns {code, marker, pttl, fence}:
//
//	code 1:  the marker is "1" (done): skip the handler;
//	code 0:  the lock is ours; marker is the previous marker ("" or "-1"); fence is our
//	         fencing token: max(the fence key's value + 1, the server clock in µs), stored
//	         back into the fence key;
//	code -2: the lock is held by another token; pttl is its remaining time in ms.
//
// The fencing token mixes in the server clock (TIME) so it keeps growing when the fence
// key has expired; Redis 5+ replicates a script's effects, so TIME before a write is fine.
var acquireScript = redis.NewScript(`
local m = redis.call("GET", KEYS[1])
if m == "1" then
  return {1, m, 0, 0}
end
if redis.call("SET", KEYS[2], ARGV[1], "PX", ARGV[2], "NX") then
  local t = redis.call("TIME")
  local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local prev = tonumber(redis.call("GET", KEYS[3]) or "0")
  if prev and prev >= f then
    f = prev + 1
  end
  redis.call("SET", KEYS[3], string.format("%d", f), "PX", ARGV[3])
  return {0, m or "", 0, f}
end
return {-2, m or "", redis.call("PTTL", KEYS[2]), 0}
`)

// finishScript writes the marker and releases the lock in one round trip.
//
// KEYS[1] the marker key
// KEYS[2] the lock key
// ARGV[1] our token
// ARGV[2] the marker value: "1" (handler succeeded) or "-1" (failed)
// ARGV[3] marker TTL in ms
//
// Returns:
//
//	1:  the lock was ours: marker written, lock deleted;
//	0:  the lock had expired (absent): lost;
//	-1: the lock is held by another token (left alone): lost.
//
// When the lock is lost a "1" marker is still written (the effect happened); a "-1"
// never overwrites a "1".
var finishScript = redis.NewScript(`
local l = redis.call("GET", KEYS[2])
if ARGV[2] == "1" then
  redis.call("SET", KEYS[1], "1", "PX", ARGV[3])
elseif l == ARGV[1] and redis.call("GET", KEYS[1]) ~= "1" then
  redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
end
if l == ARGV[1] then
  redis.call("DEL", KEYS[2])
  return 1
end
if l then
  return -1
end
return 0
`)

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.StdEncoding.EncodeToString(b[:])
}

// handle runs the dedup rule for msgs, a batch of one.
func (d *Deduper) handle(ctx context.Context, msgs []*message.MessageExt, next middleware.ConsumeFunc) (message.ConsumeResult, error) {
	key := d.cfg.KeyFunc(msgs[0])
	if key == "" {
		middleware.Note(ctx, middleware.ReasonNoKey)
		return next(ctx, msgs)
	}
	if err := ctx.Err(); err != nil {
		return message.ReconsumeLater, err
	}
	mk, lk, fk := d.MarkerKey(key), d.LockKey(key), d.FenceKey(key)
	lockMs := d.cfg.LockExpiry.Milliseconds()
	token := newToken()
	start := time.Now()
	vals, err := acquireScript.Run(ctx, d.cfg.Client, []string{mk, lk, fk}, token, lockMs, d.cfg.DoneTTL.Milliseconds()).Slice()
	var code, pttl, fence int64
	if err == nil {
		code, pttl, fence, err = parseAcquire(vals)
	}
	if err != nil {
		if ctx.Err() != nil {
			return message.ReconsumeLater, ctx.Err()
		}
		if d.cfg.FailOpen {
			middleware.Note(ctx, middleware.ReasonFailOpen)
			d.cfg.Logger.WarnContext(ctx, "dedup: redis failed, running the handler without dedup (fail open)",
				"key", key, "topic", msgs[0].Topic, "error", err)
			return next(ctx, msgs)
		}
		middleware.Note(ctx, middleware.ReasonRedisUnavailable)
		return message.ReconsumeLater, &DedupError{Key: key, Reason: middleware.ReasonRedisUnavailable, Kind: ErrRedisUnavailable, Cause: err}
	}
	switch code {
	case 1:
		middleware.Note(ctx, middleware.ReasonDuplicate)
		return message.ConsumeSuccess, nil
	case -2:
		middleware.Note(ctx, middleware.ReasonLockHeld)
		return message.ReconsumeLater, &DedupError{Key: key, Reason: middleware.ReasonLockHeld, Kind: ErrLockHeld, HeldFor: time.Duration(pttl) * time.Millisecond}
	}

	// The lock is ours until start+LockExpiry.
	mutex := d.rs.NewMutex(lk, redsync.WithExpiry(d.cfg.LockExpiry), redsync.WithValue(token), redsync.WithTries(1))
	hctx := context.WithValue(ctx, scopeKey{}, &markerScope{prefix: d.cfg.Prefix, key: key})
	hctx = context.WithValue(hctx, fenceCtxKey{}, fence)
	hctx = middleware.WithIdempotencyKey(hctx, key)
	hctx, cancel := context.WithCancelCause(hctx)
	r := startRenewal(hctx, cancel, mutex, key, d.cfg.LockExpiry, start)
	res, herr := middleware.CallRecovered(hctx, next, msgs)
	renewErr := r.stop()
	cancel(nil)
	ok := herr == nil && res == message.ConsumeSuccess

	val := "-1"
	if ok {
		val = "1"
	}
	fcode, ferr := d.finish(ctx, mk, lk, token, val)

	var errs []error
	if herr != nil {
		errs = append(errs, herr)
	}
	lost := fcode != 1 && ferr == nil
	switch {
	case lost || errors.Is(renewErr, ErrLockLost):
		middleware.Note(ctx, middleware.ReasonLockLost)
		var how error
		switch {
		case fcode == 0 && ferr == nil:
			how = errors.New("at release the lock had expired")
		case fcode == -1 && ferr == nil:
			how = errors.New("at release the lock belonged to another holder")
		default:
			how = errors.New("a renewal found the lock gone or re-taken")
		}
		errs = append(errs, &DedupError{Key: key, Reason: middleware.ReasonLockLost, Kind: ErrLockLost, Cause: how})
	case renewErr != nil:
		middleware.Note(ctx, middleware.ReasonRenewFailed)
		errs = append(errs, renewErr)
	}
	if ferr != nil {
		middleware.Note(ctx, middleware.ReasonMarkerNotSaved)
		errs = append(errs, &DedupError{Key: key, Reason: middleware.ReasonMarkerNotSaved, Kind: ErrRedisUnavailable, Cause: ferr})
	}
	if ok {
		if len(errs) > 0 {
			// The effect happened: acknowledge; re-running would repeat it.
			d.cfg.Logger.WarnContext(ctx, "dedup: handler succeeded but its lock or marker had trouble; acknowledged",
				"key", key, "topic", msgs[0].Topic, "error", errors.Join(errs...))
		}
		return message.ConsumeSuccess, nil
	}
	switch len(errs) {
	case 0:
		return message.ReconsumeLater, nil // the handler returned ReconsumeLater without an error
	case 1:
		return message.ReconsumeLater, errs[0]
	}
	return message.ReconsumeLater, errors.Join(errs...)
}

func parseAcquire(vals []any) (code, pttl, fence int64, err error) {
	if len(vals) != 4 {
		return 0, 0, 0, fmt.Errorf("middleware: dedup acquire script returned %d values, want 4", len(vals))
	}
	c, ok1 := vals[0].(int64)
	p, ok2 := vals[2].(int64)
	f, ok3 := vals[3].(int64)
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, 0, fmt.Errorf("middleware: dedup acquire script returned %T, %T, %T", vals[0], vals[2], vals[3])
	}
	return c, p, f, nil
}

// finish runs finishScript, independent of the caller's cancellation, and retries a Redis
// error twice (after 20 and 40 ms) within LockExpiry/3.
func (d *Deduper) finish(parent context.Context, mk, lk, token, val string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), d.cfg.LockExpiry/3)
	defer cancel()
	var err error
	backoff := 20 * time.Millisecond
	for attempt := 0; attempt < 3; attempt++ {
		var n int64
		n, err = finishScript.Run(ctx, d.cfg.Client, []string{mk, lk}, token, val, d.cfg.DoneTTL.Milliseconds()).Int64()
		if err == nil {
			return n, nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, err
		case <-t.C:
		}
		backoff *= 2
	}
	return 0, err
}

// renewal extends one lock every expiry/3 until stopped.
type renewal struct {
	stopc chan struct{}
	done  chan struct{}
	err   error // set by the goroutine before done is closed
}

// startRenewal starts the renewal goroutine for mutex, acquired at start. On a lost lock
// it cancels ctx with a *DedupError of kind ErrLockLost; on Redis errors it keeps trying
// while the lock is still valid for more than one interval, then cancels with
// ErrRenewFailed.
func startRenewal(ctx context.Context, cancel context.CancelCauseFunc, mutex *redsync.Mutex, key string, expiry time.Duration, start time.Time) *renewal {
	r := &renewal{stopc: make(chan struct{}), done: make(chan struct{})}
	interval := expiry / 3
	validUntil := start.Add(expiry)
	go func() {
		defer close(r.done)
		t := time.NewTimer(interval)
		defer t.Stop()
		for {
			select {
			case <-r.stopc:
				return
			case <-t.C:
			}
			began := time.Now()
			ectx, ecancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
			ok, err := mutex.ExtendContext(ectx)
			ecancel()
			if ok {
				validUntil = began.Add(expiry)
				t.Reset(interval)
				continue
			}
			var taken *redsync.ErrTaken
			if errors.As(err, &taken) {
				r.err = &DedupError{Key: key, Reason: middleware.ReasonLockLost, Kind: ErrLockLost}
				cancel(r.err)
				return
			}
			if err == nil {
				err = redsync.ErrExtendFailed
			}
			if time.Until(validUntil) > interval {
				t.Reset(interval / 2) // retry sooner; the lock is still valid for a while
				continue
			}
			r.err = &DedupError{Key: key, Reason: middleware.ReasonRenewFailed, Kind: ErrRenewFailed, Cause: err}
			cancel(r.err)
			return
		}
	}()
	return r
}

// stop stops the renewal goroutine, waits for it and returns its failure, if any.
func (r *renewal) stop() error {
	close(r.stopc)
	<-r.done
	return r.err
}
