package redismw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Park defaults.
const (
	// DefaultParkNamespace is the default ParkConfig.Namespace.
	DefaultParkNamespace = "default"
	// DefaultParkRedisTimeout bounds one park write to Redis: 3 s.
	DefaultParkRedisTimeout = 3 * time.Second
	// DefaultParkSeenTTL is how long a record ID's idempotency key lives: 7 days. A spooled
	// record drained later than that after a push whose answer was lost could be pushed twice.
	DefaultParkSeenTTL = 7 * 24 * time.Hour
)

// DefaultRetriable is the default ParkConfig.Retriable. A send error is permanent (returned
// as is, never parked) when something in its chain is
//
//   - a *message.ValidationError (too large, illegal topic or tag, empty body, ...);
//   - an error with a method Permanent() bool that returns true — producers and adapters
//     implement it to mark errors a resend cannot fix;
//   - an error with a method Retryable() bool that returns false (the producer's
//     *producer.SendError and the broker's *remoting.ResponseError inside it: an answer
//     such as 13 MESSAGE_ILLEGAL);
//   - context.Canceled (the caller gave up on the send and gets its error back).
//
// Everything else is retriable: network errors, timeouts (context.DeadlineExceeded,
// net.Error), broker busy or unavailable, no route, a closed producer.
func DefaultRetriable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ve *message.ValidationError
	if errors.As(err, &ve) {
		return false
	}
	var perm interface{ Permanent() bool }
	if errors.As(err, &perm) && perm.Permanent() {
		return false
	}
	var retry interface{ Retryable() bool }
	if errors.As(err, &retry) && !retry.Retryable() {
		return false
	}
	return true
}

// ParkConfig configures [Park]. Client is required.
type ParkConfig struct {
	// Client is the Redis holding the park lists. Required; never closed by the Parker.
	Client redis.UniversalClient
	// Namespace selects the lists (NewParkKeys(Namespace)). Default "default". It must not
	// contain '{' or '}'.
	Namespace string
	// SpoolPath is the local append-only spool file used when Redis is unreachable (one
	// JSON record per line, fsynced before Send returns). Its directory must exist. Default
	// "": no spool, and a send that cannot be parked returns a *middleware.ParkFailedError. Beside it
	// the Parker keeps SpoolPath+".lock" (one Parker per spool, across processes),
	// SpoolPath+".draining" (a drain in progress) and SpoolPath+".bad" (lines that did not
	// decode).
	SpoolPath string
	// Retriable decides which send errors are parked. Default DefaultRetriable.
	Retriable func(error) bool
	// DelayLevels maps delay level n to DelayLevels[n-1] for the record's DeliverAtMs.
	// Default message.DefaultDelayLevels() (RocketMQ's 18 levels).
	DelayLevels []time.Duration
	// Logger receives warnings (spooled records, bad spool lines). Default slog.Default().
	Logger *slog.Logger
	// Clock returns the current time for the record timestamps. Default time.Now.
	Clock func() time.Time
	// RedisTimeout bounds one park write to Redis, independent of the send's context (a
	// send that failed on its deadline still gets parked). Default 3 s.
	RedisTimeout time.Duration
	// SeenTTL is how long a record ID's idempotency key ("sluice:park:{ns}:seen:<id>")
	// lives; within it a record ID is pushed at most once. Default 7 days.
	SeenTTL time.Duration
	// DrainInterval, when > 0, starts a background goroutine that drains the spool into
	// Redis every interval (and soon after a park succeeds in Redis while the spool holds
	// records). Stopped by Close. Default 0: call DrainSpool yourself.
	DrainInterval time.Duration
}

