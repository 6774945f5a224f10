package remoting

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Connection internals shared by Client and Server.
//
// Goroutines of one Conn (all started through the owner's spawn helper and counted in the
// owner's WaitGroup, so Client.Close / Server.Shutdown wait for them):
//   - one reader (readLoop): reads frames, completes pending calls, dispatches requests;
//   - one writer (writeLoop): drains the bounded outgoing queue onto the socket;
//     frames that are likely alone (a sync call's request, a handler's answer, the
//     answers the reader produced for a burst of inline requests) are written by the
//     goroutine that has them when nothing is queued or being written (writeDirect), with
//     one non-blocking attempt whose rest, if any, the writer writes before anything else;
//   - one goroutine per incoming request being handled (bounded by maxInFlight on servers),
//     except for the codes a Server handles inline (Server.HandleInline, and
//     Server.HandleInlineGroup, whose requests the reader collects into runs and hands
//     over together): those run on the reader itself, and the codes of
//     Server.HandleAsync, which start on the reader and answer from whichever goroutine
//     calls their reply function;
//   - one goroutine per async-call callback (InvokeAsync), or, for calls of
//     Client.InvokeAsyncTimeout, at most one callback runner (runCallbacks) at a time,
//     running while answered callbacks are queued.
//
// Stop order of a Conn (closeWith, run once, by whoever notices first: reader, writer,
// a full outgoing queue, Conn.Close, or the owner's Close/Shutdown):
//  1. under mu: mark closed, record the cause, take the pending-call table;
//  2. cancel the conn context (handlers see ctx.Done, the writer and blocked senders return);
//  3. close the socket (unblocks the reader and a writer stuck in Write);
//  4. fail every taken pending call with a *ConnError wrapping the cause;
//  5. call the owner's onClose (Server: drop from the table, run OnConnClose listeners;
//     Client: drop from the connection cache so the next call re-dials).
//
// Locks: Conn.mu guards pending/closed/closeErr only and is never held while calling out
// (callbacks, socket I/O, owner locks). Conn.wmu is held only around a socket write
// (the writer's batch or one direct attempt) and takes no other lock. Owner locks (Client.mu, Server.mu) are never held
// while taking Conn.mu either, so there is no lock nesting.

// opaqueSeq is the process-wide request id counter; the first id is 1 (as the Go client).
var opaqueSeq atomic.Int32

func nextOpaque() int32 { return opaqueSeq.Add(1) }

// connOptions are the per-side settings and hooks of a Conn.
type connOptions struct {
	maxFrameSize int
	writeTimeout time.Duration
	idleTimeout  time.Duration // 0: no idle close
	queueLen     int
	maxInFlight  int // 0: unlimited
	// maxInFlightBytes bounds the body bytes of the requests being handled on one
	// connection (0: unlimited); one request is always let through.
	maxInFlightBytes int64
	// maxQueuedBytes bounds the bytes of encoded frames waiting to be written on one
	// connection (0: only the frame count, queueLen, bounds them); a sender waits for
	// room up to writeTimeout, then the connection is closed as not reading.
	maxQueuedBytes int64
	// frameTimeout bounds reading the rest of a frame once its first byte arrived
	// (0: idleTimeout, or none).
	frameTimeout time.Duration
	// handshakeTimeout bounds the TLS handshake of a server connection (0: the idle
	// timeout does, through the first read).
	handshakeTimeout time.Duration
	// readBufIdle is how long a connection's large read buffer may stay empty before
	// the reader swaps it for a small one (0: never).
	readBufIdle time.Duration
	log         *slog.Logger
	// spawn runs f in a goroutine owned by the Client/Server; false if the owner is stopping.
	spawn func(f func()) bool
	// route says how requests with a code are served on this side (Server.HandleInline,
	// Server.HandleAsync, Server.HandleInlineGroup); nil: each in a goroutine of its own.
	route func(code int16) codeRoute
	// before runs ahead of an async handler (ServerConfig.Before); nil: none.
	before Handler
	// serve handles an incoming request (in its own goroutine); nil result = no response.
	serve func(ctx context.Context, c *Conn, req *RemotingCommand) *RemotingCommand
	// onClose is called once after the conn closed (step 5 of the stop order).
	onClose func(c *Conn)
	// extListRequests: incoming requests with these codes keep their ext fields in
	// ExtList (ServerConfig.ExtListCodes); extListResponses: so do the responses to
	// outgoing requests with these codes (ClientConfig.ExtListCodes).
	extListRequests  codeSet
	extListResponses codeSet
	// serializeType is the header encoding of the requests this side sends
	// (ClientConfig.SerializeType; a server's calls to clients use JSON).
	serializeType SerializeType
}

// Conn is one remoting TCP connection, on either side. A [Server] hands it to handlers so
// they can identify the client (RemoteAddr, ID), call back into the client
// ([Conn.Invoke], e.g. CHECK_TRANSACTION_STATE) and notice it closing ([Conn.Context]).
// All methods are safe for concurrent use.
type Conn struct {
	id     uint64
	nc     net.Conn
	remote string
	opts   *connOptions

	ctx    context.Context
	cancel context.CancelFunc
	out    chan []byte // bounded outgoing queue of encoded frames

	flushOnce sync.Once
	flushed   chan struct{} // closed by the writer when it wrote the flush marker

	inFlight atomic.Int32 // requests being handled
	timed    atomic.Int32 // pending calls with a deadline (the sweep skips conns without)

	cbMu      sync.Mutex      // guards the callback runner's fields below
	cbQueue   []asyncCallback // callbacks of serial async calls waiting to run
	cbHead    int             // index of the next callback to run in cbQueue
	cbRunners int             // runCallbacks goroutines running
	cbDone    atomic.Int64    // callbacks run so far (the sweep sees whether runners progress)
	cbSeen    int64           // cbDone at the previous sweep; only the sweep uses it
	inBytes   atomic.Int64    // body bytes of the requests being handled
	outBytes  atomic.Int64    // bytes of frames queued or being written
	room      chan struct{}   // (cap 1) signalled when the writer wrote a batch
	slotFree  chan struct{}   // (cap 1) signalled when a handler finishes
	lastWrite atomic.Int64    // unix nanoseconds of the last completed socket write
	readBuf   atomic.Int32    // size of the reader's buffer (tests)

	// Direct writes (writeDirect): a goroutine with a frame to send writes it to the
	// socket itself when nothing is queued or being written, instead of waking the
	// writer. wmu is held by whoever writes to the socket (the writer for a batch, a
	// direct writer for one attempt) and guards the fields below.
	wmu      sync.Mutex
	raw      *rawWriter    // non-blocking write attempts; nil: no direct writes (TLS, not Linux)
	one      [1][]byte     // the frame of a one-frame direct write (no slice allocation)
	leftover [][]byte      // what a direct write could not write at once; the writer writes it first
	kick     chan struct{} // (cap 1) tells the writer that leftover is waiting

	// replies are the encoded answers of the requests handled on the reader (inline
	// handlers, SYSTEM_BUSY), written in one go when the reader has no complete frame
	// left to handle (flushReplies). Only the reader touches them.
	replies     [][]byte
	repliesSize int
	// heldReplies counts the answers in replies (Shutdown waits for them as for
	// requests in flight); the reader writes it, anyone reads it.
	heldReplies atomic.Int32

	// run holds the requests of one code read in a row whose handler takes them
	// together (Server.HandleInlineGroup), until flushRun hands them over; each counts
	// in inFlight meanwhile. Only the reader touches these fields.
	run      []runReq
	runH     GroupHandler
	runBytes int
	runReqs  []*RemotingCommand // flushRun's scratch: the requests handed to runH
	runResps []*RemotingCommand // and their responses

	// sawRequest is set once the peer's first request was read (FirstRequestTimeout).
	sawRequest atomic.Bool

	mu       sync.Mutex // guards the fields below
	pending  map[int32]*pendingCall
	closed   bool
	closeErr error
}

