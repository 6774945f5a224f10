package remoting

// Timeouts and deadlines of a Conn: the idle and frame timeouts of the reader, and the
// deadline sweep of pending calls.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// busy reports whether an idle read timeout should be ignored: requests are being
// handled, calls await responses, or we wrote recently (Java counts reads and writes).
func (c *Conn) busy() bool {
	return c.inFlight.Load() > 0 || c.heldAnswers.Load() > 0 || c.pendingLen() > 0 ||
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

func timeoutErr(remote string, req *RemotingCommand, err error) error {
	return fmt.Errorf("%w: %s opaque %d to %s: %w", ErrTimeout, RequestCode(req.Code), req.Opaque, remote, err)
}
