package crashtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// The parent test re-executes its own binary (os.Args[0] -test.run=^$) with these
// variables set; TestMain then runs a broker instead of the tests.
const (
	envChild   = "SLUICE_CRASHTEST_CHILD"   // "1" makes the process a broker child
	envDir     = "SLUICE_CRASHTEST_DIR"     // storePathRootDir
	envAddr    = "SLUICE_CRASHTEST_ADDR"    // broker listen "ip:port"
	envNamesrv = "SLUICE_CRASHTEST_NAMESRV" // embedded name server listen "ip:port"
	envFlush   = "SLUICE_CRASHTEST_FLUSH"   // flushDiskType: SYNC_FLUSH (default) or ASYNC_FLUSH

	readyPrefix = "SLUICE_CRASHTEST_READY " // the child's stdout line: prefix, broker addr, name server addr
)

// Test shape. Small segments make the commitlog roll over many times during the test.
const (
	segmentSize    = 1 << 20   // commitlog segment, bytes
	maxMessageSize = 128 << 10 // broker maxMessageSize; must leave 64 KiB of a segment spare
	minBody        = 256       // body sizes are uniform in [minBody, maxBody) bytes
	maxBody        = 8 << 10
	topic          = "CrashTopic"
	queueNums      = 4
	cycles         = 20
	senders        = 4
	maxKillDelay   = 400 * time.Millisecond // kill point: first SEND_OK of a cycle + U[0, maxKillDelay)
	maxPerCycle    = 50000                  // bound on messages a cycle may send
	verifyGroup    = "crashtest_verifier"
	idxProperty    = "CRASH_IDX" // user property: the message's index, which determines its body
	childStartWait = 30 * time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// runChild runs a broker (SYNC_FLUSH unless envFlush says otherwise) with an embedded
// name server from the environment,
// prints its ready line and serves until stdin reaches EOF (the parent closed it or
// died), then shuts down cleanly. The parent normally ends it with SIGKILL instead.
// Exit codes: 0 clean shutdown, 2 bad config, 3 start failed, 4 shutdown failed.
func runChild() int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	flush := os.Getenv(envFlush)
	if flush == "" {
		flush = "SYNC_FLUSH"
	}
	b, err := broker.New(broker.Config{
		ListenAddr:              os.Getenv(envAddr),
		NamesrvListenAddr:       os.Getenv(envNamesrv),
		StorePathRootDir:        os.Getenv(envDir),
		FlushDiskType:           flush,
		MappedFileSizeCommitLog: segmentSize,
		MaxMessageSize:          maxMessageSize,
		Logger:                  logger,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "crashtest child: new broker: %v\n", err)
		return 2
	}
	if err := b.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "crashtest child: start broker: %v\n", err)
		return 3
	}
	fmt.Printf("%s%s %s\n", readyPrefix, b.Addr(), b.NamesrvAddr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "crashtest child: shutdown: %v\n", err)
		return 4
	}
	return 0
}

// lockedBuffer collects a child's stderr.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// child is one broker process.
type child struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *lockedBuffer
	addr    string // broker "ip:port"
	namesrv string // embedded name server "ip:port"
	done    chan struct{}
	waitErr error // set before done is closed
}

var errAddrInUse = errors.New("address already in use")

// tryStartChild starts one broker child and waits for its ready line. It returns
// errAddrInUse when the child could not bind its ports.
func tryStartChild(dir, addr, namesrv, flush string) (*child, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envDir+"="+dir, envAddr+"="+addr, envNamesrv+"="+namesrv, envFlush+"="+flush)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan string, 1)
	readDone := make(chan struct{})
	go func() { // reads stdout until the child exits; owned by the child's lifetime
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), readyPrefix); ok {
				select {
				case ready <- line:
				default:
				}
			}
		}
	}()
	go func() { // reaps the child once its stdout is drained
		<-readDone
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	select {
	case line := <-ready:
		f := strings.Fields(line)
		if len(f) != 2 {
			c.kill()
			return nil, fmt.Errorf("bad ready line %q", line)
		}
		c.addr, c.namesrv = f[0], f[1]
		return c, nil
	case <-c.done:
		if strings.Contains(c.stderr.String(), "address already in use") {
			return nil, errAddrInUse
		}
		return nil, fmt.Errorf("child exited before ready (%v); stderr:\n%s", c.waitErr, c.stderr.String())
	case <-time.After(childStartWait):
		c.kill()
		return nil, fmt.Errorf("child not ready after %v; stderr:\n%s", childStartWait, c.stderr.String())
	}
}

