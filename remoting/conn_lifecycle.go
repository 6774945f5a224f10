package remoting

// Starting and closing a Conn: start, the graceful Close, and closeWith, which runs
// the stop order described in conn.go.

import (
	"time"
)

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

// closeWith closes the connection once with the given cause (see the stop order in conn.go).
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
