package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
)

// Flush disk types accepted by EmbeddedConfig.FlushDiskType (broker.conf flushDiskType).
const (
	AsyncFlush = "ASYNC_FLUSH"
	SyncFlush  = "SYNC_FLUSH"
)

// EmbeddedConfig configures an in-process broker with an embedded name server, both
// on free loopback ports.
type EmbeddedConfig struct {
	// Dir is the data directory (storePathRootDir). Default: a new temporary directory,
	// removed by Shutdown.
	Dir string
	// FlushDiskType is AsyncFlush (fsync every 500 ms) or SyncFlush (a send is
	// answered after fsync). Default: AsyncFlush.
	FlushDiskType string
	// Logger receives the broker's logs. Default: a logger that discards everything.
	Logger *slog.Logger
}

// Embedded is a running in-process broker and name server.
type Embedded struct {
	// Broker is the running broker.
	Broker  *broker.Broker
	dir     string
	ownsDir bool
}

// StartEmbedded starts a broker with an embedded name server on 127.0.0.1 free ports.
// Errors: an unknown FlushDiskType, a temporary directory that cannot be made, and the
// broker's own configuration or start errors.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.FlushDiskType == "" {
		cfg.FlushDiskType = AsyncFlush
	}
	if cfg.FlushDiskType != AsyncFlush && cfg.FlushDiskType != SyncFlush {
		return nil, fmt.Errorf("bench: flush disk type %q: want %s or %s", cfg.FlushDiskType, AsyncFlush, SyncFlush)
	}
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	e := &Embedded{dir: cfg.Dir}
	if e.dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-")
		if err != nil {
			return nil, fmt.Errorf("bench: temporary data directory: %w", err)
		}
		e.dir, e.ownsDir = d, true
	}
	b, err := broker.New(broker.Config{
		ListenAddr:        "127.0.0.1:0",
		NamesrvListenAddr: "127.0.0.1:0",
		StorePathRootDir:  e.dir,
		FlushDiskType:     cfg.FlushDiskType,
		Logger:            cfg.Logger,
	})
	if err == nil {
		err = b.Start()
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = b.Shutdown(ctx)
			cancel()
		}
	}
	if err != nil {
		if e.ownsDir {
			_ = os.RemoveAll(e.dir)
		}
		return nil, fmt.Errorf("bench: embedded broker: %w", err)
	}
	e.Broker = b
	return e, nil
}

// NamesrvAddrs returns the embedded name server's address ("127.0.0.1:port").
func (e *Embedded) NamesrvAddrs() []string { return strings.Split(e.Broker.NamesrvAddr(), ";") }

// Dir returns the data directory.
func (e *Embedded) Dir() string { return e.dir }

// Shutdown stops the broker and name server and removes the data directory if
// StartEmbedded made it. It returns the broker's shutdown error joined with a removal
// error.
func (e *Embedded) Shutdown(ctx context.Context) error {
	err := e.Broker.Shutdown(ctx)
	if e.ownsDir {
		if rerr := os.RemoveAll(e.dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("bench: remove data directory: %w", rerr))
		}
	}
	return err
}

// EnsureTopic creates topic with the given queue count on every master broker known to
// the name servers and waits (bounded by ctx) until its route is published.
func EnsureTopic(ctx context.Context, namesrvAddrs []string, topic string, queues int) error {
	a, err := admin.New(admin.Config{NamesrvAddrs: namesrvAddrs, Logger: discard})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer a.Close()
	res, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: queues})
	if err != nil {
		return fmt.Errorf("bench: create topic %s: %w", topic, err)
	}
	names := make([]string, 0, len(res.Brokers))
	for _, b := range res.Brokers {
		names = append(names, b.Name)
	}
	if _, err := a.WaitTopicRoute(ctx, topic, names...); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// DeleteTopic deletes topic from its brokers and the name servers.
func DeleteTopic(ctx context.Context, namesrvAddrs []string, topic string) error {
	a, err := admin.New(admin.Config{NamesrvAddrs: namesrvAddrs, Logger: discard})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer a.Close()
	if _, err := a.DeleteTopic(ctx, topic); err != nil {
		return fmt.Errorf("bench: delete topic %s: %w", topic, err)
	}
	return nil
}