// startChild starts a broker child with flushDiskType flush on the fixed ports, retrying
// while they are still in use (bounded by a deadline).
func startChild(t *testing.T, dir, addr, namesrv, flush string) *child {
	t.Helper()
	var c *child
	var err error
	testkit.EventuallyEvery(20*time.Second, 100*time.Millisecond, func() bool { // bind attempts 100 ms apart
		if c, err = tryStartChild(dir, addr, namesrv, flush); err != nil && errors.Is(err, errAddrInUse) {
			t.Logf("ports %s/%s still in use; retrying", addr, namesrv)
			return false
		}
		return true
	})
	if err != nil {
		t.Fatalf("start broker child: %v", err)
	}
	t.Cleanup(func() { c.kill() })
	return c
}

// kill sends SIGKILL and waits until the process is reaped. Safe to call twice.
func (c *child) kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

// stop closes the child's stdin (a clean Shutdown) and waits up to 20 s for exit code 0.
func (c *child) stop(t *testing.T) {
	t.Helper()
	_ = c.stdin.Close()
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		c.kill()
		t.Fatalf("child did not shut down within 20s; stderr:\n%s", c.stderr.String())
	}
	if c.waitErr != nil {
		t.Fatalf("child clean shutdown: %v; stderr:\n%s", c.waitErr, c.stderr.String())
	}
}

// checkStderr fails the test if the (dead) child reported a data race or a panic.
func (c *child) checkStderr(t *testing.T) {
	t.Helper()
	s := c.stderr.String()
	if strings.Contains(s, "DATA RACE") || strings.Contains(s, "panic:") {
		t.Errorf("broker child reported a race or panic:\n%s", s)
	}
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// makeBody returns the body of message idx: "crash-<idx>:" then pseudo-random bytes,
// [minBody, maxBody) bytes in all, the same every time for the same idx.
func makeBody(idx int) []byte {
	r := rand.New(rand.NewPCG(uint64(idx), 0x5eed))
	n := minBody + r.IntN(maxBody-minBody)
	b := make([]byte, 0, n+8)
	b = fmt.Appendf(b, "crash-%08d:", idx)
	for len(b) < n {
		b = append(b, byte(r.Uint32()))
	}
	return b[:n]
}

// ack is what a SEND_OK told us about a message.
type ack struct {
	queueID     int32
	queueOffset int64
	msgID       string // UNIQ_KEY, the client message id
	offsetMsgID string // store host + commitlog offset
	cycle       int
}

// ledger records every message that got SEND_OK.
type ledger struct {
	next  atomic.Int64 // next message index
	mu    sync.Mutex
	acked map[int]ack
}

func (l *ledger) add(idx int, a ack) {
	l.mu.Lock()
	l.acked[idx] = a
	l.mu.Unlock()
}

func (l *ledger) snapshot() map[int]ack {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]ack, len(l.acked))
	for k, v := range l.acked {
		out[k] = v
	}
	return out
}

var quiet = testkit.Quiet()

func invoke(t *testing.T, rc *remoting.Client, addr string, code remoting.RequestCode, ext map[string]string) *remoting.RemotingCommand {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rc.InvokeSync(ctx, addr, remoting.NewRequest(code, ext, nil))
	if err != nil {
		t.Fatalf("%v to %s: %v", code, addr, err)
	}
	return resp
}

