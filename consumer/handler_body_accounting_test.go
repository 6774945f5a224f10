package consumer

import (
	"context"
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
	if err := c.Start(); err != nil {
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
