package consumer

import (
	"context"
	"sync"
	"sync/atomic"
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
// the queue: clustering consumers take queues over without a lock, as in RocketMQ).
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
		joining   atomic.Bool
	)
	joining.Store(true)
	newC := func(who string) *PushConsumer {
		c := e.push(Config{Group: "rbg", InstanceName: who, ConsumeFromWhere: ConsumeFromFirstOffset, ConsumeGoroutines: 2, PullBatchSize: 16})
		c.cfg.onAssign = func(mq message.MessageQueue, start int64) {
			mu.Lock()
			assigns = append(assigns, assignEvent{who: who, mq: mq, start: start, at: time.Now()})
			mu.Unlock()
		}
		if err := c.Subscribe("Reb", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			// The handler's work: slower until the third consumer has its queues, so a
			// backlog is left when it joins even on a fast machine.
			if joining.Load() {
				time.Sleep(10 * time.Millisecond)
			} else {
				time.Sleep(2 * time.Millisecond)
			}
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
		if err := c.Start(); err != nil {
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
	testkit.WaitFor(t, 15*time.Second, func() bool {
		return len(assigned(c1, "Reb")) == 2 && len(assigned(c2, "Reb")) == 2 && len(assigned(c3, "Reb")) == 2
	}, "2 queues each")
	if deliveries() >= total {
		t.Fatalf("all %d messages were consumed before the third consumer joined; the test needs a backlog", total)
	}
	joining.Store(false)
	testkit.WaitFor(t, 20*time.Second, func() bool { return deliveries() >= 2*total/3 }, "two thirds of the messages")
	c1Queues := assigned(c1, "Reb")
	leaveAt := time.Now()
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
	// takeover returns the last assignment of mq to who before at.
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
	dups := 0
	for body, ds := range delivered {
		if len(ds) == 1 {
			continue
		}
		dups += len(ds) - 1
		if len(ds) > 2 {
			t.Fatalf("%s delivered %d times: %+v", body, len(ds), ds)
		}
		first, second := ds[0], ds[1]
		if c1Queues[second.queue] && second.at.After(leaveAt) {
			t.Fatalf("%s (queue %v offset %d) delivered again after c1 left; c1 commits before it leaves: %+v", body, second.queue, second.offset, ds)
		}
		if second.who == first.who {
			t.Fatalf("%s delivered twice by %s; only a queue's next owner may redeliver in-flight messages", body, first.who)
		}
		a, ok := takeover(second.who, second.queue, second.at)
		if !ok || a.at.Before(joinAt) || second.offset < a.start {
			t.Fatalf("%s (queue %v offset %d) delivered by %s at %v, then by %s, which took the queue over at %v from offset %d (found %v)",
				body, second.queue, second.offset, first.who, first.at, second.who, a.at, a.start, ok)
		}
	}
	t.Logf("%d messages, %d duplicate deliveries (in flight at a takeover)", total, dups)

}
