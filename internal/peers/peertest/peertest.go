// Package peertest holds the test helpers of package peers: they start Apache RocketMQ,
// Apache Kafka and the Java driver for a test (testing.TB), stop them at its cleanup and
// skip the test when Java or the peer jars are absent. They live apart from package peers
// so that the sluice binary, whose bench starts the peers too, links no test code.
package peertest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/testkit"
)

// skipOrFatal skips t when err wraps ErrUnavailable and fails it otherwise.
func skipOrFatal(t testing.TB, what string, err error) {
	t.Helper()
	if errors.Is(err, peers.ErrUnavailable) {
		t.Skipf("%s: %v", what, err)
	}
	t.Fatalf("%s: %v", what, err)
}

// StartRocketMQ starts an Apache RocketMQ name server and broker for t ([peers.LaunchRocketMQ]
// with opt) and stops them at t.Cleanup, logging their last output when t failed. It
// skips t when Java or the jars are absent.
func StartRocketMQ(t testing.TB, opt peers.RocketMQOptions) *peers.RocketMQ {
	t.Helper()
	r, err := peers.LaunchRocketMQ(context.Background(), opt)
	if err != nil {
		skipOrFatal(t, "apache rocketmq", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("apache rocketmq output:\n%s", r.Output())
		}
		if err := r.Stop(); err != nil {
			t.Errorf("stop apache rocketmq: %v", err)
		}
	})
	return r
}

// StartKafka starts an Apache Kafka KRaft cluster of nodes combined nodes for t
// ([peers.LaunchKafka]) and stops it at t.Cleanup. It skips t when Java or the jars are absent.
func StartKafka(t testing.TB, nodes int) *peers.Kafka {
	t.Helper()
	k, err := peers.LaunchKafka(context.Background(), peers.KafkaOptions{Nodes: nodes})
	if err != nil {
		skipOrFatal(t, "apache kafka", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("apache kafka output:\n%s", k.Output())
		}
		if err := k.Stop(); err != nil {
			t.Errorf("stop apache kafka: %v", err)
		}
	})
	return k
}

// Driver runs the Java driver (internal/peers/javadriver: the RocketMQ 4.9 Java client
// as a command-line program).
type Driver struct {
	argv []string // java, flags, -cp, main class
	home string
}

// SerializeRocketMQ is the JVM flag that makes the RocketMQ Java client write its
// request headers in the binary ROCKETMQ encoding instead of JSON: RemotingCommand
// reads the system property rocketmq.serialize.type once, when the class loads
// (docs/protocol.md §1.3).
const SerializeRocketMQ = "-Drocketmq.serialize.type=ROCKETMQ"

// WithJVMFlags returns a copy of d whose processes run with flags added to the JVM's
// options (system properties such as [SerializeRocketMQ], heap sizes); d is unchanged.
func (d *Driver) WithJVMFlags(flags ...string) *Driver {
	cp := len(d.argv) - 3 // before "-cp", the class path and the main class
	argv := append(append(append([]string{}, d.argv[:cp]...), flags...), d.argv[cp:]...)
	return &Driver{argv: argv, home: d.home}
}

// JavaDriver returns the Java driver for t, or skips t when Java or the driver's jars are
// absent.
func JavaDriver(t testing.TB) *Driver {
	t.Helper()
	home := t.TempDir()
	argv, err := peers.DriverArgv(home)
	if err != nil {
		skipOrFatal(t, "java driver", err)
	}
	if err := driverFresh("driver", "javadriver"); err != nil {
		t.Fatal(err)
	}
	return &Driver{home: home, argv: argv}
}

// driverFresh reports an error when the driver built into dir under [peers.Dir] (by
// .ci/peers) was built from other sources than internal/peers/<src>, found beside this
// file's package: its .stamp is the first 16 hex digits of the SHA-256 of pom.xml and
// then every file under src, in sorted path order. A driver without a stamp, or sources
// that cannot be read, is taken as it is.
func driverFresh(dir, src string) error {
	built := filepath.Join(peers.Dir(), dir)
	stamp, err := os.ReadFile(filepath.Join(built, ".stamp"))
	if err != nil {
		return nil
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return nil
	}
	root := filepath.Join(filepath.Dir(self), "..", src)
	var files []string
	if err := filepath.WalkDir(filepath.Join(root, "src"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}); err != nil {
		return nil
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range append([]string{filepath.Join(root, "pom.xml")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil
		}
		h.Write(b)
	}
	if got := hex.EncodeToString(h.Sum(nil))[:16]; got != strings.TrimSpace(string(stamp)) {
		return fmt.Errorf("peers: the java driver in %s was built from other sources than internal/peers/%s: run bash .ci/peers", built, src)
	}
	return nil
}

// Event is one JSON line the driver prints: "started", "sent" (a send's result), "check"
// (a transaction check-back), "msg" (a delivery) or "done". Fields are set as the event
// has them (see the driver's class comment).
type Event struct {
	Event          string `json:"event"`
	I              int    `json:"i"`
	OK             bool   `json:"ok"`
	Status         string `json:"status"`
	MsgID          string `json:"msgId"`
	OffsetMsgID    string `json:"offsetMsgId"`
	QueueID        int    `json:"queueId"`
	Broker         string `json:"broker"`
	QueueOffset    int64  `json:"queueOffset"`
	TxnState       string `json:"txnState"`
	TransactionID  string `json:"transactionId"`
	Error          string `json:"error"`
	Exception      string `json:"exception"`
	Code           int    `json:"code"`
	Topic          string `json:"topic"`
	Keys           string `json:"keys"`
	Tags           string `json:"tags"`
	Body           string `json:"body"`
	Result         string `json:"result"`
	Answer         string `json:"answer"`
	ReconsumeTimes int    `json:"reconsumeTimes"`

	// Props are a delivery's properties, system ones (KEYS, TAGS, UNIQ_KEY, ...) included.
	Props map[string]string `json:"props"`
}

// Msg is one message for the driver's produce command: a line of its input.
type Msg struct {
	Topic   string            `json:"topic,omitempty"`
	Tags    string            `json:"tags,omitempty"`
	Keys    string            `json:"keys,omitempty"`
	Body    string            `json:"body"`
	Props   map[string]string `json:"props,omitempty"`
	Delay   int               `json:"delay,omitempty"`
	QueueID *int              `json:"queueId,omitempty"`
	Mode    string            `json:"mode,omitempty"`
	Batch   []Msg             `json:"batch,omitempty"`
	Txn     string            `json:"txn,omitempty"`
	Check   string            `json:"check,omitempty"`
}

// DriverProc is one running driver process.
type DriverProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	events []Event
	stderr *peers.Tail
	done   chan struct{}
	enc    *json.Encoder
}

