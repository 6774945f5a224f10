package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// A queue holds A then B (one queue: same sharding key). A is suspended once: the
// deliveries are A, A, B; the retry waits SuspendCurrentQueueTime (default 1 s); while
// A is being retried the group's committed offset on the broker is A's offset — never
// past it — although offsets were persisted in between.
func TestOrderlySuspendOnceThenInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("OrdSuspend", 1)
	offs := sendBodies(t, e.producer(), "OrdSuspend", "A", "B")

	rec := &recorder{}
	var committedDuringRetry atomic.Int64
	committedDuringRetry.Store(-99)
	c := e.push(Config{Group: "og-suspend", Orderly: true, ConsumeFromWhere: ConsumeFromFirstOffset, PersistOffsetInterval: 50 * time.Millisecond})
	if err := c.Subscribe("OrdSuspend", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		m := msgs[0]
		rec.add("c", m)
		if string(m.Body) == "A" && m.ReconsumeTimes == 0 {
			return SuspendCurrentQueueAMoment, nil
		}
		if string(m.Body) == "A" {
			committedDuringRetry.Store(e.committed("og-suspend", "OrdSuspend", 0))
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return rec.count() >= 3 && e.committed("og-suspend", "OrdSuspend", 0) == offs["B"]+1
	}, "3 deliveries and the offset past B")
	got := rec.list()
	if want := []string{"A(rt=0)", "A(rt=1)", "B(rt=0)"}; !reflect.DeepEqual(rec.bodies(), want) {
		t.Fatalf("deliveries %v, want %v", rec.bodies(), want)
	}
	if gap := got[1].at.Sub(got[0].at); gap < DefaultSuspendCurrentQueue {
		t.Fatalf("A retried after %v, before the default suspend of %v", gap, DefaultSuspendCurrentQueue)
	}
	if v := committedDuringRetry.Load(); v != offs["A"] {
		t.Fatalf("committed offset while A was retried: %d, want A's offset %d", v, offs["A"])
	}
}

// Five failures in a row — ReconsumeLater (the concurrent-mode result), errors and a
// panic — then success: A is retried with ReconsumeTimes 1..5 and B follows; the queue
// never stalls.
func TestOrderlyFailuresThenSuccessNoStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("OrdFail", 1)
	offs := sendBodies(t, e.producer(), "OrdFail", "A", "B")

	rec := &recorder{}
	c := e.push(Config{Group: "og-fail", Orderly: true, ConsumeFromWhere: ConsumeFromFirstOffset, SuspendCurrentQueueTime: 50 * time.Millisecond})
	if err := c.Subscribe("OrdFail", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		m := msgs[0]
		rec.add("c", m)
		if string(m.Body) == "A" {
			switch m.ReconsumeTimes {
			case 0, 1:
				return message.ReconsumeLater, nil
			case 2:
				return message.ConsumeSuccess, errors.New("handler error")
			case 3:
				panic("handler panic")
			case 4:
				return SuspendCurrentQueueAMoment, nil
			}
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return rec.count() >= 7 && e.committed("og-fail", "OrdFail", 0) == offs["B"]+1
	}, "7 deliveries and the offset past B")
	want := []string{"A(rt=0)", "A(rt=1)", "A(rt=2)", "A(rt=3)", "A(rt=4)", "A(rt=5)", "B(rt=0)"}
	if !reflect.DeepEqual(rec.bodies(), want) {
		t.Fatalf("deliveries %v, want %v", rec.bodies(), want)
	}
	if dl := e.dlq("og-fail"); len(dl) != 0 {
		t.Fatalf("unlimited retries by default, but %d dead letters", len(dl))
	}
}

