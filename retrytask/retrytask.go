// Package retrytask resends the sends that redismw.Park parked in Redis.
//
// # Where a record lives
//
// redismw.Park RPUSHes each failed send as a JSON [redismw.ParkedRecord] onto the
// pending list "sluice:park:{ns}:pending". A run of the task moves it through these keys
// (all with the hash tag {ns}, so Redis Cluster keeps them on one slot), every move one
// Lua script (scripts.go), so a record is always in exactly one place in Redis and never
// only in a resender's memory:
//
//	pending ──intake──▶ schedule ──promote (due)──▶ ready:<bucket> ──claim (LMOVE)──▶ processing
//	  (LIST, Park)      (ZSET id→due ms)            (LIST of ids)                     (LIST of ids + lease)
//	                         ▲                                                            │
//	                         ├──── requeue: failed (backoff) / held (not yet due) ◀──────┤
//	                         ├──── reclaim: lease expired (resender died) ◀───────────────┤
//	                         │                                    ack (sent) ◀────────────┤
//	                         │                                    dead list ◀─────────────┘
//
// The record's JSON is kept in the hash "…:records" (id → JSON) while it is scheduled,
// ready or processing; the lists and the schedule hold ids. The dead list
// ("…:dead", [redismw.ParkKeys].Dead) holds full JSON records with LastError.
//
//   - Resend: the record's message (redismw.ParkedRecord.Message) goes to Config.Send.
//     A failure that redismw.DefaultRetriable calls permanent (a
//     *message.ValidationError, an error whose Permanent() is true or whose Retryable()
//     is false) moves the record to the dead list at once; any other failure counts an
//     attempt and reschedules it after the backoff, until MaxAttempts.
//   - Intake: the record is scheduled at ParkedAtMs + MinAge, or at its DeliverAtMs when
//     that is later. An undecodable record goes to the dead list as it is.
//   - Claim: LMOVE ready → processing plus a lease (expiry = now + Lease, and a random
//     token unique to this claim).
//   - Ack / requeue / dead: only while the claim's token still owns the record.
//   - Reclaim: a record whose lease expired goes back to the schedule, due at once.
//
// # Sharding
//
// Each record belongs to bucket sha1(id) mod 64 ([Buckets]); bucket b belongs to shard
// b mod Total. A run of shard {Index, Total} claims only from its buckets' ready lists,
// so it never touches, let alone spins on, other shards' records. Intake, promote and
// reclaim are shard-independent bookkeeping (no sends) that any run does for everyone;
// they are atomic, so concurrent runs just split the work. With Total > 64, shards 64
// and up own no bucket and do nothing. Sharding only splits load: correctness never
// depends on it, because every claim is atomic.
//
// # Guarantees and their limits
//
//   - No loss: a record leaves Redis only by an ack after a successful Send, or to the
//     dead list. A resender that dies between claim and ack leaves the record in
//     processing; the first run after its lease expired reclaims and resends it.
//   - One send per claim: two runs can never claim one record at the same time (the
//     claim is one atomic LMOVE + lease), so overlapping runs, on one machine or many,
//     never send one record twice.
//   - Reclaim vs. a live but slow resender: each Send gets a context bounded by
//     SendTimeout and by the claim's lease expiry (minus a safety margin), and Lease ≥
//     2×SendTimeout, so a live resender has finished (or abandoned) its Send before
//     anyone may reclaim — provided Send honours its context, as the SDK producers'
//     sends do. A Send that ignores its context can outlive the lease, and the record
//     is then sent again by whoever reclaims it. The
//     ack checks the claim token. A duplicate send is possible only when a resender
//     stalls (process freeze, Redis unreachable for the ack) for longer than the rest of
//     its lease after the broker stored the message, or when resenders' clocks disagree
//     by more than that margin: then the ack finds its token gone, is counted as
//     LeaseLost and logged. Consumers with redismw.Dedup (keyed by the message keys,
//     which the resend keeps) absorb such a duplicate.
//   - Delivery time: RocketMQ 4.x brokers have delay levels only, no arbitrary timer.
//     A delayed or timed record therefore stays parked until its DeliverAtMs (it is
//     scheduled at that time; a record claimed earlier is put back without counting an
//     attempt) and is then sent without a delay level, so it arrives at its original
//     time within DeliverTolerance early or one scheduler period late. One already past
//     due by more than DeliverTolerance is sent at once and marked late (properties
//     SLUICE_LATE=true and SLUICE_LATE_MS) and logged.
//   - Stopping: a run stops between records when its context is cancelled (records not
//     yet claimed stay where they are); a claimed record is finished first. Shutdown
//     waits for that; when its own context ends first, in-flight sends are aborted and
//     their records handed back to the schedule (counted as Returned; if the broker had
//     stored the message already, the later resend is a duplicate).
//
// Triggers: the built-in scheduler ([Task.Run] / [Task.Start]), or an XXL-JOB executor
// (package retrytask/xxljob) calling [Task.RunOnce] with the job's sharding parameters.
package retrytask

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/middleware/redismw"
)