var connIDSeq atomic.Uint64

func newConn(nc net.Conn, remote string, opts *connOptions) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		id:       connIDSeq.Add(1),
		nc:       nc,
		remote:   remote,
		opts:     opts,
		ctx:      ctx,
		cancel:   cancel,
		out:      make(chan []byte, opts.queueLen),
		flushed:  make(chan struct{}),
		slotFree: make(chan struct{}, 1),
		room:     make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
		pending:  make(map[int32]*pendingCall),
		raw:      newRawWriter(nc),
	}
	c.lastWrite.Store(time.Now().UnixNano())
	return c
}

// start launches the reader and writer through spawn; on failure the conn is closed.
func (c *Conn) start() bool {
	if !c.opts.spawn(c.writeLoop) {
		c.closeWith(ErrClosed)
		return false
	}
	if !c.opts.spawn(c.readLoop) {
		c.closeWith(ErrClosed)
		return false
	}
	return true
}

// ID returns a process-unique connection id (counter from 1).
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr returns the peer address "ip:port" (for client conns: the address dialed).
func (c *Conn) RemoteAddr() string { return c.remote }

// LocalAddr returns the local socket address "ip:port".
func (c *Conn) LocalAddr() string { return c.nc.LocalAddr().String() }

// Context returns a context that is done when the connection closes.
func (c *Conn) Context() context.Context { return c.ctx }

// Close closes the connection gracefully: frames already queued (a response just
// returned, a one-way request) are written first, waiting at most the write timeout,
// then the connection is closed; pending calls on it fail with a [*ConnError] wrapping
// [ErrClosed]. It is idempotent and always returns nil.
func (c *Conn) Close() error {
	c.flushQueued()
	c.closeWith(ErrClosed)
	return nil
}

// flushQueued waits until every frame queued before the call has been written, the
// connection closed, or the write timeout passed. Only the first call waits.
func (c *Conn) flushQueued() {
	c.flushOnce.Do(func() {
		t := time.NewTimer(c.opts.writeTimeout)
		defer t.Stop()
		select {
		case c.out <- nil: // flush marker: the writer closes c.flushed when it gets there
		case <-c.ctx.Done():
			return
		case <-t.C:
			return
		}
		select {
		case <-c.flushed:
		case <-c.ctx.Done():
		case <-t.C:
		}
	})
}

// Err returns why the connection closed, or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

// pendingCall is a request waiting for its response. complete is called exactly once,
// by whoever removes the call from the pending table.
type pendingCall struct {
	complete func(*RemotingCommand, error)
	stop     func() bool // stops the async timeout watcher; guarded by Conn.mu
	// deadline (unix ns) after which the client's sweep fails the call with ErrTimeout
	// (Client.InvokeAsyncTimeout); 0: none. req names the call in that error.
	deadline int64
	req      *RemotingCommand
	// extList: the response keeps its ext fields in ExtList (connOptions.extListResponses).
	extList bool
	// ctx of a call with a deadline whose context can end: the sweep fails the call when
	// ctx is done (instead of a context.AfterFunc registration per call).
	ctx context.Context
}

func (c *Conn) register(opaque int32, p *pendingCall) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return &ConnError{Addr: c.remote, Op: "write", Err: c.closeErr}
	}
	c.pending[opaque] = p
	if p.deadline != 0 {
		c.timed.Add(1)
	}
	return nil
}

// take removes and returns the pending call for opaque (nil if none) and its stop func.
func (c *Conn) take(opaque int32) (*pendingCall, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[opaque]
	if p == nil {
		return nil, nil
	}
	delete(c.pending, opaque)
	if p.deadline != 0 {
		c.timed.Add(-1)
	}
	return p, p.stop
}

// sweepExpired fails every pending call whose deadline (unix ns) is at or before now,
// or whose context (pendingCall.ctx) is done, with ErrTimeout (the Client's deadline
// sweep, see Client.InvokeAsyncTimeout).
func (c *Conn) sweepExpired(now int64) {
	if c.timed.Load() == 0 {
		return
	}
	type failed struct {
		p   *pendingCall
		err error
	}
	var expired []failed
	c.mu.Lock()
	for op, p := range c.pending {
		if p.deadline == 0 {
			continue
		}
		var cause error
		if p.deadline <= now {
			cause = context.DeadlineExceeded
		} else if p.ctx != nil {
			cause = p.ctx.Err() // takes only the context's own lock, never calls out
		}
		if cause != nil {
			delete(c.pending, op)
			c.timed.Add(-1)
			expired = append(expired, failed{p, cause})
		}
	}
	c.mu.Unlock()
	for _, f := range expired {
		if f.p.stop != nil {
			f.p.stop()
		}
		f.p.complete(nil, timeoutErr(c.remote, f.p.req, f.err))
	}
}

// pendingLen returns the number of calls waiting for a response.
func (c *Conn) pendingLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// closeWith closes the connection once with the given cause (see the stop order above).
func (c *Conn) closeWith(cause error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.closeErr = cause
	pend := c.pending
	c.pending = nil
	c.mu.Unlock()

	c.cancel()
	_ = c.nc.Close()
	for _, p := range pend {
		if p.stop != nil {
			p.stop()
		}
		p.complete(nil, &ConnError{Addr: c.remote, Op: "await response", Err: cause})
	}
	if c.opts.onClose != nil {
		c.opts.onClose(c)
	}
}

// send puts an encoded frame on the outgoing queue. If the queue stays full for longer
// than writeTimeout the peer is not reading: the connection is closed.
func (c *Conn) send(ctx context.Context, frame []byte) error {
	n := int64(len(frame))
	if c.opts.maxQueuedBytes > 0 {
		if err := c.waitRoom(ctx, n); err != nil {
			return err
		}
	}
	c.outBytes.Add(n)
	if err := c.enqueue(ctx, frame); err != nil {
		c.outBytes.Add(-n)
		c.signalRoom()
		return err
	}
	return nil
}

// sendDirect is send that first tries writing frame from the calling goroutine
// (writeDirect), for a frame that is likely alone: a sync call's request, a handler's
// answer. Bursts of frames from one goroutine (async calls, one-way requests) use send,
// so that the writer coalesces them.
func (c *Conn) sendDirect(ctx context.Context, frame []byte) error {
	if len(frame) > c.opts.maxFrameSize {
		return &FrameError{Field: "length", Reason: fmt.Sprintf("outgoing frame of %d bytes exceeds the maximum frame size %d", len(frame), c.opts.maxFrameSize)}
	}
	if done, err := c.writeDirect1(frame); done {
		return err
	}
	return c.send(ctx, frame)
}

