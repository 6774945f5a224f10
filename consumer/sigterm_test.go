package consumer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// Environment of the consumer child process.
const (
	childEnv      = "SLUICE_SIGTERM_CHILD" // set: TestMain runs runSigtermChild
	childNamesrv  = "SLUICE_CHILD_NAMESRV"
	childLog      = "SLUICE_CHILD_LOG"
	childHoldAt   = "SLUICE_CHILD_HOLD_AT" // finished messages after which batches wait for Shutdown; unset: never
	childGroup    = "sigg"
	childTopic    = "SigTerm"
	childWorkTime = 40 * time.Millisecond // per batch
)

// runSigtermChild is a consumer process: batches of up to 8 messages take
// childWorkTime each; a finished message is appended to the log file ("<queue>
// <offset> <body>", fsynced, one batch at a time) before its batch reports success. Once
// SLUICE_CHILD_HOLD_AT messages have finished, a batch that starts works until its
// context is cancelled, and the first such batch prints "holding". On SIGTERM it shuts
// down with a deadline shorter than a batch, so batches in progress are interrupted:
// their handlers see the context cancelled (while working or waiting for the log) and
// give up without logging. Once every handler call has returned it prints
// "interrupted N" and exits 0.
//
// The held batches make sure some batch is in progress when SIGTERM comes: batches of one
// pull start together and queue for the log together, so on a busy disk every batch in
// progress may be logging, beyond interruption, when the signal arrives.
func runSigtermChild() int {
	logf, err := os.OpenFile(os.Getenv(childLog), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer logf.Close()
	var interrupted, startedAfter atomic.Int64
	var logMu sync.Mutex // one batch's lines stay together
	// Shutdown does not wait for handlers it cancelled at its deadline: the counts are
	// read once every handler call has returned.
	var calls sync.WaitGroup
	var finished atomic.Int64
	var holding sync.Once
	holdAt := int64(-1)
	if v := os.Getenv(childHoldAt); v != "" {
		if holdAt, err = strconv.ParseInt(v, 10, 64); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	}
	c, err := NewPushConsumer(Config{
		NamesrvAddrs: []string{os.Getenv(childNamesrv)}, Group: childGroup, ConsumeFromWhere: ConsumeFromFirstOffset,
		ConsumeMessageBatchMaxSize: 8, ConsumeGoroutines: 4, PersistOffsetInterval: 200 * time.Millisecond,
		RebalanceInterval: time.Second, Logger: quiet,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	err = c.Subscribe(childTopic, "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		calls.Add(1)
		defer calls.Done()
		if c.stopping() { // Shutdown (called on SIGTERM) has begun: no handler may start
			startedAfter.Add(1)
		}
		if holdAt >= 0 && finished.Load() >= holdAt {
			holding.Do(func() { fmt.Println("holding") })
			<-ctx.Done()
			interrupted.Add(1)
			return message.ReconsumeLater, ctx.Err()
		}
		t := time.NewTimer(childWorkTime)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		// Cancelled while working, or while waiting for the log (another batch's fsync
		// may take long on a busy disk): give up without logging. select picks at random
		// when the timer and the cancellation are both ready, hence the check after it.
		logMu.Lock()
		defer logMu.Unlock()
		if ctx.Err() != nil {
			interrupted.Add(1)
			return message.ReconsumeLater, ctx.Err()
		}
		var b bytes.Buffer
		for _, m := range msgs {
			fmt.Fprintf(&b, "%d %d %d %s\n", m.ReconsumeTimes, m.QueueID, m.QueueOffset, m.Body)
		}
		if _, err := logf.Write(b.Bytes()); err != nil {
			return message.ReconsumeLater, err
		}
		if err := logf.Sync(); err != nil {
			return message.ReconsumeLater, err
		}
		finished.Add(int64(len(msgs)))
		return message.ConsumeSuccess, nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := c.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("started")
	<-ctx.Done()
	// A deadline of 1/8 of a batch: batches still working then (held ones always are;
	// no new one starts after SIGTERM) are interrupted.
	sctx, cancel := context.WithTimeout(context.Background(), childWorkTime/8)
	err = c.Shutdown(sctx)
	cancel()
	returned := make(chan struct{})
	go func() { calls.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		fmt.Println("handlers did not return within 30 s of Shutdown")
		return 2
	}
	fmt.Printf("interrupted %d\n", interrupted.Load())
	fmt.Printf("startedAfterShutdown %d\n", startedAfter.Load())
	fmt.Printf("shutdown %v\n", err)
	return 0
}

// readChildLog returns, per body, the "<reconsume times> <queue> <offset>" of each time
// it was logged.
func readChildLog(t *testing.T, path string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1] // a line still being written is not finished yet
	} else {
		b = nil
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, " ", 4)
		if len(parts) != 4 {
			t.Fatalf("torn log line %q", line)
		}
		out[parts[3]] = append(out[parts[3]], strings.Join(parts[:3], " "))
	}
	return out
}

type child struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer
	exited chan struct{} // closed when the process was reaped; err is then set
	err    error
}