// Buckets is the number of ready lists per namespace; a record's bucket is
// sha1(id) mod Buckets and bucket b belongs to shard b mod Total.
const Buckets = 64

// Properties set on a resent message that is sent later than its delivery time.
const (
	// PropertyLate is "true" on a delayed or timed message resent more than
	// DeliverTolerance after its delivery time.
	PropertyLate = "SLUICE_LATE"
	// PropertyLateMs is how late it was resent, in milliseconds after the delivery time.
	PropertyLateMs = "SLUICE_LATE_MS"
)

// Errors.
var (
	// ErrClosed is returned by RunOnce, Run and Start after Shutdown.
	ErrClosed = errors.New("retrytask: closed")
)

// ShardError reports an invalid Shard.
type ShardError struct {
	Shard  Shard
	Reason string
}

// Error implements error.
func (e *ShardError) Error() string {
	return fmt.Sprintf("retrytask: invalid shard {Index: %d, Total: %d}: %s", e.Shard.Index, e.Shard.Total, e.Reason)
}

// Shard selects the part of the parked records a run handles: the records whose bucket
// b (see [Buckets]) has b mod Total == Index. XXL-JOB's broadcast sharding parameters map
// to it directly (broadcastIndex, broadcastTotal). The zero value means "everything"
// (Index 0 of 1).
type Shard struct {
	// Index is this executor's shard, 0 ≤ Index < Total.
	Index int
	// Total is the number of shards (executors); 0 is taken as 1.
	Total int
}

func (s Shard) norm() Shard {
	if s.Total == 0 && s.Index == 0 {
		return Shard{Index: 0, Total: 1}
	}
	return s
}

// Validate reports a Total below 1 or an Index outside [0, Total).
func (s *Shard) Validate() error {
	n := s.norm()
	if n.Total < 1 {
		return &ShardError{Shard: n, Reason: "Total must be at least 1"}
	}
	if n.Index < 0 || n.Index >= n.Total {
		return &ShardError{Shard: n, Reason: "Index must be in [0, Total)"}
	}
	return nil
}

// buckets returns the buckets shard s owns.
func (s Shard) buckets() []int {
	s = s.norm()
	var out []int
	for b := s.Index; b < Buckets; b += s.Total {
		out = append(out, b)
	}
	return out
}

// BucketOf returns the bucket of record id: the first 4 bytes of sha1(id), big-endian,
// modulo Buckets (the same computation the promote script does with redis.sha1hex).
func BucketOf(id string) int {
	sum := sha1.Sum([]byte(id))
	return int(binary.BigEndian.Uint32(sum[:4]) % Buckets)
}

// Owns reports whether record id belongs to shard s.
func (s Shard) Owns(id string) bool {
	s = s.norm()
	return s.Total > 0 && BucketOf(id)%s.Total == s.Index
}

// Stats counts what one RunOnce did.
type Stats struct {
	// Intake: records moved from the pending list into the schedule.
	Intake int
	// Duplicates: pending elements dropped because the same record was already scheduled.
	Duplicates int
	// Reclaimed: records whose lease had expired, put back into the schedule.
	Reclaimed int
	// Promoted: scheduled records that became due and moved to their ready list.
	Promoted int
	// Claimed: records this run claimed (each is then Sent, Held, Retried, Dead or Returned).
	Claimed int
	// Sent: records resent and acknowledged (removed from Redis).
	Sent int
	// Late: of Sent, delayed or timed records sent more than DeliverTolerance after their delivery time.
	Late int
	// Held: delayed or timed records claimed before their delivery time and put back, no attempt counted.
	Held int
	// Retried: failed resends put back into the schedule with backoff.
	Retried int
	// Dead: records moved to the dead list (attempts used up, a permanent error, undecodable).
	Dead int
	// Returned: claimed records handed back unsent (or with an aborted send) because of Shutdown.
	Returned int
	// LeaseLost: finished claims whose lease had already been reclaimed (a duplicate send is possible).
	LeaseLost int
}

