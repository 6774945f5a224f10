package consumer

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// A message that fails twice and then succeeds is delivered three times, with
// ReconsumeTimes 0, 1, 2, always under its original topic, tag and keys.
func TestConcurrentRetryTwiceThenSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Retry2", 2)
	p := e.producer()
	rec := &recorder{}
	c := e.push(Config{Group: "r2g", ConsumeFromWhere: ConsumeFromFirstOffset})
	if err := c.Subscribe("Retry2", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		rec.add("c", msgs[0])
		if msgs[0].ReconsumeTimes < 2 {
			return message.ReconsumeLater, nil
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sendBodies(t, p, "Retry2", "X")
	testkit.WaitFor(t, 30*time.Second, func() bool { return rec.count() >= 3 }, "3 deliveries")
	if want := []string{"X(rt=0)", "X(rt=1)", "X(rt=2)"}; !reflect.DeepEqual(rec.bodies(), want) {
		t.Fatalf("deliveries %v", rec.bodies())
	}
	for _, d := range rec.list() {
		if d.topic != "Retry2" {
			t.Fatalf("delivery under topic %q", d.topic)
		}
	}
	if dl := e.dlq("r2g"); len(dl) != 0 {
		t.Fatalf("%d dead letters", len(dl))
	}
}

// MaxReconsumeTimes 2 and a handler that always fails: 3 deliveries (ReconsumeTimes
// 0, 1, 2), then exactly one copy in %DLQ%<group>, with the original topic, tag, keys
// and body, and no further delivery: the retry topic holds exactly the 2 retries.
func TestConcurrentAlwaysFailingGoesToDLQOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Retry3", 1)
	p := e.producer()
	rec := &recorder{}
	c := e.push(Config{Group: "r3g", ConsumeFromWhere: ConsumeFromFirstOffset, MaxReconsumeTimes: Retries(2)})
	if err := c.Subscribe("Retry3", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		rec.add("c", msgs[0])
		return message.ReconsumeLater, fmt.Errorf("always failing")
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sendBodies(t, p, "Retry3", "Y")
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(e.dlq("r3g")) >= 1 }, "a dead letter")
	retry := message.RetryTopic("r3g")
	testkit.WaitFor(t, 10*time.Second, func() bool {
		return e.committed("r3g", retry, 0) == 2
	}, "the retry topic offset at its end")
	if want := []string{"Y(rt=0)", "Y(rt=1)", "Y(rt=2)"}; !reflect.DeepEqual(rec.bodies(), want) {
		t.Fatalf("deliveries %v, want %v", rec.bodies(), want)
	}
	dl := e.dlq("r3g")
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want exactly 1", len(dl))
	}
	m := dl[0].Message
	if dl[0].OriginTopic != "Retry3" || string(m.Body) != "Y" || m.Tag() != "T" || m.Keys()[0] != "key-Y" || m.ReconsumeTimes != 3 {
		t.Fatalf("dead letter %+v (origin %q) props %v", m, dl[0].OriginTopic, m.Properties)
	}
}

