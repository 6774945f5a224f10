package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

type assignEvent struct {
	who   string
	mq    message.MessageQueue
	start int64
	at    time.Time
}

// Two consumers share 6 queues; a third joins mid-stream, then the first leaves
// (Shutdown) mid-stream. No message is lost. A message is delivered twice only after
// its queue moved to another consumer, by that consumer, at or after the offset it took
// the queue over from — a message the previous owner had in flight: delivered, but its
// progress not yet committed to the broker when the new owner read the offset (the
// previous owner may even start it after the takeover, until its own rebalance drops
// the queue: clustering consumers take queues over without a lock, as in RocketMQ), so
// the two handler calls may end in either order.
// The leaving consumer commits before it unregisters, so its own queues move without
// any duplicate.
func TestRebalanceJoinAndLeaveMidStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Reb", 6)
	p := e.producer()
	const total = 900

	var (
		mu        sync.Mutex
		delivered = map[string][]delivery{}
		count     int
		assigns   []assignEvent
		// The handlers pause at a third of the messages until the third consumer has its
		// queues, and c1's at two thirds until it is told to leave: the membership changes
		// happen mid-stream however fast or slow the machine consumes.
		joinGate, leaveGate = make(chan struct{}), make(chan struct{})
		openJoin            = sync.OnceFunc(func() { close(joinGate) })
		openLeave           = sync.OnceFunc(func() { close(leaveGate) })
	)
	defer openJoin() // a failing test must not leave handlers waiting
	defer openLeave()
	pause := func(ctx context.Context, who string) {
		mu.Lock()
		n := count
		mu.Unlock()
		var gate chan struct{}
		switch {
		case n >= 2*total/3 && who == "c1":
			gate = leaveGate
		case n >= total/3:
			gate = joinGate
		default:
			return
		}
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	newC := func(who string) *PushConsumer {
		c := e.push(Config{Group: "rbg", InstanceName: who, ConsumeFromWhere: ConsumeFromFirstOffset, ConsumeGoroutines: 2, PullBatchSize: 16})
		c.cfg.onAssign = func(mq message.MessageQueue, start int64) {
			mu.Lock()
			assigns = append(assigns, assignEvent{who: who, mq: mq, start: start, at: time.Now()})
			mu.Unlock()
		}
		if err := c.Subscribe("Reb", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			pause(ctx, who)
			time.Sleep(2 * time.Millisecond) // the handler's work
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				delivered[string(m.Body)] = append(delivered[string(m.Body)], delivery{who: who, body: string(m.Body),
					queue: message.MessageQueue{Topic: m.Topic, BrokerName: m.BrokerName, QueueID: int(m.QueueID)}, offset: m.QueueOffset, at: time.Now()})
				count++
			}
			return message.ConsumeSuccess, nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	deliveries := func() int { mu.Lock(); defer mu.Unlock(); return count }

	c1, c2 := newC("c1"), newC("c2")
	testkit.WaitFor(t, 15*time.Second, func() bool {
		return len(assigned(c1, "Reb")) == 3 && len(assigned(c2, "Reb")) == 3
	}, "3 queues each")
	s := send(t, p, "Reb", total, "r")

	testkit.WaitFor(t, 20*time.Second, func() bool { return deliveries() >= total/3 }, "a third of the messages")
	joinAt := time.Now()
	c3 := newC("c3")
	// c2 gives up two queues and takes one of c1's: it takes it only once the handlers of
	// those it gave up have finished (or handoverWait passed), so the handlers go on
	// before every consumer has its two queues.
	testkit.WaitFor(t, 15*time.Second, func() bool {
		return len(assigned(c1, "Reb")) == 2 && len(assigned(c2, "Reb")) <= 2 && len(assigned(c3, "Reb")) == 2
	}, "c3 to take 2 queues, c1 and c2 to give theirs up")
	if deliveries() >= total {
		t.Fatalf("all %d messages were consumed before the third consumer joined; the test needs a backlog", total)
	}
	openJoin()
	testkit.WaitFor(t, 15*time.Second, func() bool {
		return len(assigned(c1, "Reb")) == 2 && len(assigned(c2, "Reb")) == 2 && len(assigned(c3, "Reb")) == 2
	}, "2 queues each")
	testkit.WaitFor(t, 20*time.Second, func() bool { return deliveries() >= 2*total/3 }, "two thirds of the messages")
	c1Queues := assigned(c1, "Reb")
	leaveAt := time.Now()
	openLeave() // c1's paused handlers finish; Shutdown starts no new one
	shutdown(t, c1)
	testkit.WaitFor(t, 15*time.Second, func() bool {
		return len(assigned(c2, "Reb")) == 3 && len(assigned(c3, "Reb")) == 3
	}, "3 queues each for c2 and c3")
	testkit.WaitFor(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(delivered) == total }, "every message")
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Reb", s.ends, c2, c3) }, "committed offsets at the queue ends")

	mu.Lock()
	defer mu.Unlock()
	for body := range s.bodies {
		if len(delivered[body]) == 0 {
			t.Fatalf("message %s lost", body)
		}
	}
	// takeover returns the last assignment of mq to who at or before at.
	takeover := func(who string, mq message.MessageQueue, at time.Time) (assignEvent, bool) {
		var found assignEvent
		ok := false
		for _, a := range assigns {
			if a.who == who && a.mq == mq && !a.at.After(at) {
				found, ok = a, true
			}
		}
		return found, ok
	}
	// redelivery reports whether again is the next owner's delivery of a message the
	// previous owner (prev) had in flight: again's consumer took the queue over after the
	// join, at or below the message's offset, and prev held the queue before that.
	redelivery := func(prev, again delivery) (assignEvent, bool) {
		a, ok := takeover(again.who, again.queue, again.at)
		if !ok || a.at.Before(joinAt) || again.offset < a.start {
			return a, false
		}
		_, held := takeover(prev.who, prev.queue, a.at)
		return a, held
	}
	dups := 0
	for body, ds := range delivered {
		if len(ds) == 1 {
			continue
		}
		dups += len(ds) - 1
		if len(ds) > 2 {
			t.Fatalf("%s delivered %d times: %+v", body, len(ds), ds)
		}
		if ds[0].who == ds[1].who {
			t.Fatalf("%s delivered twice by %s; only a queue's next owner may redeliver in-flight messages: %+v", body, ds[0].who, ds)
		}
		// The two handler calls may finish in either order: the previous owner's call may
		// have started before the takeover and end after the next owner's, so the order
		// in delivered does not tell which is the redelivery.
		a, ok := redelivery(ds[0], ds[1])
		if !ok {
			a, ok = redelivery(ds[1], ds[0])
		}
		if !ok {
			t.Fatalf("%s (queue %v offset %d) delivered by %s and by %s, and neither took the queue over from the other after the join at or below that offset; assignments: %+v",
				body, ds[0].queue, ds[0].offset, ds[0].who, ds[1].who, assignsOf(assigns, ds[0].queue))
		}
		if c1Queues[ds[0].queue] && a.at.After(leaveAt) {
			t.Fatalf("%s (queue %v offset %d) delivered again after c1 left; c1 commits before it leaves: %+v", body, ds[0].queue, ds[0].offset, ds)
		}
	}
	movedOnLeave := 0
	for _, ds := range delivered {
		if d := ds[len(ds)-1]; c1Queues[d.queue] && d.who != "c1" {
			movedOnLeave++
		}
	}
	t.Logf("%d messages, %d duplicate deliveries (in flight at a takeover), %d messages of c1's queues consumed by c2 and c3 after c1 left",
		total, dups, movedOnLeave)
}

// assignsOf returns the assignments of mq, for failure messages.
func assignsOf(all []assignEvent, mq message.MessageQueue) []assignEvent {
	var out []assignEvent
	for _, a := range all {
		if a.mq == mq {
			out = append(out, a)
		}
	}
	return out
}