// MaxReconsumeTimes 3: A fails every time; after its 3 local retries (4 deliveries) it
// goes to %DLQ%<group> and the queue moves on to B.
func TestOrderlyMaxReconsumeTimesToDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("OrdDLQ", 1)
	offs := sendBodies(t, e.producer(), "OrdDLQ", "A", "B")

	rec := &recorder{}
	c := e.push(Config{Group: "og-dlq", Orderly: true, ConsumeFromWhere: ConsumeFromFirstOffset,
		SuspendCurrentQueueTime: 50 * time.Millisecond, MaxReconsumeTimes: Retries(3)})
	if err := c.Subscribe("OrdDLQ", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		rec.add("c", msgs[0])
		if string(msgs[0].Body) == "A" {
			return SuspendCurrentQueueAMoment, nil
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return rec.count() >= 5 && e.committed("og-dlq", "OrdDLQ", 0) == offs["B"]+1
	}, "B delivered and the offset past B")
	want := []string{"A(rt=0)", "A(rt=1)", "A(rt=2)", "A(rt=3)", "B(rt=0)"}
	if !reflect.DeepEqual(rec.bodies(), want) {
		t.Fatalf("deliveries %v, want %v", rec.bodies(), want)
	}
	dl := e.dlq("og-dlq")
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want A only", len(dl))
	}
	m := dl[0].Message
	if string(m.Body) != "A" || dl[0].OriginTopic != "OrdDLQ" || m.Tag() != "T" || m.Keys()[0] != "key-A" {
		t.Fatalf("dead letter %+v props %v", m, m.Properties)
	}
}

// Many messages over several queues, with random failures: per queue the messages are
// first handled in offset order, a message is handled again only right after it
// failed, and no two handler calls of one queue ever overlap — while different queues
// run in parallel.
func TestOrderlyPerQueueOrderUnderFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("OrdMany", 4)
	p := e.producer()
	const n = 200
	for i := 0; i < n; i++ {
		if _, err := p.SendSync(context.Background(), message.NewMessage("OrdMany", []byte(fmt.Sprintf("m-%03d", i)))); err != nil {
			t.Fatal(err)
		}
	}
	type queueState struct {
		busy     bool
		lastDone int64
		lastSeen int64
	}
	var (
		mu       sync.Mutex
		state    = map[int32]*queueState{}
		problems []string
		done     = map[string]bool{}
		parallel atomic.Int32
		maxPar   atomic.Int32
	)
	c := e.push(Config{Group: "og-many", Orderly: true, ConsumeFromWhere: ConsumeFromFirstOffset,
		SuspendCurrentQueueTime: 5 * time.Millisecond, ConsumeMessageBatchMaxSize: 3})
	if err := c.Subscribe("OrdMany", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		q := msgs[0].QueueID
		mu.Lock()
		s := state[q]
		if s == nil {
			s = &queueState{lastDone: -1, lastSeen: -1}
			state[q] = s
		}
		if s.busy {
			problems = append(problems, fmt.Sprintf("queue %d: two handler calls at once", q))
		}
		s.busy = true
		for i, m := range msgs {
			if i > 0 && m.QueueOffset != msgs[i-1].QueueOffset+1 {
				problems = append(problems, fmt.Sprintf("queue %d: batch not consecutive: %d after %d", q, m.QueueOffset, msgs[i-1].QueueOffset))
			}
		}
		if first := msgs[0].QueueOffset; first <= s.lastDone {
			problems = append(problems, fmt.Sprintf("queue %d: offset %d after %d was done", q, first, s.lastDone))
		}
		s.lastSeen = msgs[len(msgs)-1].QueueOffset
		mu.Unlock()
		if p := parallel.Add(1); p > maxPar.Load() {
			maxPar.Store(p)
		}
		time.Sleep(time.Millisecond) // a handler doing some work, so queues overlap
		parallel.Add(-1)
		fail := msgs[0].QueueOffset%7 == 3 && msgs[0].ReconsumeTimes < 2
		mu.Lock()
		s.busy = false
		if !fail {
			s.lastDone = msgs[len(msgs)-1].QueueOffset
			for _, m := range msgs {
				done[string(m.Body)] = true
			}
		}
		mu.Unlock()
		if fail {
			return message.ReconsumeLater, nil
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(done) == n }, "all messages done")
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("%d order problems, e.g. %v", len(problems), problems[:min(5, len(problems))])
	}
	if maxPar.Load() < 2 {
		t.Logf("queues never ran in parallel (max %d); fine on a slow machine", maxPar.Load())
	}
}

