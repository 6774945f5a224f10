package remoting

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

func TestSyncAsyncOneway(t *testing.T) {
	oneways := make(chan *RemotingCommand, 1)
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, echoHandler)
	s.Handle(UpdateConsumerOffset, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		oneways <- req
		return NewResponse(Success, "must not be sent")
	})
	c := newClient(t, ClientConfig{})

	// Sync.
	req := NewRequest(SendMessage, map[string]string{"topic": "T", "queueId": "2"}, []byte("payload"))
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), req)
	if err != nil {
		t.Fatal(err)
	}
	if req.Opaque == 0 || resp.Opaque != req.Opaque || !resp.IsResponse() || resp.ResponseCode() != Success {
		t.Fatalf("bad response %v for request %v", resp, req)
	}
	if resp.ExtFields["topic"] != "T" || string(resp.Body) != "payload" || resp.Language != LanguageGo || resp.Version != DefaultVersion {
		t.Fatalf("bad echo: %#v", resp)
	}

	// Async: many concurrent calls, each callback exactly once with its own answer.
	const n = 50
	var wg sync.WaitGroup
	var calls atomic.Int32
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		body := fmt.Sprintf("async-%d", i)
		err := c.InvokeAsync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(SendMessage, nil, []byte(body)),
			func(resp *RemotingCommand, err error) {
				defer wg.Done()
				calls.Add(1)
				if err != nil {
					errs <- err
				} else if string(resp.Body) != body {
					errs <- fmt.Errorf("got body %q, want %q", resp.Body, body)
				}
			})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if calls.Load() != n {
		t.Fatalf("callbacks: %d, want %d", calls.Load(), n)
	}

	// Oneway: flag bit1 set on the wire, handler sees it, and no response is written.
	ow := NewRequest(UpdateConsumerOffset, map[string]string{"consumerGroup": "g"}, nil)
	if err := c.InvokeOneway(ctxTimeout(t, 20*time.Second), s.Addr(), ow); err != nil {
		t.Fatal(err)
	}
	got := <-oneways
	if !got.IsOneway() || got.Flag != FlagOneway || got.ExtFields["consumerGroup"] != "g" {
		t.Fatalf("oneway request arrived as %v", got)
	}
	// Over a raw connection: after a oneway request, the next frame read must be the
	// answer to a following sync request.
	nc := rawDial(t, s.Addr())
	ow2 := NewRequest(UpdateConsumerOffset, nil, nil)
	ow2.Opaque, ow2.Flag = 100, FlagOneway
	f1, _ := ow2.Encode()
	sync2 := NewRequest(SendMessage, nil, []byte("x"))
	sync2.Opaque = 101
	f2, _ := sync2.Encode()
	if _, err := nc.Write(f1); err != nil {
		t.Fatal(err)
	}
	<-oneways
	r, _ := rawRoundTrip(t, nc, f2)
	if r.Opaque != 101 {
		t.Fatalf("first frame after a oneway request has opaque %d, want 101", r.Opaque)
	}
}

func TestInvokeSyncTimeoutRemovesPending(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, ServerConfig{})
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return NewResponse(PullNotFound, "late")
	})
	s.Handle(SendMessage, echoHandler)
	c := newClient(t, ClientConfig{})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.InvokeSync(ctx, s.Addr(), NewRequest(PullMessage, nil, nil))
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrTimeout wrapping DeadlineExceeded, got %v", err)
	}
	conn := clientConn(c, s.Addr())
	if conn == nil {
		t.Fatal("no cached connection")
	}
	if n := conn.pendingLen(); n != 0 {
		t.Fatalf("pending entries after timeout: %d", n)
	}
	close(release) // the late response arrives and is dropped
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(SendMessage, nil, []byte("next")))
	if err != nil || string(resp.Body) != "next" {
		t.Fatalf("call after timeout: %v %v", resp, err)
	}
	if clientConn(c, s.Addr()) != conn {
		t.Fatal("a timeout must not drop the connection")
	}
}

