package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
)

func TestMain(m *testing.M) {
	// Child mode for TestSignalStopsNamesrv: run the real main with SLUICE_MAIN_ARGS.
	if args, ok := os.LookupEnv("SLUICE_MAIN_ARGS"); ok {
		os.Args = append([]string{"sluice"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	// sluice bench starts its broker as "sluice broker ...": here, this binary in child mode.
	benchBrokerCommand = func(args []string) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "SLUICE_MAIN_ARGS="+strings.Join(args, " "))
		return cmd
	}
	goleak.VerifyTestMain(m, officialV5ClientGoroutines...)
}

// officialV5ClientGoroutines are the goroutines the official RocketMQ 5 Go client
// (v5.1.4, cmd_v5clients_test.go) leaves behind after GracefulStop: its client
// manager's loops (they sleep their initial delay, up to a minute, before they look at
// their done channel), their tickers, its gRPC connections' serializers, its log file
// rotation and its metrics worker. Nothing of this module runs these functions.
var officialV5ClientGoroutines = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientManager).startUp.func1"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientManager).startUp.func2"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientManager).startUp.func3"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-clients/golang/v5.(*defaultClientManager).startUp.func4"),
	goleak.IgnoreTopFunction("github.com/apache/rocketmq-clients/golang/v5/pkg/ticker.Tick.func1"),
	goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
	goleak.IgnoreTopFunction("github.com/natefinch/lumberjack.(*Logger).millRun"),
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
}

// syncBuffer is an io.Writer safe for a command goroutine and a polling test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// run executes the command tree in-process and returns its stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut syncBuffer
	root := newRootCmd()
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader("")) // not a terminal: destructive commands need --yes
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// background starts a long-running command; stop cancels it and returns its error.
type background struct {
	out    syncBuffer
	cancel context.CancelFunc
	done   chan error
}

func startBackground(t *testing.T, args ...string) *background {
	t.Helper()
	bg := &background{done: make(chan error, 1)}
	root := newRootCmd()
	root.SetOut(&bg.out)
	root.SetErr(&syncBuffer{})
	root.SetArgs(args)
	ctx, cancel := context.WithCancel(context.Background())
	bg.cancel = cancel
	go func() { bg.done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() { bg.stop(t) })
	return bg
}

func (bg *background) stop(t *testing.T) error {
	t.Helper()
	bg.cancel()
	select {
	case err := <-bg.done:
		bg.done <- err // keep it for a second stop
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("command did not stop within 15s of cancel")
		return nil
	}
}

// waitLine polls the command's output until re matches, and returns the submatches.
func (bg *background) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	var exitErr error
	exited := false
	testkit.Eventually(30*time.Second, func() bool {
		if m = re.FindStringSubmatch(bg.out.String()); m != nil {
			return true
		}
		select {
		case exitErr = <-bg.done:
			bg.done <- exitErr
			exited = true
		default:
		}
		return exited
	})
	if m == nil && exited { // the line may have been printed just before the exit
		m = re.FindStringSubmatch(bg.out.String())
	}
	switch {
	case m != nil:
		return m
	case exited:
		t.Fatalf("command exited before printing %v: %v; output %q", re, exitErr, bg.out.String())
	default:
		t.Fatalf("no line matching %v within 30s in %q", re, bg.out.String())
	}
	return nil
}

var brokerLine = regexp.MustCompile(`sluice broker (\S+) listening on (\S+), name server (\S+), data in`)