func (c *ParkConfig) setDefaults() {
	if c.Namespace == "" {
		c.Namespace = DefaultParkNamespace
	}
	if c.Retriable == nil {
		c.Retriable = DefaultRetriable
	}
	if c.DelayLevels == nil {
		c.DelayLevels = message.DefaultDelayLevels()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.RedisTimeout == 0 {
		c.RedisTimeout = DefaultParkRedisTimeout
	}
	if c.SeenTTL == 0 {
		c.SeenTTL = DefaultParkSeenTTL
	}
}

// Validate checks the configuration after defaults.
func (c *ParkConfig) Validate() error {
	if c.Client == nil {
		return &config.Error{Package: "middleware", Field: "Client", Reason: "is nil"}
	}
	if err := validatePrefix("Namespace", c.Namespace); err != nil {
		return err
	}
	if c.RedisTimeout < time.Millisecond {
		return &config.Error{Package: "middleware", Field: "RedisTimeout", Value: c.RedisTimeout, Reason: "must be at least 1ms"}
	}
	if c.SeenTTL < time.Second {
		return &config.Error{Package: "middleware", Field: "SeenTTL", Value: c.SeenTTL, Reason: "must be at least 1s"}
	}
	if c.DrainInterval < 0 {
		return &config.Error{Package: "middleware", Field: "DrainInterval", Value: c.DrainInterval, Reason: "must not be negative"}
	}
	for i, d := range c.DelayLevels {
		if d <= 0 {
			return &config.Error{Package: "middleware", Field: "DelayLevels[" + strconv.Itoa(i) + "]", Value: d, Reason: "must be positive"}
		}
	}
	if c.SpoolPath != "" {
		if st, err := os.Stat(filepath.Dir(c.SpoolPath)); err != nil || !st.IsDir() {
			return &config.Error{Package: "middleware", Field: "SpoolPath", Value: c.SpoolPath, Reason: "directory does not exist"}
		}
	}
	return nil
}

// Parker parks failed sends; see [Park]. Safe for concurrent use. Close it to stop the
// background drain and release the spool.
type Parker struct {
	cfg   ParkConfig
	keys  ParkKeys
	spool *spool // nil without SpoolPath

	drainMu sync.Mutex // one DrainSpool at a time

	kick      chan struct{}   // wakes the background drain
	ctx       context.Context // cancelled by Close: stops a background drain in progress
	cancel    context.CancelFunc
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// NewParker returns a Parker for cfg (defaults applied), or an error naming the bad field.
// With SpoolPath it locks SpoolPath+".lock" (an error if another Parker holds it); with
// DrainInterval it starts the background drain.
func NewParker(cfg ParkConfig) (*Parker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Parker{cfg: cfg, keys: NewParkKeys(cfg.Namespace), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.SpoolPath != "" {
		s, err := openSpool(cfg.SpoolPath)
		if err != nil {
			return nil, err
		}
		p.spool = s
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if cfg.DrainInterval > 0 && p.spool != nil {
		go p.drainLoop()
	} else {
		close(p.done)
	}
	return p, nil
}

// Park returns the send middleware of [NewParker](cfg), with the Parker for DrainSpool and
// Close.
//
// A send that fails with a retriable error (cfg.Retriable; put Park outside the
// producer's own retries, i.e. wrap the producer's SendFunc) is written as a
// [ParkedRecord] (JSON) to the Redis list ParkKeys.Pending (RPUSH) and the caller gets
// (nil, *middleware.ParkedError). Non-retriable errors come back unchanged and nothing is parked.
// Redis failing too → the record is appended to the spool file and fsynced before Send
// returns (*middleware.ParkedError with Spooled set); [Parker.DrainSpool] moves it to Redis later.
// No spool, or the spool failing too → *middleware.ParkFailedError: the caller still learns the
// message was not kept. Nothing handed to Send is dropped silently.
//
// Every push is idempotent by record ID (one Lua script: SET NX the ID's key, then RPUSH),
// so a push whose answer was lost, spooled, and drained later lands once. One round trip
// per parked send; none on a successful send.
func Park(cfg ParkConfig) (middleware.SendMiddleware, *Parker, error) {
	p, err := NewParker(cfg)
	if err != nil {
		return nil, nil, err
	}
	return p.Middleware(), p, nil
}

// Keys returns the Redis keys of the Parker's namespace.
func (p *Parker) Keys() ParkKeys { return p.keys }

// SeenKey returns the idempotency key of record id: "sluice:park:{ns}:seen:<id>".
func (p *Parker) SeenKey(id string) string { return parkSeenKey(p.cfg.Namespace, id) }

func parkSeenKey(ns, id string) string { return "sluice:park:{" + ns + "}:seen:" + id }

// Middleware returns the send middleware; see [Park].
func (p *Parker) Middleware() middleware.SendMiddleware {
	return func(next middleware.SendFunc) middleware.SendFunc {
		return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
			res, err := next(ctx, msg)
			if err == nil || msg == nil || !p.cfg.Retriable(err) {
				return res, err
			}
			return nil, p.Park(ctx, msg, err)
		}
	}
}

// pushOnceScript appends a record to the pending list unless its ID was pushed before.
//
// KEYS[1] the pending list (ParkKeys.Pending)
// KEYS[2] the record's idempotency key (sluice:park:{ns}:seen:<id>)
// ARGV[1] the record JSON
// ARGV[2] the idempotency key's TTL in ms
//
// Returns 1 when pushed, 0 when the ID was already pushed (nothing done).
var pushOnceScript = redis.NewScript(`
if redis.call("SET", KEYS[2], "1", "PX", ARGV[2], "NX") then
  redis.call("RPUSH", KEYS[1], ARGV[1])
  return 1
end
return 0
`)

func (p *Parker) push(ctx context.Context, id string, data []byte) (bool, error) {
	n, err := pushOnceScript.Run(ctx, p.cfg.Client, []string{p.keys.Pending, p.SeenKey(id)}, data, p.cfg.SeenTTL.Milliseconds()).Int64()
	return n == 1, err
}

// Park keeps msg, whose send failed with cause, for a resend, whatever cause is: the
// middleware calls it for retriable errors only. It returns a *middleware.ParkedError when the record
// is in Redis or in the spool, and a *middleware.ParkFailedError when it is in neither. The Redis
// write is bounded by RedisTimeout and ignores ctx's cancellation.
func (p *Parker) Park(ctx context.Context, msg *message.Message, cause error) error {
	rec := NewParkedRecord(msg, cause, p.cfg.Clock(), p.cfg.DelayLevels)
	data, err := json.Marshal(rec)
	if err != nil { // cannot happen for these field types; never drop silently anyway
		middleware.Note(ctx, middleware.ReasonNotParked)
		return &middleware.ParkFailedError{Topic: msg.Topic, Cause: cause, Err: err}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.RedisTimeout)
	_, rerr := p.push(rctx, rec.ID, data)
	cancel()
	if rerr == nil {
		middleware.Note(ctx, middleware.ReasonParked)
		if p.spool != nil && p.spool.pending() {
			select {
			case p.kick <- struct{}{}:
			default:
			}
		}
		return &middleware.ParkedError{RecordID: rec.ID, Topic: rec.Topic, Cause: cause}
	}
	if p.spool == nil {
		middleware.Note(ctx, middleware.ReasonNotParked)
		return &middleware.ParkFailedError{Topic: msg.Topic, Cause: cause, Err: fmt.Errorf("redis: %w (no spool configured)", rerr)}
	}
	if serr := p.spool.append(data); serr != nil {
		middleware.Note(ctx, middleware.ReasonNotParked)
		p.cfg.Logger.ErrorContext(ctx, "park: record neither in redis nor in the spool", "topic", msg.Topic,
			"redisError", rerr, "spoolError", serr, "sendError", cause)
		return &middleware.ParkFailedError{Topic: msg.Topic, Cause: cause, Err: errors.Join(fmt.Errorf("redis: %w", rerr), serr)}
	}
	middleware.Note(ctx, middleware.ReasonSpooled)
	p.cfg.Logger.WarnContext(ctx, "park: redis failed, record spooled locally", "record", rec.ID, "topic", msg.Topic,
		"redisError", rerr)
	return &middleware.ParkedError{RecordID: rec.ID, Topic: rec.Topic, Spooled: true, RedisErr: rerr, Cause: cause}
}

// DrainStats counts what one DrainSpool did.
type DrainStats struct {
	// Moved is the number of records pushed into Redis.
	Moved int
	// Skipped is the number of records whose ID was already pushed (by an interrupted
	// earlier drain, or by a park whose answer was lost).
	Skipped int
	// Bad is the number of spool lines that did not decode; they were appended to
	// SpoolPath+".bad" for inspection (a drain rerun after an interruption may append the
	// same bad line again).
	Bad int
}

// DrainSpool moves the spooled records into Redis (ParkKeys.Pending) and returns what it
// did. It is crash-safe: the spool file is first renamed to SpoolPath+".draining" (new
// parks go to a fresh spool), every record is pushed with the idempotent script, and the
// draining file is deleted only after all its records are in Redis. A drain that stops
// midway (ctx cancelled, Redis failing, a crash) leaves the draining file; the next
// DrainSpool pushes it again from its start, and the records already in Redis are skipped
// by their ID (DrainStats.Skipped). So none is lost and none is pushed twice (within
// SeenTTL). Without a spool it returns zero stats. Calls are serialized.
func (p *Parker) DrainSpool(ctx context.Context) (DrainStats, error) {
	var st DrainStats
	if p.spool == nil {
		return st, nil
	}
	p.drainMu.Lock()
	defer p.drainMu.Unlock()
	for round := 0; round < 2; round++ { // the leftover draining file, then the current spool
		f, err := p.spool.takeDraining()
		if err != nil || f == nil {
			return st, err
		}
		err = p.spool.drainFile(ctx, f, &st, func(ctx context.Context, id string, line []byte) (bool, error) {
			rctx, cancel := context.WithTimeout(ctx, p.cfg.RedisTimeout)
			defer cancel()
			return p.push(rctx, id, line)
		}, p.cfg.Logger)
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// SpoolPending reports whether the spool (or an unfinished drain) holds records.
func (p *Parker) SpoolPending() bool { return p.spool != nil && p.spool.pending() }

func (p *Parker) drainLoop() {
	defer close(p.done)
	t := time.NewTicker(p.cfg.DrainInterval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		case <-p.kick:
		}
		if !p.spool.pending() {
			continue
		}
		st, err := p.DrainSpool(p.ctx)
		if err != nil && p.ctx.Err() == nil {
			p.cfg.Logger.Warn("park: background spool drain stopped early", "moved", st.Moved, "skipped", st.Skipped, "error", err)
		} else if st.Moved+st.Skipped+st.Bad > 0 {
			p.cfg.Logger.Info("park: spool drained into redis", "moved", st.Moved, "skipped", st.Skipped, "bad", st.Bad)
		}
	}
}

// Close stops the background drain (cancelling a drain in progress, which the next
// DrainSpool resumes), closes the spool file and releases its lock. Later sends that need
// the spool get a *middleware.ParkFailedError. Close is idempotent.
func (p *Parker) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		close(p.stop)
		<-p.done
		if p.spool != nil {
			p.closeErr = p.spool.close()
		}
	})
	return p.closeErr
}