func TestInvokeAsyncTimeout(t *testing.T) {
	s := startServer(t, ServerConfig{})
	stallPulls(t, s)
	c := newClient(t, ClientConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	results := make(chan error, 2)
	err := c.InvokeAsync(ctx, s.Addr(), NewRequest(PullMessage, nil, nil), func(r *RemotingCommand, err error) {
		results <- err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-results; !errors.Is(err, ErrTimeout) {
		t.Fatalf("want ErrTimeout, got %v", err)
	}
	if n := clientConn(c, s.Addr()).pendingLen(); n != 0 {
		t.Fatalf("pending entries after async timeout: %d", n)
	}
	// Already-expired context: InvokeAsync fails with ErrTimeout and never calls cb.
	if err := c.InvokeAsync(ctx, s.Addr(), NewRequest(PullMessage, nil, nil), func(r *RemotingCommand, err error) {
		results <- err
	}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("want ErrTimeout for an expired context, got %v", err)
	}
	if _, err := c.InvokeSync(ctx, s.Addr(), NewRequest(PullMessage, nil, nil)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("sync with an expired context: %v", err)
	}
	if err := c.InvokeOneway(ctx, s.Addr(), NewRequest(PullMessage, nil, nil)); !errors.Is(err, ErrTimeout) {
		t.Fatalf("oneway with an expired context: %v", err)
	}
	if len(results) != 0 {
		t.Fatal("callback called more than once")
	}
}

func TestServerInitiatedRequest(t *testing.T) {
	s := startServer(t, ServerConfig{})
	// The broker-side handler calls back into the client over the same connection,
	// as a broker does for GET_CONSUMER_RUNNING_INFO.
	s.Handle(HeartBeat, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		info, err := conn.Invoke(ctx, NewRequest(GetConsumerRunningInfo, map[string]string{"consumerGroup": "g1"}, nil))
		if err != nil {
			return NewResponse(SystemError, err.Error())
		}
		unknown, err := conn.Invoke(ctx, NewRequest(ConsumeMessageDirectly, nil, nil))
		if err != nil {
			return NewResponse(SystemError, err.Error())
		}
		resp := NewResponse(Success, "")
		resp.Body = info.Body
		resp.SetExt("unknownCode", fmt.Sprint(unknown.Code)).SetExt("unknownRemark", unknown.Remark)
		return resp
	})
	c := newClient(t, ClientConfig{})
	var fromAddr atomic.Value
	c.RegisterHandler(GetConsumerRunningInfo, func(ctx context.Context, addr string, req *RemotingCommand) *RemotingCommand {
		fromAddr.Store(addr)
		resp := NewResponse(Success, "")
		resp.Body = []byte("running:" + req.ExtFields["consumerGroup"])
		return resp
	})
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.ResponseCode() != Success || string(resp.Body) != "running:g1" {
		t.Fatalf("got %v body %q", resp, resp.Body)
	}
	if fromAddr.Load() != s.Addr() {
		t.Fatalf("handler addr %v, want %s", fromAddr.Load(), s.Addr())
	}
	if resp.ExtFields["unknownCode"] != "3" || resp.ExtFields["unknownRemark"] != "request type 309 not supported" {
		t.Fatalf("client answer to an unregistered code: %v", resp.ExtFields)
	}
}

func TestUnknownCodeAndDefaultHandler(t *testing.T) {
	s := startServer(t, ServerConfig{})
	c := newClient(t, ClientConfig{})
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(RequestCode(999), nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.ResponseCode() != RequestCodeNotSupported || resp.Remark != "request type 999 not supported" {
		t.Fatalf("got %v", resp)
	}
	s.SetDefaultHandler(func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		return NewResponse(TopicNotExist, "default")
	})
	resp, err = c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(RequestCode(999), nil, nil))
	if err != nil || resp.ResponseCode() != TopicNotExist || resp.Remark != "default" {
		t.Fatalf("default handler: %v %v", resp, err)
	}
	var re *ResponseError
	if !errors.As(resp.ResponseErr(), &re) || re.Code != TopicNotExist {
		t.Fatalf("ResponseErr: %v", resp.ResponseErr())
	}
}

func TestHandlerPanic(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		if string(req.Body) == "boom" {
			panic("kaboom in handler")
		}
		return echoHandler(ctx, conn, req)
	})
	c := newClient(t, ClientConfig{})
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(SendMessage, nil, []byte("boom")))
	if err != nil {
		t.Fatal(err)
	}
	if resp.ResponseCode() != SystemError || !strings.Contains(resp.Remark, "kaboom in handler") {
		t.Fatalf("got %v", resp)
	}
	for i := 0; i < 3; i++ {
		resp, err = c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(SendMessage, nil, []byte("ok")))
		if err != nil || string(resp.Body) != "ok" {
			t.Fatalf("after panic: %v %v", resp, err)
		}
	}
}

