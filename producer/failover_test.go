package producer

// Two brokers under one name server; one of them runs as a child process (this test
// binary re-executed, see TestMain) and is killed with SIGKILL mid-stream.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
)

// childBrokerEnv carries a childConfig (JSON) to a re-executed test binary, making it a
// broker process instead of a test run.
const childBrokerEnv = "SLUICE_PRODUCER_TEST_CHILD_BROKER"

type childConfig struct {
	NamesrvAddr string
	ListenAddr  string
	Dir         string
	Name        string
}

// runChildBroker is the child's main: start the broker, print "READY <addr>" (or
// "ERR <error>"), run until stdin closes (the parent is done or gone) or SIGKILL.
func runChildBroker() {
	var c childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childBrokerEnv)), &c); err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	b, err := broker.New(broker.Config{NamesrvAddr: c.NamesrvAddr, BrokerName: c.Name, ListenAddr: c.ListenAddr,
		StorePathRootDir: c.Dir, Logger: testkit.Quiet()})
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	fmt.Println("READY", b.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.Shutdown(ctx)
	os.Exit(0)
}

// childBroker is a broker running in a child process.
type childBroker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	eof   chan struct{} // closed when the child's stdout reached EOF
	once  sync.Once
}

// startChildBroker starts a child broker, retrying for up to 20 s while its fixed
// address is still in use. The child is killed at t.Cleanup if still running.
func startChildBroker(t *testing.T, c childConfig) *childBroker {
	t.Helper()
	env, _ := json.Marshal(c)
	var cb *childBroker
	var line string
	// A port of the previous child may still be in use for a moment: start again, 100 ms
	// apart.
	testkit.EventuallyEvery(20*time.Second, 100*time.Millisecond, func() bool {
		cb, line = spawnChild(t, string(env))
		if strings.HasPrefix(line, "READY ") {
			return true
		}
		cb.kill()
		return !strings.Contains(line, "address already in use")
	})
	if !strings.HasPrefix(line, "READY ") {
		t.Fatalf("child broker: %q", line)
	}
	t.Cleanup(cb.kill)
	return cb
}

func spawnChild(t *testing.T, env string) (*childBroker, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childBrokerEnv+"="+env)
	cmd.Stderr = io.Discard
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
	cb := &childBroker{cmd: cmd, stdin: stdin, eof: make(chan struct{})}
	first := make(chan string, 1)
	go func() { // owned by cb: ends at the child's exit (stdout EOF)
		defer close(cb.eof)
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			first <- sc.Text()
		} else {
			first <- "child exited without a word"
		}
		for sc.Scan() {
		}
	}()
	select {
	case line := <-first:
		return cb, line
	case <-time.After(30 * time.Second):
		return cb, "child did not report within 30s"
	}
}

// kill sends SIGKILL (no shutdown, no flush) and reaps the child. Idempotent.
func (c *childBroker) kill() {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(syscall.SIGKILL)
		<-c.eof
		_ = c.cmd.Wait()
		_ = c.stdin.Close()
	})
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestFailoverTwoBrokersKillOne: four goroutines send synchronously to a topic on
// broker-a (in process) and broker-b (a child process). broker-b is SIGKILLed mid-stream:
// sends keep succeeding through broker-a (at most the ones in flight fail), broker-b is
// avoided while it is down (few attempts reach it), and after it restarts on the same
// address and store it gets messages again. The producer's routes are not refreshed
// during the test (the name server drops a killed broker from its routes at once, which
// would hide the producer's own behaviour), so only latency fault tolerance keeps sends
// away from broker-b, and broker-b is used again once its isolation window (1 s) passes
// after the restart. The run with fault tolerance off shows the difference: every
// other send tries broker-b first and is retried on broker-a.
func TestFailoverTwoBrokersKillOne(t *testing.T) {
	for _, fault := range []bool{true, false} {
		t.Run(fmt.Sprintf("SendLatencyFaultEnable=%v", fault), func(t *testing.T) { testFailover(t, fault) })
	}
}

