package remoting

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quiet = testkit.Quiet()

func startServer(t testing.TB, cfg ServerConfig) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return s
}

func newClient(t testing.TB, cfg ClientConfig) *Client {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// echoHandler answers with SUCCESS, the request's ext fields and body.
func echoHandler(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
	resp := NewResponse(Success, "")
	resp.ExtFields = req.ExtFields
	resp.Body = req.Body
	return resp
}

// rawDial opens a plain TCP connection for speaking the wire by hand.
func rawDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}

// rawRoundTrip writes frame on nc and reads back one frame.
func rawRoundTrip(t testing.TB, nc net.Conn, frame []byte) (*RemotingCommand, SerializeType) {
	t.Helper()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(nc, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd, st, err := DecodeFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, st
}

// clientConn returns the client's cached connection to addr (nil if none).
func clientConn(c *Client, addr string) *Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.conns[addr]
	if e == nil {
		return nil
	}
	select {
	case <-e.ready:
		return e.conn
	default:
		return nil
	}
}
