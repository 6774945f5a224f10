package remoting

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// sumHandler answers with the request's ext fields, the body's checksum as remark and
// the body itself.
func sumHandler(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
	resp := NewResponse(Success, testkit.Sum(req.Body))
	resp.ExtFields = req.ExtFields
	resp.Body = req.Body
	return resp
}

// TestMixedTrafficOneConn: many goroutines mix sync (direct), sync-timeout, async
// and one-way calls, small and 4 MiB bodies, to inline and goroutine handlers, on one
// connection; every answer matches its request and every one-way request arrives whole
// and in per-goroutine order.
func TestMixedTrafficOneConn(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(SendMessage, sumHandler)
	s.Handle(PullMessage, sumHandler)
	var mu sync.Mutex
	last := map[string]int{}
	var bad []string
	var oneways atomic.Int64
	s.HandleInline(UpdateConsumerOffset, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		g := req.ExtFields["g"]
		n, _ := strconv.Atoi(req.ExtFields["seq"])
		mu.Lock()
		if prev, ok := last[g]; ok && n <= prev {
			bad = append(bad, g+": "+strconv.Itoa(prev)+" then "+strconv.Itoa(n))
		}
		last[g] = n
		if req.ExtFields["sum"] != testkit.Sum(req.Body) {
			bad = append(bad, g+"/"+strconv.Itoa(n)+": body corrupt")
		}
		mu.Unlock()
		oneways.Add(1)
		return nil
	})
	c := newClient(t, ClientConfig{})
	const goroutines, rounds = 12, 60
	var wg sync.WaitGroup
	var calls, big atomic.Int64
	check := func(id string, body []byte, resp *RemotingCommand, err error) {
		if err != nil {
			t.Errorf("call %s: %v", id, err)
			return
		}
		calls.Add(1)
		if resp.ExtFields["id"] != id || resp.Remark != testkit.Sum(body) || testkit.Sum(resp.Body) != testkit.Sum(body) {
			t.Errorf("call %s got answer of %q (remark %s)", id, resp.ExtFields["id"], resp.Remark)
		}
	}
	var sentOneway atomic.Int64
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var awg sync.WaitGroup
			defer awg.Wait()
			for i := 0; i < rounds; i++ {
				seq := g*100000 + i
				size := 100 + (seq*37)%3000
				if i%20 == 7 {
					size = 4 << 20
					big.Add(1)
				}
				body := testkit.SeqBody(seq, size, 1)
				id := strconv.Itoa(g) + "/" + strconv.Itoa(i)
				code := SendMessage
				if i%3 == 1 {
					code = PullMessage
				}
				switch i % 4 {
				case 0:
					resp, err := c.InvokeSync(ctxTimeout(t, 30*time.Second), s.Addr(), NewRequest(code, map[string]string{"id": id}, body))
					check(id, body, resp, err)
				case 1:
					resp, err := c.InvokeSyncTimeout(context.Background(), s.Addr(), NewRequest(code, map[string]string{"id": id}, body), 30*time.Second)
					check(id, body, resp, err)
				case 2:
					awg.Add(1)
					err := c.InvokeAsync(ctxTimeout(t, 30*time.Second), s.Addr(), NewRequest(code, map[string]string{"id": id}, body), func(resp *RemotingCommand, err error) {
						defer awg.Done()
						check(id, body, resp, err)
					})
					if err != nil {
						awg.Done()
						t.Errorf("async %s: %v", id, err)
					}
				case 3:
					err := c.InvokeOneway(ctxTimeout(t, 30*time.Second), s.Addr(), NewRequest(UpdateConsumerOffset, map[string]string{"g": strconv.Itoa(g), "seq": strconv.Itoa(i), "sum": testkit.Sum(body)}, body))
					if err != nil {
						t.Errorf("oneway %s: %v", id, err)
					} else {
						sentOneway.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	testkit.WaitFor(t, 20*time.Second, func() bool { return oneways.Load() == sentOneway.Load() }, "one-way requests to arrive")
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("%d bad one-way requests, first %v", len(bad), bad[0])
	}
	t.Logf("calls answered %d (big bodies %d), one-way %d", calls.Load(), big.Load(), oneways.Load())
}

// TestLateAnswerAfterSyncTimeout: a call that timed out (sweep) gets its answer
// later, while the same goroutine already makes the next call with recycled call
// state: the late answer must not complete the next call.
func TestLateAnswerAfterSyncTimeout(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		if d, _ := strconv.Atoi(req.ExtFields["delay"]); d > 0 {
			select {
			case <-time.After(time.Duration(d) * time.Millisecond):
			case <-ctx.Done():
			}
		}
		return echoHandler(ctx, conn, req)
	})
	c := newClient(t, ClientConfig{})
	const goroutines, rounds = 8, 40
	var wg sync.WaitGroup
	var timeouts, ok atomic.Int64
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				id := strconv.Itoa(g) + "/" + strconv.Itoa(i)
				delay := "0"
				if i%2 == 0 {
					delay = strconv.Itoa(20 + (g*7+i)%15) // answered after its 15 ms timeout, while the next call waits
				}
				timeout := 15 * time.Millisecond
				if delay == "0" {
					timeout = 10 * time.Second
				}
				resp, err := c.InvokeSyncTimeout(context.Background(), s.Addr(), NewRequest(SendMessage, map[string]string{"id": id, "delay": delay}, []byte(id)), timeout)
				if err != nil {
					if delay == "0" || !errors.Is(err, ErrTimeout) {
						t.Errorf("call %s (delay %s): %v", id, delay, err)
					}
					timeouts.Add(1)
					continue
				}
				ok.Add(1)
				if resp.ExtFields["id"] != id || string(resp.Body) != id {
					t.Errorf("call %s got the answer of %s", id, resp.ExtFields["id"])
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("ok %d timeouts %d", ok.Load(), timeouts.Load())
	if conn := clientConn(c, s.Addr()); conn != nil {
		testkit.WaitFor(t, 5*time.Second, func() bool { return conn.pendingLen() == 0 }, "no pending calls")
	}
}

