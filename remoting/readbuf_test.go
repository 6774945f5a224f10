package remoting

import (
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
			order := sendBurst(t, rawDial(t, s.Addr()), 500, n)
			for i, op := range order {
				if inline && op != int32(i) {
					t.Fatalf("inline answers out of order: answer %d has opaque %d", i, op)
				}
			}
			if got := serverConnReadBuf(t, s); got != readBufLarge {
				t.Fatalf("after a burst: read buffer %d bytes, want %d", got, readBufLarge)
			}
		})
	}
}
