package grpcfront_test

// The POP kill -9 campaign: a broker with the gRPC front end runs as a child process
// (this test binary re-executed with envPopChild set); receivers take messages by POP
// and acknowledge most of them while the child is killed with SIGKILL at random points;
// after every restart on the same data directory no message whose AckMessage was
// answered OK may be delivered again, and in the end every message was acknowledged
// (or its acknowledgement was in flight at a kill and it never came back): nothing lost.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/grpcfront"
	"github.com/sluicemq/sluice/broker/pop"
	"github.com/sluicemq/sluice/internal/testkit"
)

const (
	envPopChild   = "SLUICE_POPCRASH_CHILD" // "1": run a broker + front end instead of the tests
	envPopDir     = "SLUICE_POPCRASH_DIR"
	popReady      = "SLUICE_POPCRASH_READY "
	popTopic      = "PopCrash"
	popGroup      = "PopCrashGroup"
	popMessages   = 4000
	popCycles     = 12
	popReceivers  = 3
	popInvisible  = time.Second
	popMaxKillGap = 700 * time.Millisecond
)

// runPopChild serves until stdin closes; the parent normally kills it instead.
func runPopChild() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0",
		StorePathRootDir: os.Getenv(envPopDir), MappedFileSizeCommitLog: 4 << 20, MaxMessageSize: 64 << 10, Logger: log})
	if err == nil {
		err = b.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pop crash child:", err)
		return 3
	}
	s, err := grpcfront.New(grpcfront.Config{Broker: b, Listen: "127.0.0.1:0", Logger: log, MinInvisibleDuration: popInvisible,
		Pop: pop.Config{ReviveInterval: 20 * time.Millisecond}})
	if err == nil {
		err = s.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pop crash child:", err)
		return 3
	}
	fmt.Println(popReady + s.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := errorsJoin(s.Shutdown(ctx), b.Shutdown(ctx)); err != nil {
		fmt.Fprintln(os.Stderr, "pop crash child: shutdown:", err)
		return 4
	}
	return 0
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

type popChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	mu     sync.Mutex
	addr   string
	done   chan struct{}
}

func startPopChild(t *testing.T, dir string) *popChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envPopChild+"=1", envPopDir+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &popChild{cmd: cmd, stdin: stdin, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{mu: &c.mu, w: c.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() { // owned by the child's lifetime: ends when its stdout closes
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), popReady); ok {
				ready <- a
			}
		}
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(c.kill)
	select {
	case c.addr = <-ready:
		return c
	case <-c.done:
	case <-time.After(30 * time.Second):
	}
	c.kill()
	c.mu.Lock()
	defer c.mu.Unlock()
	t.Fatalf("pop crash child did not start; stderr:\n%s", c.stderr.String())
	return nil
}

func (c *popChild) kill() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
}