// TestSlowReaderDoesNotStallOthers: a raw client floods inline requests and reads
// nothing; the server keeps answering another client, and closes the flooding
// connection within about its write timeout; held bytes stay bounded.
func TestSlowReaderDoesNotStallOthers(t *testing.T) {
	s := startServer(t, ServerConfig{WriteTimeout: 500 * time.Millisecond, MaxQueuedBytesPerConn: 1 << 20})
	s.HandleInline(SendMessage, echoHandler)
	nc := rawDial(t, s.Addr())
	body := make([]byte, 16<<10)
	var burst []byte
	for i := 0; i < 64; i++ {
		req := NewRequest(SendMessage, map[string]string{"i": strconv.Itoa(i)}, body)
		req.Opaque = int32(i + 1)
		f, err := req.Encode()
		if err != nil {
			t.Fatal(err)
		}
		burst = append(burst, f...)
	}
	stop := make(chan struct{})
	floodDone := make(chan error, 1)
	go func() {
		var err error
		for k := 0; k < 2000; k++ { // bounded: at most ~2 GB, stops when the server closes
			select {
			case <-stop:
				floodDone <- nil
				return
			default:
			}
			_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err = nc.Write(burst); err != nil {
				break
			}
		}
		floodDone <- err
	}()
	c := newClient(t, ClientConfig{})
	var maxOut int64
	start := time.Now()
	closed := false
	for i := 0; i < 100000 && !closed && time.Since(start) < 10*time.Second; i++ {
		if _, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(SendMessage, nil, []byte("x"))); err != nil {
			t.Fatalf("other client stalled: %v", err)
		}
		s.mu.Lock()
		for _, sc := range s.conns {
			if o := sc.outBytes.Load(); o > maxOut {
				maxOut = o
			}
		}
		s.mu.Unlock()
		select {
		case err := <-floodDone:
			closed = true
			t.Logf("flooder stopped after %v: %v", time.Since(start), err)
		default:
		}
	}
	if !closed {
		close(stop)
		<-floodDone
		t.Fatalf("flooding connection not closed after %v", time.Since(start))
	}
	t.Logf("max queued bytes on a server conn %d", maxOut)
	if maxOut > 2<<20 {
		t.Fatalf("queued %d bytes, limit 1 MiB", maxOut)
	}
}

// TestPeerClosesDuringBigDirectWrite: the peer closes while a 4 MiB request is
// being written (its rest by the writer); the call fails with a connection error, and
// the next call re-dials and works.
func TestPeerClosesDuringBigDirectWrite(t *testing.T) {
	c := newClient(t, ClientConfig{})
	for round := 0; round < 20; round++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := c.InvokeSync(ctxTimeout(t, 10*time.Second), ln.Addr().String(), NewRequest(SendMessage, nil, make([]byte, 4<<20)))
			errc <- err
		}()
		nc, err := ln.Accept()
		_ = ln.Close() // a re-dial is refused
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.CopyN(io.Discard, nc, int64(round*50000))
		_ = nc.Close()
		select {
		case err := <-errc:
			var ce *ConnError
			if !errors.As(err, &ce) && !strings.Contains(err.Error(), "refused") {
				t.Fatalf("round %d: want ConnError or a refused dial, got %v", round, err)
			}
			if errors.Is(err, ErrTimeout) {
				t.Fatalf("round %d: timed out: %v", round, err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: call did not end", round)
		}
	}
}

