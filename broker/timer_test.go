package broker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

func putTimer(t *testing.T, b *Broker, topic, body, prop, value string) {
	t.Helper()
	m := &message.MessageExt{Message: message.Message{Topic: topic, Body: []byte(body),
		Properties: map[string]string{prop: value}}, QueueID: 0}
	if _, err := b.PutMessage(context.Background(), m); err != nil {
		t.Fatalf("put %s=%s: %v", prop, value, err)
	}
}

func readTopic(t *testing.T, b *Broker, topic string) []*message.MessageExt {
	t.Helper()
	msgs, _, err := b.ReadMessages(topic, 0, 0, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// Timer messages (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS) reach their topic
// once due and not before, also across a restart, each once.
func TestTimerMessages(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	start := time.Now()
	due := start.Add(1500 * time.Millisecond)
	putTimer(t, b, "TimerT", "abs", PropertyTimerDeliverMS, strconv.FormatInt(due.UnixMilli(), 10))
	putTimer(t, b, "TimerT", "sec", PropertyTimerDelaySec, "1")
	putTimer(t, b, "TimerT", "ms", PropertyTimerDelayMS, "1200")
	putTimer(t, b, "TimerT", "past", PropertyTimerDeliverMS, strconv.FormatInt(start.Add(-time.Hour).UnixMilli(), 10))
	// The past one is stored at once; the others are parked.
	if got := readTopic(t, b, "TimerT"); len(got) != 1 || string(got[0].Body) != "past" {
		t.Fatalf("stored at once: %d messages", len(got))
	}
	var got []*message.MessageExt
	testkit.WaitFor(t, 30*time.Second, func() bool { got = readTopic(t, b, "TimerT"); return len(got) == 4 }, "the timers to be delivered")
	for _, m := range got[1:] {
		min := map[string]time.Duration{"abs": 1500 * time.Millisecond, "sec": time.Second, "ms": 1200 * time.Millisecond}[string(m.Body)]
		// StoreTimestamp is in whole milliseconds (truncated) and so are due times: compare
		// with start truncated the same way (an abs timer stored 0.2 ms "early" was that).
		late := time.UnixMilli(m.StoreTimestamp).Sub(start.Truncate(time.Millisecond))
		if late < min {
			t.Fatalf("%s delivered after %v, before its %v", m.Body, late, min)
		}
		t.Logf("%s: due after %v, delivered after %v", m.Body, min, late)
		if m.Property(message.PropertyRealTopic) != "" || m.Property(PropertyTimerOutMS) != "" || m.Property(PropertyTimerDelaySec) != "" {
			t.Fatalf("%s delivered with parking properties: %v", m.Body, m.Properties)
		}
	}

	// Across a restart: parked before, delivered after, once.
	putTimer(t, b, "TimerR", "restart", PropertyTimerDelayMS, "1500")
	testkit.WaitFor(t, 10*time.Second, func() bool {
		b.timer.mu.Lock()
		defer b.timer.mu.Unlock()
		return b.timer.indexed > 0
	}, "the timer to be indexed")
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, nil)
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(readTopic(t, b2, "TimerR")) == 1 }, "the timer parked before the restart")
	if n := len(readTopic(t, b2, "TimerT")); n != 4 {
		t.Fatalf("TimerT has %d messages after the restart, want 4 (no timer delivered twice)", n)
	}
}

// Bad timer properties are refused naming the property.
func TestTimerValidation(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	for _, c := range []struct{ prop, value string }{
		{PropertyTimerDeliverMS, "soon"},
		{PropertyTimerDelaySec, "-1"},
		{PropertyTimerDelayMS, strconv.FormatInt(MaxTimerDelay.Milliseconds()+1, 10)},
		{PropertyTimerDeliverMS, strconv.FormatInt(time.Now().Add(MaxTimerDelay+time.Hour).UnixMilli(), 10)},
	} {
		m := &message.MessageExt{Message: message.Message{Topic: "TimerV", Body: []byte("x"),
			Properties: map[string]string{c.prop: c.value}}, QueueID: 0}
		_, err := b.PutMessage(context.Background(), m)
		r, ok := IsRefused(err)
		if !ok || !(strings.Contains(r.Reason, c.prop) || strings.Contains(r.Reason, "ahead")) {
			t.Errorf("%s=%s: %v, want a refusal naming it", c.prop, c.value, err)
		}
	}
}

// A recalled timer is not delivered, also after a restart; a second recall is refused.
func TestTimerRecallSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, nil)
	due := time.Now().Add(1500 * time.Millisecond)
	m := &message.MessageExt{Message: message.Message{Topic: "TimerRecall", Body: []byte("recalled"),
		Properties: map[string]string{PropertyTimerDeliverMS: strconv.FormatInt(due.UnixMilli(), 10),
			message.PropertyUniqClientMessageIDKeyIdx: "RECALL1"}}, QueueID: 0}
	res, err := b.PutMessage(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	putTimer(t, b, "TimerRecall", "kept", PropertyTimerDeliverMS, strconv.FormatInt(due.UnixMilli(), 10))
	if id, err := b.RecallTimer(res.CommitLogOffset, due.UnixMilli()); err != nil || id != "RECALL1" {
		t.Fatalf("recall: %q %v", id, err)
	}
	if _, err := b.RecallTimer(res.CommitLogOffset, due.UnixMilli()); err != ErrTimerNotPending {
		t.Fatalf("second recall: %v, want ErrTimerNotPending", err)
	}
	if _, err := b.RecallTimer(res.CommitLogOffset, due.UnixMilli()+1); err != ErrTimerNotPending {
		t.Fatalf("recall with another delivery time: %v, want ErrTimerNotPending", err)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, nil)
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(readTopic(t, b2, "TimerRecall")) >= 1 }, "the kept timer")
	testkit.WaitFor(t, 10*time.Second, func() bool { return time.Now().After(due.Add(time.Second)) }, "a second past due")
	if got := readTopic(t, b2, "TimerRecall"); len(got) != 1 || string(got[0].Body) != "kept" {
		t.Fatalf("after the restart %d delivered, want only kept", len(got))
	}
}