func TestBinaryRequestAnsweredInBinary(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, echoHandler)
	nc := rawDial(t, s.Addr())
	req := NewRequest(SendMessage, map[string]string{"a": "b"}, []byte("bin"))
	req.Opaque = 77
	f, _ := req.EncodeBinary()
	resp, st := rawRoundTrip(t, nc, f)
	if st != SerializeRocketMQ || resp.Opaque != 77 || !resp.IsResponse() || string(resp.Body) != "bin" || resp.ExtFields["a"] != "b" {
		t.Fatalf("got %v (%v)", resp, st)
	}
	// A Java-style JSON request is answered in JSON.
	h := `{"code":10,"extFields":{"a":"c"},"flag":0,"language":"JAVA","opaque":78,"serializeTypeCurrentRPC":"JSON","version":409}`
	resp, st = rawRoundTrip(t, nc, append(lengthPrefix(jsonFrame(h, nil)), nil...))
	if st != SerializeJSON || resp.Opaque != 78 || resp.ExtFields["a"] != "c" {
		t.Fatalf("got %v (%v)", resp, st)
	}
}

// lengthPrefix prepends the 4-byte length field to a frame body.
func lengthPrefix(frame []byte) []byte {
	out := make([]byte, 4, 4+len(frame))
	out[0], out[1], out[2], out[3] = byte(len(frame)>>24), byte(len(frame)>>16), byte(len(frame)>>8), byte(len(frame))
	return append(out, frame...)
}

func TestSystemBusyBeyondMaxInFlight(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	s := startServer(t, ServerConfig{MaxInFlightPerConn: 2})
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		started.Add(1)
		<-release
		return NewResponse(Success, "")
	})
	c := newClient(t, ClientConfig{})
	results := make(chan *RemotingCommand, 2)
	for i := 0; i < 2; i++ {
		if err := c.InvokeAsync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(PullMessage, nil, nil), func(r *RemotingCommand, err error) {
			results <- r
		}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return started.Load() == 2 }, "two handlers running")
	resp, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(PullMessage, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.ResponseCode() != SystemBusy || !strings.Contains(resp.Remark, "limit 2") {
		t.Fatalf("got %v", resp)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if r := <-results; r == nil || r.ResponseCode() != Success {
			t.Fatalf("in-flight call %d: %v", i, r)
		}
	}
}