func (c *popChild) checkStderr(t *testing.T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.stderr.String(); strings.Contains(s, "panic:") || strings.Contains(s, "DATA RACE") {
		t.Errorf("child reported a panic or race:\n%s", s)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// popLedger is what the receivers learned.
type popLedger struct {
	mu          sync.Mutex
	ackedOK     map[string]int // body -> cycle of the OK ack
	ackUnknown  map[string]int // body -> cycle of an ack whose answer was lost
	violations  []string
	deliveries  int
	redelivered int
	seen        map[string]bool
}

func (l *popLedger) delivered(cycle int, body string, attempt int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deliveries++
	if l.seen[body] {
		l.redelivered++
	}
	l.seen[body] = true
	if c, ok := l.ackedOK[body]; ok {
		l.violations = append(l.violations, fmt.Sprintf("%s acknowledged OK in cycle %d delivered again in cycle %d (attempt %d)", body, c, cycle, attempt))
	}
	delete(l.ackUnknown, body) // it came back: its ack was not persisted, it will be acked again
}

func TestPopStateSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 campaign: not in -short")
	}
	dir := t.TempDir()
	writeGroupConfig(t, dir, popGroup, 1000) // attempts are not the subject here
	ledger := &popLedger{ackedOK: map[string]int{}, ackUnknown: map[string]int{}, seen: map[string]bool{}}
	kills := 0
	for cycle := 0; cycle <= popCycles; cycle++ {
		c := startPopChild(t, dir)
		conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		cl := v2.NewMessagingServiceClient(conn)
		ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "crash"))
		if cycle == 0 {
			sendAll(t, ctx, cl)
		}
		last := cycle == popCycles
		var wg sync.WaitGroup
		for r := range popReceivers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(cycle), uint64(r)))
				popReceiver(ctx, cl, ledger, cycle, rng, last)
			}()
		}
		if last {
			// drain: every message acknowledged (or its ack lost with a kill and it never came back)
			// (the counts are checked after the drain, so a timeout here shows up there)
			testkit.Eventually(60*time.Second, func() bool {
				ledger.mu.Lock()
				defer ledger.mu.Unlock()
				return len(ledger.ackedOK)+len(ledger.ackUnknown) == popMessages
			})
			cancel()
			wg.Wait()
			_ = c.stdin.Close()
			<-c.done
		} else {
			time.Sleep(200*time.Millisecond + rand.N(popMaxKillGap)) // the kill point
			c.kill()
			kills++
			cancel()
			wg.Wait()
		}
		_ = conn.Close()
		c.checkStderr(t)
	}
	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	t.Logf("kill -9 campaign: %d kills, %d messages, %d deliveries (%d redeliveries), %d acks answered OK, %d acks lost in a kill and never redelivered",
		kills, popMessages, ledger.deliveries, ledger.redelivered, len(ledger.ackedOK), len(ledger.ackUnknown))
	for _, v := range ledger.violations {
		t.Error(v)
	}
	if got := len(ledger.ackedOK) + len(ledger.ackUnknown); got != popMessages {
		missing := 0
		for i := range popMessages {
			b := fmt.Sprintf("m-%d", i)
			if _, ok := ledger.ackedOK[b]; !ok {
				if _, ok := ledger.ackUnknown[b]; !ok {
					missing++
				}
			}
		}
		t.Errorf("%d of %d messages never acknowledged: lost", missing, popMessages)
	}
}

func sendAll(t *testing.T, ctx context.Context, cl v2.MessagingServiceClient) {
	t.Helper()
	for i := 0; i < popMessages; i += 50 {
		var msgs []*v2.Message
		for j := i; j < i+50; j++ {
			msgs = append(msgs, &v2.Message{Topic: &v2.Resource{Name: popTopic}, Body: []byte(fmt.Sprintf("m-%d", j)),
				SystemProperties: &v2.SystemProperties{MessageId: fmt.Sprintf("ID%06d", j), MessageType: v2.MessageType_NORMAL}})
		}
		resp, err := cl.SendMessage(ctx, &v2.SendMessageRequest{Messages: msgs})
		if err != nil || resp.GetStatus().GetCode() != v2.Code_OK {
			t.Fatalf("send: %v %v", resp.GetStatus(), err)
		}
	}
}

// popReceiver receives and acknowledges until ctx ends; outside the last cycle it
// leaves about one message in ten unacknowledged.
func popReceiver(ctx context.Context, cl v2.MessagingServiceClient, l *popLedger, cycle int, rng *rand.Rand, last bool) {
	for ctx.Err() == nil {
		stream, err := cl.ReceiveMessage(ctx, &v2.ReceiveMessageRequest{Group: &v2.Resource{Name: popGroup},
			MessageQueue: &v2.MessageQueue{Topic: &v2.Resource{Name: popTopic}}, BatchSize: 8,
			InvisibleDuration: durationpb.New(popInvisible), LongPollingTimeout: durationpb.New(time.Second)})
		if err != nil {
			return
		}
		var got []*v2.Message
		for {
			resp, err := stream.Recv()
			if err != nil {
				break
			}
			if m := resp.GetMessage(); m != nil {
				got = append(got, m)
			}
		}
		for _, m := range got {
			body := string(m.GetBody())
			l.delivered(cycle, body, m.GetSystemProperties().GetDeliveryAttempt())
			if !last && rng.IntN(10) == 0 {
				continue
			}
			resp, err := cl.AckMessage(ctx, &v2.AckMessageRequest{Group: &v2.Resource{Name: popGroup}, Topic: &v2.Resource{Name: popTopic},
				Entries: []*v2.AckMessageEntry{{MessageId: m.GetSystemProperties().GetMessageId(), ReceiptHandle: m.GetSystemProperties().GetReceiptHandle()}}})
			l.mu.Lock()
			switch {
			case err != nil:
				l.ackUnknown[body] = cycle
			case resp.GetStatus().GetCode() == v2.Code_OK:
				l.ackedOK[body] = cycle
				delete(l.ackUnknown, body)
			}
			l.mu.Unlock()
		}
	}
}

