package producer

// Delay levels end to end against the real broker, with a shortened messageDelayLevel
// table in the broker config (not edited constants) so the tests stay fast.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
)

// delayTable has 18 levels: level 1 = 1 s, levels 2..17 = 4 s, level 18 = 2 s.
const delayTable = "1s 4s 4s 4s 4s 4s 4s 4s 4s 4s 4s 4s 4s 4s 4s 4s 4s 2s"

// lateness is how much later than its due time a delayed message may be seen: the
// scheduler's timer, the store, and the 20 ms poll.
const lateness = 2 * time.Second

func TestDelayLevels(t *testing.T) {
	// RocketMQ's handling of levels out of range (clamped; -1 is none), which Sluice
	// keeps with delayLevelOutOfRange=clamp (the default refuses them).
	b, _ := testbroker.Start(t, broker.Config{MessageDelayLevel: delayTable, DelayLevelOutOfRange: broker.DelayLevelClamp})
	const topic = "Delayed"
	createTopic(t, testbroker.Namesrv(b), topic, 1)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b)})
	col := poll(t, b.Addr(), topic, 1, "case")

	type tc struct {
		name    string
		set     func(*message.Message)
		delay   time.Duration // 0 = immediate
		stored  int           // the clamped level the broker parks it under (0 = none)
		sentAt  time.Time
		doneSet bool
	}
	cases := []*tc{
		{name: "level 0", set: func(m *message.Message) { m.SetDelayLevel(0) }},
		{name: "level -1", set: func(m *message.Message) { m.SetDelayLevel(-1) }},
		// A raw DELAY=-1 property (another client's doing) is no delay at the broker too.
		{name: "raw property -1", set: func(m *message.Message) { m.SetProperty(message.PropertyDelayTimeLevel, "-1") }},
		{name: "level 1", set: func(m *message.Message) { m.SetDelayLevel(1) }, delay: time.Second, stored: 1},
		{name: "level 18", set: func(m *message.Message) { m.SetDelayLevel(18) }, delay: 2 * time.Second, stored: 18},
		{name: "level 19", set: func(m *message.Message) { m.SetDelayLevel(19) }, delay: 2 * time.Second, stored: 18},
	}
	for _, c := range cases {
		m := message.NewMessage(topic, []byte(c.name)).SetProperty("case", c.name)
		c.set(m)
		c.sentAt = time.Now()
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if r.Status != message.SendOK {
			t.Fatalf("%s: %v", c.name, r.Status)
		}
	}
	// Parked where the level says: SCHEDULE_TOPIC_XXXX queue (level-1); 19 clamped to 18.
	sched := maxOffsets(t, b.Addr(), message.ScheduleTopic, 18)
	want := make([]int64, 18)
	want[0], want[17] = 1, 2
	if fmt.Sprint(sched) != fmt.Sprint(want) {
		t.Fatalf("SCHEDULE_TOPIC_XXXX queue max offsets %v, want %v", sched, want)
	}
	testkit.WaitFor(t, 15*time.Second, func() bool { return col.count() == len(cases) }, func() string { return strconv.Itoa(col.count()) + " of " + strconv.Itoa(len(cases)) + " delivered" })
	for _, c := range cases {
		d := col.get(c.name)
		if len(d) != 1 {
			t.Fatalf("%s: delivered %d times", c.name, len(d))
		}
		m, took := d[0].msg, d[0].at.Sub(c.sentAt)
		t.Logf("%s: seen %v after the send", c.name, took.Round(time.Millisecond))
		if c.delay == 0 {
			// Never parked: no REAL_TOPIC; stored on the first send, so it is here
			// long before the shortest delay.
			if m.Property(message.PropertyRealTopic) != "" || took >= time.Second {
				t.Errorf("%s: REAL_TOPIC %q, seen after %v", c.name, m.Property(message.PropertyRealTopic), took)
			}
			continue
		}
		if took < c.delay || took > c.delay+lateness {
			t.Errorf("%s: delivered after %v, want %v (+ up to %v)", c.name, took, c.delay, lateness)
		}
		if m.Property(message.PropertyRealTopic) != topic || m.Property(message.PropertyDelayTimeLevel) != "" || m.Topic != topic {
			t.Errorf("%s: delivered with topic %q, properties %v", c.name, m.Topic, m.Properties)
		}
	}
	// The consume queue of the real topic holds each message once.
	if off := maxOffsets(t, b.Addr(), topic, 1); off[0] != int64(len(cases)) {
		t.Fatalf("topic max offset %v, want %d", off, len(cases))
	}
}

