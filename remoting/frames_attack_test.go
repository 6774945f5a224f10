package remoting

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// Attacks on the adaptive read buffer (8 KiB, 64 KiB after a burst) and on the recycled
// request frames (frames up to 128 KiB read into pooled buffers, given back by
// RemotingCommand.ReleaseBody).

// releasingEcho answers with the request's ext fields and body and releases the body:
// the answer is encoded before the frame is reused.
func releasingEcho(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
	resp := echoHandler(ctx, conn, req)
	req.ReleaseBody()
	return resp
}

// burstFrames encodes n echo requests (code) of 1-3 KiB, opaque i and body byte i.
func burstFrames(t *testing.T, code RequestCode, n int) []byte {
	t.Helper()
	var burst []byte
	for i := range n {
		req := NewRequest(code, nil, bytes.Repeat([]byte{byte(i)}, 1024+(i*37)%2048))
		req.Opaque = int32(i)
		frame, err := req.Encode()
		if err != nil {
			t.Fatal(err)
		}
		burst = append(burst, frame...)
	}
	return burst
}

// sendBurst writes the burst of n requests (burstFrames) in one write, checks the n
// answers' bodies and returns their opaques in the order they came.
func sendBurst(t *testing.T, nc net.Conn, code RequestCode, n int) []int32 {
	t.Helper()
	order := make([]int32, 0, n)
	burst := burstFrames(t, code, n)
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	writeErr := make(chan error, 1)
	go func() { _, err := nc.Write(burst); writeErr <- err }()
	for i := range n {
		f, err := ReadFrame(nc, 0)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		resp, _, err := DecodeFrame(f)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if want := bytes.Repeat([]byte{byte(resp.Opaque)}, 1024+(int(resp.Opaque)*37)%2048); !bytes.Equal(resp.Body, want) {
			t.Fatalf("answer %d (opaque %d): body of %d bytes is not the request's", i, resp.Opaque, len(resp.Body))
		}
		order = append(order, resp.Opaque)
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}
	_ = nc.SetDeadline(time.Time{})
	return order
}

// TestQuietConnectionGivesBackLargeReadBuffer: a connection that grew the 64 KiB read
// buffer with a burst and then goes quiet reads through an 8 KiB one again (a broker with
// thousands of producers that each sent one burst does not keep 64 KiB per connection),
// twice in a row; every request, and a frame split around the quiet period, answered
// intact.
func TestQuietConnectionGivesBackLargeReadBuffer(t *testing.T) {
	// With an idle timeout, with only the frame timeout, and with neither (no deadline
	// may be left behind then: a frame may take its time).
	for _, to := range [][2]time.Duration{{time.Hour, 0}, {-1, 0}, {-1, -1}} {
		t.Run(fmt.Sprintf("idle=%v,frame=%v", to[0], to[1]), func(t *testing.T) {
			s := startServer(t, ServerConfig{IdleTimeout: to[0], FrameReadTimeout: to[1]})
			s.opts.readBufIdle = 50 * time.Millisecond // before any connection
			s.HandleInline(RequestCode(500), releasingEcho)
			nc := rawDial(t, s.Addr())
			for round := range 2 {
				sendBurst(t, nc, 500, 300)
				// The large buffer is taken at the first full read and kept while data
				// keeps coming; once the connection is quiet for readBufIdle it is dropped.
				testkit.WaitFor(t, 5*time.Second, func() bool { return serverConnReadBuf(t, s) == readBufSmall },
					fmt.Sprintf("round %d: the quiet connection's read buffer back to %d bytes", round, readBufSmall))
				// A frame sent in two parts, the second after the quiet period: read whole.
				frame := mustEncode(t, NewRequest(500, nil, []byte("after")))
				if _, err := nc.Write(frame[:10]); err != nil {
					t.Fatal(err)
				}
				<-time.After(3 * s.opts.readBufIdle) // a slow peer, longer than the quiet period
				resp, _ := rawRoundTrip(t, nc, frame[10:])
				if string(resp.Body) != "after" {
					t.Fatalf("round %d: answer after the buffer shrank: %q", round, resp.Body)
				}
			}
		})
	}
}