func (s Stats) String() string {
	return fmt.Sprintf("intake=%d dup=%d reclaimed=%d promoted=%d claimed=%d sent=%d late=%d held=%d retried=%d dead=%d returned=%d leaseLost=%d",
		s.Intake, s.Duplicates, s.Reclaimed, s.Promoted, s.Claimed, s.Sent, s.Late, s.Held, s.Retried, s.Dead, s.Returned, s.LeaseLost)
}

func (s Stats) busy() bool { return s != Stats{} }

// keys are the Redis keys of one namespace.
type keys struct {
	pending, processing, dead       string
	records, schedule, lease, owner string
	ready                           [Buckets]string
}

func newKeys(ns string) keys {
	pk := redismw.NewParkKeys(ns)
	base := "sluice:park:{" + ns + "}:"
	k := keys{pending: pk.Pending, processing: pk.Processing, dead: pk.Dead,
		records: base + "records", schedule: base + "schedule", lease: base + "lease", owner: base + "owner"}
	for b := range k.ready {
		k.ready[b] = base + "ready:" + strconv.Itoa(b)
	}
	return k
}

// Tuning constants (not configuration: they only bound the work of one call).
const (
	intakeChunk    = 32  // pending elements read per intake script call
	promoteChunk   = 500 // records promoted per promote script call
	reclaimChunk   = 500 // records reclaimed per reclaim script call
	redisOpTimeout = 5 * time.Second
	leaseMargin    = time.Second // a Send ends at least this long before its lease expires
	abortWait      = 10 * time.Second
)

// Task resends parked records. Create it with New; trigger runs with RunOnce (one
// batch of one shard), Run (a blocking scheduler loop) or Start (the same loop in a
// goroutine the task owns); stop everything with Shutdown. Safe for concurrent use:
// several runs, in one process or many, may overlap.
type Task struct {
	cfg  Config
	keys keys
	log  *slog.Logger

	mu     sync.Mutex
	closed bool
	active sync.WaitGroup // RunOnce calls and Start loops; Add only under mu while open

	soft       context.Context // cancelled by Shutdown: runs stop between records
	softCancel context.CancelFunc
	hard       context.Context // cancelled when Shutdown's ctx ends: in-flight sends abort
	hardCancel context.CancelFunc

	rr atomic.Uint32 // rotates the bucket a claim tries first
}

// New returns a task for cfg (defaults applied). It does not contact Redis. Errors:
// cfg.Validate's.
func New(cfg Config) (*Task, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	t := &Task{cfg: cfg, keys: newKeys(cfg.Namespace), log: cfg.Logger.With("component", "retrytask", "namespace", cfg.Namespace)}
	t.soft, t.softCancel = context.WithCancel(context.Background())
	t.hard, t.hardCancel = context.WithCancel(context.Background())
	return t, nil
}

// enter registers a run; the caller must call t.active.Done.
func (t *Task) enter() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ErrClosed
	}
	t.active.Add(1)
	return nil
}

// RunOnce does one batch for shard: intake, reclaim and promote (for everyone), then
// claims and resends up to BatchSize due records of the shard. It returns what it did
// and the first Redis error (which ends the run), ctx's error when ctx was cancelled
// before the batch was done (the run stops between records: unclaimed records stay,
// a claimed one is finished first), a *ShardError, or ErrClosed. A failed resend is not
// an error of the run: it is counted (Retried or Dead) and logged.
func (t *Task) RunOnce(ctx context.Context, shard Shard) (Stats, error) {
	var st Stats
	if err := shard.Validate(); err != nil {
		return st, err
	}
	if err := t.enter(); err != nil {
		return st, err
	}
	defer t.active.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(t.soft, cancel)
	defer stop()

	err := t.runOnce(ctx, shard.norm(), &st)
	if st.busy() {
		t.log.Info("retrytask: run", "shard", shard.norm().Index, "of", shard.norm().Total, "stats", st.String(), "err", err)
	}
	return st, err
}

