package remoting

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/testkit"
)

// closeRecorder collects the close cause of server conns by remote address.
type closeRecorder struct {
	mu     sync.Mutex
	causes map[string]error
}

func recordCloses(s *Server) *closeRecorder {
	r := &closeRecorder{causes: map[string]error{}}
	s.OnConnClose(func(c *Conn) {
		r.mu.Lock()
		r.causes[c.RemoteAddr()] = c.Err()
		r.mu.Unlock()
	})
	return r
}

func (r *closeRecorder) cause(addr string) (error, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err, ok := r.causes[addr]
	return err, ok
}

// backgroundCaller keeps a well-behaved client calling the server until stopped.
type backgroundCaller struct {
	ok, failed atomic.Int64
	lastErr    atomic.Value
	stop       chan struct{}
	done       chan struct{}
}

func startBackgroundCaller(t *testing.T, c *Client, addr string) *backgroundCaller {
	b := &backgroundCaller{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for i := 0; ; i++ {
			select {
			case <-b.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			body := []byte{byte(i)}
			resp, err := c.InvokeSync(ctx, addr, NewRequest(HeartBeat, nil, body))
			cancel()
			if err != nil || !bytes.Equal(resp.Body, body) {
				b.failed.Add(1)
				b.lastErr.Store(errors.Join(err, errors.New("bad or missing echo")))
				continue
			}
			b.ok.Add(1)
		}
	}()
	return b
}

func (b *backgroundCaller) finish(t *testing.T) {
	t.Helper()
	close(b.stop)
	<-b.done
	if n := b.failed.Load(); n > 0 {
		t.Fatalf("well-behaved client had %d failed calls, last: %v", n, b.lastErr.Load())
	}
	if b.ok.Load() == 0 {
		t.Fatal("well-behaved client made no successful call")
	}
}

// expectClosed waits until the server closes nc (a read returns an error other than our deadline).
func expectClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	for {
		_, err := nc.Read(buf)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("server did not close the connection")
		}
		return
	}
}

