// Package outboxpg wakes an outbox relay when PostgreSQL reports new rows: a [Listener]
// holds one pgx connection that LISTENs on a channel, and its [Listener.C] is what
// outbox.RelayConfig.Wake takes. The outbox itself (outbox.Config.NotifyChannel) runs
// pg_notify in the business transaction, so the notification arrives when, and only if,
// the transaction commits. pgx lives here, not in package outbox.
package outboxpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// channelName is what the Listener accepts as a channel (used unquoted in LISTEN).
var channelName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Config configures a [Listener].
type Config struct {
	// ConnString is the PostgreSQL connection string (URL or key=value), as pgx takes it.
	// Required.
	ConnString string
	// Channel is the channel to LISTEN on: outbox.Config.NotifyChannel. Required; 1..63
	// characters of [A-Za-z0-9_], not starting with a digit.
	Channel string
	// RetryMax caps the pause between reconnection attempts (it doubles from 100 ms).
	// Default 5 s.
	RetryMax time.Duration
	// Logger receives a warning per lost connection. Default slog.Default().
	Logger *slog.Logger
}

// Listener delivers a signal on C for every batch of notifications on its channel, and
// one after each (re)connection (notifications sent while it was disconnected are lost;
// the relay's polling covers them, and the signal after a reconnection makes it look at
// once).
type Listener struct {
	cfg    Config
	c      chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Listen connects and starts listening; it returns the connection error of the first
// attempt (later ones are retried in the background until Close).
func Listen(ctx context.Context, cfg Config) (*Listener, error) {
	if cfg.ConnString == "" {
		return nil, errors.New("outboxpg: Config.ConnString is empty")
	}
	if !channelName.MatchString(cfg.Channel) {
		return nil, fmt.Errorf("outboxpg: Config.Channel %q: want 1..63 characters of [A-Za-z0-9_], not starting with a digit", cfg.Channel)
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	conn, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l := &Listener{cfg: cfg, c: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go l.run(lctx, conn)
	return l, nil
}

func connect(ctx context.Context, cfg Config) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, cfg.ConnString)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+cfg.Channel); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("outboxpg: LISTEN %s: %w", cfg.Channel, err)
	}
	return conn, nil
}

// C returns the channel that receives a value when rows may be waiting (buffer 1: a
// burst of notifications is one signal).
func (l *Listener) C() <-chan struct{} { return l.c }

func (l *Listener) signal() {
	select {
	case l.c <- struct{}{}:
	default:
	}
}

func (l *Listener) run(ctx context.Context, conn *pgx.Conn) {
	defer close(l.done)
	wait := 100 * time.Millisecond
	for {
		for conn != nil {
			_, err := conn.WaitForNotification(ctx)
			if err != nil {
				_ = conn.Close(context.Background())
				conn = nil
				if ctx.Err() != nil {
					return
				}
				l.cfg.Logger.Warn("outboxpg: listener connection lost; reconnecting", "channel", l.cfg.Channel, "error", err)
				break
			}
			wait = 100 * time.Millisecond
			l.signal()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, l.cfg.RetryMax)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := connect(cctx, l.cfg)
		cancel()
		if err == nil {
			conn = c
			l.signal() // rows committed while we were away
		}
	}
}

// Close stops listening and closes the connection; it returns when the listener's
// goroutine has ended. Idempotent.
func (l *Listener) Close() error {
	l.once.Do(l.cancel)
	<-l.done
	return nil
}
