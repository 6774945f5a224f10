package remoting

// Reading a Conn: the reader goroutine (readLoop), its adaptive read buffer, the TLS
// handshake it begins with, and how it ends on a read error.

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
	"time"
)

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
	defer c.dropAnswers() // the connection is closing: no answer is written any more
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
// (flushAnswers): before the reader waits for input, and before it closes the connection
// on a malformed frame (closeOnReadErr).
func (c *Conn) finishRead() {
	if len(c.run) > 0 {
		c.flushRun()
	}
	if len(c.answers) > 0 {
		c.flushAnswers()
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