func TestMalformedInputClosesOnlyThatConnection(t *testing.T) {
	const maxFrame = 64 << 10
	s := startServer(t, ServerConfig{MaxFrameSize: maxFrame})
	s.Handle(HeartBeat, echoHandler)
	rec := recordCloses(s)
	good := newClient(t, ClientConfig{})
	bg := startBackgroundCaller(t, good, s.Addr())
	testkit.WaitFor(t, 20*time.Second, func() bool { return bg.ok.Load() > 0 }, "first good call")
	goodBinary := newClient(t, ClientConfig{SerializeType: SerializeRocketMQ})
	bgBinary := startBackgroundCaller(t, goodBinary, s.Addr())
	testkit.WaitFor(t, 20*time.Second, func() bool { return bgBinary.ok.Load() > 0 }, "first good binary call")

	be32 := func(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
	frameWith := func(typeAndHeaderLen uint32, rest []byte) []byte {
		body := binary.BigEndian.AppendUint32(nil, typeAndHeaderLen)
		body = append(body, rest...)
		return lengthPrefix(body)
	}
	cases := []struct {
		name      string
		data      []byte
		halfClose bool
		wantFrame bool // cause is a *FrameError (else *HeaderError)
		wantIOEOF bool
		field     string // the *HeaderError's Field, when set
	}{
		{name: "negative length", data: be32(-8), wantFrame: true},
		{name: "length below 4", data: be32(3), wantFrame: true},
		{name: "length above max", data: be32(maxFrame), wantFrame: true},
		{name: "length above default max", data: be32(DefaultMaxFrameSize + 1), wantFrame: true},
		{name: "header length beyond frame", data: frameWith(100, []byte(`{"code":1}`)), wantFrame: true},
		{name: "unknown serialize type", data: frameWith(7<<24|2, []byte(`{}`)), wantFrame: true},
		{name: "invalid JSON header", data: frameWith(10, []byte(`{not json}`))},
		{name: "truncated JSON header", data: frameWith(15, []byte(`{"code":10,"lan`))},
		{name: "truncated binary header", data: frameWith(1<<24|5, []byte{0, 10, 9, 1, 61})},
		{name: "binary remark length negative", data: binaryFrame(be32(-1), nil), field: "remark"},
		{name: "binary remark beyond header", data: binaryFrame(append(be32(50), "short"...), nil), field: "remark"},
		{name: "binary ext key beyond block", data: binaryFrame(be32(0), []byte{0, 40, 'k'}), field: "extFields"},
		{name: "binary ext value length negative", data: binaryFrame(be32(0), append([]byte{0, 1, 'k'}, be32(-3)...)), field: "extFields"},
		{name: "binary trailing bytes", data: lengthPrefix(append(binary.BigEndian.AppendUint32(nil, 1<<24|(13+4+4+1)),
			append(append(append([]byte{0, 10, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, be32(0)...), be32(0)...), 0xEE)...)), field: "header"},
		{name: "stream ends inside frame", data: append(be32(100), []byte("{\"code\"")...), halfClose: true, wantFrame: true, wantIOEOF: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nc := rawDial(t, s.Addr())
			local := nc.LocalAddr().String()
			if _, err := nc.Write(tc.data); err != nil {
				t.Fatal(err)
			}
			if tc.halfClose {
				_ = nc.(*net.TCPConn).CloseWrite()
			}
			expectClosed(t, nc)
			var cause error
			testkit.WaitFor(t, 20*time.Second, func() bool {
				var ok bool
				cause, ok = rec.cause(local)
				return ok
			}, "close listener")
			var fe *FrameError
			var he *HeaderError
			switch {
			case tc.wantFrame && !errors.As(cause, &fe):
				t.Fatalf("close cause %v, want a *FrameError", cause)
			case !tc.wantFrame && !errors.As(cause, &he):
				t.Fatalf("close cause %v, want a *HeaderError", cause)
			case tc.wantIOEOF && !errors.Is(cause, io.ErrUnexpectedEOF):
				t.Fatalf("close cause %v, want io.ErrUnexpectedEOF", cause)
			case tc.field != "" && he.Field != tc.field:
				t.Fatalf("close cause %v, want a *HeaderError for %s", cause, tc.field)
			}
		})
	}
	bg.finish(t)
	bgBinary.finish(t)
	if n := s.Conns(); n != 2 {
		t.Fatalf("server has %d conns, want only the good clients' two", n)
	}
}

// binaryFrame is a length-prefixed frame with a binary header: code 10, language 9,
// version 0, opaque 1, flag 0, then remark (its length field and bytes, as given) and
// the ext block ext with its length field.
func binaryFrame(remark, ext []byte) []byte {
	h := []byte{0, 10, 9, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}
	h = append(h, remark...)
	h = binary.BigEndian.AppendUint32(h, uint32(len(ext)))
	h = append(h, ext...)
	return lengthPrefix(append(binary.BigEndian.AppendUint32(nil, 1<<24|uint32(len(h))), h...))
}

func TestNonReadingClientDoesNotStallOthers(t *testing.T) {
	// The write timeout applies to every connection: short enough that the non-reading
	// client is dropped well within the wait below, long enough that the good client's
	// writer, starved of CPU for a moment under -race on loaded cores, is not taken for a
	// peer that stopped reading (200 ms was not: its connection was closed at times).
	s := startServer(t, ServerConfig{WriteTimeout: 2 * time.Second, WriteQueueSize: 2})
	big := bytes.Repeat([]byte("x"), 1<<20)
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		resp := NewResponse(Success, "")
		resp.Body = big
		return resp
	})
	s.Handle(HeartBeat, echoHandler)
	rec := recordCloses(s)

	stuck := rawDial(t, s.Addr())
	local := stuck.LocalAddr().String()
	writerDone := make(chan struct{})
	go func() { // floods requests and never reads a byte
		defer close(writerDone)
		_ = stuck.SetWriteDeadline(time.Now().Add(10 * time.Second))
		for i := 0; i < 200; i++ {
			req := NewRequest(PullMessage, nil, nil)
			req.Opaque = int32(i + 1)
			f, _ := req.Encode()
			if _, err := stuck.Write(f); err != nil {
				return
			}
		}
	}()

	good := newClient(t, ClientConfig{})
	bg := startBackgroundCaller(t, good, s.Addr())
	var cause error
	testkit.WaitFor(t, 10*time.Second, func() bool {
		var ok bool
		cause, ok = rec.cause(local)
		return ok
	}, "server to drop the non-reading client")
	// Keep calling a little after the drop, then check that no call failed.
	after := bg.ok.Load()
	testkit.WaitFor(t, 5*time.Second, func() bool { return bg.ok.Load() > after+5 }, "more good calls")
	bg.finish(t)
	if cause == nil || !(strings.Contains(cause.Error(), "write") || strings.Contains(cause.Error(), "not reading")) {
		t.Fatalf("close cause %v, want a write timeout or full queue", cause)
	}
	t.Logf("non-reading client dropped: %v", cause)
	_ = stuck.Close()
	<-writerDone
}

