package remoting

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// TestConnectionLimits: connections beyond MaxConnsPerHost from one address are closed
// at accept and counted; closing one makes room again.
func TestConnectionLimits(t *testing.T) {
	s := startServer(t, ServerConfig{MaxConnsPerHost: 3})
	s.Handle(HeartBeat, echoHandler)
	var kept []interface{ Close() error }
	for range 3 {
		nc := rawDial(t, s.Addr())
		kept = append(kept, nc)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return s.Conns() == 3 }, "three connections")
	extra := rawDial(t, s.Addr())
	expectClosed(t, extra)
	if s.RefusedConns() != 1 || s.Conns() != 3 {
		t.Fatalf("refused %d, open %d", s.RefusedConns(), s.Conns())
	}
	_ = kept[0].Close()
	testkit.WaitFor(t, 20*time.Second, func() bool { return s.Conns() == 2 }, "room again")
	c := newClient(t, ClientConfig{})
	if _, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); err != nil {
		t.Fatalf("a connection within the limit: %v", err)
	}
}

// TestInFlightBytesLimit: one connection holding requests with large bodies (held pulls
// with junk bodies) gets SYSTEM_BUSY once MaxInFlightBytesPerConn is reached, and the
// held bodies are bounded by it.
func TestInFlightBytesLimit(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Int32
	s := startServer(t, ServerConfig{MaxInFlightBytesPerConn: 3 << 20})
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		held.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return NewResponse(PullNotFound, "")
	})
	c := newClient(t, ClientConfig{})
	junk := make([]byte, 1<<20)
	results := make(chan *RemotingCommand, 10)
	for range 10 {
		if err := c.InvokeAsync(ctxTimeout(t, 10*time.Second), s.Addr(), NewRequest(PullMessage, nil, junk), func(r *RemotingCommand, err error) {
			results <- r
		}); err != nil {
			t.Fatal(err)
		}
	}
	busy := 0
	testkit.WaitFor(t, 5*time.Second, func() bool {
		for {
			select {
			case r := <-results:
				if r == nil || r.ResponseCode() != SystemBusy || !strings.Contains(r.Remark, "limit 3145728 bytes") {
					t.Fatalf("got %v", r)
				}
				busy++
			default:
				return busy == 7
			}
		}
	}, "seven busy answers")
	testkit.WaitFor(t, 5*time.Second, func() bool { return held.Load() == 3 }, "three held requests")
	close(release)
	for range 3 {
		if r := <-results; r == nil || r.ResponseCode() != PullNotFound {
			t.Fatalf("held request: %v", r)
		}
	}
}

// TestHalfSentFrameClosedAfterFrameTimeout: with a long idle timeout, a frame whose
// first bytes arrived and then stalled is closed after FrameReadTimeout.
func TestHalfSentFrameClosedAfterFrameTimeout(t *testing.T) {
	s := startServer(t, ServerConfig{IdleTimeout: time.Hour, FrameReadTimeout: 100 * time.Millisecond})
	nc := rawDial(t, s.Addr())
	if _, err := nc.Write([]byte{0, 0, 0, 100, 0}); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, nc)
}

// TestQueuedBytesLimit: a peer that sends requests but never reads the answers holds at
// most MaxQueuedBytesPerConn of them on the server (plus what the socket buffers), and
// is disconnected after WriteTimeout.
func TestQueuedBytesLimit(t *testing.T) {
	s := startServer(t, ServerConfig{MaxQueuedBytesPerConn: 1 << 20, WriteTimeout: 300 * time.Millisecond})
	big := make([]byte, 256<<10)
	s.Handle(QueryMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		r := NewResponse(Success, "")
		r.Body = big
		return r
	})
	nc := rawDial(t, s.Addr())
	if tc, ok := nc.(interface{ SetReadBuffer(int) error }); ok {
		_ = tc.SetReadBuffer(4096)
	}
	frame, err := NewRequest(QueryMessage, nil, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	for range 400 { // 100 MiB of answers if all were queued
		if _, err := nc.Write(frame); err != nil {
			break // the server closed the connection
		}
	}
	// Never read: the server's queue fills and its write timeout closes the connection.
	testkit.WaitFor(t, 10*time.Second, func() bool { return s.Conns() == 0 }, "the server to drop a peer that does not read")
}
