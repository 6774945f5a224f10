package remoting

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// TestOnewayBeyondMaxInFlightIsNotDropped: one-way requests over the in-flight limit are
// not dropped (they cannot be answered SYSTEM_BUSY); the server stops reading until a
// handler finishes, and every one of them is handled.
func TestOnewayBeyondMaxInFlightIsNotDropped(t *testing.T) {
	release := make(chan struct{})
	var handled atomic.Int32
	s := startServer(t, ServerConfig{MaxInFlightPerConn: 2})
	s.Handle(UpdateConsumerOffset, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		select {
		case <-release:
		case <-ctx.Done():
		}
		handled.Add(1)
		return nil
	})
	c := newClient(t, ClientConfig{})
	const n = 50
	for i := 0; i < n; i++ {
		if err := c.InvokeOneway(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(UpdateConsumerOffset, nil, nil)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	testkit.WaitFor(t, 10*time.Second, func() bool { return handled.Load() == n }, "every one-way request to be handled")
}