func (t *Task) runOnce(ctx context.Context, shard Shard, st *Stats) error {
	if err := t.intake(ctx, st); err != nil {
		return err
	}
	if err := t.reclaim(ctx, st); err != nil {
		return err
	}
	if err := t.promote(ctx, st); err != nil {
		return err
	}
	buckets := shard.buckets()
	if len(buckets) == 0 {
		return nil
	}
	for st.Claimed < t.cfg.BatchSize {
		if err := t.stopping(ctx); err != nil {
			return err
		}
		c, err := t.claim(ctx, buckets)
		if err != nil {
			return err
		}
		if c == nil {
			return nil
		}
		st.Claimed++
		if err := t.process(ctx, c, st); err != nil {
			return err
		}
	}
	return nil
}

// stopping reports whether the run must stop before its next claim: ctx's error, or
// context.Canceled once Shutdown has begun. t.soft is checked directly, not only through
// ctx: the run's ctx is cancelled from a context.AfterFunc goroutine, which may run
// after this check, and a record claimed then would be sent after Shutdown began.
func (t *Task) stopping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.soft.Err() != nil {
		return context.Canceled
	}
	return nil
}

// opCtx returns a context for one Redis operation that must not be cut short by the
// run's cancellation (claims and finishes: a half-done claim would leave a record to
// its lease), bounded by redisOpTimeout.
func opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), redisOpTimeout)
}

// intake moves the pending list into the schedule, intakeChunk elements per script call,
// until it is empty, 10×BatchSize records were taken, or other runs keep taking the
// same elements first (16 conflicts).
func (t *Task) intake(ctx context.Context, st *Stats) error {
	limit := 10 * t.cfg.BatchSize
	conflicts := 0
	for taken := 0; taken < limit && conflicts < 16; {
		if err := ctx.Err(); err != nil {
			return err
		}
		raws, err := t.cfg.Client.LRange(ctx, t.keys.pending, 0, intakeChunk-1).Result()
		if err != nil {
			return fmt.Errorf("retrytask: read pending list: %w", err)
		}
		if len(raws) == 0 {
			return nil
		}
		args := make([]any, 0, 1+3*len(raws))
		args = append(args, len(raws))
		for _, raw := range raws {
			sum := sha1.Sum([]byte(raw))
			id, due := t.intakeDecision(raw)
			args = append(args, hex.EncodeToString(sum[:]), id, due)
		}
		octx, cancel := opCtx(ctx)
		res, err := intakeScript.Run(octx, t.cfg.Client, []string{t.keys.pending, t.keys.records, t.keys.schedule, t.keys.dead}, args...).Result()
		cancel()
		if err != nil {
			return fmt.Errorf("retrytask: intake: %w", err)
		}
		counts, ok := res.([]any)
		if !ok || len(counts) != 3 {
			conflicts++ // -1: another run took these elements first; read again
			continue
		}
		moved, dead, dup := toInt(counts[0]), toInt(counts[1]), toInt(counts[2])
		st.Intake += moved
		st.Dead += dead
		st.Duplicates += dup
		if dead > 0 {
			t.log.Warn("retrytask: undecodable or conflicting records moved to the dead list at intake", "count", dead, "dead", t.keys.dead)
		}
		taken += len(raws)
	}
	return nil
}

// intakeDecision returns the record id ("" when undecodable) and its first due time:
// ParkedAtMs + MinAge, or DeliverAtMs when later.
func (t *Task) intakeDecision(raw string) (string, int64) {
	var r redismw.ParkedRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil || r.ID == "" {
		return "", 0
	}
	due := r.ParkedAtMs + t.cfg.MinAge.Milliseconds()
	if at := t.deliverAt(&r); at > due {
		due = at
	}
	return r.ID, due
}

