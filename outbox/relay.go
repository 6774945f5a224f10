package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Relay defaults (see RelayConfig).
const (
	DefaultBatchSize     = 200
	DefaultMaxBatchBytes = 16 << 20
	DefaultConcurrency   = 16
	DefaultLease         = 30 * time.Second
	DefaultPollInterval  = 500 * time.Millisecond
	DefaultMaxAttempts   = 16
	DefaultBackoffBase   = time.Second
	DefaultBackoffMax    = 5 * time.Minute
	DefaultSendTimeout   = 10 * time.Second
	DefaultCleanInterval = time.Minute
	DefaultKeyRetention  = time.Hour
	// MaxBatchSize is the largest RelayConfig.BatchSize.
	MaxBatchSize = 10_000
)

// Errors of a relay's lifecycle.
var (
	ErrRelayStarted = errors.New("outbox: relay already started")
	ErrRelayClosed  = errors.New("outbox: relay shut down")
)

// RelayConfig configures a [Relay]. Send or SendBatch is required.
type RelayConfig struct {
	// Send sends one message: producer.SendFunc(), kafka's Producer.SendFunc(), or either
	// wrapped in a middleware chain. A nil error means the broker stored the message.
	// Required unless SendBatch is set.
	Send middleware.SendFunc
	// SendBatch, when set, is used instead of Send: the relay hands it many rows of a
	// claim in one call (see [BatchSendFunc]) instead of one call per row — Sluice's
	// producer.SendEach (SEND_BATCH requests per queue), or [AsyncBatch] over a
	// SendAsync (kafka's Producer.SendAsync, whose writer packs the records into produce
	// batches). Each call is bounded by SendTimeout and the lease.
	SendBatch BatchSendFunc
	// BatchSize is the most rows one claim takes. Default 200; 1..MaxBatchSize.
	BatchSize int
	// MaxBatchBytes bounds the bodies and properties one claim holds in memory (a claim
	// takes at least one row). Default 16 MiB.
	MaxBatchBytes int
	// Concurrency is how many sends of one batch run at once (rows of one order key are
	// always sent one after another, in id order). Default 16. Not used with SendBatch
	// (the BatchSendFunc decides how many requests it makes at once).
	Concurrency int
	// Lease is how long a claim is this relay's: another relay claims the rows after it
	// expires. The relay sends no row whose lease has less than Lease/4 left (by its own
	// clock) and bounds each send by the lease, so keep it well above SendTimeout.
	// Default 30 s; at least 100 ms. Relays' clocks must agree to well within Lease/4.
	Lease time.Duration
	// PollInterval is the pause after a claim found nothing due. Default 500 ms.
	PollInterval time.Duration
	// Wake, when set, makes an idle relay claim at once when it receives (for example
	// outboxpg.Listener.C(), fed by PostgreSQL LISTEN); polling continues as a fallback.
	Wake <-chan struct{}
	// MaxAttempts: a row whose send failed this many times becomes dead (StateDead),
	// listed by Outbox.Dead and re-driven by Outbox.Redrive; never deleted by the relay.
	// An error with a Permanent() bool method returning true makes it dead at once.
	// Default 16.
	MaxAttempts int
	// BackoffBase and BackoffMax: after its n-th failed send a row waits
	// min(BackoffMax, BackoffBase·2^(n-1)), with ±20 % jitter. Defaults 1 s and 5 min.
	BackoffBase, BackoffMax time.Duration
	// SendTimeout bounds one send. Default 10 s.
	SendTimeout time.Duration
	// Retention: 0 (default) deletes a row once sent; > 0 keeps it (StateSent) and deletes
	// it after Retention, in the relay's periodic clean-up.
	Retention time.Duration
	// CleanInterval is the pause between clean-ups (sent rows past Retention, key-lock
	// rows unused for KeyRetention). Default 1 min.
	CleanInterval time.Duration
	// KeyRetention: a key-lock row (<table>_keys) unused this long is deleted. Default 1 h.
	KeyRetention time.Duration
	// Now returns the current time. Default time.Now.
	Now func() time.Time
	// Logger receives a warning per failed claim or bookkeeping statement. Default
	// slog.Default().
	Logger *slog.Logger
}

