package retrytask

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Defaults of Config.
const (
	DefaultNamespace        = "default"
	DefaultMinAge           = time.Minute
	DefaultMaxAttempts      = 16
	DefaultBackoffBase      = 30 * time.Second
	DefaultBackoffMax       = 30 * time.Minute
	DefaultLease            = 5 * time.Minute
	DefaultSendTimeout      = 30 * time.Second
	DefaultBatchSize        = 256
	DefaultDeliverTolerance = 500 * time.Millisecond
)

// Config configures a Task. Client and Send are required; every other field has a
// default, documented on the field.
type Config struct {
	// Client is the Redis holding the parked records (the same one redismw.Park
	// writes to). The task never closes it. Required.
	Client redis.UniversalClient
	// Namespace selects the keys "sluice:park:{Namespace}:…" (redismw.NewParkKeys);
	// it must match the one Park writes to and must not contain '{' or '}'.
	// Default: "default".
	Namespace string
	// Send is the raw send used for resending: the producer's send WITHOUT the Park
	// middleware (a failed resend is rescheduled by the task, not parked again).
	// Required.
	Send middleware.SendFunc
	// MinAge is how long after ParkedAtMs a record is first resent. Default: 1 min.
	// A negative value means no minimum.
	MinAge time.Duration
	// MaxAttempts is the number of failed sends (the one Park recorded included) after
	// which a record moves to the dead list. Default: 16 (so 15 resends at most).
	MaxAttempts int
	// BackoffBase is the wait after the first failed resend; it doubles with every
	// further failure (no jitter) up to BackoffMax. Default: 30s.
	BackoffBase time.Duration
	// BackoffMax caps the wait between resends. Default: 30 min.
	BackoffMax time.Duration
	// Lease is how long a claimed record may stay in the processing list before another
	// run reclaims it (its resender is presumed dead). Must be at least 2×SendTimeout.
	// Default: 5 min.
	Lease time.Duration
	// SendTimeout bounds one resend (the Send call). Default: 30s.
	SendTimeout time.Duration
	// BatchSize is the most records one RunOnce claims. Default: 256.
	BatchSize int
	// DelayLevels maps delay level n to DelayLevels[n-1], used only for a record that
	// has a DelayLevel but no DeliverAtMs. Default: message.DefaultDelayLevels()
	// (RocketMQ "1s 5s 10s 30s 1m … 2h").
	DelayLevels []time.Duration
	// DeliverTolerance: a delayed or timed record is sent (without a delay level) once its
	// delivery time is at most this far away, and is marked late (properties SLUICE_LATE,
	// SLUICE_LATE_MS) when sent more than this after it. Default: 500ms. Negative: 0.
	DeliverTolerance time.Duration
	// Logger receives warnings (dead records, late sends, lost leases) and per-run
	// summaries at Info when something happened. Default: slog.Default().
	Logger *slog.Logger
	// Clock returns the current time; all due times and leases use it, so the clocks
	// of all resenders of a namespace must agree to well within Lease - SendTimeout.
	// Default: time.Now.
	Clock func() time.Time
}

func (c *Config) setDefaults() {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.MinAge == 0 {
		c.MinAge = DefaultMinAge
	} else if c.MinAge < 0 {
		c.MinAge = 0
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
	if c.BackoffMax < c.BackoffBase {
		c.BackoffMax = c.BackoffBase
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.DelayLevels == nil {
		c.DelayLevels = message.DefaultDelayLevels()
	}
	if c.DeliverTolerance == 0 {
		c.DeliverTolerance = DefaultDeliverTolerance
	} else if c.DeliverTolerance < 0 {
		c.DeliverTolerance = 0
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
}

// Validate reports the first invalid field as an error naming it and its limit: a
// missing Client or Send, a Namespace with '{' or '}', a negative MaxAttempts,
// BackoffBase, BackoffMax, Lease, SendTimeout or BatchSize, a Lease shorter than
// 2×SendTimeout (after defaults), or a DelayLevels entry that is not positive.
func (c *Config) Validate() error {
	if c.Client == nil {
		return &config.Error{Package: "retrytask", Field: "Client", Reason: "is nil: need a Redis client"}
	}
	if c.Send == nil {
		return &config.Error{Package: "retrytask", Field: "Send", Reason: "is nil: need the raw producer send"}
	}
	if strings.ContainsAny(c.Namespace, "{}") {
		return &config.Error{Package: "retrytask", Field: "Namespace", Value: c.Namespace, Reason: "must not contain '{' or '}' (it is the Redis hash tag)"}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxAttempts", int64(c.MaxAttempts)}, {"BackoffBase", int64(c.BackoffBase)},
		{"BackoffMax", int64(c.BackoffMax)}, {"Lease", int64(c.Lease)},
		{"SendTimeout", int64(c.SendTimeout)}, {"BatchSize", int64(c.BatchSize)},
	} {
		if f.v < 0 {
			return &config.Error{Package: "retrytask", Field: f.name, Value: f.v, Reason: "is negative; 0 means the default"}
		}
	}
	for i, d := range c.DelayLevels {
		if d <= 0 {
			return &config.Error{Package: "retrytask", Field: "DelayLevels[" + strconv.Itoa(i) + "]", Value: d, Reason: "must be positive"}
		}
	}
	d := *c
	d.setDefaults()
	if d.Lease < 2*d.SendTimeout {
		return &config.Error{Package: "retrytask", Field: "Lease", Value: d.Lease, Reason: fmt.Sprintf("must be at least 2×SendTimeout (%v) so a live resender never loses its lease mid-send", 2*d.SendTimeout)}
	}
	return nil
}
