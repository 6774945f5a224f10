package pop_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/pop"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is the broker with a fixed number of delivery attempts.
type backend struct {
	*broker.Broker
	attempts int32
}

func (b backend) MaxDeliveryAttempts(string) int32 { return b.attempts }

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type fixture struct {
	b     *broker.Broker
	dir   string
	clock *clock
	svc   *pop.Service
}

func newFixture(t *testing.T, attempts int32) *fixture {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{})
	f := &fixture{b: b, dir: filepath.Join(t.TempDir(), "pop"), clock: &clock{now: time.Now()}}
	f.open(t, attempts)
	return f
}

func (f *fixture) open(t *testing.T, attempts int32) {
	t.Helper()
	svc, err := pop.Open(pop.Config{Dir: f.dir, Backend: backend{f.b, attempts}, Logger: testkit.Quiet(),
		Now: f.clock.Now, ReviveInterval: time.Hour, CompactBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	t.Cleanup(func() { _ = svc.Close() })
}

func (f *fixture) reopen(t *testing.T, attempts int32) {
	t.Helper()
	if err := f.svc.Close(); err != nil {
		t.Fatal(err)
	}
	f.open(t, attempts)
}

func (f *fixture) send(t *testing.T, topic string, n int) {
	t.Helper()
	for i := range n {
		m := &message.MessageExt{Message: message.Message{Topic: topic, Body: []byte(fmt.Sprintf("m%d", i)),
			Properties: map[string]string{}}, QueueID: 0}
		if _, err := f.b.PutMessage(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) receive(t *testing.T, group, topic string, batch int) []pop.Delivery {
	t.Helper()
	out, err := f.svc.Receive(context.Background(), pop.ReceiveRequest{Group: group, Topic: topic, QueueIDs: []int32{0},
		BatchSize: batch, Invisible: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func handleKind(err error) pop.HandleErrorKind {
	var he *pop.HandleError
	if errors.As(err, &he) {
		return he.Kind
	}
	return 0
}

func TestReceiptHandlesCannotBeForgedOrReplayed(t *testing.T) {
	f := newFixture(t, 16)
	f.send(t, "T", 2)
	ds := f.receive(t, "G", "T", 2)
	if len(ds) != 2 {
		t.Fatalf("received %d, want 2", len(ds))
	}
	for _, c := range []struct {
		name         string
		group, topic string
		handle       string
		want         pop.HandleErrorKind
	}{
		{"another group", "G2", "T", ds[0].Handle, pop.HandleForged},
		{"another topic", "G", "T2", ds[0].Handle, pop.HandleForged},
		{"not base64", "G", "T", "!!not a handle!!", pop.HandleMalformed},
		{"too short", "G", "T", ds[0].Handle[:20], pop.HandleMalformed},
		{"too long", "G", "T", ds[0].Handle + ds[0].Handle, pop.HandleMalformed},
	} {
		if err := f.svc.Ack(c.group, c.topic, c.handle); handleKind(err) != c.want {
			t.Errorf("%s: %v, want kind %d", c.name, err, c.want)
		}
	}
	// Point the first handle at the second message's offset: the signature breaks.
	raw, err := base64.RawURLEncoding.DecodeString(ds[0].Handle)
	if err != nil {
		t.Fatal(err)
	}
	raw[12] ^= 1 // low byte of the offset
	if err := f.svc.Ack("G", "T", base64.RawURLEncoding.EncodeToString(raw)); handleKind(err) != pop.HandleForged {
		t.Fatalf("edited offset: %v, want forged", err)
	}
	// A service with another secret refuses our handles.
	other, err := pop.Open(pop.Config{Dir: filepath.Join(t.TempDir(), "other"), Backend: backend{f.b, 16}, Logger: testkit.Quiet(), ReviveInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Ack("G", "T", ds[0].Handle); handleKind(err) != pop.HandleForged {
		t.Fatalf("another broker's secret: %v, want forged", err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	// The genuine handles work once, then they are stale.
	for _, d := range ds {
		if err := f.svc.Ack("G", "T", d.Handle); err != nil {
			t.Fatalf("ack: %v", err)
		}
		if err := f.svc.Ack("G", "T", d.Handle); handleKind(err) != pop.HandleStale {
			t.Fatalf("second ack: %v, want stale", err)
		}
	}
}

func TestExpiredAndChangedHandles(t *testing.T) {
	f := newFixture(t, 16)
	f.send(t, "T", 1)
	d := f.receive(t, "G", "T", 1)[0]
	nh, _, err := f.svc.ChangeInvisible("G", "T", d.Handle, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Ack("G", "T", d.Handle); handleKind(err) != pop.HandleStale {
		t.Fatalf("ack with the handle before the change: %v, want stale", err)
	}
	f.clock.add(20 * time.Second) // past the first invisibility, within the changed one
	if got := f.receive(t, "G", "T", 1); len(got) != 0 {
		t.Fatalf("redelivered during the changed invisibility: %d", len(got))
	}
	f.clock.add(11 * time.Second)
	if err := f.svc.Ack("G", "T", nh); handleKind(err) != pop.HandleExpired {
		t.Fatalf("ack after the invisibility: %v, want expired", err)
	}
	again := f.receive(t, "G", "T", 1)
	if len(again) != 1 || again[0].Attempt != 2 {
		t.Fatalf("redelivery: %+v", again)
	}
	if err := f.svc.Ack("G", "T", again[0].Handle); err != nil {
		t.Fatal(err)
	}
}

// The state survives a restart: acknowledged messages do not come back, unacknowledged
// ones do (with their attempts counted), and issued handles stay valid.
func TestStateSurvivesRestart(t *testing.T) {
	f := newFixture(t, 16)
	f.send(t, "T", 5)
	ds := f.receive(t, "G", "T", 3)
	if len(ds) != 3 {
		t.Fatalf("received %d", len(ds))
	}
	if err := f.svc.Ack("G", "T", ds[0].Handle); err != nil {
		t.Fatal(err)
	}
	f.reopen(t, 16)
	if n := f.svc.Inflight("G"); n != 2 {
		t.Fatalf("inflight after restart %d, want 2", n)
	}
	if err := f.svc.Ack("G", "T", ds[0].Handle); handleKind(err) != pop.HandleStale {
		t.Fatalf("acked before the restart, acked again: %v", err)
	}
	if err := f.svc.Ack("G", "T", ds[1].Handle); err != nil {
		t.Fatalf("a handle issued before the restart: %v", err)
	}
	rest := f.receive(t, "G", "T", 10) // the two never delivered
	if len(rest) != 2 || string(rest[0].Message.Body) != "m3" || string(rest[1].Message.Body) != "m4" {
		t.Fatalf("after restart received %d: %v", len(rest), rest)
	}
	f.clock.add(11 * time.Second)
	back := f.receive(t, "G", "T", 10)
	if len(back) != 3 {
		t.Fatalf("after the invisibility %d came back, want 3 (m2, m3, m4)", len(back))
	}
	for _, d := range back {
		if d.Attempt != 2 {
			t.Fatalf("%s attempt %d, want 2", d.Message.Body, d.Attempt)
		}
		if string(d.Message.Body) == "m0" || string(d.Message.Body) == "m1" {
			t.Fatalf("acknowledged %s came back", d.Message.Body)
		}
	}
}

// A torn last record (a crash in the middle of a write) is dropped at open; the records
// before it hold.
func TestTornTailIsTruncated(t *testing.T) {
	f := newFixture(t, 16)
	f.send(t, "T", 2)
	ds := f.receive(t, "G", "T", 2)
	if err := f.svc.Ack("G", "T", ds[0].Handle); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Close(); err != nil {
		t.Fatal(err)
	}
	logs, _ := filepath.Glob(filepath.Join(f.dir, "*.pop"))
	if len(logs) != 1 {
		t.Fatalf("logs: %v", logs)
	}
	st, _ := os.Stat(logs[0])
	fh, err := os.OpenFile(logs[0], os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write([]byte{0, 0, 0, 40, 1, 2, 3, 4, 5}); err != nil { // a record cut short
		t.Fatal(err)
	}
	fh.Close()
	f.open(t, 16)
	if n := f.svc.Inflight("G"); n != 1 {
		t.Fatalf("inflight %d, want 1", n)
	}
	st2, _ := os.Stat(logs[0])
	if st2.Size() < st.Size() || st2.Size() >= st.Size()+9 {
		t.Fatalf("log size %d after reopening, was %d before the torn record", st2.Size(), st.Size())
	}
	if err := f.svc.Ack("G", "T", ds[1].Handle); err != nil {
		t.Fatal(err)
	}
}

// The log is compacted and stays bounded under churn; the compacted state is right.
func TestLogCompaction(t *testing.T) {
	f := newFixture(t, 16)
	f.send(t, "T", 700)
	logs := func() int64 {
		ps, _ := filepath.Glob(filepath.Join(f.dir, "*.pop"))
		if len(ps) != 1 {
			t.Fatalf("logs: %v", ps)
		}
		st, err := os.Stat(ps[0])
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	// 300 deliveries acknowledged at once: about 100 bytes of records each (30 KB
	// uncompacted) and no state left; compaction (at 4 KiB here) keeps the log small.
	for range 300 {
		ds := f.receive(t, "G", "T", 1)
		if len(ds) != 1 {
			t.Fatalf("received %d", len(ds))
		}
		if err := f.svc.Ack("G", "T", ds[0].Handle); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs(); n > 8<<10 {
		t.Fatalf("log is %d bytes after 300 acknowledged deliveries", n)
	}
	var keep []pop.Delivery
	for range 200 {
		ds := f.receive(t, "G", "T", 2)
		if len(ds) != 2 {
			t.Fatalf("received %d", len(ds))
		}
		if err := f.svc.Ack("G", "T", ds[0].Handle); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, ds[1])
	}
	f.reopen(t, 16)
	if n := f.svc.Inflight("G"); n != 200 {
		t.Fatalf("inflight after compaction and restart %d, want 200", n)
	}
	for _, d := range keep {
		if err := f.svc.Ack("G", "T", d.Handle); err != nil {
			t.Fatalf("ack %s after compaction: %v", d.Message.Body, err)
		}
	}
	if got := f.receive(t, "G", "T", 10); len(got) != 0 {
		t.Fatalf("received %d after everything was acknowledged", len(got))
	}
}

// Past the last attempt the message goes to %DLQ%<group> and is not delivered again.
func TestDeadLetterAfterMaxAttempts(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	clk := &clock{now: time.Now()}
	svc, err := pop.Open(pop.Config{Dir: filepath.Join(t.TempDir(), "pop"), Backend: backend{b, 2}, Logger: testkit.Quiet(),
		Now: clk.Now, ReviveInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	f := &fixture{b: b, clock: clk, svc: svc}
	f.send(t, "T", 1)
	for attempt := int32(1); attempt <= 2; attempt++ {
		ds := f.receive(t, "G", "T", 1)
		if len(ds) != 1 || ds[0].Attempt != attempt {
			t.Fatalf("attempt %d: %+v", attempt, ds)
		}
		clk.add(11 * time.Second)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return svc.Inflight("G") == 0 }, "the revive loop to dead-letter")
	dead, _, err := b.ReadMessages(message.DLQTopic("G"), 0, 0, 10, nil)
	if err != nil || len(dead) != 1 || string(dead[0].Body) != "m0" {
		t.Fatalf("DLQ: %v %v", dead, err)
	}
	if got := f.receive(t, "G", "T", 1); len(got) != 0 {
		t.Fatalf("delivered after dead-lettering: %+v", got)
	}
}

func (f *fixture) sendGroup(t *testing.T, topic string, groups ...string) {
	t.Helper()
	for i, g := range groups {
		m := &message.MessageExt{Message: message.Message{Topic: topic, Body: []byte(fmt.Sprintf("%s%d", g, i)),
			Properties: map[string]string{pop.PropertyMessageGroup: g}}, QueueID: 0}
		if _, err := f.b.PutMessage(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

func bodies(ds []pop.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, string(d.Message.Body))
	}
	return out
}

// A message group's next message is delivered only after the previous one is
// acknowledged (or dead-lettered, or delivered again after its invisibility); different
// groups proceed in parallel; the order holds across a restart.
func TestFIFOGroupsOneAtATime(t *testing.T) {
	f := newFixture(t, 3)
	f.sendGroup(t, "F", "A", "B", "A", "B", "A", "C")
	first := f.receive(t, "G", "F", 10)
	if got := fmt.Sprint(bodies(first)); got != "[A0 B1 C5]" {
		t.Fatalf("first receive %s, want the head of each group [A0 B1 C5]", got)
	}
	if got := f.receive(t, "G", "F", 10); len(got) != 0 {
		t.Fatalf("delivered %v while every group's head is outstanding", bodies(got))
	}
	if err := f.svc.Ack("G", "F", first[0].Handle); err != nil { // A0
		t.Fatal(err)
	}
	if got := fmt.Sprint(bodies(f.receive(t, "G", "F", 10))); got != "[A2]" {
		t.Fatalf("after acking A0: %s, want [A2]", got)
	}
	f.reopen(t, 3)
	f.clock.add(11 * time.Second) // B1, C5 and A2 come back; order within each group holds
	back := f.receive(t, "G", "F", 10)
	if got := fmt.Sprint(bodies(back)); got != "[B1 A2 C5]" {
		t.Fatalf("after the invisibility: %s, want [B1 A2 C5]", got)
	}
	for _, d := range back {
		if d.Attempt != 2 {
			t.Fatalf("%s attempt %d", d.Message.Body, d.Attempt)
		}
		if err := f.svc.Ack("G", "F", d.Handle); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(bodies(f.receive(t, "G", "F", 10))); got != "[B3 A4]" {
		t.Fatalf("after acking the heads: %s, want [B3 A4]", got)
	}
}

// A group's head that is dead-lettered after its last attempt lets the next message of
// the group go.
func TestFIFODeadLetterReleasesTheGroup(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	clk := &clock{now: time.Now()}
	svc, err := pop.Open(pop.Config{Dir: filepath.Join(t.TempDir(), "pop"), Backend: backend{b, 1}, Logger: testkit.Quiet(),
		Now: clk.Now, ReviveInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	f := &fixture{b: b, clock: clk, svc: svc}
	f.sendGroup(t, "F", "A", "A")
	if got := fmt.Sprint(bodies(f.receive(t, "G", "F", 10))); got != "[A0]" {
		t.Fatalf("first: %s", got)
	}
	clk.add(11 * time.Second) // A0 used its only attempt: dead-lettered
	testkit.WaitFor(t, 10*time.Second, func() bool { return svc.Inflight("G") == 1 }, "A0 to be dead-lettered")
	if got := fmt.Sprint(bodies(f.receive(t, "G", "F", 10))); got != "[A1]" {
		t.Fatalf("after A0's dead-lettering: %s, want [A1]", got)
	}
}

// Messages of the group's %RETRY% topic (sent back by 4.x consumers) are delivered to
// the receivers of their RETRY_TOPIC with attempt = reconsume times + 1, shown as
// messages of that topic; their handles (version 2) cannot be turned into handles of
// the topic's own queue; the state survives a restart; a retry of another topic is left
// for that topic's receivers.
func TestRetryTopicDeliveries(t *testing.T) {
	f := newFixture(t, 16)
	retry := message.RetryTopic("G")
	for _, m := range []struct {
		topic string
		times int32
	}{{"T", 2}, {"U", 1}} {
		rm := &message.MessageExt{Message: message.Message{Topic: retry, Body: []byte("for " + m.topic),
			Properties: map[string]string{message.PropertyRetryTopic: m.topic}}, ReconsumeTimes: m.times}
		if _, err := f.b.PutMessage(context.Background(), rm); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(topic string) []pop.Delivery {
		out, err := f.svc.Receive(context.Background(), pop.ReceiveRequest{Group: "G", Topic: topic, QueueIDs: []int32{0},
			RetryQueueIDs: []int32{0}, BatchSize: 8, Invisible: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ds := recv("T")
	if len(ds) != 1 || string(ds[0].Message.Body) != "for T" || ds[0].Attempt != 3 || ds[0].Message.Topic != "T" {
		t.Fatalf("deliveries for T: %v", bodies(ds))
	}
	raw, err := base64.RawURLEncoding.DecodeString(ds[0].Handle)
	if err != nil {
		t.Fatal(err)
	}
	raw[0] = 1 // claim the topic's own queue 0, same offset
	if err := f.svc.Ack("G", "T", base64.RawURLEncoding.EncodeToString(raw)); handleKind(err) != pop.HandleForged {
		t.Fatalf("a retry handle turned into a topic handle: %v, want forged", err)
	}
	f.reopen(t, 16)
	if err := f.svc.Ack("G", "T", ds[0].Handle); err != nil {
		t.Fatalf("ack after restart: %v", err)
	}
	if ds := recv("T"); len(ds) != 0 {
		t.Fatalf("T again: %v", bodies(ds))
	}
	if ds := recv("U"); len(ds) != 1 || string(ds[0].Message.Body) != "for U" || ds[0].Attempt != 2 {
		t.Fatalf("deliveries for U: %v", bodies(ds))
	}
}