// createTopic sends UPDATE_AND_CREATE_TOPIC (17) and waits until the name server serves
// the topic's route (GET_ROUTEINFO_BY_TOPIC, 105).
func createTopic(t *testing.T, rc *remoting.Client, c *child) {
	t.Helper()
	resp := invoke(t, rc, c.addr, remoting.UpdateAndCreateTopic, map[string]string{
		"topic": topic, "defaultTopic": "TBW102", "readQueueNums": strconv.Itoa(queueNums),
		"writeQueueNums": strconv.Itoa(queueNums), "perm": "6", "topicFilterType": "SINGLE_TAG",
		"topicSysFlag": "0", "order": "false",
	})
	if err := resp.ResponseErr(); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	waitRoute(t, rc, c)
}

func waitRoute(t *testing.T, rc *remoting.Client, c *child) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() bool {
		return invoke(t, rc, c.namesrv, remoting.GetRouteInfoByTopic, map[string]string{"topic": topic}).ResponseCode() == remoting.Success
	}, "route of "+topic)
}

func queueOffset(t *testing.T, rc *remoting.Client, addr string, code remoting.RequestCode, q int) int64 {
	t.Helper()
	resp := invoke(t, rc, addr, code, map[string]string{"topic": topic, "queueId": strconv.Itoa(q)})
	if err := resp.ResponseErr(); err != nil {
		t.Fatalf("%v queue %d: %v", code, q, err)
	}
	off, err := resp.ExtInt64("offset", true)
	if err != nil {
		t.Fatalf("%v queue %d: %v", code, q, err)
	}
	return off
}

// verify pulls every message of every queue through PULL_MESSAGE (11), decodes each
// record with the body CRC checked, checks that each body is exactly the one its index
// determines and that the queue offsets are dense, and then that every acked message
// sits at the queue offset and commitlog offset (offset msg id) its SEND_OK reported,
// with the msg id (UNIQ_KEY) it reported.
// It returns the number of records read.
func verify(t *testing.T, rc *remoting.Client, c *child, acked map[int]ack) int {
	t.Helper()
	read := 0
	seen := make([]map[int64]*message.MessageExt, queueNums)
	for q := 0; q < queueNums; q++ {
		seen[q] = make(map[int64]*message.MessageExt)
		minOff := queueOffset(t, rc, c.addr, remoting.GetMinOffset, q)
		maxOff := queueOffset(t, rc, c.addr, remoting.GetMaxOffset, q)
		if minOff != 0 {
			t.Fatalf("queue %d: min offset %d, want 0 (nothing is old enough to be deleted)", q, minOff)
		}
		for off := minOff; off < maxOff; {
			resp := invoke(t, rc, c.addr, remoting.PullMessage, map[string]string{
				"consumerGroup": verifyGroup, "topic": topic, "queueId": strconv.Itoa(q),
				"queueOffset": strconv.FormatInt(off, 10), "maxMsgNums": "32",
				"sysFlag":      "4", // subscription in the request; no commit, no suspend
				"commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
				"subVersion": "0", "expressionType": "TAG",
			})
			if resp.ResponseCode() != remoting.Success {
				t.Fatalf("pull queue %d offset %d (max %d): %v", q, off, maxOff, resp.ResponseErr())
			}
			recs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
			if err != nil {
				t.Fatalf("queue %d offset %d: torn or corrupt record served after %d good ones: %v", q, off, len(recs), err)
			}
			if len(recs) == 0 {
				t.Fatalf("queue %d offset %d: SUCCESS with no records", q, off)
			}
			for i, m := range recs {
				want := off + int64(i)
				if m.Topic != topic || m.QueueID != int32(q) || m.QueueOffset != want {
					t.Fatalf("queue %d offset %d: record says topic %q queue %d offset %d", q, want, m.Topic, m.QueueID, m.QueueOffset)
				}
				idx, err := strconv.Atoi(m.Property(idxProperty))
				if err != nil {
					t.Fatalf("queue %d offset %d: property %s = %q", q, want, idxProperty, m.Property(idxProperty))
				}
				if !bytes.Equal(m.Body, makeBody(idx)) {
					t.Fatalf("queue %d offset %d: body of message %d differs (len %d)", q, want, idx, len(m.Body))
				}
				seen[q][want] = m
			}
			next, err := resp.ExtInt64("nextBeginOffset", true)
			if err != nil {
				t.Fatal(err)
			}
			if next != off+int64(len(recs)) {
				t.Fatalf("queue %d offset %d: nextBeginOffset %d after %d records", q, off, next, len(recs))
			}
			off = next
			read += len(recs)
		}
	}
	for idx, a := range acked {
		m := seen[a.queueID][a.queueOffset]
		if m == nil {
			t.Fatalf("message %d (SEND_OK in cycle %d, queue %d offset %d) is lost", idx, a.cycle, a.queueID, a.queueOffset)
		}
		if got := m.Property(idxProperty); got != strconv.Itoa(idx) {
			t.Fatalf("queue %d offset %d holds message %s, but SEND_OK said message %d", a.queueID, a.queueOffset, got, idx)
		}
		if m.MsgID != a.msgID {
			t.Fatalf("message %d: msg id %s, SEND_OK said %s", idx, m.MsgID, a.msgID)
		}
		if m.OffsetMsgID != a.offsetMsgID {
			t.Fatalf("message %d: offset msg id %s, SEND_OK said %s", idx, m.OffsetMsgID, a.offsetMsgID)
		}
	}
	return read
}

