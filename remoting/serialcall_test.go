package remoting

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// TestSerialCallsRecycledAcrossOutcomes: the pending state of InvokeAsyncTimeout calls is
// recycled once a call completed, whatever the outcome. Over several rounds, each with
// calls answered, calls failed by the sweep (deadline passed, ctx cancelled) and calls
// failed by the connection closing under them, every callback runs exactly once, with
// its own answer or the error of its own outcome — a recycled call never completes
// another's callback or one twice.
func TestSerialCallsRecycledAcrossOutcomes(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, echoHandler)
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		select { // never answered in time
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	c := newClient(t, ClientConfig{})
	const perKind = 40
	for round := range 4 {
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			bad    []string
			counts = make([]atomic.Int32, 4*perKind)
		)
		fail := func(format string, a ...any) {
			mu.Lock()
			bad = append(bad, fmt.Sprintf(format, a...))
			mu.Unlock()
		}
		ctx, cancel := context.WithCancel(context.Background())
		call := func(i int, req *RemotingCommand, cctx context.Context, timeout time.Duration, check func(*RemotingCommand, error)) {
			wg.Add(1)
			if err := c.InvokeAsyncTimeout(cctx, s.Addr(), req, timeout, func(r *RemotingCommand, err error) {
				defer wg.Done()
				if counts[i].Add(1) != 1 {
					fail("round %d call %d: callback ran twice", round, i)
				}
				check(r, err)
			}); err != nil {
				wg.Done()
				t.Fatalf("round %d call %d: %v", round, i, err)
			}
		}
		for k := range perKind {
			i := k
			body := fmt.Sprintf("r%d-%d", round, i)
			call(i, NewRequest(SendMessage, nil, []byte(body)), context.Background(), 10*time.Second, func(r *RemotingCommand, err error) {
				if err != nil || string(r.Body) != body {
					fail("answered call %s: %v %v", body, r, err)
				}
			})
			i = perKind + k
			call(i, NewRequest(PullMessage, nil, nil), context.Background(), 20*time.Millisecond, func(r *RemotingCommand, err error) {
				if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
					fail("timed-out call %d: %v %v", i, r, err)
				}
			})
			i = 2*perKind + k
			call(i, NewRequest(PullMessage, nil, nil), ctx, time.Hour, func(r *RemotingCommand, err error) {
				if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
					fail("cancelled call %d: %v %v", i, r, err)
				}
			})
		}
		cancel()
		waitAll(t, &wg, fmt.Sprintf("round %d: the answered, timed-out and cancelled calls", round))
		// The calls still pending when the connection closes fail with a *ConnError.
		for k := range perKind {
			i := 3*perKind + k
			call(i, NewRequest(PullMessage, nil, []byte(strconv.Itoa(i))), context.Background(), time.Hour, func(r *RemotingCommand, err error) {
				var ce *ConnError
				if !errors.As(err, &ce) {
					fail("call %d on a closed connection: %v %v", i, r, err)
				}
			})
		}
		conn := clientConn(c, s.Addr())
		testkit.WaitFor(t, 10*time.Second, func() bool { return conn.pendingLen() == perKind }, "the calls pending")
		c.CloseConn(s.Addr())
		waitAll(t, &wg, fmt.Sprintf("round %d: the calls on the closed connection", round))
		for _, b := range bad {
			t.Error(b)
		}
		for i := range counts {
			if n := counts[i].Load(); n != 1 {
				t.Fatalf("round %d call %d: %d callbacks", round, i, n)
			}
		}
	}
}

// waitAll waits for wg, failing the test after 20 s.
func waitAll(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: callbacks missing after 20s", what)
	}
}
