// Package testbroker starts an embedded Sluice broker for a test: [broker.StartEphemeral]
// (an embedded name server and the broker on free 127.0.0.1 ports, a temporary data
// directory) with a quiet logger, stopped in the test's cleanup. It is a sub-package of
// testkit because it imports the broker: the broker's own tests use testkit and
// broker.StartEphemeral directly.
package testbroker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
)

// StopTimeout bounds the broker's Shutdown when a test stops it.
const StopTimeout = 15 * time.Second

// Start starts a broker with cfg through broker.StartEphemeral (which fills in free
// loopback ports and a temporary data directory unless cfg sets them) and a discarding
// logger unless cfg.Logger is set. It fails t when the broker does not start. stop shuts
// the broker down (bounded by StopTimeout; an error fails t) and removes the temporary
// directory; it is idempotent and also runs in t's cleanup, so call it only to stop the
// broker early.
func Start(t testing.TB, cfg broker.Config) (b *broker.Broker, stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	b, shutdown, err := broker.StartEphemeral(cfg)
	if err != nil {
		t.Fatalf("testbroker: start: %v", err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				t.Errorf("testbroker: broker shutdown: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return b, stop
}

// Namesrv returns b's name server addresses as a client config wants them.
func Namesrv(b *broker.Broker) []string { return strings.Split(b.NamesrvAddr(), ";") }