func mustEncode(t *testing.T, req *RemotingCommand) []byte {
	t.Helper()
	f, err := req.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTimeoutsHoldWithBufferedFrames: the reader skips read deadlines for a frame that is
// already buffered; the frame and idle timeouts must still close a connection whose next
// frame is only partly there, with the large buffer too, and a slow handler (longer than
// the frame timeout) must not make the connection fail on a stale deadline.
func TestTimeoutsHoldWithBufferedFrames(t *testing.T) {
	t.Run("partial frame after complete ones, large buffer", func(t *testing.T) {
		s := startServer(t, ServerConfig{IdleTimeout: time.Hour, FrameReadTimeout: 150 * time.Millisecond})
		s.opts.readBufIdle = time.Hour // keeps the large buffer, however slow the machine
		s.HandleInline(RequestCode(500), releasingEcho)
		nc := rawDial(t, s.Addr())
		sendBurst(t, nc, 500, 300)
		if got := serverConnReadBuf(t, s); got != readBufLarge {
			t.Fatalf("read buffer %d after a burst, want %d", got, readBufLarge)
		}
		// Three whole frames and the first half of a fourth in one write: the three are
		// answered from the buffer, then the fourth must complete within the frame timeout.
		all := burstFrames(t, 500, 4)
		cut := len(all) - 700
		if _, err := nc.Write(all[:cut]); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		for i := range 3 {
			f, err := ReadFrame(nc, 0)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			if resp, _, err := DecodeFrame(f); err != nil || resp.Opaque != int32(i) {
				t.Fatalf("answer %d: opaque %v, %v", i, resp, err)
			}
		}
		expectClosed(t, nc)
	})
	t.Run("128 KiB frames announced, a few bytes sent", func(t *testing.T) {
		// Each such connection holds a pooled 128 KiB buffer until the frame timeout.
		s := startServer(t, ServerConfig{IdleTimeout: time.Hour, FrameReadTimeout: 150 * time.Millisecond})
		var conns []net.Conn
		for _, n := range []uint32{64<<10 + 1, 128<<10 - 1, 128 << 10, 128<<10 + 1} {
			nc := rawDial(t, s.Addr())
			if _, err := nc.Write(append(binary.BigEndian.AppendUint32(nil, n), 0, 0, 0, 2, '{')); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, nc)
		}
		for _, nc := range conns {
			expectClosed(t, nc)
		}
		testkit.WaitFor(t, 5*time.Second, func() bool { return s.Conns() == 0 }, "every stalled connection closed")
	})
	t.Run("idle timeout with the large buffer", func(t *testing.T) {
		// Waiting for the large buffer to go quiet must not push the idle close back.
		s := startServer(t, ServerConfig{IdleTimeout: 200 * time.Millisecond})
		s.opts.readBufIdle = time.Minute
		s.HandleInline(RequestCode(500), releasingEcho)
		nc := rawDial(t, s.Addr())
		sendBurst(t, nc, 500, 300)
		expectClosed(t, nc) // within 5 s, not after readBufIdle
	})
	t.Run("idle timeout while a client trickles a frame", func(t *testing.T) {
		// FrameReadTimeout defaults to the shorter IdleTimeout: a frame sent one byte at a
		// time (for 10 s in all) is cut off long before it is complete.
		s := startServer(t, ServerConfig{IdleTimeout: 200 * time.Millisecond})
		s.opts.readBufIdle = time.Hour // keeps the large buffer
		s.HandleInline(RequestCode(500), releasingEcho)
		nc := rawDial(t, s.Addr())
		sendBurst(t, nc, 500, 300) // the large buffer
		frame := mustEncode(t, NewRequest(500, nil, bytes.Repeat([]byte{1}, 150)))
		closed := make(chan error, 1)
		go func() {
			_ = nc.SetReadDeadline(time.Now().Add(15 * time.Second))
			_, err := nc.Read(make([]byte, 1))
			closed <- err
		}()
		tick := time.NewTicker(frameTrickle)
		defer tick.Stop()
		sent := 0
	trickle:
		for ; sent < len(frame); sent++ {
			select {
			case err := <-closed:
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("no close seen")
				}
				break trickle
			case <-tick.C:
				if _, err := nc.Write(frame[sent : sent+1]); err != nil {
					break trickle // the server closed: the write was reset
				}
			}
		}
		if sent == len(frame) {
			t.Fatalf("a frame trickled over %v was read whole: no timeout applied", time.Duration(len(frame))*frameTrickle)
		}
	})
	t.Run("slow handler, next frame buffered", func(t *testing.T) {
		// The deadline set for frame 1 passes while its handler runs; frame 2, buffered
		// meanwhile, is read without the socket, and frame 3, sent after the answers, is
		// read under fresh deadlines.
		const frameTimeout = 100 * time.Millisecond
		s := startServer(t, ServerConfig{IdleTimeout: time.Hour, FrameReadTimeout: frameTimeout})
		s.HandleInline(RequestCode(500), func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
			if string(req.Body) == "slow" {
				select { // a handler slower than the frame timeout (a slow disk)
				case <-time.After(3 * frameTimeout):
				case <-ctx.Done():
				}
			}
			return releasingEcho(ctx, conn, req)
		})
		nc := rawDial(t, s.Addr())
		var two []byte
		for i, body := range []string{"slow", "next"} {
			req := NewRequest(500, nil, []byte(body))
			req.Opaque = int32(i)
			two = append(two, mustEncode(t, req)...)
		}
		if _, err := nc.Write(two); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		for i, want := range []string{"slow", "next"} {
			f, err := ReadFrame(nc, 0)
			if err != nil {
				t.Fatalf("answer %d: %v", i, err)
			}
			if resp, _, err := DecodeFrame(f); err != nil || string(resp.Body) != want {
				t.Fatalf("answer %d: %v %v", i, resp, err)
			}
		}
		if resp, _ := rawRoundTrip(t, nc, mustEncode(t, NewRequest(500, nil, []byte("third")))); string(resp.Body) != "third" {
			t.Fatalf("third answer: %q", resp.Body)
		}
	})
}