func testFailover(t *testing.T, fault bool) {
	ns, err := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ns.Shutdown(ctx)
	})
	testbroker.Start(t, broker.Config{NamesrvAddr: ns.Addr(), BrokerName: "broker-a"})
	bcfg := childConfig{NamesrvAddr: ns.Addr(), ListenAddr: freeAddr(t), Dir: t.TempDir(), Name: "broker-b"}
	child := startChildBroker(t, bcfg)
	const topic = "Failover"
	createTopic(t, []string{ns.Addr()}, topic, 4, "broker-a", "broker-b")

	var down atomic.Bool
	var attemptsBDown, failedAttempts atomic.Int64
	hook := func(mq message.MessageQueue, err error) {
		if err != nil {
			failedAttempts.Add(1)
		}
		if mq.BrokerName == "broker-b" && down.Load() {
			attemptsBDown.Add(1)
		}
	}
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, SendTimeout: 2 * time.Second, SendLatencyFaultEnable: &fault,
		FaultIsolationDuration: time.Second, routeRefreshInterval: time.Hour, attemptHook: hook})

	type result struct {
		broker string
		at     time.Time
	}
	var (
		mu      sync.Mutex
		results []result
		errs    []error
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	const workers = 4
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := p.SendSync(ctx, message.NewMessage(topic, []byte(fmt.Sprintf("w%d-%d", w, i))))
				cancel()
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					results = append(results, result{r.Queue.BrokerName, time.Now()})
				}
				mu.Unlock()
			}
		}()
	}
	defer func() { // stop the senders even when an assertion fails
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	countOn := func(b string, after time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if (b == "" || r.broker == b) && r.at.After(after) {
				n++
			}
		}
		return n
	}
	start := time.Now()
	testkit.WaitFor(t, 20*time.Second, func() bool { return countOn("broker-a", start) >= 20 && countOn("broker-b", start) >= 20 }, func() string {
		return fmt.Sprintf("a %d, b %d", countOn("broker-a", start), countOn("broker-b", start))
	})

	down.Store(true)
	killAt := time.Now()
	child.kill()
	// Down for at least two isolation windows, and plenty of sends.
	testkit.WaitFor(t, 30*time.Second, func() bool { return time.Since(killAt) > 2500*time.Millisecond && countOn("", killAt) >= 200 }, func() string { return fmt.Sprintf("%d sends since the kill", countOn("", killAt)) })
	downSends := countOn("", killAt)
	downAttempts := attemptsBDown.Load()
	downFor := time.Since(killAt)

	restartAt := time.Now()
	startChildBroker(t, bcfg)
	down.Store(false)
	testkit.WaitFor(t, 30*time.Second, func() bool { return countOn("broker-b", restartAt) >= 10 }, func() string {
		return fmt.Sprintf("%d sends on broker-b since its restart", countOn("broker-b", restartAt))
	})
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d sends stored, %d failed; while broker-b was down: %d sends stored, %d attempts reached broker-b; %d failed attempts in all",
		len(results), len(errs), downSends, downAttempts, failedAttempts.Load())
	if len(errs) > workers {
		t.Fatalf("%d sends failed, more than the %d that can be in flight: %v", len(errs), workers, errs[0])
	}
	for _, r := range results {
		if r.broker == "broker-b" && r.at.After(killAt.Add(500*time.Millisecond)) && r.at.Before(restartAt) {
			t.Fatalf("a send stored on broker-b at %v, after it was killed at %v", r.at, killAt)
		}
	}
	// With fault tolerance: the sends in flight at the kill, then each time the 1 s
	// isolation window passes, at most one attempt per sender before the failure
	// isolates broker-b again.
	allowed := int64(workers * (1 + int(downFor/time.Second) + 1))
	if !fault {
		// About every other send tries broker-b first.
		if downAttempts <= allowed {
			t.Fatalf("without fault tolerance only %d attempts reached the dead broker-b (of %d sends)", downAttempts, downSends)
		}
		return
	}
	if downAttempts > allowed {
		t.Fatalf("%d attempts reached broker-b while it was down for %v (of %d sends; allowed %d): it was not avoided",
			downAttempts, downFor, downSends, allowed)
	}
}