// Two orderly consumers: a second joins mid-stream and later the first leaves. Queues
// change owner only through the broker lock — the old owner finishes its handler call,
// stores its offset and unlocks; the new one locks, then reads the offset — so per
// queue no two handler calls ever overlap (across both consumers), messages are first
// handled in offset order, and no message is handled twice.
func TestOrderlyHandoverBetweenConsumers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("OrdHand", 4)
	p := e.producer()
	const n = 400
	var (
		mu       sync.Mutex
		busy     = map[int32]string{}
		last     = map[int32]int64{}
		seen     = map[string]int{}
		owners   = map[int32]map[string]bool{}
		problems []string
		// Handlers pause at a quarter of the messages until c1 has given up the queues
		// c2 is to take: the handover happens with a backlog however fast or slow the
		// machine consumes. (c1 unlocks a queue only once its handler returned, so the
		// pause ends before c2 can take them.)
		gate     = make(chan struct{})
		openGate = sync.OnceFunc(func() { close(gate) })
	)
	defer openGate() // a failing test must not leave handlers waiting
	handler := func(who string) func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			q := msgs[0].QueueID
			mu.Lock()
			pause := len(seen) >= n/4
			mu.Unlock()
			if pause {
				select {
				case <-gate:
				case <-ctx.Done():
				}
			}
			mu.Lock()
			if other, ok := busy[q]; ok {
				problems = append(problems, fmt.Sprintf("queue %d: %s and %s handle it at once", q, other, who))
			}
			busy[q] = who
			if prev, ok := last[q]; ok && msgs[0].QueueOffset != prev+1 {
				problems = append(problems, fmt.Sprintf("queue %d: offset %d after %d (%s)", q, msgs[0].QueueOffset, prev, who))
			}
			if owners[q] == nil {
				owners[q] = map[string]bool{}
			}
			owners[q][who] = true
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // the handler's work
			mu.Lock()
			delete(busy, q)
			last[q] = msgs[len(msgs)-1].QueueOffset
			for _, m := range msgs {
				seen[string(m.Body)]++
			}
			mu.Unlock()
			return message.ConsumeSuccess, nil
		}
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	mk := func(who string) *PushConsumer {
		c := e.push(Config{Group: "og-hand", InstanceName: who, Orderly: true, ConsumeFromWhere: ConsumeFromFirstOffset, RebalanceInterval: 200 * time.Millisecond})
		if err := c.Subscribe("OrdHand", "*", handler(who)); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c1 := mk("c1")
	testkit.WaitFor(t, 10*time.Second, func() bool { return len(assigned(c1, "OrdHand")) == 4 }, "c1 owns 4 queues")
	for i := 0; i < n; i++ {
		if _, err := p.SendSync(context.Background(), message.NewMessage("OrdHand", []byte(fmt.Sprintf("h-%03d", i)))); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return count() >= n/4 }, "a quarter handled")
	c2 := mk("c2")
	testkit.WaitFor(t, 20*time.Second, func() bool { return len(assigned(c1, "OrdHand")) == 2 }, "c1 to give up 2 queues")
	if count() >= n {
		t.Fatal("everything was handled before the handover; the test needs a backlog")
	}
	openGate()
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return len(assigned(c1, "OrdHand")) == 2 && len(assigned(c2, "OrdHand")) == 2
	}, "2 queues each")
	testkit.WaitFor(t, 20*time.Second, func() bool { return count() >= n/2 }, "half handled")
	shutdown(t, c1)
	testkit.WaitFor(t, 20*time.Second, func() bool { return len(assigned(c2, "OrdHand")) == 4 }, "c2 owns 4 queues")
	testkit.WaitFor(t, 30*time.Second, func() bool { return count() >= n }, "all handled")
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("%d problems, e.g. %v", len(problems), problems[:min(5, len(problems))])
	}
	for body, k := range seen {
		if k != 1 {
			t.Fatalf("%s handled %d times", body, k)
		}
	}
	moved := 0
	for _, o := range owners {
		if len(o) == 2 {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("no queue was handled by both consumers: %v", owners)
	}
}