// TestDelayedMessagesSurviveRestart: 10 messages at level 1 (1 s) are delivered, the
// broker is shut down with 10 at level 2 (4 s) still pending, and restarted on the same
// store: each pending one is delivered once, at its time, and nothing twice.
func TestDelayedMessagesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := broker.Config{MessageDelayLevel: "1s 4s", StorePathRootDir: dir}
	b1, stop1 := testbroker.Start(t, cfg)
	const topic, n = "DelayedRestart", 10
	createTopic(t, testbroker.Namesrv(b1), topic, 2)
	p, err := New(Config{NamesrvAddrs: testbroker.Namesrv(b1), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sentAt := map[string]time.Time{}
	for i := 0; i < 2*n; i++ {
		level := 1 + i%2
		key := strconv.Itoa(i)
		sentAt[key] = time.Now()
		if _, err := p.SendSync(context.Background(), message.NewMessage(topic, []byte(key)).SetProperty("seq", key).SetDelayLevel(level)); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for the level-1 half only, then stop the broker.
	testkit.WaitFor(t, 10*time.Second, func() bool { return sum(maxOffsets(t, b1.Addr(), topic, 2)) == n }, func() string {
		return fmt.Sprintf("level-1 messages delivered: %v", maxOffsets(t, b1.Addr(), topic, 2))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := p.Shutdown(ctx); err != nil {
		t.Errorf("producer shutdown: %v", err)
	}
	cancel()
	stop1()
	if time.Since(sentAt[strconv.Itoa(2*n-1)]) >= 3*time.Second {
		t.Fatal("the broker stopped after the level-2 messages were due: the test proves nothing")
	}

	b2, _ := testbroker.Start(t, cfg)
	col := poll(t, b2.Addr(), topic, 2, "seq")
	testkit.WaitFor(t, 15*time.Second, func() bool { return col.count() == 2*n }, func() string { return fmt.Sprintf("%d of %d delivered", col.count(), 2*n) })
	if total := sum(maxOffsets(t, b2.Addr(), topic, 2)); total != 2*n {
		t.Fatalf("topic holds %d messages, want %d: a delivery was repeated or lost", total, 2*n)
	}
	for i := 0; i < 2*n; i++ {
		key := strconv.Itoa(i)
		d := col.get(key)
		if len(d) != 1 {
			t.Fatalf("message %s seen %d times", key, len(d))
		}
		if i%2 == 1 { // level 2, delivered by the restarted broker
			took := d[0].at.Sub(sentAt[key])
			t.Logf("message %s (level 2): seen %v after the send", key, took.Round(time.Millisecond))
			if took < 4*time.Second || took > 4*time.Second+lateness {
				t.Errorf("message %s (level 2) delivered after %v, want 4s (+ up to %v)", key, took, lateness)
			}
		}
	}
}

// TestAutoCreateTopicSwitch: with autoCreateTopicEnable on (default), a send to a new
// topic creates it with 4 queues; off, it fails with a topic-not-exist error and creates
// nothing.
func TestAutoCreateTopicSwitch(t *testing.T) {
	on, _ := testbroker.Start(t, broker.Config{})
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(on)})
	if _, err := p.SendSync(context.Background(), message.NewMessage("Fresh", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if off := maxOffsets(t, on.Addr(), "Fresh", 5); sum(off) != 1 {
		t.Fatalf("offsets %v", off)
	}

	disabled := false
	off, _ := testbroker.Start(t, broker.Config{AutoCreateTopicEnable: &disabled})
	p2 := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(off)})
	for _, send := range []func() error{
		func() error {
			_, err := p2.SendSync(context.Background(), message.NewMessage("Fresh", []byte("x")))
			return err
		},
		func() error {
			return (<-p2.SendAsyncChan(context.Background(), message.NewMessage("Fresh", []byte("x")))).Err
		},
		func() error {
			_, err := p2.SendBatch(context.Background(), []*message.Message{message.NewMessage("Fresh", []byte("x"))})
			return err
		},
	} {
		err := send()
		var se *SendError
		if !errors.Is(err, ErrTopicNotExist) || !errors.As(err, &se) {
			t.Fatalf("send to a missing topic with auto-create off: %v", err)
		}
	}
	// A topic created by an admin works.
	createTopic(t, testbroker.Namesrv(off), "Made", 2)
	if _, err := p2.SendSync(context.Background(), message.NewMessage("Made", []byte("x"))); err != nil {
		t.Fatal(err)
	}
}