func (c *RelayConfig) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.CleanInterval == 0 {
		c.CleanInterval = DefaultCleanInterval
	}
	if c.KeyRetention == 0 {
		c.KeyRetention = DefaultKeyRetention
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration after defaults.
func (c *RelayConfig) Validate() error {
	switch {
	case c.Send == nil && c.SendBatch == nil:
		return &config.Error{Package: "outbox", Field: "Send", Reason: "nil (set Send or SendBatch)"}
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return &config.Error{Package: "outbox", Field: "BatchSize", Reason: fmt.Sprintf("%d: want 1..%d", c.BatchSize, MaxBatchSize)}
	case c.MaxBatchBytes < 1:
		return &config.Error{Package: "outbox", Field: "MaxBatchBytes", Reason: fmt.Sprintf("%d: must be positive", c.MaxBatchBytes)}
	case c.Concurrency < 1 || c.Concurrency > 1024:
		return &config.Error{Package: "outbox", Field: "Concurrency", Reason: fmt.Sprintf("%d: want 1..1024", c.Concurrency)}
	case c.Lease < 100*time.Millisecond:
		return &config.Error{Package: "outbox", Field: "Lease", Reason: fmt.Sprintf("%v: at least 100ms", c.Lease)}
	case c.PollInterval < time.Millisecond:
		return &config.Error{Package: "outbox", Field: "PollInterval", Reason: fmt.Sprintf("%v: at least 1ms", c.PollInterval)}
	case c.MaxAttempts < 1:
		return &config.Error{Package: "outbox", Field: "MaxAttempts", Reason: fmt.Sprintf("%d: at least 1", c.MaxAttempts)}
	case c.BackoffBase < time.Millisecond || c.BackoffMax < c.BackoffBase:
		return &config.Error{Package: "outbox", Field: "BackoffBase", Reason: fmt.Sprintf("%v..%v: want 1ms ≤ BackoffBase ≤ BackoffMax", c.BackoffBase, c.BackoffMax)}
	case c.SendTimeout < time.Millisecond:
		return &config.Error{Package: "outbox", Field: "SendTimeout", Reason: fmt.Sprintf("%v: at least 1ms", c.SendTimeout)}
	case c.Retention < 0:
		return &config.Error{Package: "outbox", Field: "Retention", Reason: fmt.Sprintf("%v: must not be negative", c.Retention)}
	case c.CleanInterval < time.Millisecond || c.KeyRetention < time.Millisecond:
		return &config.Error{Package: "outbox", Field: "CleanInterval", Reason: "CleanInterval and KeyRetention must be at least 1ms"}
	}
	return nil
}

// Counters are a relay's totals since it was made.
type Counters struct {
	Claimed  uint64 // rows claimed
	Sent     uint64 // rows sent and recorded as sent
	Failed   uint64 // failed send attempts
	Dead     uint64 // rows this relay made dead
	Released uint64 // claimed rows given back unsent (an earlier row of their key failed, the lease ran short, shutdown)
	Fenced   uint64 // rows whose lease had passed to another relay when this one recorded the outcome
}

// Relay sends committed outbox rows (see the package doc). Run it with Start and stop it
// with Shutdown, or drive it with RunOnce. Several relays (in one process or many) may
// share one table.
type Relay struct {
	ob  *Outbox
	cfg RelayConfig

	claimed, sent, failed, dead, released, fenced atomic.Uint64

	mu        sync.Mutex
	started   bool
	closed    bool
	stop      chan struct{} // closed by Shutdown
	done      chan struct{} // closed when the loop returned
	abort     context.CancelFunc
	lastClean time.Time
}

// NewRelay returns a relay for ob's table, or a *config.Error naming the bad field.
func NewRelay(ob *Outbox, cfg RelayConfig) (*Relay, error) {
	if ob == nil {
		return nil, &config.Error{Package: "outbox", Field: "Outbox", Reason: "nil"}
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{ob: ob, cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// Counters returns the relay's totals.
func (r *Relay) Counters() Counters {
	return Counters{Claimed: r.claimed.Load(), Sent: r.sent.Load(), Failed: r.failed.Load(), Dead: r.dead.Load(),
		Released: r.released.Load(), Fenced: r.fenced.Load()}
}

// Start starts the relay's loop in a goroutine that Shutdown stops. ctx bounds nothing
// after Start returns (the loop runs until Shutdown).
func (r *Relay) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return ErrRelayClosed
	case r.started:
		return ErrRelayStarted
	}
	r.started = true
	loopCtx, cancel := context.WithCancel(context.Background())
	r.abort = cancel
	go r.loop(loopCtx)
	return nil
}

// Shutdown stops the relay: no new claim is made; the batch in flight finishes its sends
// while ctx allows; when ctx ends first, its sends are cancelled and its unsent rows
// released (their leases cleared, so another relay takes them at once). It returns when
// the loop has returned, or ctx's error if that takes longer than ctx allows after the
// cancellation. Shutdown is idempotent; Start after it fails with ErrRelayClosed.
func (r *Relay) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.stop)
	}
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
	}
	r.abort() // cancel the sends in flight; their rows are released
	select {
	case <-r.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("outbox: relay shutdown: %w", ctx.Err())
	}
}