// signalRoom wakes one sender waiting for queue room.
func (c *Conn) signalRoom() {
	select {
	case c.room <- struct{}{}:
	default:
	}
}

// waitRoom waits until n more bytes fit under maxQueuedBytes (a frame is always let
// through when nothing is queued), at most writeTimeout; then the peer is taken as not
// reading and the connection is closed.
func (c *Conn) waitRoom(ctx context.Context, n int64) error {
	fits := func() bool { cur := c.outBytes.Load(); return cur == 0 || cur+n <= c.opts.maxQueuedBytes }
	if fits() {
		return nil
	}
	t := time.NewTimer(c.opts.writeTimeout)
	defer t.Stop()
	for !fits() {
		select {
		case <-c.room:
		case <-c.ctx.Done():
			return &ConnError{Addr: c.remote, Op: "write", Err: c.Err()}
		case <-ctx.Done():
			return fmt.Errorf("%w: outgoing queue to %s full: %w", ErrTimeout, c.remote, ctx.Err())
		case <-t.C:
			err := fmt.Errorf("outgoing queue holds %d bytes (limit %d) for %v, peer is not reading", c.outBytes.Load(), c.opts.maxQueuedBytes, c.opts.writeTimeout)
			c.opts.log.Warn("remoting: closing connection", "remote", c.remote, "conn", c.id, "err", err)
			c.closeWith(err)
			return &ConnError{Addr: c.remote, Op: "write", Err: err}
		}
	}
	c.signalRoom() // let another waiter look too
	return nil
}

// enqueue puts an encoded frame on the outgoing queue, waiting up to writeTimeout for a
// free slot.
func (c *Conn) enqueue(ctx context.Context, frame []byte) error {
	if len(frame) > c.opts.maxFrameSize {
		return &FrameError{Field: "length", Reason: fmt.Sprintf("outgoing frame of %d bytes exceeds the maximum frame size %d", len(frame), c.opts.maxFrameSize)}
	}
	select {
	case <-c.ctx.Done():
		return &ConnError{Addr: c.remote, Op: "write", Err: c.Err()}
	default:
	}
	select {
	case c.out <- frame:
		return nil
	default:
	}
	t := time.NewTimer(c.opts.writeTimeout)
	defer t.Stop()
	select {
	case c.out <- frame:
		return nil
	case <-c.ctx.Done():
		return &ConnError{Addr: c.remote, Op: "write", Err: c.Err()}
	case <-ctx.Done():
		return fmt.Errorf("%w: outgoing queue to %s full: %w", ErrTimeout, c.remote, ctx.Err())
	case <-t.C:
		err := fmt.Errorf("outgoing queue of %d frames full for %v, peer is not reading", cap(c.out), c.opts.writeTimeout)
		c.opts.log.Warn("remoting: closing connection", "remote", c.remote, "conn", c.id, "err", err)
		c.closeWith(err)
		return &ConnError{Addr: c.remote, Op: "write", Err: err}
	}
}

// Writer batching limits: one writev call carries at most this many frames / bytes
// (the byte limit is checked before adding a frame, so one big frame always goes).
const (
	maxBatchFrames = 128
	maxBatchBytes  = 1 << 20
)

func (c *Conn) writeLoop() {
	batch := make([][]byte, 0, maxBatchFrames)
	// bufs is what writev consumes (net.Buffers.WriteTo clears the entries it wrote), a
	// copy of batch so that the written frames can be recycled afterwards.
	bufArr := make(net.Buffers, 0, maxBatchFrames)
	bufs := new(net.Buffers) // one allocation per connection, not per write
	for {
		var f []byte
		got := false
		select {
		case <-c.ctx.Done():
			return
		case f = <-c.out:
			got = true
		case <-c.kick: // a direct write left a rest (c.leftover)
		}
		c.wmu.Lock()
		// The rest of a direct write goes first: it was accepted before anything queued
		// now, and half a frame must not be followed by another one.
		batch = append(batch[:0], c.leftover...)
		clear(c.leftover)
		c.leftover = c.leftover[:0]
		rest := len(batch) // batch[:rest] are parts of frames: not recycled
		size, marker := 0, false
		for _, b := range batch {
			size += len(b)
		}
		// Coalesce what is already queued (bounded) into one writev call.
		for got {
			if f == nil { // flushQueued's marker
				marker = true
			} else {
				batch = append(batch, f)
				size += len(f)
			}
			if len(batch) >= maxBatchFrames || size >= maxBatchBytes || len(c.out) == 0 {
				break
			}
			f = <-c.out // only this goroutine receives, and len > 0: does not block
		}
		var err error
		if len(batch) > 0 {
			if c.opts.writeTimeout > 0 {
				_ = c.nc.SetWriteDeadline(time.Now().Add(c.opts.writeTimeout))
			}
			*bufs = append(bufArr[:0], batch...)
			_, err = bufs.WriteTo(c.nc)
		}
		if err == nil {
			for _, f := range batch[rest:] {
				recycleFrame(f) // the queue owned it, and it is written
			}
			if size > 0 {
				c.outBytes.Add(-int64(size))
			}
		}
		c.wmu.Unlock()
		clear(batch) // drop references to written frames
		if err == nil && size > 0 {
			c.signalRoom()
		}
		if err != nil {
			c.opts.log.Debug("remoting: write failed, closing connection", "remote", c.remote, "conn", c.id, "err", err)
			c.closeWith(fmt.Errorf("write: %w", err))
			return
		}
		if marker {
			close(c.flushed) // only one marker is ever sent (flushOnce)
		}
		if len(batch) > 0 {
			c.lastWrite.Store(time.Now().UnixNano())
		}
	}
}

// writeDirect1 is writeDirect of one frame.
func (c *Conn) writeDirect1(frame []byte) (bool, error) {
	if c.raw == nil || c.outBytes.Load() != 0 || !c.wmu.TryLock() {
		return false, nil
	}
	c.one[0] = frame
	done, rest, err := c.writeDirectLocked(c.one[:])
	c.one[0] = nil
	c.wmu.Unlock()
	return c.afterDirect(done, rest, err)
}

// writeDirect writes frames (encoded frames the caller owns and hands over) on the
// calling goroutine when the connection's write side is idle: no frame is queued or
// being written (outBytes is zero) and no other goroutine writes (wmu is free). This
// saves waking the writer goroutine, which costs a thread wake-up per frame when the
// connection carries one request at a time. It makes one non-blocking write attempt:
// what the socket does not take at once is handed to the writer (c.leftover, written
// before anything queued later), so the caller never waits for a slow peer and the
// write timeout and the outgoing-queue limits keep applying to it. false: the write side
// is busy (or direct writes are unsupported), nothing was written, the caller queues the
// frames. A socket error closes the connection and is returned (with true).
func (c *Conn) writeDirect(frames [][]byte) (bool, error) {
	if c.raw == nil || c.outBytes.Load() != 0 || !c.wmu.TryLock() {
		return false, nil
	}
	done, rest, err := c.writeDirectLocked(frames)
	c.wmu.Unlock()
	return c.afterDirect(done, rest, err)
}

