package consumer

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// waitPastMillis waits until the wall clock is past ms (a millisecond boundary).
func waitPastMillis(t *testing.T, ms int64) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, func() bool { return time.Now().UnixMilli() > ms }, "the clock to move on")
}

// A running consumer has consumed everything. Resetting the group's offsets to time T
// (sluice admin offset reset) makes it consume again exactly the messages stored at or
// after T — each once — and nothing stored before.
func TestResetOffsetByTimeRedeliversExactlyTheLaterMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Rewind", 3)
	p := e.producer()

	col := newCollector()
	c := e.push(Config{Group: "rwg", ConsumeFromWhere: ConsumeFromFirstOffset})
	if err := c.Subscribe("Rewind", "*", col.handler("c")); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := send(t, p, "Rewind", 30, "before")
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 30 }, "the first 30")
	var lastStore int64
	col.mu.Lock()
	for _, m := range col.msgs {
		lastStore = max(lastStore, m.StoreTimestamp)
	}
	col.mu.Unlock()
	waitPastMillis(t, lastStore)
	resetAt := time.Now()
	waitPastMillis(t, resetAt.UnixMilli())
	after := send(t, p, "Rewind", 30, "after")
	ends := before.ends
	for mq, end := range after.ends {
		ends[mq] = max(ends[mq], end)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 60 }, "all 60")
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Rewind", ends, c) }, "committed offsets at the queue ends")
	col.mu.Lock()
	seen := len(col.msgs)
	col.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.admin.ResetOffsetByTime(ctx, "rwg", "Rewind", resetAt, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Offline) != 0 || len(res.Offsets) != 3 {
		t.Fatalf("reset result %+v", res)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 90 }, "the 30 later messages again")
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Rewind", ends, c) }, "committed offsets at the queue ends again")

	col.mu.Lock()
	defer col.mu.Unlock()
	var again []string
	for _, m := range col.msgs[seen:] {
		again = append(again, string(m.Body))
	}
	sort.Strings(again)
	var want []string
	for b := range after.bodies {
		want = append(want, b)
	}
	sort.Strings(want)
	if strings.Join(again, ",") != strings.Join(want, ",") {
		t.Fatalf("after the reset got %d messages %v,\nwant exactly the %d stored after it", len(again), again, len(want))
	}
	for mq, off := range res.Offsets {
		// The reset offset of each queue is where its first "after" message sits.
		first := ends[mq]
		for _, m := range col.msgs[seen:] {
			if m.QueueID == int32(mq.QueueID) {
				first = min(first, m.QueueOffset)
			}
		}
		if off != first {
			t.Fatalf("queue %v reset to %d, first later message at %d", mq, off, first)
		}
	}
}

