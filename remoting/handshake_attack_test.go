package remoting

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/testkit"
)

// tlsServerConfig returns a server TLS configuration with a self-signed certificate and
// a client configuration that trusts it (testkit.SelfSignedTLS).
func tlsServerConfig(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	certFile, keyFile, clientTLS := testkit.SelfSignedTLS(t)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}}, clientTLS
}

// stillOpen reports whether nc stays open (no data, no close) for d: a read that ends by
// its own deadline.
func stillOpen(nc net.Conn, d time.Duration) bool {
	_ = nc.SetReadDeadline(time.Now().Add(d))
	_, err := nc.Read(make([]byte, 1))
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// TestTLSHandshakeTimeoutAttacks: HandshakeTimeout bounds the whole handshake, from the
// accept, whatever the peer does in it; it does not apply after the handshake; and
// stalled handshakes hold their MaxConns share only that long.
func TestTLSHandshakeTimeoutAttacks(t *testing.T) {
	t.Run("trickled ClientHello", func(t *testing.T) {
		// A record header announcing 512 bytes, then one byte every 20 ms: every read
		// makes progress, so only a deadline on the whole handshake ends it.
		srvTLS, _ := tlsServerConfig(t)
		s := startServer(t, ServerConfig{TLS: srvTLS, IdleTimeout: time.Hour, HandshakeTimeout: 300 * time.Millisecond})
		nc := rawDial(t, s.Addr())
		if _, err := nc.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00}); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for range 511 { // never the whole record
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := nc.Write([]byte{0x01}); err != nil {
					return
				}
			}
		}()
		defer func() { close(stop); <-done }()
		expectClosed(t, nc) // 511 bytes at 20 ms would take over 10 s; expectClosed waits 5 s
	})

	t.Run("handshake done, then silent", func(t *testing.T) {
		// After the handshake the idle timeout applies, not the handshake one.
		srvTLS, cliTLS := tlsServerConfig(t)
		s := startServer(t, ServerConfig{TLS: srvTLS, IdleTimeout: 1500 * time.Millisecond, HandshakeTimeout: 400 * time.Millisecond}) // a handshake under -race on loaded cores can take over 100 ms
		raw := rawDial(t, s.Addr())
		cfg := cliTLS.Clone()
		cfg.ServerName = "127.0.0.1"
		tc := tls.Client(raw, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tc.HandshakeContext(ctx); err != nil {
			t.Fatal(err)
		}
		if !stillOpen(tc, 600*time.Millisecond) {
			t.Fatal("a connection that completed its handshake was closed before its idle timeout")
		}
		if s.Conns() != 1 {
			t.Fatalf("Conns() = %d, want 1", s.Conns())
		}
		expectClosed(t, tc) // the idle timeout, 1.5 s
		testkit.WaitFor(t, 5*time.Second, func() bool { return s.Conns() == 0 }, "the idle connection closed")
	})

	t.Run("negative: the idle timeout bounds it", func(t *testing.T) {
		srvTLS, _ := tlsServerConfig(t)
		s := startServer(t, ServerConfig{TLS: srvTLS, IdleTimeout: 300 * time.Millisecond, HandshakeTimeout: -1})
		expectClosed(t, rawDial(t, s.Addr()))
	})

	t.Run("plain TCP: not a handshake", func(t *testing.T) {
		s := startServer(t, ServerConfig{IdleTimeout: time.Hour, HandshakeTimeout: 50 * time.Millisecond})
		if !stillOpen(rawDial(t, s.Addr()), 500*time.Millisecond) {
			t.Fatal("a silent plain TCP connection was closed by HandshakeTimeout")
		}
	})

	t.Run("MaxConns", func(t *testing.T) {
		// Stalled handshakes count as connections (Conns, MaxConns) until
		// HandshakeTimeout closes them; then a TLS client is served again.
		srvTLS, cliTLS := tlsServerConfig(t)
		s := startServer(t, ServerConfig{TLS: srvTLS, IdleTimeout: time.Hour, HandshakeTimeout: 2 * time.Second, MaxConns: 3}) // long enough to dial and count all three under -race on loaded cores
		s.HandleInline(RequestCode(500), echoHandler)
		var stalled []net.Conn
		for range 3 {
			stalled = append(stalled, rawDial(t, s.Addr()))
		}
		testkit.WaitFor(t, 5*time.Second, func() bool { return s.Conns() == 3 }, "three stalled handshakes counted")
		expectClosed(t, rawDial(t, s.Addr())) // over MaxConns: refused
		if s.RefusedConns() != 1 {
			t.Fatalf("RefusedConns() = %d, want 1", s.RefusedConns())
		}
		for _, nc := range stalled {
			expectClosed(t, nc)
		}
		testkit.WaitFor(t, 5*time.Second, func() bool { return s.Conns() == 0 }, "stalled handshakes closed")
		c := newClient(t, ClientConfig{TLS: cliTLS})
		resp, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(500, nil, []byte("after")))
		if err != nil || string(resp.Body) != "after" {
			t.Fatalf("a TLS client after the stalled handshakes: %v %v", err, resp)
		}
	})

	t.Run("Shutdown during handshakes", func(t *testing.T) {
		// Shutdown does not wait for HandshakeTimeout (an hour here) and leaves no
		// goroutine behind.
		srvTLS, _ := tlsServerConfig(t)
		s, err := NewServer(ServerConfig{Logger: quiet, TLS: srvTLS, IdleTimeout: time.Hour, HandshakeTimeout: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		var conns []net.Conn
		for i := range 20 {
			nc := rawDial(t, s.Addr())
			if i%2 == 0 { // half of them sent part of a ClientHello
				if _, err := nc.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}); err != nil {
					t.Fatal(err)
				}
			}
			conns = append(conns, nc)
		}
		testkit.WaitFor(t, 5*time.Second, func() bool { return s.Conns() == 20 }, "20 handshakes in progress")
		if err := s.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatalf("Shutdown with handshakes in progress: %v", err)
		}
		for _, nc := range conns {
			expectClosed(t, nc)
		}
		goleak.VerifyNone(t)
	})
}

