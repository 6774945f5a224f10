package floodtest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

const (
	envChild    = "SLUICE_FLOODTEST_CHILD" // "1": the process is the broker child
	readyPrefix = "SLUICE_FLOODTEST_READY "
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// runChild runs a broker with default limits on free loopback ports, prints its ready
// line and serves until stdin reaches EOF, then shuts down.
func runChild() int {
	dir, err := os.MkdirTemp("", "sluice-flood-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer os.RemoveAll(dir)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: dir,
		MappedFileSizeCommitLog: 8 << 20, Logger: logger})
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "floodtest child: %v\n", err)
		return 3
	}
	fmt.Printf("%s%s\n", readyPrefix, b.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "floodtest child: shutdown: %v\n", err)
		return 4
	}
	return 0
}

// startChild starts the broker child and returns its pid and address; it is stopped
// (stdin closed, then waited for) on cleanup.
func startChild(t *testing.T) (pid int, addr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), readyPrefix); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }() // ends when the child exits
			return cmd.Process.Pid, a
		}
	}
	t.Fatal("the broker child exited before it was ready")
	return 0, ""
}

// procStatus returns a field of /proc/<pid>/status in kB (VmRSS, VmHWM).
func procStatus(t *testing.T, pid int, field string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("needs /proc: %v", err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return -1
}

// openFDs counts the child's open file descriptors (its connections, mostly).
func openFDs(pid int) int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents)
}

// flood keeps per connections open from each of hosts loopback addresses (127.0.0.2 …),
// each sending one request and then holding the connection, redialling when the broker
// closes it. It returns the number held now and a stop function.
func flood(t *testing.T, addr string, hosts, per int) (held *atomic.Int64, stop func()) {
	t.Helper()
	frame, err := remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": "TBW102", "queueId": "0"}, nil).Encode()
	if err != nil {
		t.Fatal(err)
	}
	f := testkit.HoldConnections(t, addr, frame, hosts, per, 5*time.Second, 50*time.Millisecond)
	return &f.Held, f.Stop
}

// probe sends n GET_MAX_OFFSET requests through one client from 127.0.0.1, each bounded
// by a second, and returns the share answered SUCCESS and the slowest answer.
func probe(addr string, n int) (float64, time.Duration) {
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet(), DialTimeout: time.Second})
	if err != nil {
		return 0, 0
	}
	defer func() { _ = c.Close() }()
	ok, slowest := 0, time.Duration(0)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		start := time.Now()
		r, err := c.InvokeSync(ctx, addr, remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": "TBW102", "queueId": "0"}, nil))
		cancel()
		if err == nil && r.ResponseCode() == remoting.Success {
			ok++
			slowest = max(slowest, time.Since(start))
		}
	}
	return float64(ok) / float64(n), slowest
}

// TestConnectionFloodDefaultLimits measures a broker with the default maxConnections
// (10000, 1000 per address) under connections from 30 addresses wanting 12,000: its
// resident memory and open descriptors, and the share of a probe client's requests
// answered. Opt-in: SLUICE_ABUSE_CONNFLOOD=1 (needs a descriptor limit of about 12,500
// per process and Linux loopback addresses 127.0.0.2 … 127.0.0.31).
func TestConnectionFloodDefaultLimits(t *testing.T) {
	if os.Getenv("SLUICE_ABUSE_CONNFLOOD") == "" {
		t.Skip("set SLUICE_ABUSE_CONNFLOOD=1 to measure the broker under a connection flood at its default limits")
	}
	const hosts, per = 30, 400
	pid, addr := startChild(t)
	before := procStatus(t, pid, "VmRSS")
	if rate, _ := probe(addr, 20); rate != 1 {
		t.Fatalf("probe before the flood: %.0f%% answered", 100*rate)
	}
	held, stop := flood(t, addr, hosts, per)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	lastLog := time.Now()
	testkit.WaitFor(t, 300*time.Second, func() bool {
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			t.Logf("filling: %d descriptors open in the broker, %d connections held by the flood", openFDs(pid), held.Load())
		}
		return openFDs(pid) >= 9400
	}, "the flood to fill the broker's 10000 connections less the 500 kept in reserve")
	during, fds, holding := procStatus(t, pid, "VmRSS"), openFDs(pid), held.Load()
	rate, slowest := probe(addr, 200)
	hwm := procStatus(t, pid, "VmHWM")
	stop()
	stopped = true
	testkit.WaitFor(t, 60*time.Second, func() bool { return openFDs(pid) < 200 }, "the flood's connections to close")
	after := procStatus(t, pid, "VmRSS")
	t.Logf("broker child: VmRSS %d MB before, %d MB under the flood (%d descriptors open, %d connections held by the flood), peak %d MB, %d MB after",
		before/1024, during/1024, fds, holding, hwm/1024, after/1024)
	t.Logf("probe from another address under the flood: %.1f%% of 200 answered, slowest %v", 100*rate, slowest.Round(time.Millisecond))
	if rate < 0.9 {
		t.Fatalf("probe success rate %.1f%% under the flood", 100*rate)
	}
}
