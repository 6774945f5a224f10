package remoting

import "sync"

// serialCall is the pending state of one call whose callback runs on its connection's
// callback runner (Client.InvokeAsyncTimeout): the pendingCall and what its complete
// needs. It comes from serialCalls and goes back there when complete runs: complete is
// called exactly once, by whoever took the call out of the pending table, and nothing
// uses the pendingCall after that (the sweep and closeWith read its req and stop before
// calling complete; the reader reads extList before). A call that is never completed
// (its send failed, or it was never registered) is left to the garbage collector.
// Recycling spares each call the allocation of its pendingCall and of its complete
// closure.
type serialCall struct {
	p  pendingCall
	c  *Conn
	cb func(*RemotingCommand, error)
}

// serialCalls recycles serialCalls; each has its complete closure, made once (New is
// set by init: the closure refers to the pool).
var serialCalls sync.Pool

func init() {
	serialCalls.New = func() any {
		sc := new(serialCall)
		sc.p.complete = func(cmd *RemotingCommand, err error) {
			c, cb := sc.c, sc.cb
			*sc = serialCall{p: pendingCall{complete: sc.p.complete}}
			serialCalls.Put(sc)
			c.queueCallback(asyncCallback{cb, cmd, err})
		}
		return sc
	}
}

// newSerialCall returns the pendingCall of a call on c with deadline (unix ns, 0: none)
// whose cb is queued to c's callback runner (queueCallback) when it completes.
func newSerialCall(c *Conn, deadline int64, req *RemotingCommand, cb func(*RemotingCommand, error)) *pendingCall {
	sc := serialCalls.Get().(*serialCall)
	sc.c, sc.cb = c, cb
	sc.p.deadline, sc.p.req, sc.p.extList = deadline, req, c.opts.extListResponses.has(req.Code)
	return &sc.p
}
