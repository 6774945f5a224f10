package remoting

// Answering requests on a Conn: encoding a handler's response and handing it to the
// write side, from a handler's goroutine, from the reader, or without waiting.

import (
	"fmt"
)

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
