package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/testkit"
)

// runLong is run with a longer deadline: the Apache RocketMQ JVMs take seconds to start.
func runLong(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut syncBuffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if err != nil {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), err
}

// --target rocketmq runs the same produce and consume workloads against Apache RocketMQ
// (started from the peers' jars) and a Sluice broker process, and prints the ratios.
func TestBenchTargetRocketMQ(t *testing.T) {
	if err := peers.Available("rocketmq"); err != nil {
		t.Skipf("%v", err)
	}
	out, err := runLong(t, "bench", "produce", "--target", "rocketmq", "--messages", "2000", "--inflight", "4", "--rocketmq-heap", "256m")
	if err != nil {
		t.Fatalf("produce: %v\n%s", err, out)
	}
	for _, want := range []string{"rocketmq: Apache RocketMQ " + peers.RocketMQVersion, "sluice: broker process", "ratio sluice/rocketmq: "} {
		if !strings.Contains(out, want) {
			t.Fatalf("produce output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "sent       2000 messages"); n != 2 {
		t.Fatalf("produce: %d runs sent 2000 messages, want 2:\n%s", n, out)
	}
	out, err = runLong(t, "bench", "consume", "--target", "rocketmq", "--messages", "2000", "--rocketmq-heap", "256m")
	if err != nil {
		t.Fatalf("consume: %v\n%s", err, out)
	}
	if n := strings.Count(out, "consumed   2000 messages"); n != 2 || !strings.Contains(out, "ratio sluice/rocketmq: ") {
		t.Fatalf("consume output:\n%s", out)
	}
	if _, err := runLong(t, "bench", "produce", "--target", "rocketmq", "--namesrv", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "--rocketmq-namesrv") {
		t.Fatalf("--namesrv with --target rocketmq: %v", err)
	}
}

// --target rocketmq5 runs the official RocketMQ 5 Go client's send and SimpleConsumer
// workloads against Apache RocketMQ 5.3 (proxy+broker from the peers' jars) and Sluice's
// gRPC front end (a broker process), and prints results, load averages and ratios.
func TestBenchTargetRocketMQ5(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs Apache RocketMQ 5.3 started twice (two JVMs each); run without -short")
	}
	if err := peers.Available("rocketmq5"); err != nil {
		t.Skipf("%v", err)
	}
	testkit.SkipGoV5AgainstApacheUnderRace(t)
	out, err := runLong(t, "bench", "produce", "--target", "rocketmq5", "--messages", "1000", "--inflight", "4", "--rocketmq-heap", "384m")
	if err != nil {
		t.Fatalf("produce: %v\n%s", err, out)
	}
	for _, want := range []string{"rocketmq5: Apache RocketMQ " + peers.RocketMQ5Version, "sluice: broker process", "gRPC front end at 127.0.0.1:",
		"ratio sluice/rocketmq5: ", "load avg"} {
		if !strings.Contains(out, want) {
			t.Fatalf("produce output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "sent       1000 messages"); n != 2 {
		t.Fatalf("produce: %d runs sent 1000 messages, want 2:\n%s", n, out)
	}
	out, err = runLong(t, "bench", "consume", "--target", "rocketmq5", "--messages", "1000", "--rocketmq-heap", "384m")
	if err != nil {
		t.Fatalf("consume: %v\n%s", err, out)
	}
	if n := strings.Count(out, "consumed   1000 messages"); n != 2 || !strings.Contains(out, "ratio sluice/rocketmq5: ") {
		t.Fatalf("consume output:\n%s", out)
	}
	for _, args := range [][]string{
		{"bench", "produce", "--target", "rocketmq5", "--namesrv", "127.0.0.1:1"},
		{"bench", "produce", "--target", "rocketmq5", "--async"},
		{"bench", "consume", "--target", "sluice", "--repeat", "2"},
	} {
		if _, err := runLong(t, args...); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
