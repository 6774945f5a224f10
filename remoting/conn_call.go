package remoting

// Outgoing calls on a Conn: the pending-call table, synchronous, asynchronous and one-way
// calls, and the runner of async callbacks.

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// opaqueSeq is the process-wide request id counter; the first id is 1 (as the Go client).
var opaqueSeq atomic.Int32

func nextOpaque() int32 { return opaqueSeq.Add(1) }

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

// pendingLen returns the number of calls waiting for a response.
func (c *Conn) pendingLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
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
	if err := c.writeOrQueue(ctx, frame); err != nil {
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
	if err := c.queue(ctx, frame); err != nil {
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
	return c.queue(ctx, frame)
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