// sendUntilKilled runs senders goroutines sending to the child until it is SIGKILLed at
// a random point after the first SEND_OK: each sends one message at a time (SendSync),
// or, with inFlight above 1, keeps up to inFlight asynchronous sends going (SendAsync),
// which the broker's reader takes in runs (one commitlog write per run). It returns the
// number of SEND_OKs.
func sendUntilKilled(t *testing.T, c *child, led *ledger, cycle int, rng *rand.Rand, inFlight int) int {
	t.Helper()
	p, err := producer.New(producer.Config{
		NamesrvAddrs:                  []string{c.namesrv},
		Group:                         "crashtest_producer",
		InstanceName:                  fmt.Sprintf("crashtest-%d", cycle),
		SendTimeout:                   5 * time.Second,
		RetryTimesWhenSendFailed:      -1, // one attempt: an error after the kill must not go elsewhere
		RetryTimesWhenSendAsyncFailed: -1,
		CompressMsgBodyOverHowmuch:    -1,
		MaxMessageSize:                maxMessageSize,
		Logger:                        quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var (
		killed    atomic.Bool
		okCount   atomic.Int64
		firstOK   = make(chan struct{})
		firstOnce sync.Once
		errMu     sync.Mutex
		preKill   []error
		wg        sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// done records the outcome of message idx; false: stop sending.
			done := func(idx int, res *message.SendResult, err error) bool {
				if err != nil {
					if !killed.Load() {
						errMu.Lock()
						preKill = append(preKill, fmt.Errorf("message %d: %w", idx, err))
						errMu.Unlock()
					}
					return false
				}
				if res.Status != message.SendOK {
					return true // stored, but not acked as flushed: not in the ledger
				}
				led.add(idx, ack{queueID: int32(res.Queue.QueueID), queueOffset: res.QueueOffset, msgID: res.MsgID, offsetMsgID: res.OffsetMsgID, cycle: cycle})
				okCount.Add(1)
				firstOnce.Do(func() { close(firstOK) })
				return true
			}
			slots := make(chan struct{}, max(inFlight, 1))
			var calls sync.WaitGroup
			defer calls.Wait()
			var failed atomic.Bool
			for n := 0; n < maxPerCycle && ctx.Err() == nil && !failed.Load(); n++ {
				idx := int(led.next.Add(1) - 1)
				msg := message.NewMessage(topic, makeBody(idx))
				msg.SetTag("crash").SetKeys(fmt.Sprintf("k%d", idx)).SetProperty(idxProperty, strconv.Itoa(idx))
				if inFlight <= 1 {
					res, err := p.SendSync(ctx, msg)
					if !done(idx, res, err) {
						return
					}
					continue
				}
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				calls.Add(1)
				err := p.SendAsync(ctx, msg, func(res *message.SendResult, err error) {
					defer calls.Done()
					defer func() { <-slots }()
					if !done(idx, res, err) {
						failed.Store(true)
					}
				})
				if err != nil {
					calls.Done()
					<-slots
					done(idx, nil, err)
					return
				}
			}
		}()
	}
	select {
	case <-firstOK:
	case <-time.After(15 * time.Second):
		killed.Store(true)
		cancel()
		c.kill()
		wg.Wait()
		t.Fatalf("cycle %d: no SEND_OK within 15s; errors %v; stderr:\n%s", cycle, preKill, c.stderr.String())
	}
	killDelay := maxKillDelay
	if inFlight > 1 {
		killDelay /= 4 // async sends store several times as much per unit of time
	}
	delay := time.Duration(rng.Int64N(int64(killDelay)))
	<-time.After(delay) // the random kill point
	killed.Store(true)
	c.kill()
	wg.Wait()
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = p.Shutdown(sctx) // its UNREGISTER_CLIENT goes to a dead broker; only the bound matters
	if len(preKill) > 0 {
		t.Fatalf("cycle %d: sends failed while the broker was up: %v", cycle, errors.Join(preKill...))
	}
	return int(okCount.Load())
}

// TestCrashRecovery kills a SYNC_FLUSH broker child with SIGKILL at random points while
// producers send, for cycles cycles, restarting it each time on the same data directory
// and ports, and checks after every restart that all SEND_OK messages are there intact
// and that no torn record is served.
func TestCrashRecovery(t *testing.T) { crashCycles(t, "SYNC_FLUSH", cycles, 1) }

// TestCrashRecoveryAsyncBursts is TestCrashRecovery for an ASYNC_FLUSH broker (a
// process crash loses nothing of what is in the page cache) whose producers keep many
// asynchronous sends in flight, so that the broker stores them in runs read together
// from each connection (one commitlog write per run, crossing segment boundaries).
func TestCrashRecoveryAsyncBursts(t *testing.T) { crashCycles(t, "ASYNC_FLUSH", asyncCycles, 64) }

// asyncCycles is the number of crash cycles of TestCrashRecoveryAsyncBursts.
const asyncCycles = 12

func crashCycles(t *testing.T, flush string, cycles, inFlight int) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SLUICE_CRASHTEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SLUICE_CRASHTEST_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with SLUICE_CRASHTEST_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))

	dir := t.TempDir()
	addr, namesrv := freeAddr(t), freeAddr(t)
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	led := &ledger{acked: make(map[int]ack)}

	start := time.Now()
	for cycle := 0; cycle < cycles; cycle++ {
		c := startChild(t, dir, addr, namesrv, flush)
		if c.addr != addr || c.namesrv != namesrv {
			t.Fatalf("cycle %d: child listens on %s/%s, want %s/%s", cycle, c.addr, c.namesrv, addr, namesrv)
		}
		if cycle == 0 {
			createTopic(t, rc, c)
		} else {
			waitRoute(t, rc, c) // the topic survived the crash and was registered again
		}
		acked := led.snapshot()
		read := verify(t, rc, c, acked)
		oks := sendUntilKilled(t, c, led, cycle, rng, inFlight)
		c.checkStderr(t)
		rc.CloseConn(c.addr)
		rc.CloseConn(c.namesrv)
		t.Logf("cycle %d: verified %d acked (%d records read), then %d SEND_OK before SIGKILL", cycle, len(acked), read, oks)
	}

	// A last restart: verify everything, then a clean shutdown after all the crashes.
	c := startChild(t, dir, addr, namesrv, flush)
	acked := led.snapshot()
	read := verify(t, rc, c, acked)
	rc.CloseConn(c.addr)
	rc.CloseConn(c.namesrv)
	c.stop(t)
	c.checkStderr(t)

	segs, err := os.ReadDir(filepath.Join(dir, "commitlog"))
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 3 {
		t.Errorf("commitlog has %d segment files; the test should have rolled over several 1 MiB segments", len(segs))
	}
	t.Logf("%d cycles in %v: %d messages acked and verified, %d records read at the end, %d commitlog segments",
		cycles, time.Since(start).Round(time.Millisecond), len(acked), read, len(segs))
}
