package remoting

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// TestConcurrentSyncCallsGetTheirOwnAnswers: many goroutines making sync calls on one
// connection (requests written directly by the callers or queued for the writer when
// another write is under way, answers written by the server's reader) each get the
// answer to their own request, none is lost.
func TestConcurrentSyncCallsGetTheirOwnAnswers(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(SendMessage, echoHandler)
	c := newClient(t, ClientConfig{})
	const goroutines, calls = 16, 200
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				id := strconv.Itoa(g) + "/" + strconv.Itoa(i)
				resp, err := c.InvokeSyncTimeout(context.Background(), s.Addr(), NewRequest(SendMessage, map[string]string{"id": id}, []byte(id)), 10*time.Second)
				if err != nil {
					t.Errorf("call %s: %v", id, err)
					return
				}
				if got := resp.ExtFields["id"]; got != id || string(resp.Body) != id {
					t.Errorf("call %s got the answer of %q (body %q)", id, got, resp.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestDirectAndQueuedWritesKeepOrder: one-way requests (queued for the writer) and sync
// calls (written directly when the write side is idle) from one goroutine reach the
// server in the order they were sent.
func TestDirectAndQueuedWritesKeepOrder(t *testing.T) {
	s := startServer(t, ServerConfig{})
	var mu sync.Mutex
	last := map[string]int{}
	var bad []string
	record := func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		g, seq := req.ExtFields["g"], req.ExtFields["seq"]
		n, _ := strconv.Atoi(seq)
		mu.Lock()
		if prev, ok := last[g]; ok && n != prev+1 {
			bad = append(bad, g+": "+strconv.Itoa(prev)+" then "+seq)
		}
		last[g] = n
		mu.Unlock()
		return NewResponse(Success, "")
	}
	s.HandleInline(UpdateConsumerOffset, record)
	s.HandleInline(SendMessage, record)
	c := newClient(t, ClientConfig{})
	const goroutines, rounds = 4, 150
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ext := func(seq int) map[string]string {
				return map[string]string{"g": strconv.Itoa(g), "seq": strconv.Itoa(seq)}
			}
			for i := 0; i < rounds; i++ {
				if err := c.InvokeOneway(ctxTimeout(t, 10*time.Second), s.Addr(), NewRequest(UpdateConsumerOffset, ext(2*i), nil)); err != nil {
					t.Error(err)
					return
				}
				if _, err := c.InvokeSync(ctxTimeout(t, 10*time.Second), s.Addr(), NewRequest(SendMessage, ext(2*i+1), nil)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("requests arrived out of order: %v", bad)
	}
	for g := 0; g < goroutines; g++ {
		if got := last[strconv.Itoa(g)]; got != 2*rounds-1 {
			t.Errorf("goroutine %d: last request seen %d, want %d", g, got, 2*rounds-1)
		}
	}
}

// TestDirectWriteRestIsWrittenByTheWriter: a direct write the socket cannot take at
// once (the peer is not reading) leaves its rest to the writer; a request sent after it
// waits behind it, and the peer receives both frames whole and in order.
func TestDirectWriteRestIsWrittenByTheWriter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := newClient(t, ClientConfig{})
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB: more than the socket buffers hold
	type answer struct {
		resp *RemotingCommand
		err  error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() {
		resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), ln.Addr().String(), NewRequest(SendMessage, map[string]string{"n": "1"}, big))
		first <- answer{resp, err}
	}()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testkit.WaitFor(t, 10*time.Second, func() bool {
		conn := clientConn(c, ln.Addr().String())
		return conn != nil && conn.outBytes.Load() > 0
	}, "a rest of the first request waiting for the writer")
	go func() {
		resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), ln.Addr().String(), NewRequest(SendMessage, map[string]string{"n": "2"}, []byte("small")))
		second <- answer{resp, err}
	}()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	for _, want := range []struct {
		n    string
		body []byte
	}{{"1", big}, {"2", []byte("small")}} {
		f, err := ReadFrame(nc, 0)
		if err != nil {
			t.Fatalf("reading request %s: %v", want.n, err)
		}
		req, st, err := DecodeFrame(f)
		if err != nil {
			t.Fatalf("decoding request %s: %v", want.n, err)
		}
		if req.ExtFields["n"] != want.n || !bytes.Equal(req.Body, want.body) {
			t.Fatalf("got request %q with a %d-byte body, want %s with %d bytes", req.ExtFields["n"], len(req.Body), want.n, len(want.body))
		}
		resp := NewResponse(Success, want.n)
		resp.Opaque, resp.Flag = req.Opaque, FlagResponse
		out, err := resp.EncodeAs(st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(out); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range []chan answer{first, second} {
		a := <-ch
		if a.err != nil || a.resp.Remark != strconv.Itoa(i+1) {
			t.Fatalf("call %d: %v, %v", i+1, a.resp, a.err)
		}
	}
}

// TestDirectWriteAfterTheWritersDeadlinePassed: the writer's write deadline, long
// passed, does not fail a later direct write (the connection stays up).
func TestDirectWriteAfterTheWritersDeadlinePassed(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(SendMessage, echoHandler)
	s.HandleInline(UpdateConsumerOffset, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand { return nil })
	c := newClient(t, ClientConfig{WriteTimeout: 50 * time.Millisecond})
	if _, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(SendMessage, nil, nil)); err != nil {
		t.Fatal(err)
	}
	conn := clientConn(c, s.Addr())
	// A one-way request goes through the writer, which sets a write deadline 50 ms ahead.
	if err := c.InvokeOneway(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(UpdateConsumerOffset, nil, nil)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testkit.WaitFor(t, 5*time.Second, func() bool { return conn.outBytes.Load() == 0 && time.Since(start) > 200*time.Millisecond }, "the write deadline to pass")
	for i := 0; i < 3; i++ {
		if _, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(SendMessage, nil, nil)); err != nil {
			t.Fatalf("call %d after the deadline: %v", i, err)
		}
	}
	if got := clientConn(c, s.Addr()); got != conn || conn.Err() != nil {
		t.Fatalf("connection replaced or closed: %v", conn.Err())
	}
}