// writeDirectLocked is the write of writeDirect, under wmu. It reports whether it took
// the frames (false: nothing written, the caller queues them), whether a rest was left
// for the writer, and a socket error.
func (c *Conn) writeDirectLocked(frames [][]byte) (done, rest bool, err error) {
	// Frames counted in outBytes are queued or being written by the writer, which
	// subtracts them only after writing, under wmu: zero here means every frame sent
	// before this one is on the socket, so the write order is kept.
	if c.outBytes.Load() != 0 || c.ctx.Err() != nil {
		return false, false, nil
	}
	total := 0
	for _, f := range frames {
		total += len(f)
	}
	n, err := c.raw.write(frames)
	if err != nil {
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return true, false, err
		}
		// The writer's last write deadline has passed: not a failure of this write; the
		// writer writes it all under a fresh deadline.
		n = 0
	}
	if n == total {
		for _, f := range frames {
			recycleFrame(f)
		}
		return true, false, nil
	}
	// The socket buffer is full: the writer writes the rest, under the write timeout.
	c.outBytes.Add(int64(total - n))
	for _, f := range frames {
		if n >= len(f) {
			n -= len(f)
			recycleFrame(f)
			continue
		}
		c.leftover = append(c.leftover, f[n:])
		n = 0
	}
	return true, true, nil
}

// afterDirect finishes a direct write once wmu is released: it closes the connection on
// a socket error and wakes the writer for a rest.
func (c *Conn) afterDirect(done, rest bool, err error) (bool, error) {
	switch {
	case err != nil:
		c.opts.log.Debug("remoting: write failed, closing connection", "remote", c.remote, "conn", c.id, "err", err)
		c.closeWith(fmt.Errorf("write: %w", err))
		return true, &ConnError{Addr: c.remote, Op: "write", Err: err}
	case rest:
		select {
		case c.kick <- struct{}{}:
		default:
		}
	case done:
		c.lastWrite.Store(time.Now().UnixNano())
	}
	return done, nil
}

// busy reports whether an idle read timeout should be ignored: requests are being
// handled, calls await responses, or we wrote recently (Java counts reads and writes).
func (c *Conn) busy() bool {
	return c.inFlight.Load() > 0 || c.heldReplies.Load() > 0 || c.pendingLen() > 0 ||
		time.Since(time.Unix(0, c.lastWrite.Load())) < c.opts.idleTimeout
}

// awaitFrame blocks until at least one byte of the next frame is readable. With an idle
// timeout it closes connections that carried no traffic for that long. Once the first
// byte is there, the rest of the frame must arrive within the frame timeout (a
// half-sent frame does not hold the connection open for ever). The connection counts
// as quiet since the given time (the reader may have waited already, see awaitQuiet).
func (c *Conn) awaitFrame(br *bufio.Reader, since time.Time) error {
	if frameBuffered(br) {
		return nil // the whole frame is in memory: reading it cannot wait
	}
	frameTimeout := c.opts.frameTimeout
	if frameTimeout <= 0 || (c.opts.idleTimeout > 0 && c.opts.idleTimeout < frameTimeout) {
		frameTimeout = c.opts.idleTimeout
	}
	if c.opts.idleTimeout <= 0 {
		if frameTimeout <= 0 {
			return nil
		}
		_ = c.nc.SetReadDeadline(time.Time{})
		if _, err := br.Peek(1); err != nil {
			return err
		}
		_ = c.nc.SetReadDeadline(time.Now().Add(frameTimeout))
		return nil
	}
	for {
		_ = c.nc.SetReadDeadline(since.Add(c.opts.idleTimeout))
		_, err := br.Peek(1)
		if err == nil {
			_ = c.nc.SetReadDeadline(time.Now().Add(frameTimeout))
			return nil
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && c.ctx.Err() == nil && c.busy() {
			since = time.Now() // a busy connection waits a whole idle timeout again
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("idle for %v", c.opts.idleTimeout)
		}
		return err
	}
}

// awaitQuiet waits, on a connection reading through the large buffer with nothing
// buffered, up to readBufIdle from since for the next byte. It reports whether none
// came: the connection is quiet, and the reader swaps the large buffer (64 KiB) for a
// small one, so that connections that sent one burst long ago do not keep 64 KiB each.
// With an idle timeout shorter than readBufIdle it waits only that long and reports
// false (awaitFrame then applies the idle timeout). A read error other than the
// deadline is returned.
func (c *Conn) awaitQuiet(br *bufio.Reader, since time.Time) (bool, error) {
	wait := c.opts.readBufIdle
	if c.opts.idleTimeout > 0 && c.opts.idleTimeout < wait {
		wait = c.opts.idleTimeout
	}
	_ = c.nc.SetReadDeadline(since.Add(wait))
	_, err := br.Peek(1)
	if c.opts.idleTimeout <= 0 && c.opts.frameTimeout <= 0 {
		_ = c.nc.SetReadDeadline(time.Time{}) // awaitFrame sets none: reads may take their time
	}
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, os.ErrDeadlineExceeded) && c.ctx.Err() == nil:
		return wait == c.opts.readBufIdle, nil
	}
	return false, err
}

// setExt gives cmd the ext fields decoded into ext (hasExt: the header had an extFields
// object): as a map, or, with list, as a list cmd owns.
func setExt(cmd *RemotingCommand, ext []ExtField, hasExt, list bool) {
	switch {
	case !hasExt:
	case list:
		cmd.ExtList = extListOf(ext)
	default:
		cmd.ExtFields = extMapOf(ext)
	}
}

func (c *Conn) readLoop() {
	defer c.dropReplies() // the connection is closing: no answer is written any more
	defer c.dropRun()
	if !c.handshake() {
		return
	}
	src := &readSource{nc: c.nc}
	br := bufio.NewReaderSize(src, readBufSmall)
	c.readBuf.Store(readBufSmall)
	// scratch receives each frame's ext fields before they become the command's map or
	// list; it is cleared after every frame so that it keeps no header alive.
	var scratch [32]ExtField
	for {
		if !frameBuffered(br) { // about to wait for input: handle and answer what was read
			c.finishRead()
		}
		if src.full && br.Size() < readBufLarge {
			br = growReader(br, src)
			c.readBuf.Store(int32(br.Size()))
		}
		var err error
		if !frameBuffered(br) { // else reading the frame cannot wait
			since := time.Now()
			if c.opts.readBufIdle > 0 && br.Size() > readBufSmall && br.Buffered() == 0 {
				var quiet bool
				if quiet, err = c.awaitQuiet(br, since); quiet {
					// Nothing is buffered, and the bytes growReader carried over were read
					// (the wait would have returned them): the small buffer loses nothing.
					br = bufio.NewReaderSize(src, readBufSmall)
					src.full = false
					c.readBuf.Store(readBufSmall)
				}
			}
			if err == nil {
				err = c.awaitFrame(br, since)
			}
		}
		var frame []byte
		if err == nil {
			frame, err = ReadFrame(br, c.opts.maxFrameSize)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("frame not complete in time after its first byte: %w", err)
			}
		}
		if err != nil {
			c.closeOnReadErr(err)
			return
		}
		cmd, st, ext, hasExt, err := decodeFrameExt(frame, scratch[:0])
		if err != nil {
			c.closeOnReadErr(err)
			return
		}
		if cmd.IsResponse() {
			if cmd.Body == nil {
				// The decoded header copied what it keeps (its strings): nothing refers
				// to the frame any more.
				recycleFrame(frame)
			}
			p, stop := c.take(cmd.Opaque)
			if p != nil {
				setExt(cmd, ext, hasExt, p.extList)
			}
			releaseScratch(&scratch)
			if p == nil {
				c.opts.log.Debug("remoting: dropping response without pending request", "remote", c.remote, "conn", c.id, "opaque", cmd.Opaque, "code", cmd.Code)
				continue
			}
			if stop != nil {
				stop()
			}
			p.complete(cmd, nil)
			continue
		}
		if !c.sawRequest.Load() {
			c.sawRequest.Store(true)
		}
		setExt(cmd, ext, hasExt, c.opts.extListRequests.has(cmd.Code))
		releaseScratch(&scratch)
		cmd.frame = frame
		c.dispatch(cmd, st)
	}
}

