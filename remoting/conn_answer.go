package remoting

// Answering requests on a Conn: encoding a handler's response (encodeAnswer) and handing
// it to the write side. There is one path per place an answer comes from, and they
// differ only in whether and where the caller may wait; none answers a one-way request
// or a nil response, and all use the request's serialize type:
//   - answer: from a handler's own goroutine. Written by that goroutine when the write
//     side is idle (writeDirect), else queued, the goroutine waiting for room up to
//     WriteTimeout (writeOrQueue).
//   - answerOnReader: from the reader (inline handlers, runs, SYSTEM_BUSY). Held with
//     the other answers of the same burst of requests and written together
//     (flushAnswers), so the reader neither waits per answer nor wakes the writer for each.
//   - answerNoWait: from any goroutine that must not block (an async handler's reply
//     function). Queued at once when the queue has room, else handed to a goroutine
//     that waits for room; it also frees the request's in-flight slot.

import (
	"fmt"
)

// Answers held on the reader are written together once this many are waiting (or this
// many bytes), even when more complete frames are buffered.
const (
	maxAnswerBatch      = 64
	maxAnswerBatchBytes = 64 << 10
)

// answer sends resp as the answer to req from the calling goroutine (a handler's own):
// directly when the write side is idle, else through the outgoing queue, waiting for
// room up to WriteTimeout. A frame that cannot be sent is logged and dropped (the
// connection is closing or closed).
func (c *Conn) answer(req, resp *RemotingCommand, st SerializeType) {
	if resp == nil || req.IsOneway() {
		return
	}
	frame := c.encodeAnswer(req, resp, st)
	if frame == nil {
		return
	}
	if err := c.writeOrQueue(c.ctx, frame); err != nil {
		c.opts.log.Debug("remoting: response not sent", "remote", c.remote, "conn", c.id, "opaque", req.Opaque, "err", err)
	}
}

// answerOnReader encodes resp as the answer to req and holds it with the reader's other
// answers; they are written together (flushAnswers) when the reader is about to wait
// for input, or at once when maxAnswerBatch answers or maxAnswerBatchBytes are held.
// Only the reader calls it.
func (c *Conn) answerOnReader(req, resp *RemotingCommand, st SerializeType) {
	if resp == nil || req.IsOneway() {
		return
	}
	frame := c.encodeAnswer(req, resp, st)
	if frame == nil {
		return
	}
	c.answers = append(c.answers, frame)
	c.answersSize += len(frame)
	c.heldAnswers.Add(1)
	if len(c.answers) >= maxAnswerBatch || c.answersSize >= maxAnswerBatchBytes {
		c.flushAnswers()
	}
}

// flushAnswers writes the answers held by answerOnReader: directly from the reader in
// one write when the connection's write side is idle, else through the writer's queue
// (waiting for room as any sender does). Only the reader calls it.
func (c *Conn) flushAnswers() {
	done, err := c.writeDirect(nil, c.answers)
	if !done {
		for _, f := range c.answers {
			if err = c.queue(c.ctx, f); err != nil {
				break
			}
		}
	}
	if err != nil {
		c.opts.log.Debug("remoting: responses not sent", "remote", c.remote, "conn", c.id, "err", err)
	}
	c.dropAnswers()
}

// dropAnswers forgets the answers flushAnswers did not write (the reader is ending).
func (c *Conn) dropAnswers() {
	clear(c.answers)
	c.answers = c.answers[:0]
	c.answersSize = 0
	c.heldAnswers.Store(0)
}

// answerNoWait sends resp as the answer to req without blocking the calling goroutine
// (an async reply may come from a store's flush goroutine, which must not wait on one
// slow peer): when the outgoing queue has room the frame goes straight in (tryQueue),
// otherwise a goroutine of the owner waits for room as answer does. The in-flight slot
// of size body bytes is released once the frame is queued or dropped (at once for a
// one-way request or a nil resp).
func (c *Conn) answerNoWait(req, resp *RemotingCommand, st SerializeType, size int64) {
	if resp == nil || req.IsOneway() {
		c.releaseSlot(size)
		return
	}
	frame := c.encodeAnswer(req, resp, st)
	if frame == nil {
		c.releaseSlot(size)
		return
	}
	if c.ctx.Err() != nil {
		c.releaseSlot(size)
		return
	}
	if c.tryQueue(frame) {
		c.releaseSlot(size)
		return
	}
	send := func() {
		defer c.releaseSlot(size)
		if err := c.queue(c.ctx, frame); err != nil {
			c.opts.log.Debug("remoting: response not sent", "remote", c.remote, "conn", c.id, "opaque", req.Opaque, "err", err)
		}
	}
	if !c.opts.spawn(send) {
		send() // the owner is stopping: bounded by WriteTimeout
	}
}

// encodeAnswer encodes resp as the answer to req in the request's serialize type; a
// response that cannot be encoded or is over the frame limit becomes SYSTEM_ERROR. nil
// if even that fails.
func (c *Conn) encodeAnswer(req, resp *RemotingCommand, st SerializeType) []byte {
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
