package redistest

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/internal/testkit"
)

// Unreachable returns a client pointed at a closed port on 127.0.0.1: every command fails
// at once with "connection refused". It is closed in t's cleanup.
func Unreachable(t testing.TB) redis.UniversalClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return Dial(t, addr)
}

// Outage returns a client that reaches tg through a TCP relay on 127.0.0.1, and the
// [Switch] that cuts and restores the relay. Both are closed in t's cleanup.
func (tg *Target) Outage(t testing.TB) (redis.UniversalClient, *Switch) {
	t.Helper()
	sw := NewSwitch(t, tg.Addr)
	return Dial(t, sw.Addr()), sw
}

// Switch is a TCP relay in front of a Redis: while up it forwards every connection to the
// backend; [Switch.Down] closes the listener and every relayed connection (clients then
// see "connection refused"); [Switch.Up] listens again on the same address.
type Switch struct {
	backend string
	addr    string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // accept loops and pipes
}

// NewSwitch starts a relay to backend on a free 127.0.0.1 port, up. It is closed in t's
// cleanup, which waits for all its goroutines.
func NewSwitch(t testing.TB, backend string) *Switch {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: listen: %v", err)
	}
	s := &Switch{backend: backend, addr: ln.Addr().String(), conns: make(map[net.Conn]struct{})}
	s.serve(ln)
	t.Cleanup(s.Down)
	return s
}

// Addr returns the relay's "127.0.0.1:port"; it stays the same across Down and Up.
func (s *Switch) Addr() string { return s.addr }

// Down stops the relay: the listener and all relayed connections are closed, and Down
// returns after all relay goroutines have stopped. Calling it twice is harmless.
func (s *Switch) Down() {
	s.mu.Lock()
	if s.ln != nil {
		_ = s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Up listens again on the relay's address. It retries binding for up to 2 s (the port
// was just released) and returns the last error if it cannot.
func (s *Switch) Up() error {
	s.mu.Lock()
	up := s.ln != nil
	s.mu.Unlock()
	if up {
		return nil
	}
	var err error
	var ln net.Listener
	// Rebinding a just-closed port: tried every 20 ms, for up to 10 s on a loaded machine.
	if !testkit.EventuallyEvery(10*time.Second, 20*time.Millisecond, func() bool {
		ln, err = net.Listen("tcp", s.addr)
		return err == nil
	}) {
		return err
	}
	s.serve(ln)
	return nil
}

func (s *Switch) serve(ln net.Listener) {
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Down
			}
			s.relay(c)
		}
	}()
}

func (s *Switch) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Switch) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	_ = c.Close()
}

func (s *Switch) relay(front net.Conn) {
	back, err := net.DialTimeout("tcp", s.backend, time.Second)
	if err != nil {
		_ = front.Close()
		return
	}
	if !s.track(front) || !s.track(back) {
		s.untrack(front)
		s.untrack(back)
		return
	}
	pipe := func(dst, src net.Conn) {
		defer s.wg.Done()
		_, _ = io.Copy(dst, src) // ends when either side closes (or Down closes both)
		s.untrack(dst)
		s.untrack(src)
	}
	s.wg.Add(2)
	go pipe(back, front)
	go pipe(front, back)
}