// handshake completes the TLS handshake of a server connection within
// handshakeTimeout, so that a peer that stalls it is disconnected instead of holding the
// connection until the idle timeout. It reports false (and closes the connection) when
// the handshake failed; plain connections and clients' connections pass at once.
func (c *Conn) handshake() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok || c.opts.handshakeTimeout <= 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.handshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		level := slog.LevelInfo
		if c.ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			// Closed before a handshake (a TCP health check, a port scan) or by
			// Shutdown: as a plain connection's EOF (logReadErr), not worth an info line.
			level = slog.LevelDebug
		}
		c.opts.log.Log(context.Background(), level, "remoting: TLS handshake failed, closing connection", "remote", c.remote, "conn", c.id, "err", err)
		c.closeWith(fmt.Errorf("tls handshake: %w", err))
		return false
	}
	return true
}

// A connection reads through a buffer of readBufSmall bytes until a read fills
// readBurst bytes or more of room in one go (the socket held more than that: requests
// arrive in bursts), and through one of readBufLarge bytes from then on, so that a busy
// connection takes a burst of requests in one system call (64 KiB: about 50 sends of
// 1 KiB) while the many quiet connections of a broker keep a small buffer. A connection
// whose large buffer stays empty for readBufIdle (connOptions; defaultReadBufIdle) goes
// back to a small one (awaitQuiet).
const (
	defaultReadBufIdle = time.Second
	readBufSmall       = 8 << 10
	readBufLarge       = 64 << 10
	readBurst          = 4 << 10
)

// readSource is what a connection's read buffer reads from: the socket, noting when a
// read filled readBurst bytes of room or more (full).
type readSource struct {
	nc   net.Conn
	full bool
}

func (r *readSource) Read(p []byte) (int, error) {
	n, err := r.nc.Read(p)
	if n == len(p) && n >= readBurst {
		r.full = true
	}
	return n, err
}

// growReader returns a reader of readBufLarge bytes that yields what br holds and then
// reads from src.
func growReader(br *bufio.Reader, src io.Reader) *bufio.Reader {
	var r io.Reader = src
	if n := br.Buffered(); n > 0 {
		held, _ := br.Peek(n)
		r = io.MultiReader(bytes.NewReader(bytes.Clone(held)), src)
	}
	return bufio.NewReaderSize(r, readBufLarge)
}

// releaseScratch clears all of readLoop's scratch array after a frame, not just the
// entries the decode returned: a fast decode that gave up for encoding/json may have
// filled more, and each entry aliases a copy of the frame's header (one string per
// header), which the scratch would otherwise keep alive.
func releaseScratch(scratch *[32]ExtField) { clear(scratch[:]) }

// finishRead hands the run over (flushRun) and writes the answers the reader holds
// (flushReplies): before the reader waits for input, and before it closes the connection
// on a malformed frame (closeOnReadErr).
func (c *Conn) finishRead() {
	if len(c.run) > 0 {
		c.flushRun()
	}
	if len(c.replies) > 0 {
		c.flushReplies()
	}
}

// closeOnReadErr closes the connection after a failed read or a malformed frame (or
// the peer's end of stream). It first handles the requests the reader still holds (a
// malformed frame behind whole ones in the buffer) and writes out the answers of the
// reader's own requests, queued ones included (up to WriteTimeout; at once when the
// connection is already closing), so that none of them (an inline request, or a grouped
// send) is carried out with its answer dropped: a peer that half-closes after its
// requests, or follows them with a bad frame, gets every answer. Requests being handled
// in goroutines of their own end with the connection, as on any close.
func (c *Conn) closeOnReadErr(err error) {
	c.logReadErr(err)
	c.finishRead()
	c.flushQueued()
	c.closeWith(fmt.Errorf("read: %w", err))
}

// frameBuffered reports whether br holds a whole frame, so that reading it does not wait.
func frameBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n < 4 {
		return false
	}
	b, _ := br.Peek(4)
	return int64(binary.BigEndian.Uint32(b))+4 <= int64(n)
}

// Replies handled on the reader are written together once this many are waiting (or
// this many bytes), even when more complete frames are buffered.
const (
	maxReplyBatch      = 64
	maxReplyBatchBytes = 64 << 10
)

// replyOnReader queues an encoded answer produced on the reader goroutine; it is
// written with the other answers of the same burst of requests (flushReplies).
func (c *Conn) replyOnReader(frame []byte) {
	c.replies = append(c.replies, frame)
	c.repliesSize += len(frame)
	c.heldReplies.Add(1)
	if len(c.replies) >= maxReplyBatch || c.repliesSize >= maxReplyBatchBytes {
		c.flushReplies()
	}
}

// flushReplies writes the answers queued by replyOnReader: directly from the reader in
// one write when the connection's write side is idle, else through the writer's queue
// (waiting for room as any sender does). Only the reader calls it.
func (c *Conn) flushReplies() {
	done, err := c.writeDirect(c.replies)
	if !done {
		for _, f := range c.replies {
			if err = c.send(c.ctx, f); err != nil {
				break
			}
		}
	}
	if err != nil {
		c.opts.log.Debug("remoting: responses not sent", "remote", c.remote, "conn", c.id, "err", err)
	}
	c.dropReplies()
}

// dropReplies forgets the answers flushReplies did not write (the reader is ending).
func (c *Conn) dropReplies() {
	clear(c.replies)
	c.replies = c.replies[:0]
	c.repliesSize = 0
	c.heldReplies.Store(0)
}

func (c *Conn) logReadErr(err error) {
	var fe *FrameError
	var he *HeaderError
	switch {
	case errors.As(err, &fe) || errors.As(err, &he):
		c.opts.log.Warn("remoting: malformed frame, closing connection", "remote", c.remote, "conn", c.id, "err", err)
	case c.ctx.Err() != nil || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
		c.opts.log.Debug("remoting: connection closed", "remote", c.remote, "conn", c.id, "err", err)
	default:
		c.opts.log.Info("remoting: read failed, closing connection", "remote", c.remote, "conn", c.id, "err", err)
	}
}

