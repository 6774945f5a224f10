package producer

import (
	"context"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
)

// stuckListener returns the address of a loopback socket that listens with a backlog
// of 0 and never accepts, its queue filled by held connections: further connects get no
// answer to their SYN (the kernel drops it), as to a blackholed broker.
func stuckListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	for i := 0; i < 8; i++ { // fill the accept queue; stop at the first connect that hangs
		nc, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err != nil {
			return addr
		}
		t.Cleanup(func() { _ = nc.Close() })
	}
	t.Skip("this kernel accepted 8 connects on a listener with backlog 0, so no connect hangs to time out against")
	return ""
}

// TestSendTimeoutBoundsTheDial: SendTimeout bounds one send attempt (Config doc),
// including connecting to a broker that does not answer: with SendTimeout 300 ms and no
// retry, SendSync must fail in well under the 3 s dial timeout.
func TestSendTimeoutBoundsTheDial(t *testing.T) {
	addr := stuckListener(t)
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", addr})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, SendTimeout: 300 * time.Millisecond, RetryTimesWhenSendFailed: -1})
	start := time.Now()
	_, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("x")))
	d := time.Since(start)
	t.Logf("SendSync failed after %v: %v", d, err)
	if err == nil {
		t.Fatal("send to a broker that does not answer succeeded")
	}
	if d > 2*time.Second {
		t.Fatalf("one attempt with SendTimeout 300ms took %v", d)
	}
}