// deliverAt returns r's absolute delivery time (unix ms), 0 for none: DeliverAtMs, or
// for an old record with only a DelayLevel, FirstFailedAtMs + that level's delay.
func (t *Task) deliverAt(r *redismw.ParkedRecord) int64 {
	if r.DeliverAtMs > 0 {
		return r.DeliverAtMs
	}
	if r.DelayLevel > 0 && len(t.cfg.DelayLevels) > 0 {
		i := min(r.DelayLevel, len(t.cfg.DelayLevels)) - 1
		return r.FirstFailedAtMs + t.cfg.DelayLevels[i].Milliseconds()
	}
	return 0
}

func (t *Task) reclaim(ctx context.Context, st *Stats) error {
	for i := 0; i < 10; i++ {
		n, err := reclaimScript.Run(ctx, t.cfg.Client, []string{t.keys.lease, t.keys.owner, t.keys.processing, t.keys.schedule},
			t.nowMs(), reclaimChunk).Int()
		if err != nil {
			return fmt.Errorf("retrytask: reclaim: %w", err)
		}
		st.Reclaimed += n
		if n > 0 {
			t.log.Warn("retrytask: reclaimed records whose lease expired (their resender stopped mid-send)", "count", n)
		}
		if n < reclaimChunk {
			return nil
		}
	}
	return nil
}

func (t *Task) promote(ctx context.Context, st *Stats) error {
	ks := make([]string, 0, 1+Buckets)
	ks = append(ks, t.keys.schedule)
	ks = append(ks, t.keys.ready[:]...)
	for i := 0; i < 10; i++ {
		n, err := promoteScript.Run(ctx, t.cfg.Client, ks, t.nowMs(), promoteChunk).Int()
		if err != nil {
			return fmt.Errorf("retrytask: promote: %w", err)
		}
		st.Promoted += n
		if n < promoteChunk {
			return nil
		}
	}
	return nil
}

// claimed is one claimed record.
type claimed struct {
	id, raw, token string
	expiresMs      int64
}

// claim claims one record from the shard's ready lists, trying them in a rotating
// order so no bucket starves. It returns nil when all are empty.
func (t *Task) claim(ctx context.Context, buckets []int) (*claimed, error) {
	ks := make([]string, 0, 4+len(buckets))
	ks = append(ks, t.keys.processing, t.keys.lease, t.keys.owner, t.keys.records)
	start := int(t.rr.Add(1)) % len(buckets)
	for i := range buckets {
		ks = append(ks, t.keys.ready[buckets[(start+i)%len(buckets)]])
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	c := &claimed{token: hex.EncodeToString(tok[:]), expiresMs: t.nowMs() + t.cfg.Lease.Milliseconds()}
	octx, cancel := opCtx(ctx)
	defer cancel()
	res, err := claimScript.Run(octx, t.cfg.Client, ks, c.token, c.expiresMs).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("retrytask: claim: %w", err)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("retrytask: claim: unexpected reply %v", res)
	}
	c.id, _ = res[0].(string)
	c.raw, _ = res[1].(string)
	return c, nil
}

// finish runs the finish script for c; it reports false when the lease was lost.
func (t *Task) finish(ctx context.Context, c *claimed, action, raw string, dueMs int64) (bool, error) {
	octx, cancel := opCtx(ctx)
	defer cancel()
	n, err := finishScript.Run(octx, t.cfg.Client,
		[]string{t.keys.processing, t.keys.lease, t.keys.owner, t.keys.records, t.keys.schedule, t.keys.dead},
		c.id, c.token, action, raw, dueMs).Int()
	if err != nil {
		return false, fmt.Errorf("retrytask: %s record %s: %w", action, c.id, err)
	}
	return n == 1, nil
}

