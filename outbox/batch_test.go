package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
)

// batcher is a BatchSendFunc over a recorder: it records each call's bodies and sends
// the messages one by one through the recorder (so its fail rule applies per message).
type batcher struct {
	rec   *recorder
	mu    sync.Mutex
	calls [][]string
	dupes []string // calls that held two messages of one sharding key
}

func (b *batcher) send(ctx context.Context, msgs []*message.Message) []error {
	errs := make([]error, len(msgs))
	var bodies []string
	keys := map[string]bool{}
	for i, m := range msgs {
		bodies = append(bodies, string(m.Body))
		if k := m.ShardingKey(); k != "" {
			if keys[k] {
				b.mu.Lock()
				b.dupes = append(b.dupes, fmt.Sprint(bodies))
				b.mu.Unlock()
			}
			keys[k] = true
		}
		_, errs[i] = b.rec.send(ctx, m)
	}
	b.mu.Lock()
	b.calls = append(b.calls, bodies)
	b.mu.Unlock()
	return errs
}

// TestSendBatchOrderPerKey: with RelayConfig.SendBatch the relay hands a claim's rows
// over in rounds — many keys per call, never two rows of one key — and keeps every rule
// of the per-row path: a key's rows in id order, a failed row stops its key's later rows
// (other keys go on), dead after MaxAttempts, re-drive sends the rest in order.
func TestSendBatchOrderPerKey(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ob := newOutbox(t, tg)
		var msgs []*message.Message
		for i := 0; i < 4; i++ {
			for _, k := range []string{"A", "B", "C"} {
				msgs = append(msgs, message.NewMessage("Orders", []byte(fmt.Sprintf("%s%d", k, i))).SetShardingKey(k))
			}
		}
		msgs = append(msgs, message.NewMessage("Orders", []byte("free1")), message.NewMessage("Orders", []byte("free2")))
		addTx(t, tg.DB, ob, false, msgs...)
		var mu sync.Mutex
		broken := true
		rec := &recorder{fail: func(m *message.Message, n int) error {
			mu.Lock()
			defer mu.Unlock()
			if string(m.Body) == "A1" && broken {
				return errors.New("A1 refused")
			}
			return nil
		}}
		b := &batcher{rec: rec}
		r := newRelay(t, ob, nil, func(c *outbox.RelayConfig) { c.SendBatch = b.send; c.MaxAttempts = 3; c.BatchSize = 100 })
		drain(t, r)
		if len(b.dupes) > 0 {
			t.Fatalf("calls with two rows of one key: %v", b.dupes)
		}
		if first := strings.Join(b.calls[0], ","); first != "A0,B0,C0,free1,free2" {
			t.Fatalf("first call %s; want the head of every key and the unkeyed rows", first)
		}
		got := strings.Join(rec.bodies(), ",")
		if !strings.Contains(got, "A0") || strings.Contains(got, "A2") || strings.Contains(got, "A3") {
			t.Fatalf("sent %s: A2 and A3 must wait behind A1", got)
		}
		for _, k := range []string{"B", "C"} {
			want := k + "0," + k + "1," + k + "2," + k + "3"
			var seq []string
			for _, s := range rec.bodies() {
				if strings.HasPrefix(s, k) {
					seq = append(seq, s)
				}
			}
			if strings.Join(seq, ",") != want {
				t.Fatalf("key %s sent as %v; want %s", k, seq, want)
			}
		}
		st := stats(t, ob)
		if st.Dead != 1 || st.Pending != 2 {
			t.Fatalf("stats %+v; want 1 dead (A1) and 2 pending (A2, A3)", st)
		}
		if c := r.Counters(); c.Failed != 3 || c.Dead != 1 {
			t.Fatalf("counters %+v; want 3 failed attempts, 1 dead", c)
		}
		mu.Lock()
		broken = false
		mu.Unlock()
		if n, err := ob.Redrive(context.Background()); n != 1 || err != nil {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		drain(t, r)
		if got := strings.Join(rec.bodies(), ","); !strings.HasSuffix(got, "A1,A2,A3") {
			t.Fatalf("after redrive sent %s; want A1,A2,A3 last", got)
		}
		if len(b.dupes) > 0 {
			t.Fatalf("calls with two rows of one key: %v", b.dupes)
		}
		if st := stats(t, ob); st != (outbox.Stats{}) {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestSendBatchBrokenResults: a BatchSendFunc that panics or returns the wrong number of
// results fails every message of the call (attempts counted, nothing marked sent); the
// rows are sent once it behaves.
func TestSendBatchBrokenResults(t *testing.T) {
	tg := sqltest.Open(t, outbox.SQLite)
	ob := newOutbox(t, tg)
	addTx(t, tg.DB, ob, false, message.NewMessage("T", []byte("a")), message.NewMessage("T", []byte("b")))
	rec := &recorder{}
	mode := "panic"
	send := func(ctx context.Context, msgs []*message.Message) []error {
		switch mode {
		case "panic":
			panic("transport bug")
		case "short":
			return make([]error, len(msgs)-1)
		}
		errs := make([]error, len(msgs))
		for i, m := range msgs {
			_, errs[i] = rec.send(ctx, m)
		}
		return errs
	}
	var shift atomic.Int64 // the relay's clock runs ahead by this, so backoffs pass at once
	r := newRelay(t, ob, nil, func(c *outbox.RelayConfig) {
		c.SendBatch = send
		c.Logger = testkit.Quiet()
		c.Now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	})
	ctx := context.Background()
	for _, m := range []string{"panic", "short"} {
		mode = m
		shift.Add(int64(time.Minute))
		if n, err := r.RunOnce(ctx); n != 2 || err != nil {
			t.Fatalf("%s: claimed %d, %v", m, n, err)
		}
		if st := stats(t, ob); st.Pending != 2 {
			t.Fatalf("%s: stats %+v; want both rows pending", m, st)
		}
	}
	if c := r.Counters(); c.Failed != 4 || c.Sent != 0 {
		t.Fatalf("counters %+v; want 4 failed attempts, 0 sent", c)
	}
	mode = "ok"
	drain(t, r)
	if got := strings.Join(rec.bodies(), ","); got != "a,b" {
		t.Fatalf("sent %q", got)
	}
	if _, err := outbox.NewRelay(ob, outbox.RelayConfig{}); err == nil || !strings.Contains(err.Error(), "Send") {
		t.Fatalf("a relay without Send and SendBatch: %v", err)
	}
}

// TestSendBatchFencing: a batch relay whose lease passed to another relay records
// nothing (fenced), as the per-row path does.
func TestSendBatchFencing(t *testing.T) {
	tg := sqltest.Open(t, outbox.SQLite)
	ob := newOutbox(t, tg)
	addTx(t, tg.DB, ob, false, message.NewMessage("T", []byte("a")).SetShardingKey("k"), message.NewMessage("T", []byte("b")).SetShardingKey("k"))
	release := make(chan struct{})
	inSend := make(chan struct{}, 4)
	slow := func(ctx context.Context, msgs []*message.Message) []error {
		inSend <- struct{}{}
		errs := make([]error, len(msgs))
		select {
		case <-release:
		case <-ctx.Done():
			for i := range errs {
				errs[i] = ctx.Err()
			}
		}
		return errs
	}
	r1 := newRelay(t, ob, nil, func(c *outbox.RelayConfig) { c.SendBatch = slow; c.Lease = time.Minute })
	rec := &recorder{}
	later := func() time.Time { return time.Now().Add(2 * time.Minute) }
	r2 := newRelay(t, ob, rec.send, func(c *outbox.RelayConfig) { c.Now = later })
	done := make(chan error, 1)
	go func() { _, err := r1.RunOnce(context.Background()); done <- err }()
	<-inSend
	drain(t, r2)
	if got := strings.Join(rec.bodies(), ","); got != "a,b" {
		t.Fatalf("r2 sent %q; want a,b", got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if c := r1.Counters(); c.Fenced != 2 || c.Sent != 0 {
		t.Fatalf("r1 counters %+v; want 2 fenced", c)
	}
	if st := stats(t, ob); st != (outbox.Stats{}) {
		t.Fatalf("stats %+v", st)
	}
}

// TestAsyncBatch: AsyncBatch queues every message at once and reports each callback's
// outcome in order; a refusal at queueing is that message's error; a callback that never
// comes is ErrNotAcknowledged (and the context's error) once ctx ends, and a late
// callback changes nothing.
func TestAsyncBatch(t *testing.T) {
	var mu sync.Mutex
	var late []func()
	var wg sync.WaitGroup
	send := func(ctx context.Context, m *message.Message, cb func(*message.SendResult, error)) error {
		switch string(m.Body) {
		case "refused":
			return errors.New("queue full")
		case "silent":
			mu.Lock()
			late = append(late, func() { cb(&message.SendResult{}, nil) })
			mu.Unlock()
			return nil
		case "broken":
			wg.Add(1)
			go func() { defer wg.Done(); cb(nil, errors.New("broker said no")) }()
			return nil
		}
		wg.Add(1)
		go func() { defer wg.Done(); cb(&message.SendResult{Status: message.SendOK}, nil) }()
		return nil
	}
	b := outbox.AsyncBatch(send)
	msg := func(s string) *message.Message { return message.NewMessage("T", []byte(s)) }
	errs := b(context.Background(), []*message.Message{msg("a"), msg("refused"), msg("broken"), msg("b")})
	wg.Wait()
	if len(errs) != 4 || errs[0] != nil || errs[3] != nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "queue full") ||
		errs[2] == nil || !strings.Contains(errs[2].Error(), "broker said no") {
		t.Fatalf("errs %v", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	errs = b(ctx, []*message.Message{msg("a"), msg("silent")})
	wg.Wait()
	if errs[0] != nil || !errors.Is(errs[1], outbox.ErrNotAcknowledged) || !errors.Is(errs[1], context.DeadlineExceeded) {
		t.Fatalf("errs %v; want nil and ErrNotAcknowledged", errs)
	}
	for _, f := range late {
		f()
	}
	if !errors.Is(errs[1], outbox.ErrNotAcknowledged) {
		t.Fatalf("a late callback changed the result: %v", errs[1])
	}
	if errs := b(context.Background(), nil); len(errs) != 0 {
		t.Fatalf("empty call: %v", errs)
	}
}