func TestBrokenConnectionFailsPendingPromptlyAndRedials(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(HeartBeat, echoHandler)
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		conn.Close() // the server drops the connection while the call is pending
		return nil
	})
	c := newClient(t, ClientConfig{})
	if _, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); err != nil {
		t.Fatal(err)
	}
	first := clientConn(c, s.Addr())

	ctx := ctxTimeout(t, time.Minute)
	_, err := c.InvokeSync(ctx, s.Addr(), NewRequest(PullMessage, nil, nil))
	var ce *ConnError
	if !errors.As(err, &ce) || errors.Is(err, ErrTimeout) {
		t.Fatalf("want *ConnError, got %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("pending call failed only at its timeout")
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return clientConn(c, s.Addr()) != first }, "cached conn dropped")
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, []byte("again")))
	if err != nil || string(resp.Body) != "again" {
		t.Fatalf("re-dial: %v %v", resp, err)
	}
	if second := clientConn(c, s.Addr()); second == nil || second == first {
		t.Fatal("expected a new connection")
	}

	// CloseConn from the caller side fails pending calls the same way.
	release := make(chan struct{})
	defer close(release)
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	errc := make(chan error, 1)
	go func() {
		_, err := c.InvokeSync(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil))
		errc <- err
	}()
	testkit.WaitFor(t, 20*time.Second, func() bool {
		cc := clientConn(c, s.Addr())
		return cc != nil && cc.pendingLen() == 1
	}, "pending call")
	c.CloseConn(s.Addr())
	if err := <-errc; !errors.As(err, &ce) || !errors.Is(err, ErrClosed) {
		t.Fatalf("after CloseConn: %v", err)
	}
}

func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	c := newClient(t, ClientConfig{})
	_, err = c.InvokeSync(ctxTimeout(t, 20*time.Second), addr, NewRequest(HeartBeat, nil, nil))
	var ce *ConnError
	if !errors.As(err, &ce) || ce.Op != "dial" || ce.Addr != addr {
		t.Fatalf("want dial *ConnError, got %v", err)
	}
	if err := c.InvokeAsync(ctxTimeout(t, 20*time.Second), addr, NewRequest(HeartBeat, nil, nil), func(*RemotingCommand, error) {
		t.Error("callback must not run when InvokeAsync fails")
	}); !errors.As(err, &ce) {
		t.Fatalf("async: want *ConnError, got %v", err)
	}
}

