package remoting

// Serving incoming requests on a Conn: dispatch on the reader, handlers in goroutines of
// their own, async handlers, and the in-flight limits.

import (
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"
)

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
		c.answerOnReader(req, c.safeServe(req), st)
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
			c.answerOnReader(req, NewResponse(SystemBusy, "[OVERLOAD]system busy, "+why), st)
			return
		}
		// A one-way request cannot be told "busy": stop reading this connection until a
		// handler finishes, so TCP flow control slows the sender instead of the request
		// being dropped. (The run was handed over above.)
		if len(c.answers) > 0 {
			c.flushAnswers()
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

// handle serves req in a goroutine of its own and answers it from there (answer).
func (c *Conn) handle(req *RemotingCommand, st SerializeType) {
	c.answer(req, c.safeServe(req), st)
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

// markServed notes that a request of the peer passed ServerConfig.Before and reached
// its handler (Server.ActiveWindow: connection shedding spares active connections).
func (c *Conn) markServed() { c.lastServed.Store(time.Now().UnixNano()) }

// activeAt reports whether the connection has a request in flight or had one served
// within window before now (unix ns); a window of 0 or less: never.
func (c *Conn) activeAt(now int64, window time.Duration) bool {
	if window <= 0 {
		return false
	}
	if c.inFlight.Load() > 0 {
		return true
	}
	last := c.lastServed.Load()
	return last != 0 && now-last < int64(window)
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

// serveAsync runs an async handler (Server.HandleAsync) on the reader. The request holds
// its in-flight slot until the reply function is called: the first call answers (unless
// the request is one-way or resp is nil) and frees the slot, later calls do nothing. A
// handler that panics before replying is answered SYSTEM_ERROR.
func (c *Conn) serveAsync(req *RemotingCommand, st SerializeType, h AsyncHandler, size int64) {
	var replied atomic.Bool
	reply := func(resp *RemotingCommand) {
		if replied.CompareAndSwap(false, true) {
			c.answerNoWait(req, resp, st, size)
		}
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
	c.markServed()
	h(c.ctx, c, req, reply)
}