func TestBrokerAndTopicCommands(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "broker.conf")
	if err := os.WriteFile(conf, []byte("brokerClusterName=TestCluster\nbrokerName=broker-x\nlistenPort=10911\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := startBackground(t, "broker", "-c", conf, "--data-dir", filepath.Join(dir, "store"),
		"--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0", "--log-level", "error")
	m := b.waitLine(t, brokerLine)
	name, ns := m[1], m[3]
	if name != "broker-x" {
		t.Errorf("broker name = %q, want broker-x from broker.conf", name)
	}

	out, err := run(t, "admin", "topic", "create", "--namesrv", ns, "--topic", "OrderT", "--queues", "4", "--order")
	if err != nil {
		t.Fatalf("topic create: %v (output %q)", err, out)
	}
	for _, want := range []string{"created topic OrderT on broker-x", "cluster TestCluster): 4 queues, perm 6, order true", "order config broker-x:4", "route of OrderT is published"} {
		if !strings.Contains(out, want) {
			t.Errorf("topic create output %q lacks %q", out, want)
		}
	}

	out, err = run(t, "admin", "topic", "list", "--namesrv", ns)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); !contains(lines, "OrderT") || !contains(lines, "TBW102") {
		t.Errorf("topic list = %q, want OrderT and TBW102 lines", out)
	}

	out, err = run(t, "admin", "topic", "route", "--namesrv", ns, "--topic", "OrderT")
	if err != nil || !regexp.MustCompile(`broker-x +`+regexp.QuoteMeta(m[2])+` +4 +4 +6`).MatchString(out) {
		t.Fatalf("route table: %v\n%s", err, out)
	}
	out, err = run(t, "admin", "topic", "route", "--namesrv", ns, "--topic", "OrderT", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	r, err := wire.ParseTopicRouteData("OrderT", []byte(out))
	if err != nil {
		t.Fatalf("route output is not a route: %v\n%s", err, out)
	}
	if len(r.QueueDatas) != 1 || r.QueueDatas[0].WriteQueueNums != 4 || r.QueueDatas[0].BrokerName != "broker-x" ||
		r.OrderTopicConf != "broker-x:4" || brokerMaster(r, "broker-x") != m[2] {
		t.Errorf("route = %s", out)
	}

	out, err = run(t, "admin", "cluster", "--namesrv", ns)
	if err != nil || !regexp.MustCompile(`TestCluster +broker-x +master +`+regexp.QuoteMeta(m[2])).MatchString(out) {
		t.Fatalf("cluster table: %v\n%s", err, out)
	}
	out, err = run(t, "admin", "cluster", "--namesrv", ns, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var ci wire.ClusterInfo
	if err := json.Unmarshal([]byte(out), &ci); err != nil || !contains(ci.ClusterAddrTable["TestCluster"], "broker-x") {
		t.Errorf("cluster output %q (%v)", out, err)
	}

	if out, err = run(t, "admin", "topic", "delete", "--namesrv", ns, "--topic", "OrderT", "--yes"); err != nil || !strings.Contains(out, "deleted topic OrderT") {
		t.Fatalf("topic delete: %q %v", out, err)
	}
	if _, err = run(t, "admin", "topic", "route", "--namesrv", ns, "--topic", "OrderT"); err == nil || !strings.Contains(err.Error(), `topic "OrderT" does not exist`) || exitCode(err) != exitNotFound {
		t.Errorf("route after delete: err = %v", err)
	}

	if err := b.stop(t); err != nil {
		t.Errorf("broker command returned %v after cancel", err)
	}
	if !strings.Contains(b.out.String(), "sluice broker stopped") {
		t.Errorf("broker output %q lacks the stop line", b.out.String())
	}
}

func TestNamesrvCommand(t *testing.T) {
	kv := filepath.Join(t.TempDir(), "kv.json")
	n := startBackground(t, "namesrv", "--listen", "127.0.0.1:0", "--kv-config", kv, "--log-level", "error")
	ns := n.waitLine(t, regexp.MustCompile(`sluice name server listening on (\S+)`))[1]
	// No broker registered: listing topics cannot tell what exists (exit code 4), and
	// says so instead of printing nothing.
	out, err := run(t, "admin", "topic", "list", "--namesrv", ns)
	if err == nil || out != "" || !strings.Contains(err.Error(), "no master broker registered with name server "+ns) || exitCode(err) != exitUnreachable {
		t.Errorf("topic list without a broker = %q %v", out, err)
	}
	// No broker registered: create fails with a clear error.
	if _, err := run(t, "admin", "topic", "create", "--namesrv", ns, "--topic", "T"); err == nil || !strings.Contains(err.Error(), "no master broker") {
		t.Errorf("create without broker: err = %v", err)
	}
	if err := n.stop(t); err != nil {
		t.Errorf("namesrv command returned %v", err)
	}
}

func TestCommandErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("noSuchKey=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"admin", "topic", "create", "--namesrv", "127.0.0.1:1"}, `"topic" not set`},
		{[]string{"admin", "topic", "create", "--namesrv", "127.0.0.1:1", "--topic", "T", "--queues", "0"}, "--queues 0"},
		{[]string{"admin", "topic", "create", "--namesrv", "127.0.0.1:1", "--topic", "bad topic"}, "Topic"},
		{[]string{"admin", "topic", "list", "--namesrv", "localhost"}, "is not host:port"},
		{[]string{"admin", "topic", "list", "--namesrv", "127.0.0.1:1", "--timeout", "1s"}, "no name server answered"},
		{[]string{"broker", "-c", bad, "--data-dir", dir}, "noSuchKey"},
		{[]string{"broker", "-c", filepath.Join(dir, "missing.conf")}, "missing.conf"},
		{[]string{"namesrv", "--listen", "nohostport"}, "ListenAddr"},
		{[]string{"namesrv", "--log-level", "loud"}, "--log-level"},
		{[]string{"nosuchcommand"}, "unknown command"},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sluice %v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestSignalStopsNamesrv runs the real main (this test binary in child mode) and
// stops it with SIGINT: it must shut down and exit 0.
func TestSignalStopsNamesrv(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "SLUICE_MAIN_ARGS=namesrv --listen 127.0.0.1:0 --log-level error")
	var out syncBuffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if !testkit.Eventually(30*time.Second, func() bool { return strings.Contains(out.String(), "listening on") }) {
		cmd.Process.Kill()
		<-exited
		t.Fatalf("child printed no listening line within 30s: %q", out.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("child exit after SIGINT: %v (output %q)", err, out.String())
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatal("child did not exit within 15s of SIGINT")
	}
	if !strings.Contains(out.String(), "sluice name server stopped") {
		t.Errorf("child output %q lacks the stop line", out.String())
	}

	// A usage error exits 2 (docs/operations.md) with the message on stderr.
	bad := exec.Command(os.Args[0])
	bad.Env = append(os.Environ(), "SLUICE_MAIN_ARGS=admin topic route")
	var stderr syncBuffer
	bad.Stderr = &stderr
	err := bad.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(stderr.String(), "sluice: required flag") {
		t.Errorf("bad args: err %v, stderr %q", err, stderr.String())
	}
}

// brokerMaster returns the master address of brokerName in r, or "".
func brokerMaster(r *wire.TopicRouteData, brokerName string) string {
	b, _ := r.Broker(brokerName)
	return b.MasterAddr()
}