// TestShutdownWhileInlineAnswersHeld: Shutdown while the reader holds answers of a
// burst of inline requests and more keep arriving: every call ends (answered or a
// connection error), Shutdown returns, no goroutine is left (TestMain's goleak).
func TestShutdownWhileInlineAnswersHeld(t *testing.T) {
	for round := 0; round < 10; round++ {
		s, err := NewServer(ServerConfig{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		s.HandleInline(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
			runtime.Gosched()
			return echoHandler(ctx, conn, req)
		})
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		c, err := NewClient(ClientConfig{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var answered, failed atomic.Int64
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, err := c.InvokeSync(ctx, s.Addr(), NewRequest(SendMessage, nil, []byte("b")))
					cancel()
					if err != nil {
						failed.Add(1)
						if errors.Is(err, ErrTimeout) {
							t.Errorf("call timed out instead of failing fast: %v", err)
						}
						return
					}
					answered.Add(1)
				}
			}()
		}
		testkit.WaitFor(t, 5*time.Second, func() bool { return answered.Load() > int64(50*round+20) || answered.Load() > 500 }, "some answers")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("round %d shutdown: %v", round, err)
		}
		cancel()
		wg.Wait()
		_ = c.Close()
	}
}

// TestInvokeSyncTimeoutHugeTimeout: a timeout of math.MaxInt64 (the largest
// time.Duration, "no practical limit") must not fail the call at once.
func TestInvokeSyncTimeoutHugeTimeout(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		select {
		case <-time.After(100 * time.Millisecond): // a little longer than one sweep
		case <-ctx.Done():
		}
		return echoHandler(ctx, conn, req)
	})
	c := newClient(t, ClientConfig{})
	for _, d := range []time.Duration{time.Duration(1<<63 - 1), 250 * 365 * 24 * time.Hour} {
		if _, err := c.InvokeSyncTimeout(context.Background(), s.Addr(), NewRequest(SendMessage, nil, []byte("x")), d); err != nil {
			t.Errorf("timeout %v: %v", d, err)
		}
	}
}

// TestCancelMidCall: callers cancel their contexts at varying points (before the
// write, during a 1 MiB write, while waiting); answers that arrive match their calls,
// no pending entry is left, and the connection stays usable.
func TestCancelMidCall(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(SendMessage, sumHandler)
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		runtime.Gosched()
		return sumHandler(ctx, conn, req)
	})
	c := newClient(t, ClientConfig{})
	const goroutines, rounds = 16, 60
	var wg sync.WaitGroup
	var ok, cancelled, lat atomic.Int64
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				id := strconv.Itoa(g) + "/" + strconv.Itoa(i)
				size := 50 + (g*131+i*17)%2000
				if (g+i)%9 == 0 {
					size = 1 << 20
				}
				body := testkit.SeqBody(g*1000+i, size, 3)
				code := SendMessage
				if i%2 == 1 {
					code = PullMessage
				}
				ctx, cancel := context.WithCancel(context.Background())
				switch i % 5 {
				case 0:
					cancel()
				case 1:
					go func() { runtime.Gosched(); cancel() }()
				case 2, 3:
					time.AfterFunc(time.Duration((g*7+i)%40)*100*time.Microsecond, cancel)
				case 4: // not cancelled: must be answered
				}
				callStart := time.Now()
				var resp *RemotingCommand
				var err error
				if i%2 == 0 {
					resp, err = c.InvokeSync(ctx, s.Addr(), NewRequest(code, map[string]string{"id": id}, body))
				} else {
					resp, err = c.InvokeSyncTimeout(ctx, s.Addr(), NewRequest(code, map[string]string{"id": id}, body), 10*time.Second)
				}
				cancel()
				if i%5 == 4 {
					lat.Add(int64(time.Since(callStart)))
				}
				if err != nil {
					if i%5 == 4 || !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
						t.Errorf("call %s: %v", id, err)
					}
					cancelled.Add(1)
					continue
				}
				ok.Add(1)
				if resp.ExtFields["id"] != id || resp.Remark != testkit.Sum(body) {
					t.Errorf("call %s got answer of %s", id, resp.ExtFields["id"])
				}
			}
		}()
	}
	wg.Wait()
	conn := clientConn(c, s.Addr())
	if conn == nil || conn.Err() != nil {
		t.Fatalf("connection lost")
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return conn.pendingLen() == 0 }, "no pending calls")
	if _, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(SendMessage, map[string]string{"id": "last"}, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	t.Logf("answered %d, cancelled %d, mean latency of uncancelled calls %v", ok.Load(), cancelled.Load(), time.Duration(lat.Load()/int64(goroutines*rounds/5)))
}

