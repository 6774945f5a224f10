package testkit

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ConnFlood is a connection flood from loopback addresses, started by [HoldConnections].
type ConnFlood struct {
	// Held is the number of connections open now.
	Held atomic.Int64

	done chan struct{}
	mu   sync.Mutex
	open map[net.Conn]bool
	wg   sync.WaitGroup
}

// HoldConnections keeps per connections to addr open from each of hosts loopback
// addresses (127.0.0.2 …): each writes frame, then holds the connection until the server
// closes it, and is dialled again after redial (each dial within dialTimeout; a bounded
// number of redials). It skips t when 127.0.0.2 is not a local address. Stop ends it.
func HoldConnections(t testing.TB, addr string, frame []byte, hosts, per int, dialTimeout, redial time.Duration) *ConnFlood {
	t.Helper()
	pd := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: dialTimeout}
	probe, err := pd.Dial("tcp", addr)
	if err != nil {
		t.Skipf("needs 127.0.0.2 … 127.0.0.%d to be local addresses (Linux loopback): %v", 1+hosts, err)
	}
	_ = probe.Close()
	f := &ConnFlood{done: make(chan struct{}), open: map[net.Conn]bool{}}
	for h := range hosts {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+h))}, Timeout: dialTimeout}
		for range per {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				for range 100000 { // bounded; Stop ends it long before
					select {
					case <-f.done:
						return
					default:
					}
					if nc, err := d.Dial("tcp", addr); err == nil {
						f.hold(nc, frame)
					}
					select {
					case <-f.done:
						return
					case <-time.After(redial):
					}
				}
			}()
		}
	}
	return f
}

// hold writes frame on nc and reads until the server closes it.
func (f *ConnFlood) hold(nc net.Conn, frame []byte) {
	f.mu.Lock()
	select {
	case <-f.done: // Stop has already closed the open set; this one would be missed
		f.mu.Unlock()
		_ = nc.Close()
		return
	default:
	}
	f.open[nc] = true
	f.mu.Unlock()
	f.Held.Add(1)
	if _, err := nc.Write(frame); err == nil {
		_, _ = io.Copy(io.Discard, nc)
	}
	f.Held.Add(-1)
	f.mu.Lock()
	delete(f.open, nc)
	f.mu.Unlock()
	_ = nc.Close()
}

// Stop closes the flood's connections and waits for its goroutines.
func (f *ConnFlood) Stop() {
	f.mu.Lock()
	close(f.done)
	for nc := range f.open {
		_ = nc.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