// TestHandleInline: requests of an inline code from one connection are handled one at a
// time in arrival order on the reader, and answered; a request of an ordinary code that
// blocks does not hold them up; Handle makes the code ordinary again; after Shutdown
// begins nothing is inline.
func TestHandleInline(t *testing.T) {
	s := startServer(t, ServerConfig{})
	var active, maxActive atomic.Int32
	var mu sync.Mutex
	var order []string
	s.HandleInline(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		n := active.Add(1)
		defer active.Add(-1)
		if n > maxActive.Load() {
			maxActive.Store(n)
		}
		mu.Lock()
		order = append(order, string(req.Body))
		mu.Unlock()
		return echoHandler(ctx, conn, req)
	})
	release := make(chan struct{})
	blocked := make(chan struct{})
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		close(blocked)
		<-release
		return NewResponse(Success, "")
	})
	c := newClient(t, ClientConfig{})

	pullDone := make(chan error, 1)
	if err := c.InvokeAsync(ctxTimeout(t, 10*time.Second), s.Addr(), NewRequest(PullMessage, nil, nil), func(_ *RemotingCommand, err error) { pullDone <- err }); err != nil {
		t.Fatal(err)
	}
	<-blocked
	const n = 300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		body := strconv.Itoa(i)
		if err := c.InvokeAsync(ctxTimeout(t, 10*time.Second), s.Addr(), NewRequest(SendMessage, nil, []byte(body)), func(resp *RemotingCommand, err error) {
			defer wg.Done()
			if err != nil {
				errs <- err
			} else if string(resp.Body) != body {
				errs <- fmt.Errorf("got body %q, want %q", resp.Body, body)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait() // all answered while the pull handler is still blocked
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	close(release)
	if err := <-pullDone; err != nil {
		t.Fatalf("blocked pull: %v", err)
	}
	if maxActive.Load() != 1 {
		t.Errorf("%d inline handlers ran at once, want 1", maxActive.Load())
	}
	mu.Lock()
	for i, b := range order {
		if b != strconv.Itoa(i) {
			t.Fatalf("inline request %d handled as number %d: order %v", atoi(b), i, order[:i+1])
		}
	}
	mu.Unlock()
	if len(order) != n {
		t.Fatalf("%d inline requests handled, want %d", len(order), n)
	}

	if !s.routeFor(int16(SendMessage)).inline || s.routeFor(int16(PullMessage)).inline {
		t.Fatal("isInline: want SEND_MESSAGE inline and PULL_MESSAGE not")
	}
	s.Handle(SendMessage, echoHandler)
	if s.routeFor(int16(SendMessage)).inline {
		t.Fatal("Handle after HandleInline: the code is still inline")
	}
	s.HandleInline(SendMessage, echoHandler)
	if err := s.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if s.routeFor(int16(SendMessage)).inline {
		t.Fatal("after Shutdown began a code is still inline")
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestHandleAsync: an async handler answers later from another goroutine; the request
// keeps its in-flight slot until then (SYSTEM_BUSY past MaxInFlightPerConn), a second
// reply is ignored, a panic before replying answers SYSTEM_ERROR, Before runs first, and
// Handle makes the code ordinary again.
func TestHandleAsync(t *testing.T) {
	s := startServer(t, ServerConfig{MaxInFlightPerConn: 4, Before: func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		if string(req.Body) == "refuse" {
			return NewResponse(NoPermission, "refused by Before")
		}
		return nil
	}})
	held := make(chan func(*RemotingCommand), 16)
	s.HandleAsync(SendMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand, reply func(*RemotingCommand)) {
		switch string(req.Body) {
		case "panic":
			panic("async handler test panic")
		case "now":
			reply(NewResponse(Success, "now"))
			reply(NewResponse(SystemError, "second reply")) // ignored
		default:
			body := append([]byte(nil), req.Body...)
			held <- func(r *RemotingCommand) { r.Body = body; reply(r) }
		}
	})
	c := newClient(t, ClientConfig{})
	call := func(body string) (*RemotingCommand, error) {
		return c.InvokeSync(ctxTimeout(t, 10*time.Second), s.Addr(), NewRequest(SendMessage, nil, []byte(body)))
	}
	type answer struct {
		resp *RemotingCommand
		err  error
	}
	answers := make(chan answer, 8)
	for i := range 4 {
		go func() {
			r, err := call("held" + strconv.Itoa(i))
			answers <- answer{r, err}
		}()
	}
	var replies []func(*RemotingCommand)
	for range 4 {
		replies = append(replies, <-held)
	}
	// Four requests hold the four slots: the fifth is told the connection is busy.
	if r, err := call("fifth"); err != nil || r.ResponseCode() != SystemBusy {
		t.Fatalf("fifth request with 4 unanswered: %v %v, want SYSTEM_BUSY", r, err)
	}
	select {
	case a := <-answers:
		t.Fatalf("answered before reply: %+v", a)
	default:
	}
	for _, reply := range replies {
		go reply(NewResponse(Success, "later"))
	}
	for range 4 {
		a := <-answers
		if a.err != nil || a.resp.ResponseCode() != Success || a.resp.Remark != "later" || !strings.HasPrefix(string(a.resp.Body), "held") {
			t.Fatalf("held request: %+v %v", a.resp, a.err)
		}
	}
	if r, err := call("now"); err != nil || r.ResponseCode() != Success || r.Remark != "now" {
		t.Fatalf("immediate reply: %v %v", r, err)
	}
	if r, err := call("panic"); err != nil || r.ResponseCode() != SystemError {
		t.Fatalf("panicking handler: %v %v, want SYSTEM_ERROR", r, err)
	}
	if r, err := call("refuse"); err != nil || r.ResponseCode() != NoPermission {
		t.Fatalf("Before: %v %v, want NO_PERMISSION", r, err)
	}
	// Slots were all released: four more can be held at once.
	for i := range 4 {
		go func() {
			r, err := call("again" + strconv.Itoa(i))
			answers <- answer{r, err}
		}()
	}
	for range 4 {
		(<-held)(NewResponse(Success, "later"))
	}
	for range 4 {
		if a := <-answers; a.err != nil || a.resp.ResponseCode() != Success {
			t.Fatalf("second round: %+v %v", a.resp, a.err)
		}
	}
	s.Handle(SendMessage, echoHandler)
	if s.routeFor(int16(SendMessage)).async != nil {
		t.Fatal("Handle after HandleAsync: the code is still async")
	}
	if r, err := call("echo"); err != nil || string(r.Body) != "echo" {
		t.Fatalf("after Handle: %v %v", r, err)
	}
}

// TestInvokeAsyncTimeoutSweep: InvokeAsyncTimeout fails an unanswered call with ErrTimeout
// (wrapping context.DeadlineExceeded) through the client's sweep, leaves no pending entry
// and keeps the connection; an answered call gets its response; a cancelled ctx still
// ends a call at once; a non-positive timeout is refused.
func TestInvokeAsyncTimeoutSweep(t *testing.T) {
	s := startServer(t, ServerConfig{})
	stallPulls(t, s)
	s.Handle(SendMessage, echoHandler)
	c := newClient(t, ClientConfig{})
	results := make(chan error, 4)
	if err := c.InvokeAsyncTimeout(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil), 30*time.Millisecond, func(_ *RemotingCommand, err error) {
		results <- err
	}); err != nil {
		t.Fatal(err)
	}
	if err := <-results; !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrTimeout wrapping DeadlineExceeded, got %v", err)
	}
	conn := clientConn(c, s.Addr())
	if n := conn.pendingLen(); n != 0 || conn.timed.Load() != 0 {
		t.Fatalf("after the sweep: %d pending, %d timed", n, conn.timed.Load())
	}
	answered := make(chan *RemotingCommand, 1)
	if err := c.InvokeAsyncTimeout(context.Background(), s.Addr(), NewRequest(SendMessage, nil, []byte("hi")), 10*time.Second, func(r *RemotingCommand, err error) {
		if err != nil {
			t.Error(err)
		}
		answered <- r
	}); err != nil {
		t.Fatal(err)
	}
	if r := <-answered; r == nil || string(r.Body) != "hi" {
		t.Fatalf("answered call: %v", r)
	}
	if conn.timed.Load() != 0 {
		t.Fatalf("answered call still counted as timed: %d", conn.timed.Load())
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := c.InvokeAsyncTimeout(ctx, s.Addr(), NewRequest(PullMessage, nil, nil), time.Hour, func(_ *RemotingCommand, err error) {
		results <- err
	}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-results; !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if clientConn(c, s.Addr()) != conn {
		t.Fatal("a timeout must not drop the connection")
	}
	if err := c.InvokeAsyncTimeout(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil), 0, func(*RemotingCommand, error) {}); err == nil {
		t.Fatal("zero timeout accepted")
	}
	if len(results) != 0 {
		t.Fatal("a callback ran twice")
	}
}

// TestInvokeAsyncTimeoutCallbacks: many InvokeAsyncTimeout calls in flight each get
// exactly one callback with their own answer; a panicking callback does not stop the
// later ones; a callback that blocks until every other callback has run does not hold
// them back for ever (the sweep starts another runner); Close leaves no goroutine
// (goleak in TestMain).
func TestInvokeAsyncTimeoutCallbacks(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.Handle(SendMessage, echoHandler)
	c := newClient(t, ClientConfig{})
	const n = 500
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	seen := make([]atomic.Int32, n)
	var others atomic.Int32
	othersDone := make(chan struct{})
	for i := range n {
		wg.Add(1)
		body := strconv.Itoa(i)
		err := c.InvokeAsyncTimeout(context.Background(), s.Addr(), NewRequest(SendMessage, nil, []byte(body)), 10*time.Second, func(r *RemotingCommand, err error) {
			defer wg.Done()
			seen[i].Add(1)
			if err != nil {
				errs <- err
				return
			}
			if string(r.Body) != body {
				errs <- fmt.Errorf("call %s got body %q", body, r.Body)
			}
			if i == 0 { // blocks until all the others ran
				select {
				case <-othersDone:
				case <-time.After(20 * time.Second):
					errs <- errors.New("a blocked callback held the others back for 20 s")
				}
				return
			}
			if others.Add(1) == n-1 {
				close(othersDone)
			}
			if i%100 == 7 {
				panic("callback test panic")
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range seen {
		if got := seen[i].Load(); got != 1 {
			t.Fatalf("call %d: %d callbacks, want 1", i, got)
		}
	}
}

// TestInvokeTimeoutSince: InvokeSyncTimeoutSince and InvokeAsyncTimeoutSince count the
// timeout from the clock reading given: on a ready connection, a call made with since an
// hour ago and a timeout of an hour and 50 ms fails with ErrTimeout (wrapping
// context.DeadlineExceeded) through the sweep, not an hour later. A call that had to
// wait for the dial counts its timeout from after it (its deadline is about an hour
// ahead). Answered calls get their responses.
func TestInvokeTimeoutSince(t *testing.T) {
	s := startServer(t, ServerConfig{})
	stallPulls(t, s)
	s.Handle(SendMessage, echoHandler)
	c := newClient(t, ClientConfig{})
	since, timeout := time.Now().Add(-time.Hour), time.Hour+50*time.Millisecond
	first := make(chan error, 1) // completed by the client's Close
	req := NewRequest(PullMessage, nil, nil)
	if err := c.InvokeAsyncTimeoutSince(context.Background(), s.Addr(), req, since, timeout, func(_ *RemotingCommand, err error) {
		first <- err
	}); err != nil {
		t.Fatal(err)
	}
	conn := clientConn(c, s.Addr())
	conn.mu.Lock()
	p := conn.pending[req.Opaque]
	deadline := int64(0)
	if p != nil {
		deadline = p.deadline
	}
	conn.mu.Unlock()
	if min := time.Now().Add(50 * time.Minute).UnixNano(); deadline < min {
		t.Fatalf("the call that dialed has deadline %v, want after %v", time.Unix(0, deadline), time.Unix(0, min))
	}
	results := make(chan error, 2)
	go func() {
		_, err := c.InvokeSyncTimeoutSince(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil), since, timeout)
		results <- err
	}()
	if err := c.InvokeAsyncTimeoutSince(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil), since, timeout, func(_ *RemotingCommand, err error) {
		results <- err
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-results:
			if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want ErrTimeout wrapping DeadlineExceeded, got %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no timeout within 10s: the timeout did not count from since")
		}
	}
	r, err := c.InvokeSyncTimeoutSince(context.Background(), s.Addr(), NewRequest(SendMessage, nil, []byte("hi")), time.Now(), 10*time.Second)
	if err != nil || string(r.Body) != "hi" {
		t.Fatalf("answered call: %v %v", r, err)
	}
	answered := make(chan *RemotingCommand, 1)
	if err := c.InvokeAsyncTimeoutSince(context.Background(), s.Addr(), NewRequest(SendMessage, nil, []byte("ho")), time.Now(), 10*time.Second, func(r *RemotingCommand, err error) {
		if err != nil {
			t.Error(err)
		}
		answered <- r
	}); err != nil {
		t.Fatal(err)
	}
	if r := <-answered; r == nil || string(r.Body) != "ho" {
		t.Fatalf("answered async call: %v", r)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err == nil {
		t.Fatal("the pending call succeeded after Close")
	}
}

// TestInvokeTimeoutSinceLongAgo: a since long in the past (the zero time.Time, a reading
// before 1970, one before 1678 that UnixNano cannot hold) shortens the timeout by that
// much, as documented: the calls fail at once with ErrTimeout wrapping
// context.DeadlineExceeded instead of waiting for ever (the deadline arithmetic must not
// overflow into "no deadline").
func TestInvokeTimeoutSinceLongAgo(t *testing.T) {
	s := startServer(t, ServerConfig{})
	stallPulls(t, s)
	c := newClient(t, ClientConfig{})
	if _, err := c.InvokeSyncTimeout(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil), 200*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("warm-up call (dials): %v", err) // later calls find a ready connection
	}
	for _, since := range []time.Time{{}, time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC), time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)} {
		results := make(chan error, 2)
		go func() {
			_, err := c.InvokeSyncTimeoutSince(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil), since, time.Minute)
			results <- err
		}()
		if err := c.InvokeAsyncTimeoutSince(context.Background(), s.Addr(), NewRequest(PullMessage, nil, nil), since, time.Minute, func(_ *RemotingCommand, err error) {
			results <- err
		}); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			select {
			case err := <-results:
				if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("since %v: want ErrTimeout wrapping DeadlineExceeded, got %v", since, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("since %v, timeout 1m: no timeout within 10s", since)
			}
		}
	}
}