// dispatch runs an incoming request on this goroutine (inline codes, see
// Server.HandleInline: one at a time, so they need no limit), or in its own goroutine, or
// answers SYSTEM_BUSY when maxInFlight requests, or maxInFlightBytes of request bodies, are
// already being handled on this connection (held pulls count until they are answered).
func (c *Conn) dispatch(req *RemotingCommand, st SerializeType) {
	var rt codeRoute
	if c.opts.route != nil {
		rt = c.opts.route(req.Code)
	}
	if rt.group != nil {
		c.addToRun(req, st, rt.group)
		return
	}
	if len(c.run) > 0 {
		c.flushRun() // the run came first
	}
	if rt.inline {
		c.inFlight.Add(1) // Shutdown and the idle check see it being handled
		if resp := c.safeServe(req); resp != nil && !req.IsOneway() {
			if frame := c.encodeReply(req, resp, st); frame != nil {
				c.replyOnReader(frame)
			}
		}
		c.inFlight.Add(-1)
		reuseFrame(req)
		return
	}
	ah := rt.async
	size := int64(len(req.Body))
	// full returns why the connection cannot take req now ("" if it can).
	full := func() string {
		n := c.inFlight.Load()
		if c.opts.maxInFlight > 0 && int(n) >= c.opts.maxInFlight {
			return fmt.Sprintf("%d requests in flight on this connection (limit %d)", n, c.opts.maxInFlight)
		}
		if b := c.inBytes.Load(); c.opts.maxInFlightBytes > 0 && n > 0 && b+size > c.opts.maxInFlightBytes {
			return fmt.Sprintf("%d body bytes in flight on this connection, %d more arriving (limit %d bytes)", b, size, c.opts.maxInFlightBytes)
		}
		return ""
	}
	if why := full(); why != "" {
		c.opts.log.Debug("remoting: connection busy", "remote", c.remote, "conn", c.id, "reason", why)
		if !req.IsOneway() {
			if frame := c.encodeReply(req, NewResponse(SystemBusy, "[OVERLOAD]system busy, "+why), st); frame != nil {
				c.replyOnReader(frame)
			}
			return
		}
		// A one-way request cannot be told "busy": stop reading this connection until a
		// handler finishes, so TCP flow control slows the sender instead of the request
		// being dropped. (The run was handed over above.)
		if len(c.replies) > 0 {
			c.flushReplies()
		}
		for full() != "" {
			select {
			case <-c.slotFree:
			case <-c.ctx.Done():
				return
			}
		}
	}
	c.inFlight.Add(1)
	c.inBytes.Add(size)
	if ah != nil {
		c.serveAsync(req, st, ah, size)
		reuseFrame(req)
		return
	}
	if !c.opts.spawn(func() {
		defer c.releaseSlot(size)
		c.handle(req, st)
	}) {
		c.releaseSlot(size)
	}
}

// runReq is a request waiting in a run (Conn.run) with its header encoding.
type runReq struct {
	req *RemotingCommand
	st  SerializeType
}

// addToRun adds req, whose code has the group handler h, to the run: a run of another
// code is handed over first, and the run is handed over when it reaches maxRunFrames
// requests or maxRunBytes of frames. The reader hands over a shorter run before it
// would wait for input, and before any request of another code.
func (c *Conn) addToRun(req *RemotingCommand, st SerializeType, h GroupHandler) {
	if len(c.run) > 0 && c.run[0].req.Code != req.Code {
		c.flushRun()
	}
	c.inFlight.Add(1) // Shutdown and the idle check see it being handled
	c.run = append(c.run, runReq{req, st})
	c.runH = h
	c.runBytes += len(req.frame)
	if len(c.run) >= maxRunFrames || c.runBytes >= maxRunBytes {
		c.flushRun()
	}
}

// flushRun hands the run to its group handler and queues the answers as the reader's
// own (replyOnReader). ServerConfig.Before runs first for each request; those it answers
// stay out of the handler's call.
func (c *Conn) flushRun() {
	run := c.run
	reqs := c.runReqs[:0]
	for _, r := range run {
		if c.opts.before != nil {
			if resp := c.safeBefore(r.req); resp != nil {
				c.answerOnReader(r.req, resp, r.st)
				continue
			}
		}
		reqs = append(reqs, r.req)
	}
	if len(reqs) > 0 {
		if cap(c.runResps) < len(reqs) {
			c.runResps = make([]*RemotingCommand, 0, max(len(reqs), maxRunFrames))
		}
		resps := c.runResps[:len(reqs)]
		c.serveGroup(reqs, resps)
		j := 0
		for _, r := range run {
			if j < len(reqs) && reqs[j] == r.req {
				c.answerOnReader(r.req, resps[j], r.st)
				j++
			}
		}
		clear(resps)
		c.runResps = resps[:0]
	}
	for _, r := range run {
		reuseFrame(r.req)
	}
	c.inFlight.Add(-int32(len(run)))
	clear(reqs)
	c.runReqs = reqs[:0]
	clear(run)
	c.run = run[:0]
	c.runH, c.runBytes = nil, 0
}

// dropRun forgets a run that was not handed over (the reader is ending).
func (c *Conn) dropRun() {
	c.inFlight.Add(-int32(len(c.run)))
	clear(c.run)
	c.run = c.run[:0]
	c.runH, c.runBytes = nil, 0
}

// serveGroup calls the run's handler; a panic answers each request of the run that
// has no response yet with SYSTEM_ERROR.
func (c *Conn) serveGroup(reqs, resps []*RemotingCommand) {
	defer func() {
		if r := recover(); r != nil {
			answer := c.recovered("request handler", reqs[0].Code, r)
			for i := range resps {
				if resps[i] == nil { // a command of its own each: encoding sets its opaque
					resps[i] = NewResponse(SystemError, answer.Remark)
				}
			}
		}
	}()
	c.runH(c.ctx, c, reqs, resps)
}

// safeBefore runs ServerConfig.Before for req; a panic answers SYSTEM_ERROR.
func (c *Conn) safeBefore(req *RemotingCommand) (resp *RemotingCommand) {
	defer func() {
		if r := recover(); r != nil {
			resp = c.recovered("request check", req.Code, r)
		}
	}()
	return c.opts.before(c.ctx, c, req)
}

// answerOnReader encodes resp as the answer to req and queues it with the reader's
// other answers (replyOnReader); nothing for a one-way request or a nil resp.
func (c *Conn) answerOnReader(req, resp *RemotingCommand, st SerializeType) {
	if resp == nil || req.IsOneway() {
		return
	}
	if frame := c.encodeReply(req, resp, st); frame != nil {
		c.replyOnReader(frame)
	}
}

// reuseFrame recycles the buffer req was read into when its handler, which ran on the
// reader and has returned, released the body (RemotingCommand.ReleaseBody).
func reuseFrame(req *RemotingCommand) {
	if req.bodyReleased && req.frame != nil {
		f := req.frame
		req.frame, req.Body = nil, nil
		recycleFrame(f)
	}
}