// frameTrickle is the pace of the trickling client: one byte per tick.
const frameTrickle = 20 * time.Millisecond

// TestFrameSizesThroughServer: frames at every size-class edge of the frame pool (1, 4,
// 16, 64 and 128 KiB, +-1) and just over the pooled maximum, from three connections at
// once, to a releasing inline handler and to a goroutine handler that keeps its body:
// each answer carries exactly its request's body, whatever buffer the frame was read into
// and reused from.
func TestFrameSizesThroughServer(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(RequestCode(500), releasingEcho)
	s.Handle(RequestCode(501), echoHandler)
	var sizes []int
	for _, edge := range []int{64, 1 << 10, 4 << 10, 16 << 10, 64 << 10, maxPooledFrame} {
		sizes = append(sizes, edge-1, edge, edge+1)
	}
	// frame length (after the length field) = 4 + header + body: find the body for each.
	hdr := len(mustEncode(t, NewRequest(500, nil, nil))) - 4
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for conn := range 3 {
		c := newClient(t, ClientConfig{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 4 {
				for i, size := range sizes {
					code := RequestCode(500 + (i+round+conn)%2)
					body := bytes.Repeat([]byte{byte(i*7 + conn + round)}, max(size-hdr, 1))
					resp, err := c.InvokeSync(ctxTimeout(t, 10*time.Second), s.Addr(), NewRequest(code, nil, body))
					if err == nil && !bytes.Equal(resp.Body, body) {
						err = fmt.Errorf("frame of %d bytes: answer body differs", size)
					}
					if err != nil {
						errs <- fmt.Errorf("conn %d round %d: %w", conn, round, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The tiniest frames (4 to 8 bytes: a header-length field and at most 4 header bytes):
	// answered or refused by closing the connection, never a crash; others are served.
	for n := 4; n <= 8; n++ {
		nc := rawDial(t, s.Addr())
		frame := binary.BigEndian.AppendUint32(nil, uint32(n))
		frame = binary.BigEndian.AppendUint32(frame, uint32(min(n-4, 2)))
		frame = append(frame, "{}  "[:n-4]...)
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := ReadFrame(nc, 0)
		switch {
		case err == nil:
			if resp, _, derr := DecodeFrame(f); derr != nil || !resp.IsResponse() {
				t.Fatalf("frame of %d bytes: answer %v %v", n, resp, derr)
			}
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err):
		default:
			t.Fatalf("frame of %d bytes: %v", n, err)
		}
	}
	c := newClient(t, ClientConfig{})
	if resp, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(500, nil, []byte("ok"))); err != nil || string(resp.Body) != "ok" {
		t.Fatalf("after the tiny frames: %v %v", resp, err)
	}
}

// isReset reports a connection reset by the peer (a close with unread data).
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// TestReleasedFrameRecycledOnce: a request's frame goes back to the pool once, however
// often reuseFrame runs for it, so that two later frames never share a buffer.
func TestReleasedFrameRecycledOnce(t *testing.T) {
	for range 50 {
		frame := frameBuf(3000, false)[:3000]
		req := &RemotingCommand{frame: frame, Body: frame[10:]}
		req.ReleaseBody()
		reuseFrame(req)
		reuseFrame(req) // a second pass (a handler's panic path, a retry) must not put it again
		a, b := frameBuf(3000, false), frameBuf(3000, false)
		if &a[:1][0] == &b[:1][0] {
			t.Fatal("one recycled frame handed out twice")
		}
	}
}

// TestBodyEndsWithItsFrame: a request or response read into a recycled buffer (which
// held another connection's frame, such as an answer carrying other topics' messages)
// gets a Body whose capacity ends with the frame, so that neither reslicing nor an
// append reaches the stale bytes after it.
func TestBodyEndsWithItsFrame(t *testing.T) {
	wire := mustEncode(t, NewRequest(500, map[string]string{"k": "v"}, bytes.Repeat([]byte("b"), 2000)))
	recycledSeen := false
	for range 100 {
		old := frameBuf(4<<10, false)[:4<<10]
		copy(old, bytes.Repeat([]byte("S"), len(old))) // another frame's bytes
		recycleFrame(old)
		f, err := ReadFrame(bytes.NewReader(wire), 0)
		if err != nil {
			t.Fatal(err)
		}
		cmd, _, err := DecodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		if cap(f) > len(f) {
			recycledSeen = true
		}
		if cap(cmd.Body) != len(cmd.Body) {
			t.Fatalf("body of %d bytes has capacity %d: %q... after it", len(cmd.Body), cap(cmd.Body), cmd.Body[len(cmd.Body):cap(cmd.Body)][:8])
		}
	}
	if !recycledSeen {
		t.Fatal("no frame was read into a recycled buffer in 100 tries")
	}
}

// TestReleaseThenPanic: handlers on the reader (inline and async) that release their
// body and then panic are answered SYSTEM_ERROR, their frames are recycled once, and the
// echo requests pipelined between them on the same connection come back intact.
func TestReleaseThenPanic(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.HandleInline(RequestCode(500), releasingEcho)
	s.HandleInline(RequestCode(502), func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		req.ReleaseBody()
		panic("inline handler fails after releasing its body")
	})
	s.HandleAsync(RequestCode(503), func(ctx context.Context, conn *Conn, req *RemotingCommand, reply func(*RemotingCommand)) {
		req.ReleaseBody()
		panic("async handler fails after releasing its body")
	})
	c := newClient(t, ClientConfig{})
	const n = 600
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		code := RequestCode(500)
		if i%3 == 1 {
			code = 502
		} else if i%3 == 2 {
			code = 503
		}
		body := bytes.Repeat([]byte(fmt.Sprintf("%05d", i)), 50+(i*131)%3000) // 250 B .. 15 KiB
		wg.Add(1)
		err := c.InvokeAsync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(code, nil, body), func(resp *RemotingCommand, err error) {
			defer wg.Done()
			switch {
			case err != nil:
			case code == 500 && !bytes.Equal(resp.Body, body):
				err = fmt.Errorf("echo %d: answer body of %d bytes is not the request's", i, len(resp.Body))
			case code != 500 && resp.ResponseCode() != SystemError:
				err = fmt.Errorf("request %d to a panicking handler: answer %d %q", i, resp.Code, resp.Remark)
			}
			if err != nil {
				errs <- err
			}
		})
		if err != nil {
			wg.Done()
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestKeptHeadersSurviveFrameReuse: a handler that releases its body may keep the
// request's header (ext fields as a map or a list, remark): they never point into the
// frame, which later requests overwrite. Both header encodings, with plain and escaped
// JSON strings (the fast parser's two paths).
func TestKeptHeadersSurviveFrameReuse(t *testing.T) {
	s := startServer(t, ServerConfig{ExtListCodes: []RequestCode{505}})
	type kept struct {
		ext    map[string]string
		list   []ExtField
		remark string
	}
	var (
		mu   sync.Mutex
		keep []kept
	)
	keeper := func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		mu.Lock()
		keep = append(keep, kept{ext: req.ExtFields, list: req.ExtList, remark: req.Remark})
		mu.Unlock()
		req.ReleaseBody()
		return NewResponse(Success, "")
	}
	s.HandleInline(504, keeper)
	s.HandleInline(505, keeper)
	value := func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("plain-%06d", i)
		}
		return fmt.Sprintf("esc\"aped\\-%06d-\u00e9", i) // escapes and non-ASCII
	}
	const n = 400
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		c := newClient(t, ClientConfig{SerializeType: st})
		for i := range n {
			req := NewRequest(RequestCode(504+i%2), map[string]string{"k": value(i), "n": fmt.Sprint(i)}, bytes.Repeat([]byte{byte(i)}, 1500))
			req.Remark = value(i)
			if _, err := c.InvokeSync(ctxTimeout(t, 10*time.Second), s.Addr(), req); err != nil {
				t.Fatal(err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keep) != 2*n {
		t.Fatalf("%d requests kept, want %d", len(keep), 2*n)
	}
	for j, k := range keep {
		i := j % n
		got, _ := (&RemotingCommand{ExtFields: k.ext, ExtList: k.list}).Ext("k")
		if got != value(i) || k.remark != value(i) {
			t.Fatalf("request %d: kept ext k=%q remark %q, sent %q", j, got, k.remark, value(i))
		}
	}
}
