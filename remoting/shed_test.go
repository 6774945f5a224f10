package remoting

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// holdFlood keeps per connections open from each of hosts loopback addresses
// (127.0.0.2 …), each sending a heartbeat and holding its connection until the server
// closes it. stop closes them and waits.
func holdFlood(t *testing.T, addr string, hosts, per int) (stop func()) {
	t.Helper()
	frame, err := NewRequest(HeartBeat, nil, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	return testkit.HoldConnections(t, addr, frame, hosts, per, 5*time.Second, 20*time.Millisecond).Stop
}

// TestSheddingSparesActiveClient: once the server was full, a connection from an address
// holding fewer closed the newest connection of the largest holder, whoever it was. A
// flood from 20 addresses wanting 2 connections each made a client that had been using
// 3 connections since before the flood the largest holder, and its connections were
// closed under its requests. Active connections of an address holding few are now kept:
// the client's requests all succeed while the flood is refused.
func TestSheddingSparesActiveClient(t *testing.T) {
	s := startServer(t, ServerConfig{MaxConns: 24})
	s.Handle(HeartBeat, echoHandler)
	const clients = 3
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		c := newClient(t, ClientConfig{})
		if _, err := c.InvokeSync(ctxTimeout(t, 20*time.Second), s.Addr(), NewRequest(HeartBeat, nil, nil)); err != nil {
			t.Fatalf("before the flood: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000000 { // bounded; ends on done long before
				select {
				case <-done:
					return
				case <-time.After(5 * time.Millisecond):
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := c.InvokeSync(ctx, s.Addr(), NewRequest(HeartBeat, nil, []byte("legit")))
				cancel()
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return s.Conns() == clients }, "the client's connections")
	stop := holdFlood(t, s.Addr(), 20, 2) // 40 connections wanted, 21 left
	testkit.WaitFor(t, 60*time.Second, func() bool { return s.RefusedConns()+s.ShedConns() >= 300 && ok.Load()+failed.Load() >= 100 },
		"300 flood connections refused or shed and 100 requests of the client")
	stop()
	close(done)
	wg.Wait()
	t.Logf("client: %d requests answered, %d failed; flood: %d connections refused, %d shed", ok.Load(), failed.Load(), s.RefusedConns(), s.ShedConns())
	if failed.Load() > 0 {
		t.Fatalf("%d of the client's requests failed under the flood, the first: %v", failed.Load(), firstErr.Load())
	}
}

// TestShedCandidateOrder: the connection closed to make room is an idle one before an
// active one, then one of the address holding the most, then the newest; an active
// connection of an address holding ReserveHostConns or fewer is never closed.
func TestShedCandidateOrder(t *testing.T) {
	s, err := NewServer(ServerConfig{Logger: quiet, ActiveWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	type group struct {
		host   string
		n      int
		active bool
	}
	byHost := map[string][]*Conn{}
	add := func(g group) {
		for range g.n {
			a, b := net.Pipe()
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			c := newConn(a, g.host+":1", s.opts)
			if g.active {
				c.markServed()
			} else {
				c.lastServed.Store(time.Now().Add(-2 * time.Minute).UnixNano())
			}
			s.conns[c.ID()] = c
			if s.byHost[g.host] == nil {
				s.byHost[g.host] = map[uint64]*Conn{}
			}
			s.byHost[g.host][c.ID()] = c
			byHost[g.host] = append(byHost[g.host], c)
		}
	}
	newest := func(host string) *Conn { cs := byHost[host]; return cs[len(cs)-1] }
	host := func(c *Conn) string {
		if c == nil {
			return "none"
		}
		return hostOf(c.RemoteAddr())
	}
	add(group{"10.0.0.1", 6, true})  // a client using 6 connections since before the flood
	add(group{"10.0.0.2", 5, false}) // a flood address whose connections went quiet
	add(group{"10.0.0.3", 3, true})  // a client using 3 connections
	add(group{"10.0.0.4", 5, true})  // a flood address using its connections, newest of all
	if got := s.shedCandidateLocked(0); got != newest("10.0.0.2") {
		t.Fatalf("held 0: closes a connection of %s (id %d), want the newest idle one of 10.0.0.2", host(got), got.ID())
	}
	if got := s.shedCandidateLocked(4); got != newest("10.0.0.1") {
		// Only 10.0.0.1 holds 6 ≥ 4+2; all its connections are active, and it holds more than 4.
		t.Fatalf("held 4: closes a connection of %s, want the newest of 10.0.0.1", host(got))
	}
	for _, c := range byHost["10.0.0.2"] {
		c.markServed()
	}
	if got := s.shedCandidateLocked(0); got != newest("10.0.0.1") {
		t.Fatalf("all active, held 0: closes a connection of %s, want the newest of the largest holder 10.0.0.1", host(got))
	}
	if got := s.shedCandidateLocked(5); got != nil {
		t.Fatalf("held 5: closes a connection of %s, want none (no address holds 7)", host(got))
	}
	// Only the small active client is left above held+2: it keeps its connections.
	for _, h := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.4"} {
		for _, c := range byHost[h] {
			delete(s.conns, c.ID())
		}
		delete(s.byHost, h)
	}
	if got := s.shedCandidateLocked(0); got != nil {
		t.Fatalf("closes an active connection of %s, which holds %d", host(got), len(byHost["10.0.0.3"]))
	}
	byHost["10.0.0.3"][0].lastServed.Store(time.Now().Add(-2 * time.Minute).UnixNano())
	if got := s.shedCandidateLocked(0); got != byHost["10.0.0.3"][0] {
		t.Fatalf("an idle connection of a small holder: got %s, want its idle one", host(got))
	}
}
