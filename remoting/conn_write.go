package remoting

// Writing a Conn. There are two ways onto the socket, and one name for each:
//   - queue: put an encoded frame on the bounded outgoing queue, which the writer
//     goroutine (writeLoop) drains, coalescing queued frames into one writev; tryQueue
//     is its non-blocking form.
//   - writeDirect: write frames from the goroutine that has them, when the write side
//     is idle, with one non-blocking attempt whose rest the writer writes first.
//
// writeOrQueue combines them for a frame that is likely alone (a sync call's request, a
// handler's answer): a direct write when possible, else the queue.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// frameTooBig reports an outgoing frame over the maximum frame size (nil if it fits).
func (c *Conn) frameTooBig(frame []byte) error {
	if len(frame) > c.opts.maxFrameSize {
		return &FrameError{Field: "length", Reason: fmt.Sprintf("outgoing frame of %d bytes exceeds the maximum frame size %d", len(frame), c.opts.maxFrameSize)}
	}
	return nil
}

// queue puts an encoded frame on the outgoing queue. It waits for byte room under
// maxQueuedBytes (waitRoom) and then for a free slot of the queue, each at most
// writeTimeout: a queue that stays full that long means the peer is not reading, and
// the connection is closed. ctx ending first gives an error wrapping ErrTimeout.
func (c *Conn) queue(ctx context.Context, frame []byte) error {
	if err := c.frameTooBig(frame); err != nil {
		return err
	}
	n := int64(len(frame))
	if c.opts.maxQueuedBytes > 0 {
		if err := c.waitRoom(ctx, n); err != nil {
			return err
		}
	}
	c.outBytes.Add(n)
	err := c.waitSlot(ctx, frame)
	if err != nil {
		c.outBytes.Add(-n)
		c.signalRoom()
	}
	return err
}

// waitSlot is queue's wait for a free slot of the outgoing queue (the frame's bytes are
// counted in outBytes already).
func (c *Conn) waitSlot(ctx context.Context, frame []byte) error {
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

// tryQueue is queue without waiting: it puts frame (already checked against the frame
// size limit) on the outgoing queue when it fits under maxQueuedBytes and a slot is
// free, and reports whether it did.
func (c *Conn) tryQueue(frame []byte) bool {
	n := int64(len(frame))
	if cur := c.outBytes.Load(); c.opts.maxQueuedBytes > 0 && cur != 0 && cur+n > c.opts.maxQueuedBytes {
		return false
	}
	c.outBytes.Add(n)
	select {
	case c.out <- frame:
		return true
	default:
		c.outBytes.Add(-n)
		c.signalRoom()
		return false
	}
}

// writeOrQueue sends a frame that is likely alone (a sync call's request, a handler's
// answer): written from the calling goroutine when the write side is idle
// (writeDirect), else queued (queue). Bursts of frames from one goroutine (async calls,
// one-way requests) use queue, so that the writer coalesces them.
func (c *Conn) writeOrQueue(ctx context.Context, frame []byte) error {
	if err := c.frameTooBig(frame); err != nil {
		return err
	}
	if done, err := c.writeDirect(frame, nil); done {
		return err
	}
	return c.queue(ctx, frame)
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

// writeDirect writes one frame (many nil) or the frames many (encoded frames the caller
// owns and hands over) on the calling goroutine when the connection's write side is
// idle: no frame is queued or being written (outBytes is zero) and no other goroutine
// writes (wmu is free). This saves waking the writer goroutine, which costs a thread
// wake-up per frame when the connection carries one request at a time. It makes one
// non-blocking write attempt: what the socket does not take at once is handed to the
// writer (c.leftover, written before anything queued later), so the caller never waits
// for a slow peer and the write timeout and the outgoing-queue limits keep applying to
// it. false: the write side is busy (or direct writes are unsupported), nothing was
// written, the caller queues the frames. A socket error closes the connection and is
// returned (with true). One frame is passed alone so that it goes through the
// connection's one-entry array (c.one) instead of a slice allocated per write.
func (c *Conn) writeDirect(one []byte, many [][]byte) (bool, error) {
	if c.raw == nil || c.outBytes.Load() != 0 || !c.wmu.TryLock() {
		return false, nil
	}
	frames := many
	if many == nil {
		c.one[0] = one
		frames = c.one[:]
	}
	done, rest, err := c.writeDirectLocked(frames)
	c.one[0] = nil
	c.wmu.Unlock()
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
