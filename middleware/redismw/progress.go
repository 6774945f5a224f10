package redismw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// ProgressConfig configures [Progress]. Client is required.
type ProgressConfig struct {
	// Client is the Redis. Required; never closed by Progress.
	Client redis.UniversalClient
	// Prefix starts the marker keys ("<prefix>:{<key>}:m", see MarkerKey). Default
	// DefaultMarkerPrefix ("sluice:dedup"), the same keys Dedup writes. One prefix per
	// consumer group. It must not contain '{' or '}'.
	Prefix string
	// TTL is how long a marker lives. Default DefaultDoneTTL (72 h).
	TTL time.Duration
	// MarkOnly, when true, only writes markers and never skips a message. Default false:
	// a message whose marker is done is skipped and acknowledged (ReasonDuplicate) — a
	// best-effort dedup without a lock, so two concurrent deliveries can both run.
	MarkOnly bool
	// FailOpen decides what happens when reading the marker fails: false (default) returns
	// ReconsumeLater with ErrRedisUnavailable; true runs the handler (ReasonFailOpen).
	// Ignored with MarkOnly (nothing is read).
	FailOpen bool
	// KeyFunc returns the message key; "" passes the message through unmarked
	// (ReasonNoKey). Default KeyOf.
	KeyFunc func(*message.MessageExt) string
	// Logger receives warnings (markers not saved, fail open). Default slog.Default().
	Logger *slog.Logger
}

func (c *ProgressConfig) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultMarkerPrefix
	}
	if c.TTL == 0 {
		c.TTL = DefaultDoneTTL
	}
	if c.KeyFunc == nil {
		c.KeyFunc = middleware.KeyOf
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration after defaults: Client set, TTL >= 1 ms, Prefix
// without braces.
func (c *ProgressConfig) Validate() error {
	if c.Client == nil {
		return &config.Error{Package: "middleware", Field: "Client", Reason: "is nil"}
	}
	if c.TTL < time.Millisecond {
		return &config.Error{Package: "middleware", Field: "TTL", Value: c.TTL, Reason: "must be at least 1ms"}
	}
	return validatePrefix("Prefix", c.Prefix)
}

// ProgressTracker reads and writes progress markers; see [Progress]. Safe for concurrent
// use.
type ProgressTracker struct {
	cfg ProgressConfig
}

// NewProgressTracker returns a tracker for cfg (defaults applied), or an error naming the
// bad field.
func NewProgressTracker(cfg ProgressConfig) (*ProgressTracker, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ProgressTracker{cfg: cfg}, nil
}

// Progress returns the consume middleware of [NewProgressTracker](cfg): per message key,
// a marker "1" (done) after the handler succeeds and "-1" (failed) after it fails or
// panics, each with TTL; no lock. Unless MarkOnly, a message already marked done is
// skipped and acknowledged. A "-1" never replaces a "1".
//
// Round trips: two per message (read the marker, write it); one with MarkOnly. Inside a
// [Dedup] with the same prefix, Progress does nothing for the message Dedup is handling
// (Dedup already writes the same markers, atomically with its lock), so a chain of both
// costs Dedup's two round trips.
//
// A batch is handled one message at a time, in order, stopping at the first failure
// (like Dedup). Redis failing after a successful handler leaves the message acknowledged
// (ReasonMarkerNotSaved, logged).
func Progress(cfg ProgressConfig) (middleware.ConsumeMiddleware, error) {
	p, err := NewProgressTracker(cfg)
	if err != nil {
		return nil, err
	}
	return p.Middleware(), nil
}

// Middleware returns the consume middleware; see [Progress].
func (p *ProgressTracker) Middleware() middleware.ConsumeMiddleware {
	return func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if len(msgs) == 1 {
				return p.handle(ctx, msgs, next)
			}
			for i := range msgs {
				if res, err := p.handle(ctx, single(msgs, i), next); res != message.ConsumeSuccess || err != nil {
					return message.ReconsumeLater, err
				}
			}
			return message.ConsumeSuccess, nil
		}
	}
}

// MarkerKey returns the marker key of message key.
func (p *ProgressTracker) MarkerKey(key string) string { return MarkerKey(p.cfg.Prefix, key) }

// ProgressState returns key's marker (one GET): MarkerDone, MarkerFailed or MarkerNone.
func (p *ProgressTracker) ProgressState(ctx context.Context, key string) (MarkerState, error) {
	return readMarker(ctx, p.cfg.Client, p.MarkerKey(key))
}

// Mark writes key's marker (MarkerDone or MarkerFailed) with the configured TTL; a failed
// marker never replaces a done one. MarkerNone deletes the marker. One round trip.
func (p *ProgressTracker) Mark(ctx context.Context, key string, state MarkerState) error {
	mk := p.MarkerKey(key)
	switch state {
	case MarkerNone:
		return p.cfg.Client.Del(ctx, mk).Err()
	case MarkerDone, MarkerFailed:
		return markScript.Run(ctx, p.cfg.Client, []string{mk}, fmt.Sprint(int(state)), p.cfg.TTL.Milliseconds()).Err()
	}
	return fmt.Errorf("middleware: Mark state %d: want -1, 0 or 1", int(state))
}

func (p *ProgressTracker) handle(ctx context.Context, msgs []*message.MessageExt, next middleware.ConsumeFunc) (message.ConsumeResult, error) {
	key := p.cfg.KeyFunc(msgs[0])
	if key == "" {
		middleware.Note(ctx, middleware.ReasonNoKey)
		return next(ctx, msgs)
	}
	if inScope(ctx, p.cfg.Prefix, key) {
		return next(ctx, msgs) // the enclosing Dedup writes these markers
	}
	if !p.cfg.MarkOnly {
		st, err := p.ProgressState(ctx, key)
		switch {
		case err != nil && ctx.Err() != nil:
			return message.ReconsumeLater, ctx.Err()
		case err != nil && p.cfg.FailOpen:
			middleware.Note(ctx, middleware.ReasonFailOpen)
			p.cfg.Logger.WarnContext(ctx, "progress: redis failed, running the handler unchecked (fail open)",
				"key", key, "topic", msgs[0].Topic, "error", err)
		case err != nil:
			middleware.Note(ctx, middleware.ReasonRedisUnavailable)
			return message.ReconsumeLater, &DedupError{Key: key, Reason: middleware.ReasonRedisUnavailable, Kind: ErrRedisUnavailable, Cause: err}
		case st == MarkerDone:
			middleware.Note(ctx, middleware.ReasonDuplicate)
			return message.ConsumeSuccess, nil
		}
	}
	res, herr := middleware.CallRecovered(ctx, next, msgs)
	ok := herr == nil && res == message.ConsumeSuccess
	state := MarkerFailed
	if ok {
		state = MarkerDone
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	merr := p.Mark(mctx, key, state)
	cancel()
	if merr != nil {
		middleware.Note(ctx, middleware.ReasonMarkerNotSaved)
		merr = &DedupError{Key: key, Reason: middleware.ReasonMarkerNotSaved, Kind: ErrRedisUnavailable, Cause: merr}
		p.cfg.Logger.WarnContext(ctx, "progress: marker not saved", "key", key, "topic", msgs[0].Topic,
			"state", state.String(), "error", merr)
	}
	if ok {
		return message.ConsumeSuccess, nil
	}
	if herr != nil && merr != nil {
		return message.ReconsumeLater, errors.Join(herr, merr)
	}
	if herr != nil {
		return message.ReconsumeLater, herr
	}
	return message.ReconsumeLater, merr
}