// stallPulls makes s leave every PULL_MESSAGE unanswered (its handler returns nothing
// once the connection closes or the test ends), for tests of timeouts.
func stallPulls(t *testing.T, s *Server) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s.Handle(PullMessage, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
}

// TestOnConnectBeforeFirstCall: OnConnect runs before the call that dialed (or any other
// waiting for the dial) is sent on the new connection, so what it marks — a broker
// needing a heartbeat — cannot land after that call's answer has cleared it (a second,
// needless greeting, or a mark clearing the record of one that was sent).
func TestOnConnectBeforeFirstCall(t *testing.T) {
	s := startServer(t, ServerConfig{})
	var served atomic.Int32
	s.Handle(HeartBeat, func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		served.Add(1)
		return NewResponse(Success, "")
	})
	entered := make(chan struct{})
	release := make(chan struct{})
	var onConnect atomic.Int32
	c := newClient(t, ClientConfig{OnConnect: func(string) {
		if onConnect.Add(1) == 1 {
			close(entered)
			<-release
		}
	}})
	errc := make(chan error, 1)
	go func() {
		_, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil))
		errc <- err
	}()
	<-entered
	// While OnConnect has not returned the call must not reach the server: give it the
	// time it would need (it is local and answers in microseconds).
	time.Sleep(200 * time.Millisecond)
	if n := served.Load(); n != 0 {
		close(release)
		<-errc
		t.Fatalf("%d requests served before OnConnect returned", n)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if served.Load() != 1 || onConnect.Load() != 1 {
		t.Fatalf("served %d, OnConnect called %d times; want 1 and 1", served.Load(), onConnect.Load())
	}
}