// TestTLSHandshakeFailureLogLevels: a peer that connects and closes without a
// handshake (a TCP health check, a port scan) and handshakes cut by Shutdown are logged
// at debug, as a plain connection's EOF is; a handshake that runs out of time is logged
// at info.
func TestTLSHandshakeFailureLogLevels(t *testing.T) {
	srvTLS, _ := tlsServerConfig(t)
	logs, log := testkit.CaptureLogs(t)
	s, err := NewServer(ServerConfig{Logger: log, TLS: srvTLS, IdleTimeout: time.Hour, HandshakeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	infoOrAbove := func() []testkit.LogRecord {
		var out []testkit.LogRecord
		for _, r := range logs.Find("TLS handshake") {
			if r.Level >= slog.LevelInfo {
				out = append(out, r)
			}
		}
		return out
	}
	for range 5 { // health checks: connect, close
		nc := rawDial(t, s.Addr())
		_ = nc.Close()
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(logs.Find("TLS handshake")) == 5 }, "five handshake failures logged")
	if got := infoOrAbove(); len(got) != 0 {
		t.Fatalf("peers that closed before a handshake logged at info or above: %v", got)
	}
	expectClosed(t, rawDial(t, s.Addr())) // silent: HandshakeTimeout
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(infoOrAbove()) == 1 }, "the timed-out handshake logged at info")

	logs.Reset()
	for range 3 {
		rawDial(t, s.Addr())
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return s.Conns() == 3 }, "three handshakes in progress")
	if err := s.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := infoOrAbove(); len(got) != 0 {
		t.Fatalf("handshakes cut by Shutdown logged at info or above: %v", got)
	}
}