// releaseSlot ends one in-flight request of size body bytes and wakes a reader waiting
// for a slot.
func (c *Conn) releaseSlot(size int64) {
	c.inBytes.Add(-size)
	c.inFlight.Add(-1)
	select {
	case c.slotFree <- struct{}{}:
	default:
	}
}

func (c *Conn) handle(req *RemotingCommand, st SerializeType) {
	resp := c.safeServe(req)
	if resp == nil || req.IsOneway() {
		return
	}
	c.reply(req, resp, st)
}

// recovered logs a panic of the code run for a request with code (what: "request
// handler", "request check") and returns the SYSTEM_ERROR answer given instead.
func (c *Conn) recovered(what string, code int16, r any) *RemotingCommand {
	c.opts.log.Error("remoting: "+what+" panicked", "remote", c.remote, "conn", c.id,
		"code", RequestCode(code).String(), "panic", r, "stack", string(debug.Stack()))
	return NewResponse(SystemError, fmt.Sprintf("handler panic: %v", r))
}

func (c *Conn) safeServe(req *RemotingCommand) (resp *RemotingCommand) {
	defer func() {
		if r := recover(); r != nil {
			resp = c.recovered("request handler", req.Code, r)
		}
	}()
	return c.opts.serve(c.ctx, c, req)
}

// serveAsync runs an async handler (Server.HandleAsync) on the reader. The request holds
// its in-flight slot until the reply function is called: the first call answers (unless
// the request is one-way or resp is nil) and frees the slot, later calls do nothing. A
// handler that panics before replying is answered SYSTEM_ERROR.
func (c *Conn) serveAsync(req *RemotingCommand, st SerializeType, h AsyncHandler, size int64) {
	var replied atomic.Bool
	reply := func(resp *RemotingCommand) {
		if !replied.CompareAndSwap(false, true) {
			return
		}
		if resp == nil || req.IsOneway() {
			c.releaseSlot(size)
			return
		}
		c.replyNoWait(req, resp, st, size)
	}
	defer func() {
		if r := recover(); r != nil {
			reply(c.recovered("request handler", req.Code, r))
		}
	}()
	if c.opts.before != nil {
		if resp := c.opts.before(c.ctx, c, req); resp != nil {
			reply(resp)
			return
		}
	}
	h(c.ctx, c, req, reply)
}

// replyNoWait queues the answer to req without blocking the calling goroutine (an async
// reply may come from a store's flush goroutine, which must not wait on one slow peer):
// when the outgoing queue has room the frame goes straight in, otherwise a goroutine
// waits for room as reply does. The in-flight slot of size body bytes is released once
// the frame is queued or dropped.
func (c *Conn) replyNoWait(req, resp *RemotingCommand, st SerializeType, size int64) {
	frame := c.encodeReply(req, resp, st)
	if frame == nil {
		c.releaseSlot(size)
		return
	}
	if c.ctx.Err() != nil {
		c.releaseSlot(size)
		return
	}
	n := int64(len(frame))
	if cur := c.outBytes.Load(); c.opts.maxQueuedBytes <= 0 || cur == 0 || cur+n <= c.opts.maxQueuedBytes {
		c.outBytes.Add(n)
		select {
		case c.out <- frame:
			c.releaseSlot(size)
			return
		default:
			c.outBytes.Add(-n)
			c.signalRoom()
		}
	}
	send := func() {
		defer c.releaseSlot(size)
		if err := c.send(c.ctx, frame); err != nil {
			c.opts.log.Debug("remoting: response not sent", "remote", c.remote, "conn", c.id, "opaque", req.Opaque, "err", err)
		}
	}
	if !c.opts.spawn(send) {
		send() // the owner is stopping: bounded by WriteTimeout
	}
}

// encodeReply encodes resp as the answer to req in the request's serialize type; a
// response that cannot be encoded or is over the frame limit becomes SYSTEM_ERROR. nil
// if even that fails.
func (c *Conn) encodeReply(req, resp *RemotingCommand, st SerializeType) []byte {
	resp.Opaque = req.Opaque
	resp.Flag |= FlagResponse
	frame, err := resp.EncodeAs(st)
	if err == nil && len(frame) > c.opts.maxFrameSize {
		err = &FrameError{Field: "length", Reason: fmt.Sprintf("response frame of %d bytes exceeds the maximum frame size %d", len(frame), c.opts.maxFrameSize)}
	}
	if err != nil {
		c.opts.log.Error("remoting: cannot encode response", "remote", c.remote, "conn", c.id, "code", resp.Code, "err", err)
		alt := NewResponse(SystemError, "encode response: "+err.Error())
		alt.Opaque = req.Opaque
		if frame, err = alt.EncodeAs(st); err != nil {
			return nil
		}
	}
	return frame
}

// reply sends resp as the answer to req, in the request's serialize type.
func (c *Conn) reply(req, resp *RemotingCommand, st SerializeType) {
	frame := c.encodeReply(req, resp, st)
	if frame == nil {
		return
	}
	if err := c.sendDirect(c.ctx, frame); err != nil {
		c.opts.log.Debug("remoting: response not sent", "remote", c.remote, "conn", c.id, "opaque", req.Opaque, "err", err)
	}
}

// prepare assigns a fresh opaque and the flag bits and encodes req with the header
// encoding st (binary: without the ext fields whose value is empty, see
// encodeBinaryRequest).
func prepare(req *RemotingCommand, oneway bool, st SerializeType) ([]byte, error) {
	req.Opaque = nextOpaque()
	req.Flag &^= FlagResponse | FlagOneway
	if oneway {
		req.Flag |= FlagOneway
	}
	if st == SerializeRocketMQ {
		return req.encodeBinaryRequest()
	}
	return req.Encode()
}

func timeoutErr(remote string, req *RemotingCommand, err error) error {
	return fmt.Errorf("%w: %s opaque %d to %s: %w", ErrTimeout, RequestCode(req.Code), req.Opaque, remote, err)
}

type result struct {
	cmd *RemotingCommand
	err error
}

// Invoke sends req over this connection and waits for its response (server→client calls
// such as CHECK_TRANSACTION_STATE or GET_CONSUMER_RUNNING_INFO). It assigns req.Opaque and
// clears the flag bits. ctx bounds the wait: on expiry the pending entry is removed and
// an error wrapping [ErrTimeout] and ctx.Err() is returned; without a deadline it waits
// until the response arrives or the connection closes. Connection loss gives a
// [*ConnError]; an encoding problem a [*HeaderError] or [*FrameError].
func (c *Conn) Invoke(ctx context.Context, req *RemotingCommand) (*RemotingCommand, error) {
	return c.invoke(ctx, 0, req)
}

// syncCall is the state of one synchronous call, recycled (syncCalls) once nothing can
// complete it any more: its channel was received from, or its pending entry was taken
// back before anyone completed it.
type syncCall struct {
	ch chan result
	p  pendingCall
}

var syncCalls = sync.Pool{New: func() any {
	sc := &syncCall{ch: make(chan result, 1)}
	sc.p.complete = func(cmd *RemotingCommand, err error) { sc.ch <- result{cmd, err} }
	return sc
}}

// done recycles sc; only after its channel was received from or its entry taken back.
func (sc *syncCall) done() {
	sc.p.req, sc.p.deadline = nil, 0
	syncCalls.Put(sc)
}

