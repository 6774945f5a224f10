package remoting

import (
	"net"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// spoofedConn is a real TCP connection that reports another remote address, so that the
// server's per-address accounting can be fed IPv6 addresses this machine cannot bind.
type spoofedConn struct {
	net.Conn
	remote net.Addr
}

func (c spoofedConn) RemoteAddr() net.Addr { return c.remote }

// acceptAs opens a loopback TCP connection, hands its server side to s's accept path
// as coming from remote, and returns the client side.
func acceptAs(t *testing.T, s *Server, ln net.Listener, remote string) net.Conn {
	t.Helper()
	ap, err := net.ResolveTCPAddr("tcp", remote)
	if err != nil {
		t.Fatal(err)
	}
	nc := rawDial(t, ln.Addr().String())
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s.serveConn(spoofedConn{Conn: sc, remote: ap})
	return nc
}

// TestConnsPerHostCountsIPv6By64: MaxConnsPerHost counted each IPv6 address on its own,
// so a client holding a /64 (2^64 addresses) had no limit. IPv6 connections now count by
// their /64 and IPv4 ones by their address (an IPv4-mapped IPv6 address as IPv4).
func TestConnsPerHostCountsIPv6By64(t *testing.T) {
	s := startServer(t, ServerConfig{MaxConnsPerHost: 2})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	open := func(remote string) net.Conn { return acceptAs(t, s, ln, remote) }
	open("[2001:db8:1:2::1]:40001")
	open("[2001:db8:1:2::ffff:2]:40002")
	third := open("[2001:db8:1:2:abcd::3]:40003") // a third address of the same /64
	expectClosed(t, third)
	if s.RefusedConns() != 1 {
		t.Fatalf("%d connections refused, want 1 (the third of 2001:db8:1:2::/64)", s.RefusedConns())
	}
	open("[2001:db8:1:3::1]:40004") // the next /64 is another address
	open("10.1.2.3:40005")
	open("[::ffff:10.1.2.3]:40006") // the same IPv4 address, mapped
	mapped := open("[::ffff:10.1.2.3]:40007")
	expectClosed(t, mapped)
	open("10.1.2.4:40008")
	testkit.WaitFor(t, 10*time.Second, func() bool { return s.Conns() == 6 }, "six connections open")
	if s.RefusedConns() != 2 {
		t.Fatalf("%d connections refused, want 2", s.RefusedConns())
	}
}