// TestInvokeSyncTimeout: the sweep fails an unanswered call after its timeout with
// ErrTimeout and context.DeadlineExceeded and removes it; the caller's context ending
// fails it at once; a timeout that is not positive is refused.
func TestInvokeSyncTimeout(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		<-ctx.Done() // never answers
		return nil
	})
	c := newClient(t, ClientConfig{})
	// Connect first: the timeout also bounds a dial, and a loaded machine may take longer
	// than 50 ms to dial, leaving no connection to inspect below.
	if _, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.InvokeSyncTimeout(context.Background(), s.Addr(), NewRequest(SendMessage, nil, nil), 50*time.Millisecond)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrTimeout and DeadlineExceeded, got %v", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("failed after %v, before its timeout", d)
	}
	conn := clientConn(c, s.Addr())
	if n := conn.pendingLen(); n != 0 {
		t.Fatalf("%d pending entries after the timeout", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.InvokeSyncTimeout(ctx, s.Addr(), NewRequest(SendMessage, nil, nil), time.Minute)
		done <- err
	}()
	testkit.WaitFor(t, 5*time.Second, func() bool { return conn.pendingLen() == 1 }, "the call to be pending")
	cancel()
	if err := <-done; !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want ErrTimeout and Canceled, got %v", err)
	}
	if n := conn.pendingLen(); n != 0 {
		t.Fatalf("%d pending entries after the cancel", n)
	}

	if _, err := c.InvokeSyncTimeout(context.Background(), s.Addr(), NewRequest(SendMessage, nil, nil), 0); err == nil {
		t.Fatal("timeout 0 accepted")
	}
}

// TestInlineAnswersOfABurstAreWrittenBeforeTheReaderWaits: requests written in one burst
// to an inline handler are answered together, and when the reader stops in the middle of
// the next frame (waiting for the rest of it) the answers it holds are already written.
func TestInlineAnswersOfABurstAreWrittenBeforeTheReaderWaits(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(SendMessage, echoHandler)
	nc := rawDial(t, s.Addr())
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	const burst = 10
	var out []byte
	for i := 0; i <= burst; i++ {
		req := NewRequest(SendMessage, map[string]string{"i": strconv.Itoa(i)}, []byte("body"))
		req.Opaque = int32(i + 1)
		f, err := req.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f...)
	}
	lastLen := len(out) / (burst + 1) // all frames have the same size up to the index digits
	half := len(out) - lastLen/2      // the burst and half of the last request
	if _, err := nc.Write(out[:half]); err != nil {
		t.Fatal(err)
	}
	readAnswer := func(i int) {
		t.Helper()
		f, err := ReadFrame(nc, 0)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		resp, _, err := DecodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Opaque != int32(i+1) || resp.ExtFields["i"] != strconv.Itoa(i) {
			t.Fatalf("answer %d: opaque %d, ext %v", i, resp.Opaque, resp.ExtFields)
		}
	}
	for i := 0; i < burst; i++ {
		readAnswer(i) // written while the last request is incomplete
	}
	if _, err := nc.Write(out[half:]); err != nil {
		t.Fatal(err)
	}
	readAnswer(burst)
}