// process resends one claimed record and finishes the claim. It returns only Redis
// errors of the finish (the record then stays claimed until its lease expires).
func (t *Task) process(ctx context.Context, c *claimed, st *Stats) error {
	var rec redismw.ParkedRecord
	if err := json.Unmarshal([]byte(c.raw), &rec); err != nil {
		t.log.Warn("retrytask: undecodable record moved to the dead list", "id", c.id, "err", err)
		return t.finishCounted(ctx, c, "dead", "", 0, st, &st.Dead)
	}
	now := t.cfg.Clock()
	nowMs := now.UnixMilli()
	msg := rec.Message()
	lateMs := int64(0)
	if at := t.deliverAt(&rec); at > 0 {
		remaining := time.Duration(at-nowMs) * time.Millisecond
		if remaining > t.cfg.DeliverTolerance {
			// Not yet due (claimed early after a reclaim or a short backoff): hold it
			// parked until its delivery time; no attempt is counted.
			return t.finishCounted(ctx, c, "requeue", "", at, st, &st.Held)
		}
		if remaining < -t.cfg.DeliverTolerance {
			lateMs = -remaining.Milliseconds()
			msg.SetProperty(PropertyLate, "true")
			msg.SetProperty(PropertyLateMs, strconv.FormatInt(lateMs, 10))
		}
	}

	sendCtx, cancel := t.sendContext(ctx, c)
	res, err := t.cfg.Send(sendCtx, msg)
	aborted := t.hard.Err() != nil && sendCtx.Err() != nil
	cancel()
	switch {
	case err == nil:
		if lateMs > 0 {
			st.Late++
			t.log.Warn("retrytask: delayed message resent after its delivery time", "id", rec.ID, "topic", rec.Topic, "lateMs", lateMs)
		}
		msgID := ""
		if res != nil {
			msgID = res.MsgID
		}
		t.log.Debug("retrytask: resent", "id", rec.ID, "topic", rec.Topic, "msgId", msgID, "attempts", rec.Attempts+1)
		return t.finishCounted(ctx, c, "ack", "", 0, st, &st.Sent)
	case aborted:
		t.log.Warn("retrytask: resend aborted by shutdown; record returned to the schedule (a duplicate is possible if the broker stored it)", "id", rec.ID, "topic", rec.Topic)
		return t.finishCounted(ctx, c, "requeue", "", nowMs, st, &st.Returned)
	}
	rec.Attempts++
	rec.LastError = err.Error()
	raw, merr := json.Marshal(&rec)
	if merr != nil { // cannot happen for this struct; keep the stored JSON then
		raw = nil
	}
	permanent := !redismw.DefaultRetriable(err)
	if permanent || rec.Attempts >= t.cfg.MaxAttempts {
		t.log.Warn("retrytask: record moved to the dead list", "id", rec.ID, "topic", rec.Topic, "attempts", rec.Attempts,
			"permanent", permanent, "err", err, "dead", t.keys.dead)
		return t.finishCounted(ctx, c, "dead", string(raw), 0, st, &st.Dead)
	}
	due := now.Add(t.backoff(rec.Attempts)).UnixMilli()
	if at := t.deliverAt(&rec); at > due {
		due = at
	}
	t.log.Debug("retrytask: resend failed; rescheduled", "id", rec.ID, "topic", rec.Topic, "attempts", rec.Attempts, "dueMs", due, "err", err)
	return t.finishCounted(ctx, c, "requeue", string(raw), due, st, &st.Retried)
}

// finishCounted finishes c and increments *counter, or st.LeaseLost when the lease was
// lost.
func (t *Task) finishCounted(ctx context.Context, c *claimed, action, raw string, dueMs int64, st *Stats, counter *int) error {
	ok, err := t.finish(ctx, c, action, raw, dueMs)
	if err != nil {
		return err
	}
	if !ok {
		st.LeaseLost++
		t.log.Error("retrytask: lease lost before the claim finished (the record was reclaimed; a duplicate send is possible)",
			"id", c.id, "action", action)
		return nil
	}
	*counter++
	return nil
}

// sendContext bounds one Send: SendTimeout, the claim's lease expiry minus leaseMargin,
// and Shutdown's abort; the run's own cancellation does not cut a send short.
func (t *Task) sendContext(ctx context.Context, c *claimed) (context.Context, context.CancelFunc) {
	timeout := t.cfg.SendTimeout
	if untilLease := time.Duration(c.expiresMs-t.nowMs())*time.Millisecond - leaseMargin; untilLease < timeout {
		timeout = max(untilLease, 0)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	stop := context.AfterFunc(t.hard, cancel)
	return sctx, func() { stop(); cancel() }
}

// backoff returns the wait after the attempts-th failed send (attempts ≥ 2: the first
// failure was the one Park recorded): BackoffBase doubled per further failure, capped
// at BackoffMax.
func (t *Task) backoff(attempts int) time.Duration {
	d := t.cfg.BackoffBase
	for i := 2; i < attempts && d < t.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, t.cfg.BackoffMax)
}

func (t *Task) nowMs() int64 { return t.cfg.Clock().UnixMilli() }

