package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// TestSignalStopsBrokerInOrder runs the real main (this test binary in child mode) as
// `sluice broker` with the metrics endpoint and the console, sends messages, and stops
// it with SIGTERM: it exits 0, package lifecycle stops the frontends (metrics, console)
// before the broker, and what was sent is in the data directory — a broker started on it
// afterwards finds every message by its key.
func TestSignalStopsBrokerInOrder(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "SLUICE_MAIN_ARGS=broker --data-dir "+filepath.Join(dir, "store")+
		" --listen 127.0.0.1:0 --namesrv-listen 127.0.0.1:0 --metrics 127.0.0.1:0 --console 127.0.0.1:0 --log-level info")
	var out, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	testkit.WaitFor(t, 15*time.Second, func() bool { return strings.Contains(out.String(), "sluice console on http://") },
		"the broker child's console line; output:", &out)
	m := brokerLine.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no broker line in %q", out.String())
	}
	ns := m[3]

	if o, err := run(t, "admin", "topic", "create", "--namesrv", ns, "--topic", "Bills", "--queues", "2"); err != nil {
		t.Fatalf("topic create: %v %s", err, o)
	}
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t, 20*time.Second)
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		msg := message.NewMessage("Bills", fmt.Appendf(nil, "bill %d", i)).SetTag("Paid").SetKeys(fmt.Sprintf("bill-%d", i))
		if _, err := p.SendSync(ctx, msg); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("child exit after SIGTERM: %v (want status 0); stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child did not exit within 30s of SIGTERM")
	}
	if !strings.Contains(out.String(), "sluice broker stopped") {
		t.Errorf("child output %q lacks the stop line", out.String())
	}
	logs := stderr.String()
	if !regexp.MustCompile(`msg="lifecycle: shutting down" cause=signal`).MatchString(logs) {
		t.Errorf("no lifecycle shutdown on the signal in the logs:\n%s", logs)
	}
	frontends := regexp.MustCompile(`msg="lifecycle: stage stopped" stage=frontends components=2 failed=0`).FindStringIndex(logs)
	servers := regexp.MustCompile(`msg="lifecycle: stage stopped" stage=servers components=1 failed=0`).FindStringIndex(logs)
	if frontends == nil || servers == nil || frontends[0] > servers[0] {
		t.Errorf("want the frontends (metrics, console) stopped cleanly before the broker; logs:\n%s", logs)
	}

	// The data is on disk: a broker on the same directory finds every message.
	b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0",
		StorePathRootDir: filepath.Join(dir, "store"), Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	testkit.WaitFor(t, 10*time.Second, func() bool {
		o, err := run(t, "admin", "topic", "route", "--namesrv", b.NamesrvAddr(), "--topic", "Bills")
		return err == nil && strings.Contains(o, b.Addr())
	}, "the route of Bills after the restart")
	for i := range n {
		o, err := run(t, "admin", "message", "find", "--namesrv", b.NamesrvAddr(), "--topic", "Bills", "--key", fmt.Sprintf("bill-%d", i), "--json")
		var found foundJSON
		if err != nil || json.Unmarshal([]byte(o), &found) != nil || found.Partial || len(found.Messages) != 1 || found.Messages[0].Body != fmt.Sprintf("bill %d", i) {
			t.Fatalf("find bill-%d after the restart: %v\n%s", i, err, o)
		}
	}
}
