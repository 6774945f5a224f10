package peertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/peers"
)

// Driver5 runs the Java driver for RocketMQ 5 clients (internal/peers/javadriver5: the
// official Java client 5.x over gRPC, as a command-line program).
type Driver5 struct {
	argv []string // java, flags, -cp, main class
}

// JavaDriver5 returns the RocketMQ 5 Java driver for t, or skips t when Java or the
// driver's jars are absent.
func JavaDriver5(t testing.TB) *Driver5 {
	t.Helper()
	argv, err := peers.Driver5Argv(t.TempDir())
	if err != nil {
		skipOrFatal(t, "java driver for rocketmq 5 clients", err)
	}
	if err := driverFresh("driver5", "javadriver5"); err != nil {
		t.Fatal(err)
	}
	return &Driver5{argv: argv}
}

// Event5 is one JSON line of the RocketMQ 5 driver: "sent", "check", "recv" or "done"
// (see Driver5.java's class comment).
type Event5 struct {
	Event    string `json:"event"`
	I        int    `json:"i"`
	OK       bool   `json:"ok"`
	MsgID    string `json:"msgId"`
	Body     string `json:"body"`
	Group    string `json:"group"`
	Due      int64  `json:"due"`
	Txn      string `json:"txn"`
	Error    string `json:"error"`
	Topic    string `json:"topic"`
	Tag      string `json:"tag"`
	Keys     string `json:"keys"`
	Attempt  int    `json:"attempt"`
	Ms       int64  `json:"ms"`
	Acked    int    `json:"acked"`
	Consumed int    `json:"consumed"`
	Failed   int    `json:"failed"`
}

// Of returns the events of kind.
func Of(evs []Event5, kind string) []Event5 {
	var out []Event5
	for _, e := range evs {
		if e.Event == kind {
			out = append(out, e)
		}
	}
	return out
}

// Run runs the driver with args (a command and its flags) to its end, at most timeout,
// and returns its events. It fails t when the driver does not exit 0, printing its output.
func (d *Driver5) Run(t testing.TB, timeout time.Duration, args ...string) []Event5 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := peers.Command(append(append([]string{}, d.argv...), args...)...)
	var stdout bytes.Buffer
	stderr := peers.NewTail(8 << 10)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("driver5 %s: %v", args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		peers.KillGroup(cmd)
		<-done
		err = fmt.Errorf("killed after %v", timeout)
	}
	var evs []Event5
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e Event5
		if jerr := json.Unmarshal([]byte(line), &e); jerr != nil {
			t.Fatalf("driver5 %s: bad line %q: %v", args[0], line, jerr)
		}
		evs = append(evs, e)
	}
	if err != nil {
		t.Fatalf("driver5 %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return evs
}

// StartRocketMQ5 starts an Apache RocketMQ 5.3 name server and proxy in LOCAL mode for t
// ([peers.LaunchRocketMQ5] with opt) and stops them at t.Cleanup, logging their last
// output when t failed. It skips t when Java or the jars are absent.
func StartRocketMQ5(t testing.TB, opt peers.RocketMQ5Options) *peers.RocketMQ5 {
	t.Helper()
	r, err := peers.LaunchRocketMQ5(context.Background(), opt)
	if err != nil {
		skipOrFatal(t, "apache rocketmq 5", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("apache rocketmq 5 output:\n%s", r.Output())
		}
		if err := r.Stop(); err != nil {
			t.Errorf("stop apache rocketmq 5: %v", err)
		}
	})
	return r
}