// slowReader reads at most 7 KiB per Read and yields every so often, so that the server's
// socket buffer fills and its writes are partial.
type slowReader struct {
	nc net.Conn
	n  int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(p) > 7<<10 {
		p = p[:7<<10]
	}
	r.n++
	if r.n%64 == 0 {
		runtime.Gosched()
	}
	return r.nc.Read(p)
}

// TestPartialServerWritesDoNotInterleave: a raw client pipelines requests whose
// answers are big (goroutine handler, written directly by the handler, its rest by the
// writer) and small (inline, written by the reader per burst) and reads them slowly:
// every answer frame decodes, belongs to a request, and carries its body intact.
func TestPartialServerWritesDoNotInterleave(t *testing.T) {
	for _, shape := range []string{"big-and-small", "inline-60k", "pingpong"} {
		t.Run(shape, func(t *testing.T) { partialWrites(t, shape) })
	}
}

func partialWrites(t *testing.T, shape string) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(SendMessage, sumHandler)
	s.Handle(PullMessage, sumHandler)
	// The requests are built before the connection is made: under -race on a loaded
	// machine building 300 frames (some of 2 MiB) can take longer than the server's
	// FirstRequestTimeout (10 s), which would close the idle connection before the first
	// request (the test then read EOF at answer 0).
	const n = 300
	sums := make(map[int32]string, n)
	var out []byte
	for i := 0; i < n; i++ {
		code, size := SendMessage, 20+i%300
		if shape == "inline-60k" || shape == "pingpong" {
			size = 60<<10 + i
		} else if i%25 == 3 {
			code, size = PullMessage, 2<<20+i
		}
		body := testkit.SeqBody(i, size, 9)
		req := NewRequest(code, map[string]string{"i": strconv.Itoa(i)}, body)
		req.Opaque = int32(i + 1)
		sums[req.Opaque] = testkit.Sum(body)
		f, err := req.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f...)
	}
	d := net.Dialer{Control: func(network, address string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); err != nil {
			return err
		}
		return serr
	}}
	nc, err := d.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A small send buffer on the server's side too: its writes are partial often.
	testkit.WaitFor(t, 5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, sc := range s.conns {
			_ = sc.nc.(*net.TCPConn).SetWriteBuffer(4096)
			return true
		}
		return false
	}, "the server's connection")
	_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
	r := &slowReader{nc: nc}
	if shape == "pingpong" { // one request at a time: each answer is written directly, mostly in part
		for k := 0; k < n; k++ {
			req := NewRequest(SendMessage, map[string]string{"i": strconv.Itoa(k)}, testkit.SeqBody(k, 60<<10+k, 9))
			req.Opaque = int32(k + 1)
			f, err := req.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nc.Write(f); err != nil {
				t.Fatal(err)
			}
			f, err = ReadFrame(r, 0)
			if err != nil {
				t.Fatalf("answer %d: %v", k, err)
			}
			resp, _, err := DecodeFrame(f)
			if err != nil || resp.Opaque != int32(k+1) || testkit.Sum(resp.Body) != sums[int32(k+1)] {
				t.Fatalf("answer %d: opaque %d, err %v", k, resp.Opaque, err)
			}
		}
		return
	}
	werr := make(chan error, 1)
	go func() {
		// in bursts, so that the server's reader sees some complete frames at a time
		var err error
		for off := 0; off < len(out) && err == nil; off += 100 << 10 {
			_, err = nc.Write(out[off:min(off+100<<10, len(out))])
		}
		werr <- err
	}()
	for k := 0; k < n; k++ {
		f, err := ReadFrame(r, 0)
		if err != nil {
			t.Fatalf("answer %d: %v", k, err)
		}
		resp, _, err := DecodeFrame(f)
		if err != nil {
			t.Fatalf("answer %d: %v", k, err)
		}
		want, ok := sums[resp.Opaque]
		if !ok {
			t.Fatalf("answer %d: unknown or repeated opaque %d", k, resp.Opaque)
		}
		delete(sums, resp.Opaque)
		if resp.Remark != want || testkit.Sum(resp.Body) != want {
			t.Fatalf("answer %d (opaque %d): body corrupt", k, resp.Opaque)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}

// TestInvokeAsyncTimeoutHugeTimeout: the same for InvokeAsyncTimeout (SendAsync).
func TestInvokeAsyncTimeoutHugeTimeout(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
		return echoHandler(ctx, conn, req)
	})
	c := newClient(t, ClientConfig{})
	done := make(chan error, 1)
	if err := c.InvokeAsyncTimeout(context.Background(), s.Addr(), NewRequest(SendMessage, nil, []byte("x")), time.Duration(1<<63-1), func(resp *RemotingCommand, err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("timeout %v: %v", time.Duration(1<<63-1), err)
	}
}
