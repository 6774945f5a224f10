package consumer

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// TestHandlerThatDropsBodiesDoesNotStallFlowControl: a handler that releases what it no
// longer needs (m.Body = nil once processed, a common way to let a kept message's body
// go) must not make its queue stop. processQueue counts a message's len(Body) when it is
// pulled (put) but subtracts len(Body) as it is when the handler has returned (remove),
// so every such message leaks its size from the flow-control count: once
// PullThresholdSizeForQueue bytes leaked the queue is paused for ever. (A handler that
// appends to m.Body makes the count shrink instead, and size flow control stops
// working.)
func TestHandlerThatDropsBodiesDoesNotStallFlowControl(t *testing.T) {
	e := newEnv(t)
	e.createTopic("DropBody", 1)
	p := e.producer()
	const n = 300
	for i := range n {
		body := strconv.Itoa(i) + ":" + strings.Repeat("b", 1000)
		if _, err := p.SendSync(context.Background(), message.NewMessage("DropBody", []byte(body))); err != nil {
			t.Fatal(err)
		}
	}
	c, err := NewPushConsumer(Config{NamesrvAddrs: e.namesrv, Group: "gDrop", ConsumeFromWhere: ConsumeFromFirstOffset,
		RebalanceInterval: 500 * time.Millisecond, PullThresholdSizeForQueue: 64 << 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, c) })
	var mu sync.Mutex
	seen := map[string]bool{}
	if err := c.Subscribe("DropBody", "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			seen[strings.SplitN(string(m.Body), ":", 2)[0]] = true
			m.Body = nil // done with it
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !testkit.Eventually(20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	}) {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d messages consumed in 20 s by a handler that sets m.Body = nil (PullThresholdSizeForQueue 64 KiB)", len(seen), n)
	}
}

// TestHandlerThatEditsItsSliceDoesNotBreakTheConsumer: a handler may reorder or nil the
// elements of the slice it is given (it is its own copy); the consumer still finishes
// every message and commits past them, concurrent (batches of 4, failing first so the
// send-back path runs) and orderly.
func TestHandlerThatEditsItsSliceDoesNotBreakTheConsumer(t *testing.T) {
	for _, orderly := range []bool{false, true} {
		t.Run(map[bool]string{false: "concurrent", true: "orderly"}[orderly], func(t *testing.T) {
			e := newEnv(t)
			topic := map[bool]string{false: "EditSliceC", true: "EditSliceO"}[orderly]
			e.createTopic(topic, 1)
			p := e.producer()
			const n = 40
			for i := range n {
				if _, err := p.SendSync(context.Background(), message.NewMessage(topic, []byte(strconv.Itoa(i)))); err != nil {
					t.Fatal(err)
				}
			}
			c, err := NewPushConsumer(Config{NamesrvAddrs: e.namesrv, Group: "g" + topic, ConsumeFromWhere: ConsumeFromFirstOffset,
				RebalanceInterval: 500 * time.Millisecond, ConsumeMessageBatchMaxSize: 4, Orderly: orderly,
				SuspendCurrentQueueTime: 10 * time.Millisecond, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { shutdown(t, c) })
			var mu sync.Mutex
			seen := map[string]int{}
			if err := c.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				mu.Lock()
				defer mu.Unlock()
				first := true
				for _, m := range msgs {
					seen[string(m.Body)]++
					first = first && seen[string(m.Body)] == 1
				}
				slices.Reverse(msgs)
				for i := range msgs {
					msgs[i] = nil
				}
				if first {
					return message.ReconsumeLater, nil // every batch fails once
				}
				return message.ConsumeSuccess, nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !testkit.Eventually(30*time.Second, func() bool {
				mu.Lock()
				all := len(seen) == n
				mu.Unlock()
				return all && e.committed("g"+topic, topic, 0) == n
			}) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%d of %d messages seen, committed offset %d, by a handler that nils its slice", len(seen), n, e.committed("g"+topic, topic, 0))
			}
		})
	}
}