func (r *Relay) stopping() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

func (r *Relay) loop(ctx context.Context) {
	defer close(r.done)
	defer r.abort()
	idle := time.NewTimer(0)
	defer idle.Stop()
	<-idle.C
	failures := 0
	wake := r.cfg.Wake
	for !r.stopping() {
		r.maybeClean(ctx)
		n, err := r.RunOnce(ctx)
		wait := time.Duration(0)
		switch {
		case err != nil:
			failures++
			wait = min(r.cfg.PollInterval*time.Duration(1<<min(failures, 6)), 30*time.Second)
			if !r.stopping() {
				r.cfg.Logger.Warn("outbox: relay claim failed", "table", r.ob.cfg.Table, "error", err, "retry_in", wait)
			}
		case n == 0:
			failures = 0
			wait = r.cfg.PollInterval
		default:
			failures = 0
		}
		if wait == 0 {
			continue
		}
		idle.Reset(wait)
		select {
		case <-r.stop:
		case <-idle.C:
		case _, ok := <-wake:
			if !ok {
				wake = nil // a closed Wake channel: poll from now on
			}
		}
		if !idle.Stop() {
			select {
			case <-idle.C:
			default:
			}
		}
	}
}

// maybeClean deletes sent rows past Retention and unused key-lock rows, at most once per
// CleanInterval, at most 10 statements of 1000 rows each time.
func (r *Relay) maybeClean(ctx context.Context) {
	now := r.cfg.Now()
	if now.Sub(r.lastClean) < r.cfg.CleanInterval {
		return
	}
	r.lastClean = now
	if _, err := r.Clean(ctx); err != nil && ctx.Err() == nil {
		r.cfg.Logger.Warn("outbox: clean-up failed", "table", r.ob.cfg.Table, "error", err)
	}
}

// Clean deletes sent rows older than Retention (when Retention > 0) and key-lock rows
// unused for KeyRetention, at most 10,000 of each, and returns how many rows it deleted.
func (r *Relay) Clean(ctx context.Context) (int64, error) {
	now := r.cfg.Now()
	var total int64
	run := func(q string, cutoff int64) error {
		for i := 0; i < 10; i++ {
			res, err := r.ob.cfg.DB.ExecContext(ctx, q, cutoff, 1000)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			total += n
			if n < 1000 {
				return nil
			}
		}
		return nil
	}
	if r.cfg.Retention > 0 {
		if err := run(r.ob.q.cleanSent, now.Add(-r.cfg.Retention).UnixMilli()); err != nil {
			return total, fmt.Errorf("outbox: delete sent rows of %s: %w", r.ob.cfg.Table, err)
		}
	}
	if err := run(r.ob.q.cleanKeys, now.Add(-r.cfg.KeyRetention).UnixMilli()); err != nil {
		return total, fmt.Errorf("outbox: delete key rows of %s_keys: %w", r.ob.cfg.Table, err)
	}
	return total, nil
}