// startChild starts a consumer process (runSigtermChild); holdAt >= 0 sets
// SLUICE_CHILD_HOLD_AT.
func startChild(t *testing.T, namesrv, logPath string, holdAt int) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childNamesrv+"="+namesrv, childLog+"="+logPath)
	if holdAt >= 0 {
		cmd.Env = append(cmd.Env, childHoldAt+"="+strconv.Itoa(holdAt))
	}
	out := &bytes.Buffer{}
	cmd.Stdout = &lockedWriter{w: out}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdout: out, exited: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

func (c *child) output() string {
	w := c.cmd.Stdout.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return c.stdout.String()
}

func (c *child) stop(t *testing.T) string {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
		if c.err != nil {
			t.Fatalf("child exited with %v; output:\n%s", c.err, c.output())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("child did not exit after SIGTERM; output:\n%s", c.output())
	}
	return c.output()
}

// SIGTERM reaches a consumer process while batches are in progress (the parent waits
// until the child holds one). Its Shutdown
// interrupts them, starts no new handler once it has begun (the child counts handler
// starts that see Shutdown begun: 0), and commits offsets only below the lowest unfinished message. A
// restarted process then delivers every message that had not finished: in the end each
// of the messages was finished at least once, and a message finished twice lies at or
// above the offset the first process committed (it was in flight above an unfinished
// one).
func TestSIGTERMMidBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic(childTopic, 2)
	const n = 600
	s := send(t, e.producer(), childTopic, n, "s")
	logPath := filepath.Join(t.TempDir(), "finished.log")

	c1 := startChild(t, e.namesrv[0], logPath, 100)
	testkit.WaitFor(t, 30*time.Second, func() bool {
		return len(readChildLog(t, logPath)) >= 100 && strings.Contains(c1.output(), "holding\n")
	}, "the first process to finish 100 messages and hold a batch")
	out := c1.stop(t)
	interrupted, startedAfter := -1, -1
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "interrupted "); ok {
			interrupted, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(line, "startedAfterShutdown "); ok {
			startedAfter, _ = strconv.Atoi(v)
		}
	}
	if startedAfter != 0 {
		t.Fatalf("%d handlers started after Shutdown began (want 0); output:\n%s", startedAfter, out)
	}
	if interrupted <= 0 {
		t.Fatalf("SIGTERM interrupted no batch; output:\n%s", out)
	}
	first := readChildLog(t, logPath)
	if len(first) >= n {
		t.Fatalf("the first process finished everything (%d) before SIGTERM", len(first))
	}
	committed := map[int]int64{}
	for q := 0; q < 2; q++ {
		committed[q] = e.committed(childGroup, childTopic, q)
	}
	t.Logf("first process: %d finished, %d batches interrupted, committed %v", len(first), interrupted, committed)

	c2 := startChild(t, e.namesrv[0], logPath, -1)
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(readChildLog(t, logPath)) == n }, "every message finished")
	c2.stop(t)

	all := readChildLog(t, logPath)
	for body := range s.bodies {
		if len(all[body]) == 0 {
			t.Fatalf("message %s was never finished", body)
		}
	}
	dups := 0
	for body, where := range all {
		if len(where) < 2 {
			continue
		}
		dups++
		for _, w := range where {
			var rt, q int
			var off int64
			fmt.Sscanf(w, "%d %d %d", &rt, &q, &off)
			if off < committed[q] {
				t.Fatalf("%s (queue %d offset %d) finished twice (%v) although the first process committed %d", body, q, off, where, committed[q])
			}
		}
	}
	for body, where := range all {
		for _, w := range where {
			if !strings.HasPrefix(w, "0 ") {
				t.Fatalf("%s came through the retry topic (%v): an interrupted batch must stay unfinished, not be sent back too", body, where)
			}
		}
	}
	t.Logf("%d messages finished twice (in flight above an interrupted batch)", dups)
}

// lockedWriter serializes writes to w (a child's stdout is copied by another goroutine).
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
