package bench

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestProcessCPUCountsOwnWork(t *testing.T) {
	before, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	self0 := SelfCPU()
	// Burn at least 50 ms of CPU (bounded by the loop count, not by time).
	x := uint64(1)
	for i := 0; i < 1<<30 && SelfCPU()-self0 < 50*time.Millisecond; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	after, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if SelfCPU()-self0 < 50*time.Millisecond {
		t.Fatalf("the loop did not use 50 ms of CPU (x=%d)", x)
	}
	// /proc counts in 10 ms ticks: the same work, less one tick at each end.
	if got := after - before; got < 30*time.Millisecond {
		t.Fatalf("ProcessCPU grew by %v over >= 50 ms of work", got)
	}
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

func TestPidListeningFindsOwnListener(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skipf("no /proc/net/tcp here: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pid, err := PidListening(ln.Addr().(*net.TCPAddr).Port)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("PidListening = %d, %v; want %d", pid, err, os.Getpid())
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if _, err := PidListening(port); err == nil || !strings.Contains(err.Error(), "nothing listens") {
		t.Fatalf("closed port: %v", err)
	}
}

func TestResultCPUPerMessage(t *testing.T) {
	r := &Result{Messages: 4, ClientCPU: 400 * time.Microsecond, ServerCPU: 40 * time.Microsecond}
	if c, s := r.CPUPerMessage(); c != 100*time.Microsecond || s != 10*time.Microsecond {
		t.Fatalf("CPUPerMessage = %v, %v", c, s)
	}
	if c, s := (&Result{}).CPUPerMessage(); c != 0 || s != 0 {
		t.Fatalf("no messages: %v, %v", c, s)
	}
}

// TestProcessMemory reads this process's resident size: positive, at most the peak, and
// an error naming the pid for a process that does not exist.
func TestProcessMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("no /proc: %v", err)
	}
	rss, peak, err := ProcessMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || peak < rss {
		t.Fatalf("rss %d, peak %d: want 0 < rss <= peak", rss, peak)
	}
	if _, _, err := ProcessMemory(1 << 30); err == nil || !strings.Contains(err.Error(), strconv.Itoa(1<<30)) {
		t.Fatalf("ProcessMemory of a missing pid: %v, want an error naming it", err)
	}
}
