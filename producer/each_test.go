package producer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// TestSendEachRealBroker: SendEach stores every valid message, each in the queue the
// hash selector picks for its sharding key, a key's messages at increasing offsets in
// msgs' order, and reports an invalid message's error at its own index only.
func TestSendEachRealBroker(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	createTopic(t, testbroker.Namesrv(b), "Each", 4)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), Selector: HashSelector()})
	ctx := context.Background()
	var msgs []*message.Message
	for i := 0; i < 60; i++ {
		m := message.NewMessage("Each", []byte(fmt.Sprintf("m%02d", i))).SetShardingKey("k" + strconv.Itoa(i%10))
		m.SetProperty("seq", strconv.Itoa(i))
		msgs = append(msgs, m)
	}
	bad := message.NewMessage("Each", nil).SetShardingKey("k1") // empty body
	msgs = append(msgs[:30], append([]*message.Message{bad}, msgs[30:]...)...)
	errs := p.SendEach(ctx, msgs)
	for i, err := range errs {
		var ve *message.ValidationError
		switch {
		case msgs[i] == bad && !errors.As(err, &ve):
			t.Fatalf("the empty message: %v; want a validation error", err)
		case msgs[i] != bad && err != nil:
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if off := sum(maxOffsets(t, b.Addr(), "Each", 4)); off != 60 {
		t.Fatalf("%d messages stored; want 60", off)
	}
	col := poll(t, b.Addr(), "Each", 4, "seq")
	testkit.WaitFor(t, 30*time.Second, func() bool { return col.count() == 60 }, func() string { return strconv.Itoa(col.count()) + " of 60 received" })
	type pos struct {
		q   int
		off int64
	}
	last := map[string]pos{}
	for _, m := range msgs {
		if m == bad {
			continue
		}
		d := col.get(m.Property("seq"))
		if len(d) != 1 || !bytes.Equal(d[0].msg.Body, m.Body) {
			t.Fatalf("%s: %d deliveries", m.Body, len(d))
		}
		k := m.ShardingKey()
		cur := pos{int(d[0].msg.QueueID), d[0].msg.QueueOffset}
		if prev, ok := last[k]; ok && (prev.q != cur.q || prev.off >= cur.off) {
			t.Fatalf("%s of key %s at queue %d offset %d after queue %d offset %d", m.Body, k, cur.q, cur.off, prev.q, prev.off)
		}
		last[k] = cur
		if m.Property(message.PropertyKeys) != "" || m.UniqKey() == "" {
			t.Fatalf("%s: keys %q uniq %q", m.Body, m.Property(message.PropertyKeys), m.UniqKey())
		}
	}
	if got := len(errs); got != len(msgs) {
		t.Fatalf("%d results for %d messages", got, len(msgs))
	}
}

// TestSendEachStopsAfterFailure: when a batch to a queue fails at the broker, its
// messages fail and the later messages of that queue are not sent
// (ErrEarlierSendFailed); nothing of them is stored.
func TestSendEachStopsAfterFailure(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{MaxMessageSize: 1024})
	createTopic(t, testbroker.Namesrv(b), "EachFail", 1)
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), Selector: HashSelector(), MaxMessageSize: 2048})
	big := message.NewMessage("EachFail", bytes.Repeat([]byte("x"), 1500)).SetShardingKey("k")
	small := message.NewMessage("EachFail", bytes.Repeat([]byte("y"), 700)).SetShardingKey("k")
	errs := p.SendEach(context.Background(), []*message.Message{big, small})
	if errs[0] == nil || errors.Is(errs[0], ErrEarlierSendFailed) || !errors.Is(errs[1], ErrEarlierSendFailed) {
		t.Fatalf("errs %v; want the broker's refusal, then ErrEarlierSendFailed", errs)
	}
	if off := maxOffsets(t, b.Addr(), "EachFail", 1); off[0] != 0 {
		t.Fatalf("stored %d messages after a failed batch", off[0])
	}
}

// TestSendEachMiddlewares: with Config.Middlewares every message is sent through the
// chain (no batch skips it).
func TestSendEachMiddlewares(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	createTopic(t, testbroker.Namesrv(b), "EachMW", 2)
	var seen atomic.Int64
	count := func(next middleware.SendFunc) middleware.SendFunc {
		return func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
			seen.Add(1)
			return next(ctx, m)
		}
	}
	p := newProducer(t, Config{NamesrvAddrs: testbroker.Namesrv(b), Middlewares: []middleware.SendMiddleware{count}})
	var msgs []*message.Message
	for i := 0; i < 20; i++ {
		msgs = append(msgs, message.NewMessage("EachMW", []byte(strconv.Itoa(i))))
	}
	for i, err := range p.SendEach(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if seen.Load() != 20 {
		t.Fatalf("the chain ran %d times for 20 messages", seen.Load())
	}
	if off := sum(maxOffsets(t, b.Addr(), "EachMW", 2)); off != 20 {
		t.Fatalf("%d stored", off)
	}
}