func TestCloseAndShutdownLeaveNoGoroutines(t *testing.T) {
	s, err := NewServer(ServerConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 10)
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		started <- struct{}{}
		<-ctx.Done() // long polling until the connection goes away
		return NewResponse(PullNotFound, "")
	})
	s.Handle(HeartBeat, echoHandler)
	c, err := NewClient(ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c.RegisterHandler(NotifyConsumerIDsChanged, func(ctx context.Context, addr string, req *RemotingCommand) *RemotingCommand {
		return nil
	})
	if _, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); err != nil {
		t.Fatal(err)
	}
	syncErr := make(chan error, 1)
	go func() {
		_, err := c.InvokeSync(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil))
		syncErr <- err
	}()
	asyncErr := make(chan error, 1)
	if err := c.InvokeAsync(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil), func(r *RemotingCommand, err error) {
		asyncErr <- err
	}); err != nil {
		t.Fatal(err)
	}
	<-started
	<-started

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan error{syncErr, asyncErr} {
		var ce *ConnError
		if err := <-ch; !errors.Is(err, ErrClosed) || !errors.As(err, &ce) {
			t.Fatalf("pending call after Close: %v", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := c.InvokeSync(ctxTimeout(t, time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
	if err := s.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal("second Shutdown:", err)
	}
	goleak.VerifyNone(t)
}

func TestShutdownWaitsForHandlersUpToContext(t *testing.T) {
	s, err := NewServer(ServerConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	running := make(chan struct{})
	s.Handle(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		close(running)
		<-release // ignores ctx on purpose
		return NewResponse(Success, "")
	})
	var closed atomic.Int32
	s.OnConnClose(func(*Conn) { closed.Add(1) })
	c := newClient(t, ClientConfig{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.InvokeSync(context.Background(), s.Addr(), NewRequest(SendMessage, nil, nil))
		errc <- err
	}()
	<-running
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a stuck handler: %v", err)
	}
	var ce *ConnError
	if err := <-errc; !errors.As(err, &ce) {
		t.Fatalf("client call during shutdown: %v", err)
	}
	if closed.Load() != 1 {
		t.Fatalf("OnConnClose calls: %d", closed.Load())
	}
	close(release)
	if err := s.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start after Shutdown succeeded")
	}
	// New connections are refused after shutdown.
	if _, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		t.Fatal("dial after Shutdown succeeded")
	}
}

func TestIdleConnectionClosed(t *testing.T) {
	s := startServer(t, ServerConfig{IdleTimeout: 150 * time.Millisecond})
	rec := recordCloses(s)
	release := make(chan struct{})
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		<-release
		return NewResponse(Success, "held")
	})
	c := newClient(t, ClientConfig{})
	errc := make(chan error, 1)
	go func() { // a long-polling call: its connection is silent but must not be closed as idle
		resp, err := c.InvokeSync(ctxTimeout(t, 30*time.Second), s.Addr(), NewRequest(PullMessage, nil, nil))
		if err == nil && resp.Remark != "held" {
			err = errors.New("wrong response")
		}
		errc <- err
	}()
	testkit.WaitFor(t, 20*time.Second, func() bool { return s.Conns() == 1 }, "client connection")

	idle := rawDial(t, s.Addr())
	local := idle.LocalAddr().String()
	expectClosed(t, idle)
	testkit.WaitFor(t, 20*time.Second, func() bool { _, ok := rec.cause(local); return ok }, "idle close recorded")
	if cause, _ := rec.cause(local); cause == nil || !bytes.Contains([]byte(cause.Error()), []byte("idle")) {
		t.Fatalf("close cause %v", cause)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("busy connection was disturbed: %v", err)
	}
}

func TestOversizedOutgoingFrameRejected(t *testing.T) {
	s := startServer(t, ServerConfig{MaxFrameSize: 4096})
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		resp := NewResponse(Success, "")
		resp.Body = make([]byte, 8192)
		return resp
	})
	s.Handle(HeartBeat, echoHandler)
	c := newClient(t, ClientConfig{MaxFrameSize: 4096})
	_, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(SendMessage, nil, make([]byte, 8192)))
	var fe *FrameError
	if !errors.As(err, &fe) {
		t.Fatalf("want *FrameError for an oversized request, got %v", err)
	}
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(PullMessage, nil, nil))
	if err != nil || resp.ResponseCode() != SystemError {
		t.Fatalf("oversized response should become SYSTEM_ERROR: %v %v", resp, err)
	}
	resp, err = c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, []byte("still fine")))
	if err != nil || string(resp.Body) != "still fine" {
		t.Fatalf("%v %v", resp, err)
	}
}
