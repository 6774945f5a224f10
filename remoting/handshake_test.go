package remoting

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// TestTLSHandshakeTimeout: a TLS server disconnects a peer that opens a connection and
// never completes the handshake — silent, or stalled after part of a ClientHello — once
// HandshakeTimeout has passed (here with an IdleTimeout of an hour, which bounded it
// before), and still serves a client that speaks TLS. The default is 10 s.
func TestTLSHandshakeTimeout(t *testing.T) {
	certFile, keyFile, clientTLS := testkit.SelfSignedTLS(t)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ServerConfig{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, IdleTimeout: time.Hour, HandshakeTimeout: 200 * time.Millisecond})
	s.HandleInline(RequestCode(500), echoHandler)

	silent := rawDial(t, s.Addr())
	stalled := rawDial(t, s.Addr())
	if _, err := stalled.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}); err != nil { // a record header and one byte of a ClientHello
		t.Fatal(err)
	}
	start := time.Now()
	expectClosed(t, silent)
	expectClosed(t, stalled)
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("stalled handshakes closed after %v, want about the 200 ms HandshakeTimeout", d)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return s.Conns() == 0 }, "both stalled connections closed")

	c := newClient(t, ClientConfig{TLS: clientTLS})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.InvokeSync(ctx, s.Addr(), NewRequest(500, nil, []byte("over tls")))
	if err != nil || string(resp.Body) != "over tls" {
		t.Fatalf("a TLS client after the stalled ones: %v %q", err, resp)
	}

	var def ServerConfig
	def.setDefaults()
	if def.HandshakeTimeout != 10*time.Second {
		t.Fatalf("default HandshakeTimeout %v, want 10s", def.HandshakeTimeout)
	}
}
