package remoting

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// serverConnReadBuf returns the read buffer size of the server's only connection.
func serverConnReadBuf(t *testing.T, s *Server) int32 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) != 1 {
		t.Fatalf("server has %d connections, want 1", len(s.conns))
	}
	for _, c := range s.conns {
		return c.readBuf.Load()
	}
	return 0
}

// TestReadBufferGrowsForBursts: a connection that sends a burst of requests in one write
// gets the large read buffer, every request of the burst (including the bytes already
// buffered when the buffer grew) is answered intact and in order, and a connection that
// makes one small call at a time keeps the small buffer.
func TestReadBufferGrowsForBursts(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			s := startServer(t, ServerConfig{})
			s.opts.readBufIdle = time.Hour // no shrink between the burst and the check, however slow the machine
			if inline {
				s.HandleInline(RequestCode(500), echoHandler)
			} else {
				s.Handle(RequestCode(500), echoHandler)
			}

			quietConn := rawDial(t, s.Addr())
			for i := range 20 {
				req := NewRequest(500, nil, []byte("small"))
				req.Opaque = int32(i)
				frame, err := req.Encode()
				if err != nil {
					t.Fatal(err)
				}
				resp, _ := rawRoundTrip(t, quietConn, frame)
				if resp.Opaque != int32(i) || string(resp.Body) != "small" {
					t.Fatalf("call %d: answer opaque %d body %q", i, resp.Opaque, resp.Body)
				}
			}
			if got := serverConnReadBuf(t, s); got != readBufSmall {
				t.Fatalf("one call at a time: read buffer %d bytes, want %d", got, readBufSmall)
			}
			_ = quietConn.Close()
			testkit.WaitFor(t, 5*time.Second, func() bool { return s.Conns() == 0 }, "the quiet connection closed")

			// 300 requests of 1-3 KiB written at once: about 600 KiB, many buffer fills.
			const n = 300
			var burst []byte
			for i := range n {
				req := NewRequest(500, map[string]string{"i": fmt.Sprint(i)}, bytes.Repeat([]byte{byte(i)}, 1024+(i*37)%2048))
				req.Opaque = int32(i)
				frame, err := req.Encode()
				if err != nil {
					t.Fatal(err)
				}
				burst = append(burst, frame...)
			}
			nc := rawDial(t, s.Addr())
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
				want := bytes.Repeat([]byte{byte(resp.Opaque)}, 1024+(int(resp.Opaque)*37)%2048)
				if resp.ExtFields["i"] != fmt.Sprint(resp.Opaque) || !bytes.Equal(resp.Body, want) {
					t.Fatalf("answer %d (opaque %d): ext %v, body of %d bytes does not match the request's", i, resp.Opaque, resp.ExtFields, len(resp.Body))
				}
				if inline && resp.Opaque != int32(i) {
					t.Fatalf("inline answers out of order: answer %d has opaque %d", i, resp.Opaque)
				}
			}
			if err := <-writeErr; err != nil {
				t.Fatal(err)
			}
			if got := serverConnReadBuf(t, s); got != readBufLarge {
				t.Fatalf("after a burst: read buffer %d bytes, want %d", got, readBufLarge)
			}
		})
	}
}