// ConsumeMessageBatchMaxSize 32: handlers get batches of consecutive messages of one
// queue, never more than 32; a failed batch sends each of its messages back, and each
// comes back once with ReconsumeTimes 1.
func TestBatchConsume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("Batch", 2)
	p := e.producer()
	var (
		mu      sync.Mutex
		sizes   []int
		got     = map[string][]int32{}
		failed  []string
		badness []string
		failOne atomic.Bool
	)
	c := e.push(Config{Group: "bg32", ConsumeFromWhere: ConsumeFromFirstOffset, ConsumeMessageBatchMaxSize: 32, ConsumeGoroutines: 2})
	if err := c.Subscribe("Batch", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(msgs))
		for i, m := range msgs {
			got[string(m.Body)] = append(got[string(m.Body)], m.ReconsumeTimes)
			if i > 0 && m.ReconsumeTimes == 0 && (m.QueueID != msgs[0].QueueID || m.QueueOffset != msgs[i-1].QueueOffset+1) {
				badness = append(badness, fmt.Sprintf("batch not consecutive: %d/%d after %d/%d", m.QueueID, m.QueueOffset, msgs[i-1].QueueID, msgs[i-1].QueueOffset))
			}
		}
		if len(msgs) > 1 && msgs[0].ReconsumeTimes == 0 && failOne.CompareAndSwap(false, true) {
			for _, m := range msgs {
				failed = append(failed, string(m.Body))
			}
			return message.ReconsumeLater, nil
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	s := send(t, p, "Batch", 300, "b")
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 300 || len(failed) == 0 {
			return false
		}
		for _, b := range failed {
			if len(got[b]) < 2 {
				return false
			}
		}
		return true
	}, "all 300 and the failed batch again")
	testkit.WaitFor(t, 10*time.Second, func() bool { return committedAtLeast("Batch", s.ends, c) }, "committed offsets at the queue ends")
	mu.Lock()
	defer mu.Unlock()
	if len(badness) > 0 {
		t.Fatal(badness[0])
	}
	maxSize := 0
	for _, n := range sizes {
		maxSize = max(maxSize, n)
	}
	if maxSize > 32 || maxSize < 2 {
		t.Fatalf("batch sizes up to %d; want batching, at most 32 (%v)", maxSize, sizes)
	}
	isFailed := map[string]bool{}
	for _, b := range failed {
		isFailed[b] = true
		if !reflect.DeepEqual(got[b], []int32{0, 1}) {
			t.Fatalf("failed %s delivered with reconsume times %v, want [0 1]", b, got[b])
		}
	}
	for b, rts := range got {
		if !isFailed[b] && len(rts) != 1 {
			t.Fatalf("%s delivered %v times", b, rts)
		}
	}
}

// Flow control: while handlers are stuck, a queue never caches more than
// PullThresholdForQueue messages plus one pull; pulling resumes when they drain and
// every message arrives. The byte threshold works the same way.
func TestFlowControlPausesAndResumes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		limit func(n int, bytes int64) bool
	}{
		{"messages", Config{PullThresholdForQueue: 10, PullBatchSize: 4}, func(n int, _ int64) bool { return n <= 10-1+4 }},
		{"bytes", Config{PullThresholdSizeForQueue: 8 << 10, PullBatchSize: 4}, func(_ int, b int64) bool { return b < 8<<10+4<<10 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			topic := "Flow" + strings.ToUpper(tc.name[:1])
			e.createTopic(topic, 1)
			p := e.producer()
			body := strings.Repeat("x", 1024)
			for i := 0; i < 100; i++ {
				if _, err := p.SendSync(context.Background(), message.NewMessage(topic, []byte(fmt.Sprintf("%03d%s", i, body)))); err != nil {
					t.Fatal(err)
				}
			}
			release := make(chan struct{})
			var handled atomic.Int64
			cfg := tc.cfg
			cfg.Group = "flow-" + tc.name
			cfg.ConsumeFromWhere = ConsumeFromFirstOffset
			cfg.ConsumeGoroutines = 1
			c := e.push(cfg)
			if err := c.Subscribe(topic, "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				<-release
				handled.Add(int64(len(msgs)))
				return message.ConsumeSuccess, nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			var pq *processQueue
			testkit.WaitFor(t, 10*time.Second, func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				for _, q := range c.pqs {
					if q.mq.Topic == topic {
						pq = q
					}
				}
				return pq != nil
			}, "the queue assigned")
			testkit.WaitFor(t, 10*time.Second, func() bool { return pq.flowPauses.Load() > 0 }, "pulling paused by flow control")
			n0, b0 := pq.load()
			high0 := pq.nextPull()
			pauses := pq.flowPauses.Load()
			// While nothing drains, pulling stays paused: the cache and the next pull
			// offset do not move over 20 more flow-control rounds.
			testkit.WaitFor(t, 10*time.Second, func() bool { return pq.flowPauses.Load() >= pauses+20 }, "20 more flow-control rounds")
			n1, b1 := pq.load()
			if n1 != n0 || b1 != b0 || pq.nextPull() != high0 {
				t.Fatalf("cache moved while paused: %d/%d -> %d/%d messages/bytes, next pull %d -> %d", n0, b0, n1, b1, high0, pq.nextPull())
			}
			if !tc.limit(n1, b1) {
				t.Fatalf("cache grew to %d messages / %d bytes", n1, b1)
			}
			close(release)
			testkit.WaitFor(t, 20*time.Second, func() bool { return handled.Load() == 100 }, "all 100 handled")
		})
	}
}