// A broadcasting orderly consumer has no DLQ: after MaxReconsumeTimes local retries a
// failing message is skipped (logged) and the queue moves on.
func TestOrderlyBroadcastingGivesUpAfterRetries(t *testing.T) {
	c, err := NewPushConsumer(Config{NamesrvAddrs: []string{deadAddr(t)}, Group: "obg", MessageModel: Broadcasting, Orderly: true,
		MaxReconsumeTimes: Retries(1), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown(context.Background())
	pq := newProcessQueue(message.MessageQueue{Topic: "T", BrokerName: "b"}, 0)
	m := &message.MessageExt{Message: message.Message{Topic: "T"}, QueueOffset: 0}
	pq.put([]*message.MessageExt{m}, 1)
	if retry := c.orderlyFailed(pq, []*message.MessageExt{m}, message.ReconsumeLater, nil); len(retry) != 1 || m.ReconsumeTimes != 1 || pq.commitOffset() != 0 {
		t.Fatalf("first failure: retry %d, reconsume %d, commit %d", len(retry), m.ReconsumeTimes, pq.commitOffset())
	}
	if retry := c.orderlyFailed(pq, []*message.MessageExt{m}, message.ReconsumeLater, nil); len(retry) != 0 || pq.commitOffset() != 1 {
		t.Fatalf("after the last retry: retry %d, commit %d", len(retry), pq.commitOffset())
	}
}

// The broker forgets a queue lock after rebalanceLockMaxLiveTime (here 2 s); an orderly
// consumer renews its locks (every 100 ms here, 20 s by default), so another client
// cannot take its queues — until the consumer shuts down and unlocks them. The lock
// outlives a renewal by 1.9 s, as the default's 60 s do the default 20 s renewal by 40 s:
// under -race on two busy cores a renewal may come several hundred ms late (measured:
// up to 870 ms between renewals sent every 100 ms), and a lock that lapses then is no
// fault of the consumer's.
func TestOrderlyRenewsAndReleasesLocks(t *testing.T) {
	t.Parallel()
	const lockLive = 2 * time.Second
	e := newEnvWith(t, func(c *broker.Config) { c.RebalanceLockMaxLiveTime = lockLive.Milliseconds() })
	e.createTopic("OrdLock", 2)
	c := e.push(Config{Group: "og-lock", Orderly: true})
	c.cfg.lockRenewInterval = 100 * time.Millisecond
	if err := c.Subscribe("OrdLock", "*", ok); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return len(assigned(c, "OrdLock")) == 2 }, "both queues assigned")
	mqs := []message.MessageQueue{{Topic: "OrdLock", BrokerName: e.broker.Name(), QueueID: 0}, {Topic: "OrdLock", BrokerName: e.broker.Name(), QueueID: 1}}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tryLock := func() int {
		body, _ := json.Marshal(wire.LockBatchBody{ConsumerGroup: "og-lock", ClientID: "intruder", MQSet: mqs})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := rc.InvokeSync(ctx, e.broker.Addr(), remoting.NewRequest(remoting.LockBatchMQ, nil, body))
		if err != nil {
			t.Fatal(err)
		}
		var held wire.LockBatchResult
		_ = json.Unmarshal(resp.Body, &held)
		return len(held.LockOKMQSet)
	}
	// The consumer locked both queues before it took them: without renewals the locks
	// would lapse within lockLive from here. It keeps both all along.
	start := time.Now()
	testkit.WaitFor(t, 3*lockLive, func() bool {
		if n := tryLock(); n != 0 {
			t.Fatalf("another client locked %d queues %v after the consumer took them", n, time.Since(start))
		}
		return time.Since(start) > lockLive*3/2
	}, "1.5 lock lifetimes of renewals")
	shutdown(t, c)
	if n := tryLock(); n != 2 {
		t.Fatalf("after Shutdown another client locked %d of 2 queues", n)
	}
}