// Run runs RunOnce(ctx, Shard{}) at once and then every `every` (a run that claimed a
// full batch is followed at once by another) until ctx is done or the task is shut
// down; then it returns nil. A run's error is logged, not returned. It returns an error
// at once for every ≤ 0, and ErrClosed after Shutdown. The caller owns the goroutine
// Run blocks; use Start to let the task own it.
func (t *Task) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("retrytask: Run every %v: must be positive", every)
	}
	if err := t.enter(); err != nil {
		return err
	}
	defer t.active.Done()
	t.loop(ctx, every)
	return nil
}

// Start runs the Run loop (Shard{} every `every`) in a goroutine owned by the task;
// Shutdown stops it. Errors: every ≤ 0, ErrClosed.
func (t *Task) Start(every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("retrytask: Start every %v: must be positive", every)
	}
	if err := t.enter(); err != nil {
		return err
	}
	go func() {
		defer t.active.Done()
		t.loop(context.Background(), every)
	}()
	return nil
}

func (t *Task) loop(ctx context.Context, every time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(t.soft, cancel)
	defer stop()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		st, err := t.RunOnce(ctx, Shard{})
		if errors.Is(err, ErrClosed) {
			return
		}
		if err != nil && ctx.Err() == nil {
			t.log.Warn("retrytask: scheduled run failed", "err", err)
		}
		next := every
		if err == nil && st.Claimed >= t.cfg.BatchSize {
			next = 0 // a full batch: more may be due
		}
		timer.Reset(next)
	}
}

// Shutdown stops the task: RunOnce, Run and Start fail with ErrClosed from now on;
// running runs stop between records (a claimed record is finished first; none claims
// another once Shutdown has been called) and Shutdown waits for them until ctx is done. If ctx ends first, in-flight sends are aborted and
// their records returned to the schedule, Shutdown waits up to 10 s more for that, and
// returns an error wrapping ctx's error. It never closes the Redis client. Idempotent:
// a second call just waits (bounded by its ctx) for the runs to end.
//
// Stop order: refuse new runs → cancel runs between records → wait (ctx) → abort
// in-flight sends → wait for the hand-back.
func (t *Task) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.softCancel()

	done := make(chan struct{})
	go func() { t.active.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	t.hardCancel()
	timer := time.NewTimer(abortWait)
	defer timer.Stop()
	select {
	case <-done:
		return fmt.Errorf("retrytask: runs still active at the shutdown deadline; in-flight sends aborted and their records returned: %w", ctx.Err())
	case <-timer.C:
		return fmt.Errorf("retrytask: runs still active %v after the shutdown deadline (a Send ignoring its context?): %w", abortWait, ctx.Err())
	}
}

// Counts are the sizes of a namespace's structures, for monitoring and tests.
type Counts struct {
	Pending    int64 // pending list (not yet taken in by a run)
	Scheduled  int64 // waiting for their due time (MinAge, backoff, delivery time)
	Ready      int64 // due, waiting for their shard's run
	Processing int64 // claimed by a resender right now
	Dead       int64 // dead list
}

// Total returns all records not dead: Pending + Scheduled + Ready + Processing.
func (c Counts) Total() int64 { return c.Pending + c.Scheduled + c.Ready + c.Processing }

// Counts reads the sizes of the namespace's lists (one pipelined round trip).
func (t *Task) Counts(ctx context.Context) (Counts, error) {
	pipe := t.cfg.Client.Pipeline()
	pending := pipe.LLen(ctx, t.keys.pending)
	sched := pipe.ZCard(ctx, t.keys.schedule)
	proc := pipe.LLen(ctx, t.keys.processing)
	dead := pipe.LLen(ctx, t.keys.dead)
	var ready [Buckets]*redis.IntCmd
	for b := range ready {
		ready[b] = pipe.LLen(ctx, t.keys.ready[b])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Counts{}, fmt.Errorf("retrytask: counts: %w", err)
	}
	c := Counts{Pending: pending.Val(), Scheduled: sched.Val(), Processing: proc.Val(), Dead: dead.Val()}
	for _, r := range ready {
		c.Ready += r.Val()
	}
	return c, nil
}

func toInt(v any) int {
	n, _ := v.(int64)
	return int(n)
}