// invoke is Invoke with, when deadline (unix ns) is not zero, a timeout enforced by the
// client's deadline sweep (Client.InvokeSyncTimeout) instead of by ctx.
func (c *Conn) invoke(ctx context.Context, deadline int64, req *RemotingCommand) (*RemotingCommand, error) {
	if err := ctx.Err(); err != nil { // do not send what nobody waits for
		return nil, timeoutErr(c.remote, req, err)
	}
	frame, err := prepare(req, false, c.opts.serializeType)
	if err != nil {
		return nil, err
	}
	sc := syncCalls.Get().(*syncCall)
	sc.p.extList = c.opts.extListResponses.has(req.Code)
	sc.p.deadline = deadline
	if deadline != 0 {
		sc.p.req = req // the sweep names it in its timeout error
	}
	op := req.Opaque
	if err := c.register(op, &sc.p); err != nil {
		sc.done()
		return nil, err
	}
	if err := c.sendDirect(ctx, frame); err != nil {
		if p, _ := c.take(op); p == nil {
			r := <-sc.ch // completed by a concurrent close or the sweep
			sc.done()
			return r.cmd, r.err
		}
		sc.done()
		return nil, err
	}
	select {
	case r := <-sc.ch:
		sc.done()
		return r.cmd, r.err
	case <-ctx.Done():
		if p, _ := c.take(op); p != nil {
			sc.done()
			return nil, timeoutErr(c.remote, req, ctx.Err())
		}
		r := <-sc.ch // the response or a close won the race
		sc.done()
		return r.cmd, r.err
	}
}

// invokeAsync sends req and arranges for cb to be called exactly once with the response
// or an error, unless it returns an error (then cb is never called).
func (c *Conn) invokeAsync(ctx context.Context, req *RemotingCommand, cb func(*RemotingCommand, error)) error {
	return c.invokeAsyncWith(ctx, 0, false, req, cb)
}

// invokeAsyncWith is invokeAsync with a deadline (unix ns, 0: none) enforced by the
// client's sweep instead of a timer (ctx is watched only when it can end), and, with
// serial, cb run by the connection's callback runner (runCallbacks) instead of a
// goroutine of its own.
func (c *Conn) invokeAsyncWith(ctx context.Context, deadline int64, serial bool, req *RemotingCommand, cb func(*RemotingCommand, error)) error {
	if err := ctx.Err(); err != nil {
		return timeoutErr(c.remote, req, err)
	}
	frame, err := prepare(req, false, c.opts.serializeType)
	if err != nil {
		return err
	}
	op := req.Opaque
	var p *pendingCall
	if serial {
		p = newSerialCall(c, deadline, req, cb) // recycled once complete ran
	} else {
		p = &pendingCall{deadline: deadline, req: req, extList: c.opts.extListResponses.has(req.Code)}
		p.complete = func(cmd *RemotingCommand, err error) {
			f := func() { c.runCallback(asyncCallback{cb, cmd, err}) }
			if !c.opts.spawn(f) {
				f()
			}
		}
	}
	if deadline != 0 && ctx.Done() != nil {
		p.ctx = ctx // the sweep watches it
	}
	if err := c.register(op, p); err != nil {
		return err
	}
	if deadline == 0 && ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			if p, _ := c.take(op); p != nil {
				p.complete(nil, timeoutErr(c.remote, req, ctx.Err()))
			}
		})
		c.mu.Lock()
		if c.pending[op] == p {
			p.stop = stop
			c.mu.Unlock()
		} else {
			c.mu.Unlock()
			stop()
		}
	}
	if err := c.send(ctx, frame); err != nil {
		if p, stop := c.take(op); p != nil {
			if stop != nil {
				stop()
			}
			return err
		}
		// Already completed (timeout or close) and cb called: report success of the call
		// itself so that cb stays the single report.
		return nil
	}
	return nil
}

// asyncCallback is one async call's callback with its outcome.
type asyncCallback struct {
	cb  func(*RemotingCommand, error)
	cmd *RemotingCommand
	err error
}

// runCallback calls one callback, logging a panic instead of crashing the process.
func (c *Conn) runCallback(a asyncCallback) {
	defer func() {
		if r := recover(); r != nil {
			c.opts.log.Error("remoting: async callback panicked", "remote", c.remote, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	a.cb(a.cmd, a.err)
}

// queueCallback hands a callback to the connection's callback runner, starting one (a
// goroutine of the owner) when none runs; the queue holds at most one entry per call
// that was pending, so it is bounded by the calls in flight. Never blocks.
func (c *Conn) queueCallback(a asyncCallback) {
	c.cbMu.Lock()
	c.cbQueue = append(c.cbQueue, a)
	if c.cbRunners > 0 {
		c.cbMu.Unlock()
		return
	}
	c.cbRunners++
	c.cbMu.Unlock()
	if !c.opts.spawn(c.runCallbacks) {
		c.runCallbacks() // the owner is closing: run them here
	}
}

// unstickCallbacks starts another callback runner when callbacks are queued but no
// runner finished one since the previous call (one sweep interval): a callback that
// blocks (say, one that sends again and waits for room that only the queued callbacks
// would free) then delays the others by about one interval instead of for ever.
func (c *Conn) unstickCallbacks() {
	done := c.cbDone.Load()
	c.cbMu.Lock()
	stuck := c.cbHead < len(c.cbQueue) && c.cbRunners > 0 && done == c.cbSeen
	c.cbSeen = done
	if !stuck {
		c.cbMu.Unlock()
		return
	}
	c.cbRunners++
	c.cbMu.Unlock()
	if !c.opts.spawn(c.runCallbacks) {
		c.cbMu.Lock()
		c.cbRunners--
		c.cbMu.Unlock()
	}
}

// runCallbacks runs queued callbacks one after another, in completion order, taking
// one at a time (so that another runner can take over the rest when one blocks), until
// the queue is empty, then returns (the next queueCallback starts a new runner).
func (c *Conn) runCallbacks() {
	for {
		c.cbMu.Lock()
		if c.cbHead == len(c.cbQueue) {
			c.cbQueue, c.cbHead = c.cbQueue[:0], 0
			c.cbRunners--
			c.cbMu.Unlock()
			return
		}
		a := c.cbQueue[c.cbHead]
		c.cbQueue[c.cbHead] = asyncCallback{} // let the answer be collected
		c.cbHead++
		c.cbMu.Unlock()
		c.runCallback(a)
		c.cbDone.Add(1)
	}
}

// InvokeOneway sends req with the ONEWAY flag bit set and waits only until it is queued
// for writing (bounded by ctx and the write timeout). It assigns req.Opaque.
// Errors: [*ConnError] if the connection is closed, ErrTimeout if ctx expired while the
// outgoing queue was full, encoding errors as for [Conn.Invoke].
func (c *Conn) InvokeOneway(ctx context.Context, req *RemotingCommand) error {
	if err := ctx.Err(); err != nil {
		return timeoutErr(c.remote, req, err)
	}
	frame, err := prepare(req, true, c.opts.serializeType)
	if err != nil {
		return err
	}
	return c.send(ctx, frame)
}
