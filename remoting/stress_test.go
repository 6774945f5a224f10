package remoting

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

func TestServerInvokeTimeoutAndConnLoss(t *testing.T) {
	s := startServer(t, ServerConfig{})
	results := make(chan error, 2)
	var serverConn atomic.Pointer[Conn]
	s.Handle(HeartBeat, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		serverConn.Store(conn)
		return NewResponse(Success, "")
	})
	c := newClient(t, ClientConfig{})
	block := make(chan struct{})
	c.RegisterHandler(CheckTransactionState, func(ctx context.Context, addr string, req *RemotingCommand) *RemotingCommand {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return NewResponse(Success, "")
	})
	if _, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); err != nil {
		t.Fatal(err)
	}
	conn := serverConn.Load()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := conn.Invoke(ctx, NewRequest(CheckTransactionState, nil, nil))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("want ErrTimeout, got %v", err)
	}
	if n := conn.pendingLen(); n != 0 {
		t.Fatalf("server-side pending entries after timeout: %d", n)
	}

	// A server→client call pending while the client goes away fails at once.
	go func() {
		_, err := conn.Invoke(context.Background(), NewRequest(CheckTransactionState, nil, nil))
		results <- err
	}()
	testkit.WaitFor(t, 20*time.Second, func() bool { return conn.pendingLen() == 1 }, "pending server call")
	c.CloseConn(s.Addr())
	var ce *ConnError
	if err := <-results; !errors.As(err, &ce) {
		t.Fatalf("want *ConnError, got %v", err)
	}
	<-conn.Context().Done()
	if err := conn.InvokeOneway(context.Background(), NewRequest(CheckTransactionState, nil, nil)); !errors.As(err, &ce) {
		t.Fatalf("oneway on a closed conn: %v", err)
	}
	close(block)
}

// Many goroutines share one connection while it is repeatedly dropped: every call
// returns (a response or a *ConnError, never a hang or a timeout) and answers match.
func TestConcurrentCallsWithConnectionChurn(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, echoHandler)
	c := newClient(t, ClientConfig{})
	const workers, calls = 8, 150
	var ok, connErrs atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				body := fmt.Sprintf("%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := c.InvokeSync(ctx, s.Addr(), NewRequest(SendMessage, nil, []byte(body)))
				cancel()
				var ce *ConnError
				switch {
				case err == nil && string(resp.Body) == body:
					ok.Add(1)
				case errors.As(err, &ce):
					if connErrs.Add(1) < 5 {
						t.Logf("conn error: %v", err)
					}
				default:
					errc <- fmt.Errorf("call %s: resp=%v err=%v", body, resp, err)
					return
				}
				if w == 0 && i%15 == 0 {
					c.CloseConn(s.Addr())
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if ok.Load() == 0 {
		t.Fatal("no call succeeded")
	}
	t.Logf("ok=%d connErrors=%d", ok.Load(), connErrs.Load())
}

// One-way requests queued right before Client.Close still reach the server (a consumer
// persists offsets with one-way UPDATE_CONSUMER_OFFSET just before it shuts down).
func TestCloseFlushesQueuedOneways(t *testing.T) {
	s := startServer(t, ServerConfig{})
	var got atomic.Int64
	s.Handle(UpdateConsumerOffset, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		got.Add(1)
		return nil
	})
	s.Handle(HeartBeat, echoHandler)
	c, err := NewClient(ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := 0; i < n; i++ {
		if err := c.InvokeOneway(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(UpdateConsumerOffset, nil, make([]byte, 512))); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return got.Load() == n }, "all one-way requests handled")
}

// A server that sends a one-way request and then closes the connection still delivers
// the request (Conn.Close flushes the queue first).
func TestConnCloseDeliversQueuedFrames(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(UnregisterClient, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		if err := conn.InvokeOneway(ctx, NewRequest(NotifyConsumerIDsChanged, map[string]string{"consumerGroup": "g"}, nil)); err != nil {
			t.Errorf("InvokeOneway: %v", err)
		}
		conn.Close()
		return nil
	})
	c := newClient(t, ClientConfig{})
	notified := make(chan string, 1)
	c.RegisterHandler(NotifyConsumerIDsChanged, func(ctx context.Context, addr string, req *RemotingCommand) *RemotingCommand {
		notified <- req.ExtFields["consumerGroup"]
		return nil
	})
	_, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(UnregisterClient, nil, nil))
	var ce *ConnError
	if !errors.As(err, &ce) {
		t.Fatalf("want *ConnError once the server closed, got %v", err)
	}
	select {
	case g := <-notified:
		if g != "g" {
			t.Fatalf("got group %q", g)
		}
	case <-ctxTimeout(t, 20*time.Second).Done():
		t.Fatal("one-way request queued before Conn.Close was lost")
	}
}

// A peer that starts a frame and stalls is closed after the idle timeout, like an idle one.
func TestStalledFrameClosedAfterIdleTimeout(t *testing.T) {
	s := startServer(t, ServerConfig{IdleTimeout: 100 * time.Millisecond})
	rec := recordCloses(s)
	nc := rawDial(t, s.Addr())
	local := nc.LocalAddr().String()
	if _, err := nc.Write([]byte{0, 0, 0, 100, 0, 0}); err != nil { // 6 of 104 bytes
		t.Fatal(err)
	}
	expectClosed(t, nc)
	testkit.WaitFor(t, 20*time.Second, func() bool { _, ok := rec.cause(local); return ok }, "close recorded")
	if cause, _ := rec.cause(local); cause == nil {
		t.Fatal("no cause")
	}
}

// Client.IdleTimeout drops a silent connection; the next call dials again.
func TestClientIdleTimeout(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(HeartBeat, echoHandler)
	c := newClient(t, ClientConfig{IdleTimeout: 100 * time.Millisecond})
	if _, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); err != nil {
		t.Fatal(err)
	}
	first := clientConn(c, s.Addr())
	testkit.WaitFor(t, 5*time.Second, func() bool { return clientConn(c, s.Addr()) == nil }, "idle client conn dropped")
	if err := first.Err(); err == nil || !strings.Contains(err.Error(), "idle") {
		t.Fatalf("close cause %v", err)
	}
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, []byte("b")))
	if err != nil || string(resp.Body) != "b" {
		t.Fatalf("%v %v", resp, err)
	}
}