// claimedRow is a row a claim took.
type claimedRow struct {
	id       int64
	topic    string
	orderKey string
	flag     int32
	props    []byte
	body     []byte
	attempts int
}

type cand struct {
	id   int64
	key  string
	size int64
}

// newToken returns a random non-zero lease token.
func newToken() int64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		t := int64(binary.LittleEndian.Uint64(b[:]) & math.MaxInt64)
		if t != 0 {
			return t
		}
	}
}

// claim takes up to BatchSize due rows under a new lease token (see the package doc for
// the order rule) and returns them with the token and the local deadline of the lease.
func (r *Relay) claim(ctx context.Context) ([]claimedRow, int64, time.Time, error) {
	db, q := r.ob.cfg.DB, r.ob.q
	began := time.Now() // monotonic: the lease's local deadline counts from before the claim
	now := r.cfg.Now().UnixMilli()
	var opts *sql.TxOptions
	if q.d == MySQL {
		// Each statement reads the newest committed rows (see heads below).
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("outbox: claim: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if q.d == Postgres {
		// Walk the pending rows in id order and stop at the batch. Right after a burst (an
		// outage's backlog) the table's statistics still say "a few rows", and the planner
		// would rather collect every pending row, check each and sort them: a claim would
		// cost the whole backlog. Scoped to this transaction.
		if _, err := tx.ExecContext(ctx, `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)`); err != nil {
			return nil, 0, time.Time{}, fmt.Errorf("outbox: claim: planner settings: %w", err)
		}
	}

	rows, err := tx.QueryContext(ctx, q.candidates, now, now, now, now, r.cfg.BatchSize)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("outbox: claim: select %s: %w", r.ob.cfg.Table, err)
	}
	var cands []cand
	var bytes int64
	for rows.Next() {
		var c cand
		if err := rows.Scan(&c.id, &c.key, &c.size); err != nil {
			rows.Close()
			return nil, 0, time.Time{}, fmt.Errorf("outbox: claim: %w", err)
		}
		if len(cands) > 0 && bytes+c.size > int64(r.cfg.MaxBatchBytes) {
			break
		}
		bytes += c.size
		cands = append(cands, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("outbox: claim: %w", err)
	}
	if len(cands) == 0 {
		return nil, 0, time.Time{}, nil
	}

	// heads: the authoritative per-key rule, read by a statement that starts after the
	// candidates were locked, so it sees every row committed before them. (In MySQL the
	// candidates' NOT EXISTS may read an older snapshot than their locking read; in every
	// dialect rows a concurrent claim locked were skipped.) A keyed candidate is kept only
	// when every unsent row of its key with a lower id is a kept candidate too.
	ok, err := r.heads(ctx, tx, cands)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	ids := make([]any, 0, len(cands)+2)
	token := newToken()
	ids = append(ids, token, now+r.cfg.Lease.Milliseconds())
	for _, c := range cands {
		if ok[c.id] {
			ids = append(ids, c.id)
		}
	}
	n := len(ids) - 2
	if n == 0 {
		return nil, 0, time.Time{}, nil
	}
	if _, err := tx.ExecContext(ctx, q.in(q.claimUpdate, n, ""), ids...); err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("outbox: claim: lease %d rows: %w", n, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("outbox: claim: commit: %w", err)
	}
	r.claimed.Add(uint64(n))
	deadline := began.Add(r.cfg.Lease - r.cfg.Lease/4)

	got, err := r.fetch(ctx, token, ids[2:])
	if err != nil {
		// The rows stay leased until the lease expires; another claim takes them then.
		return nil, 0, time.Time{}, err
	}
	return got, token, deadline, nil
}

// heads returns the candidates that may be sent now.
func (r *Relay) heads(ctx context.Context, tx *sql.Tx, cands []cand) (map[int64]bool, error) {
	q := r.ob.q
	ok := make(map[int64]bool, len(cands))
	var keys []string
	maxID := int64(0)
	for _, c := range cands {
		if c.key == "" {
			ok[c.id] = true
			continue
		}
		keys = append(keys, c.key)
		maxID = max(maxID, c.id)
	}
	if len(keys) == 0 {
		return ok, nil
	}
	keys = sortedUniq(keys)
	isCand := make(map[int64]bool, len(cands))
	for _, c := range cands {
		isCand[c.id] = true
	}
	limit := 4*len(cands) + 100
	args := make([]any, 0, len(keys)+2)
	args = append(args, maxID)
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, limit)
	rows, err := tx.QueryContext(ctx, q.in(q.heads, len(keys), " ORDER BY order_key, id LIMIT ?"), args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: heads of %d keys: %w", len(keys), err)
	}
	defer rows.Close()
	type kid struct {
		key string
		id  int64
	}
	var list []kid
	for rows.Next() {
		var x kid
		if err := rows.Scan(&x.key, &x.id); err != nil {
			return nil, fmt.Errorf("outbox: claim: heads: %w", err)
		}
		list = append(list, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: claim: heads: %w", err)
	}
	// With the limit reached, the last key listed may be incomplete: leave it for later.
	lastComplete := ""
	truncated := len(list) >= limit
	if truncated {
		lastComplete = list[len(list)-1].key
	}
	blocked := ""
	haveBlocked := false
	for _, x := range list {
		if truncated && x.key >= lastComplete {
			break
		}
		if haveBlocked && x.key == blocked {
			continue
		}
		if isCand[x.id] {
			ok[x.id] = true
			continue
		}
		blocked, haveBlocked = x.key, true // an unsent row of this key that is not ours: the rest waits
	}
	return ok, nil
}

// fetch reads the rows ids (claimed under token), in id order.
func (r *Relay) fetch(ctx context.Context, token int64, ids []any) ([]claimedRow, error) {
	q := r.ob.q
	rows, err := r.ob.cfg.DB.QueryContext(ctx, q.in(q.fetch, len(ids), " ORDER BY id"), append([]any{token}, ids...)...)
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: read %d rows: %w", len(ids), err)
	}
	defer rows.Close()
	out := make([]claimedRow, 0, len(ids))
	for rows.Next() {
		var c claimedRow
		if err := rows.Scan(&c.id, &c.topic, &c.orderKey, &c.flag, &c.props, &c.body, &c.attempts); err != nil {
			return nil, fmt.Errorf("outbox: claim: read rows: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: claim: read rows: %w", err)
	}
	return out, nil
}

// outcome of one claimed row.
type outcome struct {
	row  *claimedRow
	sent bool
	err  error // the send error when not sent; nil and !sent: released unsent
}

// RunOnce claims one batch, sends it and records the outcomes; it returns how many rows
// it claimed (0 when none was due). Start runs it in a loop; tests and tools may call it
// directly. Claims are coordinated in the database, so calls may run concurrently with
// each other and with other relays.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	batch, token, deadline, err := r.claim(ctx)
	if err != nil || len(batch) == 0 {
		return 0, err
	}
	var outs []outcome
	if r.cfg.SendBatch != nil {
		outs = r.sendRounds(ctx, batch, deadline)
	} else {
		outs = r.sendBatch(ctx, batch, deadline)
	}
	// Bookkeeping must not be cut short by a cancelled ctx (shutdown): the sends happened.
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease)
	defer cancel()
	if err := r.record(bctx, token, outs); err != nil {
		return len(batch), err
	}
	return len(batch), nil
}

