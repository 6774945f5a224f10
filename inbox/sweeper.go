package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sluicemq/sluice/config"
)

// Sweeper defaults.
const (
	// DefaultRetention is how long an inbox row is kept: 72 h, the broker's default
	// retention (fileReservedTime), so any redelivery of retained data (consume retries
	// span about 4 h 46 min; offset resets and replays reach back to the oldest stored
	// message) still finds the row. A copy arriving after its row was swept runs again.
	DefaultRetention = 72 * time.Hour
	// DefaultSweepInterval is the pause between sweeps: 1 min.
	DefaultSweepInterval = time.Minute
	// DefaultSweepBatch is the most rows one DELETE removes: 1000, so no statement holds
	// many row locks or a long transaction.
	DefaultSweepBatch = 1000
	// DefaultSweepMaxBatches is the most DELETEs one sweep runs: 100 (so at most 100,000
	// rows per sweep by default); the rest waits for the next sweep.
	DefaultSweepMaxBatches = 100
	// MaxSweepBatch is the largest SweeperConfig.BatchSize.
	MaxSweepBatch = 100_000
)

// ErrSweeperClosed: Start after Shutdown.
var ErrSweeperClosed = errors.New("inbox: sweeper shut down")

// SweeperConfig configures a [Sweeper]. DB and Dialect are required.
type SweeperConfig struct {
	// DB is the database holding the inbox table. Required; never closed by the sweeper.
	DB *sql.DB
	// Dialect is DB's SQL dialect. Required.
	Dialect Dialect
	// Table is the inbox table. Default DefaultTable. Rows of every consumer group are swept.
	Table string
	// Retention: rows whose processed_at is older than now − Retention are deleted.
	// Default DefaultRetention (72 h); at least 1 ms. Keep it longer than any redelivery
	// can come (broker retention, consume retries, DLQ re-drives you may run).
	Retention time.Duration
	// Interval is the pause between sweeps after Start. Default DefaultSweepInterval (1 min);
	// at least 1 ms.
	Interval time.Duration
	// BatchSize is the most rows one DELETE statement removes. Default DefaultSweepBatch
	// (1000); 1..MaxSweepBatch.
	BatchSize int
	// MaxBatches is the most DELETE statements of one sweep. Default DefaultSweepMaxBatches
	// (100); at least 1.
	MaxBatches int
	// Now returns the current time. Default time.Now.
	Now func() time.Time
	// Logger receives a warning per failed sweep. Default slog.Default().
	Logger *slog.Logger
}

func (c *SweeperConfig) setDefaults() {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Interval == 0 {
		c.Interval = DefaultSweepInterval
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultSweepBatch
	}
	if c.MaxBatches == 0 {
		c.MaxBatches = DefaultSweepMaxBatches
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration after defaults.
func (c *SweeperConfig) Validate() error {
	switch {
	case c.DB == nil:
		return &config.Error{Package: "inbox", Field: "DB", Reason: "nil"}
	case !c.Dialect.Valid():
		return &config.Error{Package: "inbox", Field: "Dialect", Reason: fmt.Sprintf("%v is not Postgres, MySQL or SQLite", c.Dialect)}
	case c.Retention < time.Millisecond:
		return &config.Error{Package: "inbox", Field: "Retention", Reason: fmt.Sprintf("%v: at least 1ms", c.Retention)}
	case c.Interval < time.Millisecond:
		return &config.Error{Package: "inbox", Field: "Interval", Reason: fmt.Sprintf("%v: at least 1ms", c.Interval)}
	case c.BatchSize < 1 || c.BatchSize > MaxSweepBatch:
		return &config.Error{Package: "inbox", Field: "BatchSize", Reason: fmt.Sprintf("%d: want 1..%d", c.BatchSize, MaxSweepBatch)}
	case c.MaxBatches < 1:
		return &config.Error{Package: "inbox", Field: "MaxBatches", Reason: fmt.Sprintf("%d: at least 1", c.MaxBatches)}
	}
	return validateTable(c.Table)
}

// Sweeper deletes inbox rows older than the retention, in bounded batches: every Interval
// after [Sweeper.Start], or when [Sweeper.SweepOnce] is called. Stop order: Shutdown
// cancels the running sweep (its current DELETE is cancelled through the context) and
// waits for the goroutine.
type Sweeper struct {
	cfg SweeperConfig
	del string

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewSweeper returns a Sweeper for cfg (defaults applied) or a *config.Error.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sweeper{cfg: cfg, del: sweepSQL(cfg.Dialect, cfg.Table)}, nil
}

// SweepOnce deletes rows older than now − Retention: DELETE statements of at most
// BatchSize rows each (each its own implicit transaction), until one deletes fewer than
// BatchSize or MaxBatches ran. It returns the rows deleted and the first error.
func (s *Sweeper) SweepOnce(ctx context.Context) (int64, error) {
	cutoff := s.cfg.Now().Add(-s.cfg.Retention).UnixMilli()
	var total int64
	for i := 0; i < s.cfg.MaxBatches; i++ {
		res, err := s.cfg.DB.ExecContext(ctx, s.del, cutoff, s.cfg.BatchSize)
		if err != nil {
			return total, fmt.Errorf("inbox: sweep %s: %w", s.cfg.Table, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: sweep %s: %w", s.cfg.Table, err)
		}
		total += n
		if n < int64(s.cfg.BatchSize) {
			break
		}
	}
	return total, nil
}

// Start starts sweeping in the background: one sweep at once, then one every Interval.
// Calling it again while running does nothing; after Shutdown it returns ErrSweeperClosed.
func (s *Sweeper) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSweeperClosed
	}
	if s.started {
		return nil
	}
	s.started = true
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done = make(chan struct{})
	go s.loop(ctx)
	return nil
}

func (s *Sweeper) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.SweepOnce(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("inbox: sweep failed", "table", s.cfg.Table, "deleted", n, "error", err)
		}
		t.Reset(s.cfg.Interval)
	}
}

// Shutdown stops the background sweeps: the sweep under way is cancelled, and Shutdown
// waits for the goroutine to end or ctx to be done (then it returns ctx's error; the
// goroutine still ends as soon as its cancelled statement returns). It is safe to call more
// than once and without Start.
func (s *Sweeper) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