// TestTimerStateSurvivesKill9: timer messages (v5 DELAY sends) due over the next
// seconds while the broker child is killed with SIGKILL again and again; afterwards every
// timer whose send was answered OK is in its topic, none was stored before its delivery
// time, and duplicates (a delivery whose done record a kill cut off) are counted.
func TestTimerStateSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 campaign: not in -short")
	}
	const topic, cycles, perCycle = "TimerCrash", 10, 100
	dir := t.TempDir()
	due := map[string]int64{} // body -> delivery time (unix ms) of the sends answered OK
	kills := 0
	for cycle := 0; cycle <= cycles; cycle++ {
		c := startPopChild(t, dir)
		conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		cl := v2.NewMessagingServiceClient(conn)
		ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-mq-client-id", "timer-crash"))
		if cycle < cycles {
			var msgs []*v2.Message
			at := map[string]int64{}
			for i := range perCycle {
				body := fmt.Sprintf("t-%d-%d", cycle, i)
				when := time.Now().Add(300*time.Millisecond + rand.N(3*time.Second))
				at[body] = when.UnixMilli()
				msgs = append(msgs, &v2.Message{Topic: &v2.Resource{Name: topic}, Body: []byte(body),
					SystemProperties: &v2.SystemProperties{MessageId: body, MessageType: v2.MessageType_DELAY,
						DeliveryTimestamp: timestamppb.New(when)}})
			}
			resp, err := cl.SendMessage(ctx, &v2.SendMessageRequest{Messages: msgs})
			if err != nil || resp.GetStatus().GetCode() != v2.Code_OK {
				t.Fatalf("cycle %d send: %v %v", cycle, resp.GetStatus(), err)
			}
			for b, w := range at {
				due[b] = w
			}
			// the kill point: some cycles outlive the 1 s index sync, some do not
			time.Sleep(100*time.Millisecond + rand.N(2500*time.Millisecond))
			c.kill()
			kills++
		} else {
			// a clean stop: the timers not yet due are delivered by the broker reopened below
			_ = c.stdin.Close()
			<-c.done
		}
		cancel()
		_ = conn.Close()
		c.checkStderr(t)
	}
	// Read the topic from the store in this process.
	b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: dir,
		MappedFileSizeCommitLog: 4 << 20, MaxMessageSize: 64 << 10, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown(context.Background())
	tc, err := b.TopicConfig(topic, false)
	if err != nil {
		t.Fatal(err)
	}
	// read returns how often each body is stored in the topic, and the stored messages
	// that came before their delivery time.
	read := func() (map[string]int, []string) {
		seen := map[string]int{}
		var early []string
		for q := range tc.ReadQueueNums {
			for off := int64(0); ; {
				msgs, res, err := b.ReadMessages(topic, int32(q), off, 256, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range msgs {
					seen[string(m.Body)]++
					if w, ok := due[string(m.Body)]; ok && m.StoreTimestamp < w {
						early = append(early, fmt.Sprintf("%s stored at %d, before its delivery time %d", m.Body, m.StoreTimestamp, w))
					}
				}
				if len(msgs) == 0 || res.NextBeginOffset <= off {
					break
				}
				off = res.NextBeginOffset
			}
		}
		return seen, early
	}
	// Wait until every timer answered OK is delivered (the reopened broker delivers those
	// not yet due), bounded; the counts below report what is still missing after it.
	testkit.Eventually(2*time.Minute, func() bool {
		seen, _ := read()
		for body := range due {
			if seen[body] == 0 {
				return false
			}
		}
		return true
	})
	seen, earlyMsgs := read()
	early := len(earlyMsgs)
	for _, e := range earlyMsgs {
		t.Error(e)
	}
	missing, dups := 0, 0
	for body := range due {
		switch n := seen[body]; {
		case n == 0:
			missing++
		case n > 1:
			dups += n - 1
		}
	}
	t.Logf("timer kill -9 campaign: %d kills, %d timers sent (answered OK), %d delivered, %d missing, %d delivered twice, %d early",
		kills, len(due), len(seen), missing, dups, early)
	if missing > 0 {
		t.Errorf("%d timers lost", missing)
	}
}