// sendBatch sends the rows: rows of one order key in id order one after another, other
// keys and unkeyed rows concurrently (Concurrency at once). A failure stops its key's
// later rows (released, not attempted).
func (r *Relay) sendBatch(ctx context.Context, batch []claimedRow, deadline time.Time) []outcome {
	outs, groups := keyGroups(batch)
	work := make(chan []int)
	var wg sync.WaitGroup
	for w := 0; w < min(r.cfg.Concurrency, len(groups)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range work {
				stopped := false
				for _, i := range g {
					if stopped || ctx.Err() != nil || time.Until(deadline) <= 0 {
						stopped = true
						continue // released
					}
					outs[i].err = r.sendOne(ctx, &batch[i], deadline)
					outs[i].sent = outs[i].err == nil
					if !outs[i].sent {
						stopped = true
					}
				}
			}
		}()
	}
	for _, g := range groups {
		work <- g
	}
	close(work)
	wg.Wait()
	return outs
}

// keyGroups returns an outcome per row (none decided yet) and the rows grouped by order
// key: indexes into batch, in id order; an unkeyed row is a group of its own. Groups are
// in the order of their first row.
func keyGroups(batch []claimedRow) ([]outcome, [][]int) {
	outs := make([]outcome, len(batch))
	var groups [][]int
	byKey := map[string]int{}
	for i := range batch {
		outs[i].row = &batch[i]
		k := batch[i].orderKey
		if k == "" {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := byKey[k]
		if !ok {
			g = len(groups)
			byKey[k] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return outs, groups
}

// sendRounds sends the rows through SendBatch in rounds: each round hands it the first
// unsent row of every order key still going (and, in the first round, every unkeyed
// row), so one call never holds two rows of one key and a key's next row is handed over
// only after the broker stored the previous one. A failure stops its key's later rows
// (released, not attempted); the lease running short or ctx ending releases every row
// not handed over yet.
func (r *Relay) sendRounds(ctx context.Context, batch []claimedRow, deadline time.Time) []outcome {
	outs, groups := keyGroups(batch)
	pos := make([]int, len(groups)) // the next row of each group
	active := make([]int, len(groups))
	for g := range active {
		active[g] = g
	}
	heads := make([]int, 0, len(groups))
	msgs := make([]*message.Message, 0, len(groups))
	for len(active) > 0 && ctx.Err() == nil && time.Until(deadline) > 0 {
		heads, msgs = heads[:0], msgs[:0]
		for _, g := range active {
			i := groups[g][pos[g]]
			heads = append(heads, i)
			msgs = append(msgs, rowMessage(&batch[i]))
		}
		errs := r.sendMany(ctx, msgs, deadline)
		next := active[:0]
		for j, g := range active {
			i := heads[j]
			outs[i].err = errs[j]
			outs[i].sent = errs[j] == nil
			if outs[i].sent {
				pos[g]++
				if pos[g] < len(groups[g]) {
					next = append(next, g)
				}
			}
		}
		active = next
	}
	return outs
}

// sendMany runs SendBatch on msgs, bounded by the lease and SendTimeout; a panic, or a
// result of the wrong length, fails every message.
func (r *Relay) sendMany(ctx context.Context, msgs []*message.Message, deadline time.Time) (errs []error) {
	sctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sctx, cancel2 := context.WithTimeout(sctx, r.cfg.SendTimeout)
	defer cancel2()
	all := func(err error) []error {
		errs := make([]error, len(msgs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	defer func() {
		if p := recover(); p != nil {
			errs = all(fmt.Errorf("outbox: send batch panicked: %v", p))
		}
	}()
	errs = r.cfg.SendBatch(sctx, msgs)
	if len(errs) != len(msgs) {
		return all(fmt.Errorf("outbox: SendBatch returned %d results for %d messages", len(errs), len(msgs)))
	}
	return errs
}

// rowMessage returns the message a row holds.
func rowMessage(c *claimedRow) *message.Message {
	return &message.Message{Topic: c.topic, Flag: c.flag, Body: c.body, Properties: message.UnmarshalProperties(string(c.props))}
}

func (r *Relay) sendOne(ctx context.Context, c *claimedRow, deadline time.Time) error {
	sctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sctx, cancel2 := context.WithTimeout(sctx, r.cfg.SendTimeout)
	defer cancel2()
	_, err := callSend(sctx, r.cfg.Send, rowMessage(c))
	return err
}

// callSend runs send and turns a panic into an error.
func callSend(ctx context.Context, send middleware.SendFunc, m *message.Message) (res *message.SendResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("outbox: send panicked: %v", p)
		}
	}()
	return send(ctx, m)
}

// record writes the outcomes under the lease token: sent rows deleted (or marked sent),
// failed rows' attempts counted (dead at MaxAttempts), the others released. Rows whose
// token changed (another relay claimed them after this lease expired) are left alone and
// counted as fenced.
func (r *Relay) record(ctx context.Context, token int64, outs []outcome) error {
	db, q := r.ob.cfg.DB, r.ob.q
	now := r.cfg.Now()
	var sentIDs, releaseIDs []any
	var errs []error
	for _, o := range outs {
		switch {
		case o.sent:
			sentIDs = append(sentIDs, o.row.id)
		case o.err == nil:
			releaseIDs = append(releaseIDs, o.row.id)
		default:
			r.failed.Add(1)
			attempts := o.row.attempts + 1
			state := StatePending
			var pe interface{ Permanent() bool }
			if attempts >= r.cfg.MaxAttempts || (errors.As(o.err, &pe) && pe.Permanent()) {
				state = StateDead
			}
			next := now.Add(r.backoff(attempts)).UnixMilli()
			res, err := db.ExecContext(ctx, q.fail, attempts, next, errorText(o.err), state, o.row.id, token)
			if err != nil {
				errs = append(errs, fmt.Errorf("outbox: record failed send of row %d: %w", o.row.id, err))
				continue
			}
			if n, _ := res.RowsAffected(); n == 0 {
				r.fenced.Add(1)
			} else if state == StateDead {
				r.dead.Add(1)
				r.cfg.Logger.Warn("outbox: row is dead", "table", r.ob.cfg.Table, "id", o.row.id, "topic", o.row.topic,
					"attempts", attempts, "error", o.err)
			}
		}
	}
	for start := 0; start < len(sentIDs); start += maxInsertRows {
		ids := sentIDs[start:min(start+maxInsertRows, len(sentIDs))]
		var res sql.Result
		var err error
		if r.cfg.Retention > 0 {
			res, err = db.ExecContext(ctx, q.in(q.markSent, len(ids), ""), append([]any{now.UnixMilli(), token}, ids...)...)
		} else {
			res, err = db.ExecContext(ctx, q.in(q.deleteSent, len(ids), ""), append([]any{token}, ids...)...)
		}
		if err != nil {
			// The rows were sent but stay leased: after the lease another claim sends them
			// again (same stable key; the inbox absorbs the copy).
			errs = append(errs, fmt.Errorf("outbox: record %d sent rows: %w", len(ids), err))
			continue
		}
		n, _ := res.RowsAffected()
		r.sent.Add(uint64(n))
		r.fenced.Add(uint64(int64(len(ids)) - n))
	}
	if len(releaseIDs) > 0 {
		res, err := db.ExecContext(ctx, q.in(q.release, len(releaseIDs), ""), append([]any{token}, releaseIDs...)...)
		if err != nil {
			errs = append(errs, fmt.Errorf("outbox: release %d rows: %w", len(releaseIDs), err))
		} else {
			n, _ := res.RowsAffected()
			r.released.Add(uint64(n))
			r.fenced.Add(uint64(int64(len(releaseIDs)) - n))
		}
	}
	return errors.Join(errs...)
}

// backoff returns the wait after the n-th failed attempt.
func (r *Relay) backoff(n int) time.Duration {
	d := r.cfg.BackoffBase << min(n-1, 30)
	if d <= 0 || d > r.cfg.BackoffMax {
		d = r.cfg.BackoffMax
	}
	jitter := 0.8 + 0.4*mrand.Float64()
	return time.Duration(float64(d) * jitter)
}

// errorText returns err's text fit for last_error: valid UTF-8 without NUL, at most
// MaxErrorLen bytes.
func errorText(err error) string {
	s := strings.ToValidUTF8(err.Error(), "?")
	s = strings.ReplaceAll(s, "\x00", "?")
	if len(s) > MaxErrorLen {
		cut := MaxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}