// Resetting a group that has no consumer online stores the offsets on the broker; the
// next consumer starts there. Without force a queue never moves forward.
func TestResetOffsetOfflineGroupAndNoForce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Rewind2", 1)
	p := e.producer()
	offs := sendBodies(t, p, "Rewind2", "x0", "x1", "x2")
	var storeOfX1 int64
	{
		col := newCollector()
		c := e.push(Config{Group: "rwg2", ConsumeFromWhere: ConsumeFromFirstOffset})
		if err := c.Subscribe("Rewind2", "*", col.handler("c")); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 3 }, "3 messages")
		shutdown(t, c)
		col.mu.Lock()
		for _, m := range col.msgs {
			if string(m.Body) == "x1" {
				storeOfX1 = m.StoreTimestamp
			}
		}
		col.mu.Unlock()
	}
	if got := e.committed("rwg2", "Rewind2", 0); got != 3 {
		t.Fatalf("committed %d after shutdown, want 3", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.admin.ResetOffsetByTime(ctx, "rwg2", "Rewind2", time.UnixMilli(storeOfX1), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Offline) != 1 {
		t.Fatalf("offline brokers %v, want the one broker (no consumer online)", res.Offline)
	}
	// x0 and x1 may share a millisecond: the target is the first message stored at or
	// after that time.
	if got := e.committed("rwg2", "Rewind2", 0); got != offs["x1"] && got != offs["x0"] {
		t.Fatalf("committed %d after reset to x1's store time, want %d (or %d)", got, offs["x1"], offs["x0"])
	}
	target := e.committed("rwg2", "Rewind2", 0)
	// Forward without force: kept.
	if _, err := e.admin.ResetOffsetByTime(ctx, "rwg2", "Rewind2", time.Time{}, false); err != nil {
		t.Fatal(err)
	}
	if got := e.committed("rwg2", "Rewind2", 0); got != target {
		t.Fatalf("reset to the end without force moved the offset to %d", got)
	}
	// The zero time with force: the end of the queue.
	if _, err := e.admin.ResetOffsetByTime(ctx, "rwg2", "Rewind2", time.Time{}, true); err != nil {
		t.Fatal(err)
	}
	if got := e.committed("rwg2", "Rewind2", 0); got != 3 {
		t.Fatalf("forced reset to the end: %d", got)
	}
	// Back to x1, and a new consumer starts there.
	if _, err := e.admin.ResetOffsetByTime(ctx, "rwg2", "Rewind2", time.UnixMilli(storeOfX1), true); err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	c := e.push(Config{Group: "rwg2", ConsumeFromWhere: ConsumeFromLastOffset})
	if err := c.Subscribe("Rewind2", "*", col.handler("c")); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := int(3 - target)
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= want }, "messages from the reset offset")
	testkit.WaitFor(t, 10*time.Second, func() bool {
		return committedAtLeast("Rewind2", map[message.MessageQueue]int64{{Topic: "Rewind2", BrokerName: e.broker.Name()}: 3}, c)
	}, "committed at the end")
	if col.total() != want || col.got["x2"] != 1 {
		t.Fatalf("new consumer got %v, want the %d messages from offset %d", col.got, want, target)
	}
}

// A new group with ConsumeFromTimestamp starts each queue at the message stored at that
// time (SEARCH_OFFSET_BY_TIMESTAMP): given the exact store time of the first "after"
// message, it gets exactly the messages from there on.
func TestConsumeFromTimestamp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("FromTs", 1)
	p := e.producer()
	sendBodies(t, p, "FromTs", "old-1", "old-2")
	// Learn the store times through a throwaway group.
	probe := newCollector()
	c0 := e.push(Config{Group: "fts-probe", ConsumeFromWhere: ConsumeFromFirstOffset})
	if err := c0.Subscribe("FromTs", "*", probe.handler("p")); err != nil {
		t.Fatal(err)
	}
	if err := c0.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return probe.total() >= 2 }, "the old messages")
	probe.mu.Lock()
	lastOld := max(probe.msgs[0].StoreTimestamp, probe.msgs[1].StoreTimestamp)
	probe.mu.Unlock()
	waitPastMillis(t, lastOld)
	sendBodies(t, p, "FromTs", "new-1", "new-2")
	testkit.WaitFor(t, 20*time.Second, func() bool { return probe.total() >= 4 }, "the new messages")
	var at int64
	probe.mu.Lock()
	for _, m := range probe.msgs {
		if string(m.Body) == "new-1" {
			at = m.StoreTimestamp
		}
	}
	probe.mu.Unlock()

	col := newCollector()
	c := e.push(Config{Group: "fts", ConsumeFromWhere: ConsumeFromTimestamp, ConsumeTimestamp: time.UnixMilli(at)})
	if err := c.Subscribe("FromTs", "*", col.handler("c")); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return col.total() >= 2 }, "the new messages")
	testkit.WaitFor(t, 10*time.Second, func() bool {
		return committedAtLeast("FromTs", map[message.MessageQueue]int64{{Topic: "FromTs", BrokerName: e.broker.Name()}: 4}, c)
	}, "committed at the end")
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.count != 2 || col.got["new-1"] != 1 || col.got["new-2"] != 1 {
		t.Fatalf("from the timestamp got %v", col.got)
	}
}