// Start runs the driver with args (e.g. "produce", "--namesrv", addr) in its own process
// group; it is killed at t.Cleanup if still running. It waits (30 s at most) for the
// driver's "started" event.
func (d *Driver) Start(t testing.TB, args ...string) *DriverProc {
	t.Helper()
	cmd := peers.Command(append(append([]string{}, d.argv...), args...)...)
	p := &DriverProc{t: t, cmd: cmd, stderr: peers.NewTail(16 << 10), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	p.enc = json.NewEncoder(p.stdin)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start java driver: %v", err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 8<<20)
		for sc.Scan() {
			var e Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				_, _ = p.stderr.Write([]byte("unparsed stdout: " + sc.Text() + "\n"))
				continue
			}
			p.mu.Lock()
			p.events = append(p.events, e)
			p.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			peers.KillGroup(cmd)
			<-p.done
		}
		if t.Failed() {
			t.Logf("java driver %v stderr:\n%s", args, p.stderr.String())
		}
	})
	p.WaitFor(30*time.Second, "driver started", func(evs []Event) bool { return count(evs, "started") > 0 })
	return p
}

func count(evs []Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Event == kind {
			n++
		}
	}
	return n
}

// Send writes one message line to the driver's input.
func (p *DriverProc) Send(m Msg) {
	p.t.Helper()
	if err := p.enc.Encode(m); err != nil {
		p.t.Fatalf("java driver input: %v (stderr %s)", err, p.stderr.String())
	}
}

// Events returns the events so far, in order.
func (p *DriverProc) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Event(nil), p.events...)
}

// Of returns the events of one kind so far.
func (p *DriverProc) Of(kind string) []Event {
	var out []Event
	for _, e := range p.Events() {
		if e.Event == kind {
			out = append(out, e)
		}
	}
	return out
}

// WaitFor re-checks the events (testkit.Eventually) until cond holds, failing the test
// after timeout (or when the driver exits first) with what and the events seen.
func (p *DriverProc) WaitFor(timeout time.Duration, what string, cond func([]Event) bool) []Event {
	p.t.Helper()
	var evs []Event
	exited := false
	testkit.Eventually(timeout, func() bool {
		if evs = p.Events(); cond(evs) {
			return true
		}
		select {
		case <-p.done:
			exited = true
		default:
		}
		return exited
	})
	if cond(evs) {
		return evs
	}
	if exited { // events printed just before the exit count
		if evs = p.Events(); cond(evs) {
			return evs
		}
	}
	p.t.Fatalf("java driver: %s: not reached (exited %v) after %v; events %s; stderr:\n%s",
		what, exited, timeout, brief(evs), p.stderr.String())
	return nil
}

// Close closes the driver's input (it then finishes, shuts the client down and exits)
// and waits up to 30 s for the exit; returns all events.
func (p *DriverProc) Close() []Event {
	p.t.Helper()
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		peers.KillGroup(p.cmd)
		<-p.done
		p.t.Fatalf("java driver did not exit 30s after its input closed; stderr:\n%s", p.stderr.String())
	}
	return p.Events()
}

// brief renders events compactly for failure messages.
func brief(evs []Event) string {
	var b strings.Builder
	for i, e := range evs {
		if i == 40 {
			fmt.Fprintf(&b, " ... (%d more)", len(evs)-40)
			break
		}
		s, _ := json.Marshal(e)
		b.Write(s)
		b.WriteByte(' ')
	}
	return b.String()
}

// StartRocketMQCluster starts an Apache RocketMQ 4.9 cluster for t
// ([peers.LaunchRocketMQCluster] with opt) and stops it at t.Cleanup, logging the
// processes' last output when t failed. It skips t when Java or the jars are absent.
func StartRocketMQCluster(t testing.TB, opt peers.RocketMQClusterOptions) *peers.RocketMQCluster {
	t.Helper()
	c, err := peers.LaunchRocketMQCluster(context.Background(), opt)
	if err != nil {
		skipOrFatal(t, "apache rocketmq cluster", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("apache rocketmq cluster output:\n%s", c.Output())
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop apache rocketmq cluster: %v", err)
		}
	})
	return c
}
