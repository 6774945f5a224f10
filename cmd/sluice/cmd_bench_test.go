package main

import (
	"context"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/cmd/sluice/internal/bench"
)

// produceLines matches the result lines of one produce run.
var (
	sentLine       = regexp.MustCompile(`sent\s+(\d+) messages \((\d+) bytes\) in \S+`)
	throughputLine = regexp.MustCompile(`throughput (\d+) msg/s, ([\d.]+) MB/s`)
	latencyLine    = regexp.MustCompile(`latency\s+p50 \S+, p99 \S+, mean \S+, max \S+`)
)

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBenchProduceEmbedded(t *testing.T) {
	out, stderr, err := execRoot(t, 60*time.Second, "bench", "produce", "--broker", "embedded", "--messages", "400", "--size", "256", "--producers", "2", "--inflight", "2")
	if err != nil {
		t.Fatalf("bench produce: %v\n%s", err, out)
	}
	if stderr != "" {
		t.Errorf("no progress bar or logs expected on a non-terminal stderr, got %q", stderr)
	}
	for _, want := range []string{"broker: embedded in the bench process, broker-a at 127.0.0.1:", "this process", "(server not measured)", "(ASYNC_FLUSH)", "sluice produce: 2 producer(s) x 2 in flight (sync), 256-byte bodies, 400 messages"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	m := sentLine.FindStringSubmatch(out)
	if m == nil || atoi(t, m[1]) != 400 || atoi(t, m[2]) != 400*256 {
		t.Fatalf("sent line %v in:\n%s", m, out)
	}
	if tp := throughputLine.FindStringSubmatch(out); tp == nil || atoi(t, tp[1]) <= 0 {
		t.Errorf("throughput line %v in:\n%s", tp, out)
	}
	if !latencyLine.MatchString(out) {
		t.Errorf("no latency line in:\n%s", out)
	}
	if strings.Contains(out, "jetstream") {
		t.Errorf("--target sluice ran JetStream:\n%s", out)
	}
}

// cpuLine is the CPU-per-message line of a run whose server process was measured.
var cpuLine = regexp.MustCompile(`cpu/msg +client (\S+), server (\S+) \(pid (\d+)\), total (\S+)`)

// TestBenchProduceOwnProcess: by default the bench's broker is a process of its own
// (this test binary in child mode), and the report gives both processes' CPU per message.
func TestBenchProduceOwnProcess(t *testing.T) {
	out, _, err := execRoot(t, 60*time.Second, "bench", "produce", "--messages", "2000", "--size", "256", "--inflight", "4")
	if err != nil {
		t.Fatalf("bench produce: %v\n%s", err, out)
	}
	if !strings.Contains(out, "broker: own process (pid ") || !strings.Contains(out, "(ASYNC_FLUSH)") {
		t.Fatalf("output does not say the broker ran in its own process:\n%s", out)
	}
	m := cpuLine.FindStringSubmatch(out)
	if m == nil || atoi(t, m[3]) == int64(os.Getpid()) || atoi(t, m[3]) <= 0 {
		t.Fatalf("cpu line %v (own pid %d) in:\n%s", m, os.Getpid(), out)
	}
	if m := sentLine.FindStringSubmatch(out); m == nil || atoi(t, m[1]) != 2000 {
		t.Fatalf("sent line %v in:\n%s", m, out)
	}
}

func TestBenchProduceDurationSyncFlushWithProgress(t *testing.T) {
	out, stderr, err := execRoot(t, 60*time.Second, "bench", "produce", "--duration", "400ms", "--flush", "SYNC_FLUSH", "--inflight", "4", "--progress")
	if err != nil {
		t.Fatalf("bench produce: %v\n%s", err, out)
	}
	if !strings.Contains(out, "(SYNC_FLUSH)") || !strings.Contains(out, "for 400ms") {
		t.Errorf("output:\n%s", out)
	}
	if m := sentLine.FindStringSubmatch(out); m == nil || atoi(t, m[1]) == 0 {
		t.Errorf("sent line %v in:\n%s", m, out)
	}
	// --progress given explicitly: the bar is drawn on stderr even though it is no terminal.
	if !strings.Contains(stderr, "produce") || !strings.Contains(stderr, "msg/s") {
		t.Errorf("--progress drew no bar on stderr: %q", stderr)
	}
}

func TestBenchConsumeExternalBroker(t *testing.T) {
	e, err := bench.StartEmbedded(bench.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	ns := e.Broker.NamesrvAddr()
	out, _, err := execRoot(t, 60*time.Second, "bench", "consume", "--namesrv", ns, "--messages", "1500", "--size", "128", "--consume-batch", "8", "--queues", "4")
	if err != nil {
		t.Fatalf("bench consume: %v\n%s", err, out)
	}
	for _, want := range []string{"broker: external, name server [" + ns + "]", "prefill 1500 messages of 128 bytes", "consume batch 8", "consumed   1500 messages (192000 bytes)", ", 0 duplicate(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if tp := throughputLine.FindStringSubmatch(out); tp == nil || atoi(t, tp[1]) <= 0 {
		t.Errorf("throughput line %v in:\n%s", tp, out)
	}
}

func TestBenchProduceBothTargets(t *testing.T) {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(bench.DefaultNatsURL, "nats://"), time.Second)
	if err != nil {
		t.Skipf("no NATS server at %s: %v", bench.DefaultNatsURL, err)
	}
	c.Close()
	out, _, err := execRoot(t, 60*time.Second, "bench", "produce", "--target", "both", "--messages", "300", "--topic", "CmdBenchBoth", "--async", "--inflight", "8")
	if err != nil {
		t.Fatalf("bench produce --target both: %v\n%s", err, out)
	}
	if n := len(sentLine.FindAllString(out, -1)); n != 2 {
		t.Errorf("%d sent lines, want 2 (sluice and jetstream):\n%s", n, out)
	}
	for _, want := range []string{"sluice produce: 1 producer(s) x 8 in flight (async)", "jetstream produce: 1 producer(s) x 8 in flight (async)", "stream SLUICE_BENCH_CmdBenchBoth", "ratio sluice/jetstream: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchConsumeBothTargets(t *testing.T) {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(bench.DefaultNatsURL, "nats://"), time.Second)
	if err != nil {
		t.Skipf("no NATS server at %s: %v", bench.DefaultNatsURL, err)
	}
	c.Close()
	out, _, err := execRoot(t, 90*time.Second, "bench", "consume", "--target", "both", "--broker", "embedded", "--messages", "400", "--size", "64", "--consume-goroutines", "4", "--topic", "CmdBenchConsumeBoth")
	if err != nil {
		t.Fatalf("bench consume --target both: %v\n%s", err, out)
	}
	for _, want := range []string{"sluice consume: prefill 400 messages of 64 bytes", "jetstream consume: prefill 400 messages of 64 bytes", "durable pull consumer (explicit acks): 4 handler goroutines", "ratio sluice/jetstream: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "consumed   400 messages (25600 bytes)"); n != 2 {
		t.Errorf("%d consumed lines of 400 messages, want 2 (sluice and jetstream):\n%s", n, out)
	}
}

// Sluice and Kafka (an embedded kfake cluster) in one run, produce and consume: both
// report their numbers and the ratio is printed.
func TestBenchKafkaBesideSluice(t *testing.T) {
	out, _, err := execRoot(t, 60*time.Second, "bench", "produce", "--target", "sluice,kafka", "--broker", "embedded",
		"--messages", "300", "--size", "128", "--inflight", "4")
	if err != nil {
		t.Fatalf("bench produce sluice,kafka: %v\n%s", err, out)
	}
	for _, want := range []string{"sluice produce:", "kafka: embedded in-process Kafka-protocol cluster (kfake)", "kafka produce: 1 producer(s) x 4 in flight (sync)",
		"sent       300 messages", "ratio sluice/kafka:"} {
		if !strings.Contains(out, want) {
			t.Errorf("produce output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "sent       300 messages"); n != 2 {
		t.Errorf("%d runs sent 300 messages, want 2:\n%s", n, out)
	}
	out, _, err = execRoot(t, 60*time.Second, "bench", "consume", "--target", "kafka", "--messages", "500", "--size", "64", "--queues", "4", "--consume-batch", "8")
	if err != nil {
		t.Fatalf("bench consume kafka: %v\n%s", err, out)
	}
	for _, want := range []string{"kafka consume: prefill 500 messages", "consumed   500 messages", "0 duplicate(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("consume output lacks %q:\n%s", want, out)
		}
	}
}

// --repeat 3 runs Sluice and Kafka alternately three times, starting each server once,
// and prints both targets' medians and spreads and the median ratio.
func TestBenchRepeat(t *testing.T) {
	out, _, err := execRoot(t, 90*time.Second, "bench", "produce", "--target", "sluice,kafka", "--broker", "embedded",
		"--messages", "200", "--size", "128", "--inflight", "4", "--repeat", "3")
	if err != nil {
		t.Fatalf("bench produce --repeat 3: %v\n%s", err, out)
	}
	if n := strings.Count(out, "sent       200 messages"); n != 6 {
		t.Errorf("%d runs sent 200 messages, want 6:\n%s", n, out)
	}
	for _, want := range []string{"round 1 of 3", "round 3 of 3", "summary over 3 rounds (median, lowest-highest):", "  sluice     ", "  kafka      ",
		"  ratio sluice/kafka: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "broker: embedded"); n != 1 {
		t.Errorf("broker started %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "kafka: embedded in-process"); n != 1 {
		t.Errorf("kafka started %d times, want once:\n%s", n, out)
	}
}

// --target kafka-franz measures franz-go beside package kafka on the same embedded
// cluster, sync and async.
func TestBenchKafkaFranz(t *testing.T) {
	for _, mode := range [][]string{{"--inflight", "4"}, {"--async", "--inflight", "16"}} {
		args := append([]string{"bench", "produce", "--target", "sluice,kafka,kafka-franz", "--broker", "embedded",
			"--messages", "300", "--size", "128"}, mode...)
		out, _, err := execRoot(t, 60*time.Second, args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		for _, want := range []string{"kafka-franz produce: 1 producer(s)", "(franz-go: all in-sync replicas acknowledge", "ratio sluice/kafka-franz:"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out)
			}
		}
		if n := strings.Count(out, "sent       300 messages"); n != 3 {
			t.Errorf("%v: %d runs sent 300 messages, want 3:\n%s", args, n, out)
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "produce", "--messages", "10", "--duration", "1s"}, "give one of them, not both"},
		{[]string{"bench", "produce", "--flush", "LAZY"}, `--flush "LAZY"`},
		{[]string{"bench", "produce", "--namesrv", "127.0.0.1:1", "--flush", "SYNC_FLUSH"}, "--flush applies to the bench's own broker only"},
		{[]string{"bench", "produce", "--broker", "thread"}, `--broker "thread": want process or embedded`},
		{[]string{"bench", "produce", "--namesrv", "127.0.0.1:1", "--broker", "embedded"}, "--broker applies to the bench's own broker only"},
		{[]string{"bench", "produce", "--target", "pulsar"}, `--target "pulsar"`},
		{[]string{"bench", "produce", "--target", "pulsar", "--progress"}, `--target "pulsar"`}, // the bar's goroutine must stop too (goleak)
		{[]string{"bench", "produce", "--target", "kafka,kafka"}, "each once"},
		{[]string{"bench", "consume", "--target", "pulsar"}, `--target "pulsar"`},
		{[]string{"bench", "produce", "--rate", "150%"}, `"150%" is not a percentage in (0, 100]`},
		{[]string{"bench", "produce", "--rate", "0"}, `"0" is not a rate in (0, 10000000] msg/s`},
		{[]string{"bench", "produce", "--rate", ""}, "--rate: empty"},
		{[]string{"bench", "produce", "--rate", "1000", "--size", "8"}, "--rate needs at least 16 bytes"},
		{[]string{"bench", "produce", "--rate", "1000", "--repeat", "2"}, "--rate and --repeat: pick one"},
		{[]string{"bench", "produce", "--rate", "1000", "--mode", "batch"}, "--mode and --async do not apply"},
		{[]string{"bench", "produce", "--rate", "1000", "--target", "rocketmq"}, "--rate: not with --target rocketmq"},
		{[]string{"bench", "scale", "--clients", "5", "--topics", "4"}, "--clients 5: must be 1..2000 and at most --topics (4)"},
		{[]string{"bench", "scale", "--baseline-clients", "300"}, "--baseline-clients 300"},
		{[]string{"bench", "scale", "--broker", "embedded"}, "needs the broker in its own process"},
		{[]string{"bench", "scale", "--namesrv", "127.0.0.1:1"}, "--namesrv: the scale scenario runs against the bench's own broker process"},
		{[]string{"bench", "produce", "--repeat", "-1"}, "--repeat -1: want 1 or more"},
		{[]string{"bench", "produce", "--target", "rocketmq", "--repeat", "3"}, "--repeat 3: want 1 or more, and 1 with --target rocketmq"},
		{[]string{"bench", "produce", "--target", "sluice,kafka", "--mode", "oneway"}, "only with --target sluice"},
		{[]string{"bench", "consume", "--duration", "1s", "--progress"}, "give --messages instead"},
		{[]string{"bench", "produce", "--size", "4"}, "--size 4: must be 8..4194304 bytes"},
		{[]string{"bench", "produce", "--producers", "0"}, "--producers 0"},
		{[]string{"bench", "produce", "--inflight", "5000"}, "--inflight 5000"},
		{[]string{"bench", "produce", "--messages", "-1"}, "--messages -1"},
		{[]string{"bench", "consume", "--duration", "1s"}, "give --messages instead"},
		{[]string{"bench", "consume", "--consume-batch", "0"}, "--consume-batch 0"},
		{[]string{"bench", "consume", "--pull-batch", "2000"}, "--pull-batch 2000"},
		{[]string{"bench", "consume", "--target", "nats"}, `--target "nats": want a comma-separated list of sluice, jetstream, kafka`},
		{[]string{"bench", "consume", "--target", "jetstream", "--nats-url", "nats://127.0.0.1:1", "--messages", "1"}, "127.0.0.1:1"},
		{[]string{"bench", "produce", "--target", "jetstream", "--nats-url", "nats://127.0.0.1:1", "--messages", "1"}, "127.0.0.1:1"},
	} {
		_, _, err := execRoot(t, 20*time.Second, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// --rate runs each target at steady rates on a fresh topic with its own consumer and
// prints send and end-to-end quantiles for each, then one table.
func TestBenchRate(t *testing.T) {
	out, _, err := execRoot(t, 120*time.Second, "bench", "produce", "--target", "sluice,kafka-franz", "--broker", "embedded",
		"--rate", "400,50%", "--messages", "300", "--size", "64", "--inflight", "8")
	if err != nil {
		t.Fatalf("bench produce --rate: %v\n%s", err, out)
	}
	for _, want := range []string{"sluice produce: 1 producer(s) x 8 in flight (async), 64-byte bodies, 300 messages: saturation, producer alone", "sluice saturation with the consumer attached: 300 messages unpaced", "  saturation ",
		"sluice rate 400: 400 msg/s, 300 messages of 64 bytes", "sluice rate 50%:", "kafka-franz rate 400:", "kafka-franz rate 50%:",
		"summary (latencies from each message's due time):"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "  sent       300 messages in "); n != 4 {
		t.Errorf("%d rate runs sent 300 messages, want 4:\n%s", n, out)
	}
	if n := len(regexp.MustCompile(`end-to-end p50 \S+, p99 \S+, p99.9 \S+, max \S+, 0 duplicate`).FindAllString(out, -1)); n != 4 {
		t.Errorf("%d end-to-end lines, want 4:\n%s", n, out)
	}
}

// consume --target kafka,kafka-franz drains the same backlog with package kafka's
// consumer and a franz-go group and prints their ratio.
func TestBenchConsumeKafkaFranz(t *testing.T) {
	out, _, err := execRoot(t, 90*time.Second, "bench", "consume", "--target", "kafka,kafka-franz", "--messages", "500", "--size", "64", "--queues", "4")
	if err != nil {
		t.Fatalf("bench consume kafka,kafka-franz: %v\n%s", err, out)
	}
	for _, want := range []string{"kafka-franz consume: prefill 500 messages", "ratio kafka/kafka-franz: "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "consumed   500 messages (32000 bytes)"); n != 2 {
		t.Errorf("%d drains of 500 messages, want 2:\n%s", n, out)
	}
	if n := strings.Count(out, "kafka: embedded in-process"); n != 1 {
		t.Errorf("kafka started %d times, want once:\n%s", n, out)
	}
}
