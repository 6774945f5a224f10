package transporttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/transport"
)

// Run runs every test of the suite against tr, each as a subtest named after it (run one
// with -run 'Conformance/OrderPerShardingKey'). Tests whose feature tr switches off are
// skipped. It fails at once when a required field of tr is missing.
func Run(t *testing.T, tr Transport) {
	t.Helper()
	switch {
	case tr.CreateTopic == nil:
		t.Fatal("transporttest: Transport.CreateTopic is nil")
	case tr.NewProducer == nil:
		t.Fatal("transporttest: Transport.NewProducer is nil")
	case tr.NewConsumer == nil:
		t.Fatal("transporttest: Transport.NewConsumer is nil")
	case tr.Features.DeadLetter && tr.DeadLetters == nil:
		t.Fatal("transporttest: Features.DeadLetter needs Transport.DeadLetters")
	case tr.Features.Transactions && tr.SendInTransaction == nil:
		t.Fatal("transporttest: Features.Transactions needs Transport.SendInTransaction")
	}
	// One started producer for every test; shut down in t's cleanup, after the parallel
	// subtests.
	tr.producer = startProducer(t, tr)
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Transport)
	}{
		{"Lifecycle", TestLifecycle},
		{"SendReceive", TestSendReceive},
		{"Tags", TestTags},
		{"SQL92", TestSQL92},
		{"OrderPerShardingKey", TestOrderPerShardingKey},
		{"ConsumeRetry", TestConsumeRetry},
		{"DeadLetter", TestDeadLetter},
		{"BatchConsume", TestBatchConsume},
		{"ConsumerGroups", TestConsumerGroups},
		{"Restart", TestRestart},
		{"GracefulShutdown", TestGracefulShutdown},
		{"Transactions", TestTransactions},
		{"ReliabilityMiddleware", TestReliabilityMiddleware},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tr.Serial {
				t.Parallel()
			}
			tc.fn(t, tr)
		})
	}
}

// TestLifecycle checks the life-cycle promises of package transport on a producer and a
// consumer of their own: a send before Start fails with transport.ErrNotStarted (and an
// async one never calls its callback); Start twice is fine; an async send calls its
// callback exactly once; Subscribe after Start fails with transport.ErrStarted; Shutdown
// twice is fine; after Shutdown sends, Start and Subscribe fail with transport.ErrClosed
// and no callback runs.
func TestLifecycle(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	topic := s.topic(1)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout())
	defer cancel()
	var stray atomic.Int32 // callbacks of refused async sends (must stay 0)
	strayCB := func(*message.SendResult, error) { stray.Add(1) }

	p := s.newProducer()
	if _, err := p.Send(ctx, message.NewMessage(topic, []byte("early"))); !errors.Is(err, transport.ErrNotStarted) {
		t.Errorf("Send before Start: %v, want an error matching transport.ErrNotStarted", err)
	}
	if err := p.SendAsync(ctx, message.NewMessage(topic, []byte("early")), strayCB); !errors.Is(err, transport.ErrNotStarted) {
		t.Errorf("SendAsync before Start: %v, want an error matching transport.ErrNotStarted", err)
	}
	for i := range 2 {
		if err := p.Start(ctx); err != nil {
			t.Fatalf("producer Start #%d: %v", i+1, err)
		}
	}
	results := make(chan error, 2)
	if err := p.SendAsync(ctx, message.NewMessage(topic, []byte("async")), func(r *message.SendResult, err error) {
		if err == nil && (r == nil || r.MsgID == "") {
			err = fmt.Errorf("no result or no MsgID (%+v)", r)
		}
		results <- err
	}); err != nil {
		t.Fatalf("SendAsync: %v", err)
	}
	select {
	case err := <-results:
		if err != nil {
			t.Errorf("SendAsync callback: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("SendAsync callback did not run")
	}
	if r, err := p.SendFunc()(ctx, message.NewMessage(topic, []byte("func"))); err != nil || r == nil || r.MsgID == "" {
		t.Errorf("SendFunc: %+v, %v", r, err)
	}

	c := s.newConsumer(ConsumerConfig{Topic: topic, Group: name(t, "g"), MaxReconsumeTimes: -1})
	if err := c.Subscribe(topic, "*", ok); err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	for i := range 2 {
		if err := c.Start(ctx); err != nil {
			t.Fatalf("consumer Start #%d: %v", i+1, err)
		}
	}
	other := name(t, "t")
	if err := c.Subscribe(other, "*", ok); !errors.Is(err, transport.ErrStarted) {
		t.Errorf("Subscribe after Start: %v, want an error matching transport.ErrStarted", err)
	}

	for i := range 2 {
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("producer Shutdown #%d: %v", i+1, err)
		}
		if err := c.Shutdown(ctx); err != nil {
			t.Errorf("consumer Shutdown #%d: %v", i+1, err)
		}
	}
	if _, err := p.Send(ctx, message.NewMessage(topic, []byte("late"))); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Shutdown: %v, want an error matching transport.ErrClosed", err)
	}
	if err := p.SendAsync(ctx, message.NewMessage(topic, []byte("late")), strayCB); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("SendAsync after Shutdown: %v, want an error matching transport.ErrClosed", err)
	}
	if err := p.Start(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("producer Start after Shutdown: %v, want an error matching transport.ErrClosed", err)
	}
	if err := c.Start(ctx); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("consumer Start after Shutdown: %v, want an error matching transport.ErrClosed", err)
	}
	if err := c.Subscribe(other, "*", ok); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Subscribe after Shutdown: %v, want an error matching transport.ErrClosed", err)
	}
	if n := stray.Load(); n != 0 {
		t.Errorf("the callbacks of %d refused async sends ran", n)
	}
	select {
	case err := <-results:
		t.Errorf("an async send's callback ran a second time (%v)", err)
	default:
	}
}

// TestSendReceive sends 20 messages to a topic of 2 shards, half before and half after
// the consumer started, and checks that each arrives exactly once with its body, topic,
// tag, keys, user property, MsgID and ReconsumeTimes 0.
func TestSendReceive(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	topic := s.topic(2)
	rec := &recorder{}
	ids := map[string]string{}
	send := func(from, to int) {
		for i := from; i < to; i++ {
			b := fmt.Sprintf("m%02d", i)
			m := message.NewMessage(topic, []byte(b)).SetTag("T").SetKeys("k-"+b).SetProperty("n", b)
			ids[b] = s.send(m).MsgID
		}
	}
	send(0, 10)
	s.start(ConsumerConfig{Topic: topic, Group: name(t, "g"), Handler: rec.wrap("c", ok), MaxReconsumeTimes: -1})
	send(10, 20)
	want := make([]string, 0, 20)
	for i := 0; i < 20; i++ {
		want = append(want, fmt.Sprintf("m%02d", i))
	}
	s.waitFor("all 20 messages delivered", func() bool { return rec.has(want...) }, rec)
	for b, n := range rec.bodies() {
		if n != 1 {
			t.Errorf("message %s delivered %d times, want once", b, n)
		}
	}
	for _, d := range rec.list() {
		m, b := d.msg, d.body()
		if m.Topic != topic || m.Tag() != "T" || len(m.Keys()) != 1 || m.Keys()[0] != "k-"+b ||
			m.Property("n") != b || m.MsgID != ids[b] || m.ReconsumeTimes != 0 {
			t.Errorf("delivered %s: topic %q tag %q keys %v n=%q MsgID %q (sent as %q) ReconsumeTimes %d",
				b, m.Topic, m.Tag(), m.Keys(), m.Property("n"), m.MsgID, ids[b], m.ReconsumeTimes)
		}
	}
}

// filtered sends bodies (with their tag or property set by mark) to a 1-shard topic,
// waits for the ones in want, shuts the consumer down so no handler call is still
// running, and checks that no other body was delivered. The last body sent must be in
// want: in one shard it comes after all the others.
func filtered(s suite, cfg ConsumerConfig, bodies []string, want map[string]bool, mark func(m *message.Message, i int)) {
	s.t.Helper()
	rec := &recorder{}
	cfg.Group = name(s.t, "g")
	cfg.Handler = rec.wrap("c", ok)
	cfg.MaxReconsumeTimes = -1
	c := s.start(cfg)
	for i, b := range bodies {
		m := message.NewMessage(cfg.Topic, []byte(b))
		mark(m, i)
		s.send(m)
	}
	var wanted []string
	for b := range want {
		wanted = append(wanted, b)
	}
	s.waitFor(fmt.Sprintf("the %d matching messages", len(wanted)), func() bool { return rec.has(wanted...) }, rec)
	s.stop(c)
	for b := range rec.bodies() {
		if !want[b] {
			s.t.Errorf("message %s delivered although the subscription does not match it", b)
		}
	}
}

// TestTags subscribes "A || B" and sends tags A, B and C in turn: only A and B arrive.
func TestTags(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.Tags, "Tags")
	topic := s.topic(1)
	tags := []string{"A", "C", "B", "C", "C", "A", "B", "C", "A"}
	bodies := make([]string, len(tags))
	want := map[string]bool{}
	for i, tag := range tags {
		bodies[i] = fmt.Sprintf("%s%d", tag, i)
		if tag != "C" {
			want[bodies[i]] = true
		}
	}
	filtered(s, ConsumerConfig{Topic: topic, Tags: "A || B"}, bodies, want, func(m *message.Message, i int) { m.SetTag(tags[i]) })
}

// TestSQL92 subscribes "a >= 5 AND kind = 'x'" and sends a = 0..9 with kind x or y.
func TestSQL92(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.SQL92, "SQL92")
	topic := s.topic(1)
	kinds := []string{"x", "x", "y", "x", "x", "x", "y", "x", "y", "x"}
	bodies := make([]string, len(kinds))
	want := map[string]bool{}
	for i := range kinds {
		bodies[i] = fmt.Sprintf("a%d%s", i, kinds[i])
		if i >= 5 && kinds[i] == "x" {
			want[bodies[i]] = true
		}
	}
	filtered(s, ConsumerConfig{Topic: topic, SQL: "a >= 5 AND kind = 'x'"}, bodies, want, func(m *message.Message, i int) {
		m.SetProperty("a", strconv.Itoa(i)).SetProperty("kind", kinds[i]).SetTag("T")
	})
}

// TestOrderPerShardingKey sends 6 keys × 15 messages, interleaved, to 4 shards; an orderly
// consumer must handle each key's messages in send order, one call at a time per shard,
// also when one message fails twice before it succeeds.
func TestOrderPerShardingKey(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.OrderPerShardingKey, "OrderPerShardingKey")
	const keys, per = 6, 15
	topic := s.topic(4)
	var (
		mu       sync.Mutex
		done     = map[string][]int{} // key → sequence numbers handled successfully, in order
		failures int
		running  = map[int32]int{} // shard → handler calls running
		overlap  string
	)
	handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		q := msgs[0].QueueID
		running[q]++
		if running[q] > 1 && overlap == "" {
			overlap = fmt.Sprintf("two handler calls at once on shard %d", q)
		}
		mu.Unlock()
		defer func() { mu.Lock(); running[q]--; mu.Unlock() }()
		for _, m := range msgs {
			if string(m.Body) == "k2:7" {
				mu.Lock()
				failures++
				fail := failures <= 2
				mu.Unlock()
				if fail {
					return message.ReconsumeLater, nil
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			var k string
			var n int
			if _, err := fmt.Sscanf(string(m.Body), "%2s:%d", &k, &n); err != nil {
				return message.ConsumeSuccess, fmt.Errorf("body %q: %w", m.Body, err)
			}
			done[k] = append(done[k], n)
		}
		return message.ConsumeSuccess, nil
	}
	s.start(ConsumerConfig{Topic: topic, Group: name(t, "g"), Handler: handler, Orderly: true, MaxReconsumeTimes: -1})
	for i := 0; i < per; i++ {
		for k := 0; k < keys; k++ {
			s.send(message.NewMessage(topic, []byte(fmt.Sprintf("k%d:%d", k, i))).SetShardingKey(fmt.Sprintf("k%d", k)).SetTag("T"))
		}
	}
	s.waitFor("every key's messages handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := 0; k < keys; k++ {
			if len(done[fmt.Sprintf("k%d", k)]) < per {
				return false
			}
		}
		return true
	}, nil)
	mu.Lock()
	defer mu.Unlock()
	if overlap != "" {
		t.Error(overlap)
	}
	if failures < 3 {
		t.Errorf("k2:7 was handled %d times, want 2 failures and a success", failures)
	}
	for k := 0; k < keys; k++ {
		got := done[fmt.Sprintf("k%d", k)]
		for i, n := range got {
			if n != i {
				t.Errorf("key k%d handled in order %v, want 0..%d", k, got, per-1)
				break
			}
		}
	}
}

// TestConsumeRetry fails one message twice (once by result, once by error) and lets a
// second one succeed: the first is delivered three times with ReconsumeTimes 0, 1, 2 and
// the same MsgID, topic, tag and keys; the second once.
func TestConsumeRetry(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.ConsumeRetry, "ConsumeRetry")
	topic := s.topic(2)
	rec := &recorder{}
	handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		m := msgs[0]
		if string(m.Body) != "flaky" {
			return message.ConsumeSuccess, nil
		}
		switch m.ReconsumeTimes {
		case 0:
			return message.ReconsumeLater, nil
		case 1:
			return message.ConsumeSuccess, errors.New("transporttest: planned failure")
		}
		return message.ConsumeSuccess, nil
	}
	s.start(ConsumerConfig{Topic: topic, Group: name(t, "g"), Handler: rec.wrap("c", handler), MaxReconsumeTimes: 5})
	id := s.send(message.NewMessage(topic, []byte("flaky")).SetTag("R").SetKeys("k-flaky")).MsgID
	s.send(message.NewMessage(topic, []byte("steady")).SetTag("R"))
	s.waitFor("flaky delivered 3 times and steady once", func() bool {
		return len(rec.of("flaky")) >= 3 && len(rec.of("steady")) >= 1
	}, rec)
	ds := rec.of("flaky")
	for i, d := range ds {
		m := d.msg
		if m.ReconsumeTimes != int32(i) || m.MsgID != id || m.Topic != topic || m.Tag() != "R" || len(m.Keys()) != 1 || m.Keys()[0] != "k-flaky" {
			t.Errorf("delivery %d of flaky: ReconsumeTimes %d (want %d), MsgID %q (want %q), topic %q, tag %q, keys %v",
				i, m.ReconsumeTimes, i, m.MsgID, id, m.Topic, m.Tag(), m.Keys())
		}
	}
	if n := len(rec.of("steady")); n != 1 {
		t.Errorf("steady delivered %d times, want once", n)
	}
	if len(ds) != 3 {
		t.Errorf("flaky delivered %d times, want 3", len(ds))
	}
}

// TestDeadLetter lets one message always fail with MaxReconsumeTimes 2: it is delivered
// with ReconsumeTimes 0, 1, 2, then listed as a dead letter with its body, MsgID, tag and
// keys, and not delivered again; a message that succeeds is no dead letter.
func TestDeadLetter(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.DeadLetter, "DeadLetter")
	topic := s.topic(1)
	group := name(t, "g")
	rec := &recorder{}
	handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if string(msgs[0].Body) == "doomed" {
			return message.ReconsumeLater, nil
		}
		return message.ConsumeSuccess, nil
	}
	c := s.start(ConsumerConfig{Topic: topic, Group: group, Handler: rec.wrap("c", handler), MaxReconsumeTimes: 2})
	id := s.send(message.NewMessage(topic, []byte("doomed")).SetTag("D").SetKeys("k-doomed")).MsgID
	s.send(message.NewMessage(topic, []byte("fine")).SetTag("D"))
	var dead []*message.MessageExt
	s.waitFor("doomed listed as a dead letter", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		l, err := tr.DeadLetters(ctx, group, topic)
		if err != nil {
			t.Logf("dead letters: %v", err)
			return false
		}
		dead = l
		return len(l) > 0
	}, rec)
	// Dead letters are written after the last failed delivery returned; shut the consumer
	// down so a further delivery, if the transport wrongly made one, is recorded.
	s.stop(c)
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1 (doomed)", len(dead))
	}
	d := dead[0]
	if string(d.Body) != "doomed" || d.MsgID != id || d.Tag() != "D" || len(d.Keys()) != 1 || d.Keys()[0] != "k-doomed" {
		t.Errorf("dead letter: body %q MsgID %q (want %q) tag %q keys %v", d.Body, d.MsgID, id, d.Tag(), d.Keys())
	}
	ds := rec.of("doomed")
	var rts []int32
	for _, x := range ds {
		rts = append(rts, x.msg.ReconsumeTimes)
	}
	if fmt.Sprint(rts) != "[0 1 2]" {
		t.Errorf("doomed delivered with ReconsumeTimes %v, want [0 1 2]", rts)
	}
	if n := len(rec.of("fine")); n != 1 {
		t.Errorf("fine delivered %d times, want once", n)
	}
}

// TestBatchConsume sends 16 messages to one shard before a consumer with BatchSize 4
// starts: every message arrives, no handler call gets more than 4, and some get more
// than one.
func TestBatchConsume(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.BatchConsume, "BatchConsume")
	topic := s.topic(1)
	rec := &recorder{}
	var want []string
	for i := 0; i < 16; i++ {
		b := fmt.Sprintf("b%02d", i)
		want = append(want, b)
		s.send(message.NewMessage(topic, []byte(b)).SetTag("T"))
	}
	s.start(ConsumerConfig{Topic: topic, Group: name(t, "g"), Handler: rec.wrap("c", ok), BatchSize: 4, MaxReconsumeTimes: -1})
	s.waitFor("all 16 messages", func() bool { return rec.has(want...) }, rec)
	largest := 0
	for _, d := range rec.list() {
		largest = max(largest, d.batch)
	}
	if largest > 4 || largest < 2 {
		t.Errorf("largest handler call had %d messages, want 2..4", largest)
	}
}

// TestConsumerGroups starts two consumers of one group on a topic of 4 shards and sends
// in waves of 20 until both have handled messages (at most 10 waves): every message
// arrives, and both consumers did part of the work.
func TestConsumerGroups(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.ConsumerGroups, "ConsumerGroups")
	topic := s.topic(4)
	group := name(t, "g")
	rec := &recorder{}
	s.start(ConsumerConfig{Topic: topic, Group: group, Handler: rec.wrap("a", ok), MaxReconsumeTimes: -1})
	s.start(ConsumerConfig{Topic: topic, Group: group, Handler: rec.wrap("b", ok), MaxReconsumeTimes: -1})
	both := func() bool {
		seen := map[string]bool{}
		for _, d := range rec.list() {
			seen[d.who] = true
		}
		return seen["a"] && seen["b"]
	}
	var want []string
	for wave := 0; wave < 10; wave++ {
		for i := 0; i < 20; i++ {
			b := fmt.Sprintf("w%d-%02d", wave, i)
			want = append(want, b)
			s.send(message.NewMessage(topic, []byte(b)).SetTag("T"))
		}
		if testkit.Eventually(s.timeout()/10, func() bool { return rec.has(want...) && both() }) {
			break
		}
	}
	s.waitFor(fmt.Sprintf("all %d messages", len(want)), func() bool { return rec.has(want...) }, rec)
	if !both() {
		t.Fatalf("one consumer of the group did all the work after %d messages", len(want))
	}
}

// TestRestart consumes 10 messages, shuts the consumer down, sends 10 more and starts a
// new consumer of the same group: it gets the 10 new ones and none of the first 10.
func TestRestart(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.Restart, "Restart")
	topic := s.topic(2)
	group := name(t, "g")
	rec := &recorder{}
	var first, second []string
	for i := 0; i < 10; i++ {
		first = append(first, fmt.Sprintf("first%02d", i))
		second = append(second, fmt.Sprintf("second%02d", i))
	}
	c := s.start(ConsumerConfig{Topic: topic, Group: group, Handler: rec.wrap("before", ok), MaxReconsumeTimes: -1})
	for _, b := range first {
		s.send(message.NewMessage(topic, []byte(b)).SetTag("T"))
	}
	s.waitFor("the first 10 messages", func() bool { return rec.has(first...) }, rec)
	s.stop(c)
	for _, b := range second {
		s.send(message.NewMessage(topic, []byte(b)).SetTag("T"))
	}
	s.start(ConsumerConfig{Topic: topic, Group: group, Handler: rec.wrap("after", ok), MaxReconsumeTimes: -1})
	s.waitFor("the second 10 messages after the restart", func() bool { return rec.has(second...) }, rec)
	for _, d := range rec.list() {
		if d.who == "after" && strings.HasPrefix(d.body(), "first") {
			t.Errorf("%s was committed before the restart and delivered again after it", d.body())
		}
		if d.who == "before" && strings.HasPrefix(d.body(), "second") {
			t.Errorf("%s was delivered to the consumer that had shut down", d.body())
		}
	}
}

// TestGracefulShutdown shuts a consumer down while its handler runs a 300 ms call: Shutdown
// returns only after the call finished, its context was not cancelled, and a new consumer
// of the group does not get the message again.
func TestGracefulShutdown(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.GracefulShutdown, "GracefulShutdown")
	topic := s.topic(1)
	group := name(t, "g")
	var started, finished, cancelled atomic.Bool
	rec := &recorder{}
	handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if string(msgs[0].Body) != "slow" {
			return message.ConsumeSuccess, nil
		}
		started.Store(true)
		select { // the work: 300 ms, or less if the consumer cancels it
		case <-time.After(300 * time.Millisecond):
			finished.Store(true)
			return message.ConsumeSuccess, nil
		case <-ctx.Done():
			cancelled.Store(true)
			return message.ReconsumeLater, ctx.Err()
		}
	}
	c := s.start(ConsumerConfig{Topic: topic, Group: group, Handler: rec.wrap("first", handler), MaxReconsumeTimes: -1})
	s.send(message.NewMessage(topic, []byte("slow")).SetTag("T"))
	s.waitFor("the slow handler call to start", started.Load, rec)
	s.stop(c)
	if !finished.Load() || cancelled.Load() {
		t.Fatalf("Shutdown returned with the handler call finished=%v cancelled=%v; want it finished", finished.Load(), cancelled.Load())
	}
	if !tr.Features.Restart {
		return
	}
	s.start(ConsumerConfig{Topic: topic, Group: group, Handler: rec.wrap("second", ok), MaxReconsumeTimes: -1})
	s.send(message.NewMessage(topic, []byte("after")).SetTag("T"))
	s.waitFor("a message sent after the restart", func() bool { return rec.has("after") }, rec)
	if n := len(rec.of("slow")); n != 1 {
		t.Errorf("the message finished during Shutdown was delivered %d times, want once", n)
	}
}

// TestTransactions sends a rolled-back and a committed transactional message, then a
// plain one, to one shard: the committed one and the plain one arrive, the rolled-back
// one never.
func TestTransactions(t *testing.T, tr Transport) {
	s := newSuite(t, tr)
	s.need(tr.Features.Transactions, "Transactions")
	topic := s.topic(1)
	rec := &recorder{}
	c := s.start(ConsumerConfig{Topic: topic, Group: name(t, "g"), Handler: rec.wrap("c", ok), MaxReconsumeTimes: -1})
	for _, x := range []struct {
		body   string
		commit bool
	}{{"rolled-back", false}, {"committed", true}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := tr.SendInTransaction(ctx, message.NewMessage(topic, []byte(x.body)).SetTag("T"), x.commit)
		cancel()
		if err != nil {
			t.Fatalf("transactional send of %s: %v", x.body, err)
		}
	}
	s.send(message.NewMessage(topic, []byte("plain")).SetTag("T"))
	s.waitFor("the committed and the plain message", func() bool { return rec.has("committed", "plain") }, rec)
	s.stop(c)
	if n := len(rec.of("rolled-back")); n != 0 {
		t.Errorf("a rolled-back message was delivered %d times", n)
	}
}

// TestReliabilityMiddleware runs the middleware chain over the transport: the producer
// side sets keys ([middleware.Keys]) and every one of 10 messages is sent twice (as a
// producer retry after a lost answer would), so every message is stored and delivered
// twice; one copy of one message also fails once (with [Features.ConsumeRetry]). The
// consumer side (ConsumeKeys, the deduplication of [Transport.Dedup], Recover) must give
// one business effect per key. It runs once per deduplication store Transport.Dedup offers.
func TestReliabilityMiddleware(t *testing.T, tr Transport) {
	if tr.Dedup == nil {
		t.Skip("transporttest: Transport.Dedup is nil (no consume-side deduplication to run the middleware chain with)")
	}
	tr.Dedup(t, func(t *testing.T, dedup middleware.ConsumeMiddleware) {
		s := newSuite(t, tr)
		topic := s.topic(2)
		effects := testkit.NewEffects()
		var failedOnce atomic.Bool
		business := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			for _, m := range msgs {
				if tr.Features.ConsumeRetry && string(m.Body) == "order-3" && failedOnce.CompareAndSwap(false, true) {
					return message.ReconsumeLater, errors.New("transporttest: planned failure before the effect")
				}
				effects.Add(middleware.KeyOf(m))
			}
			return message.ConsumeSuccess, nil
		}
		rec := &recorder{}
		handler := middleware.ChainConsume(business, rec.middleware("c"), middleware.ConsumeKeys(), dedup, middleware.Recover())
		c := s.start(ConsumerConfig{Topic: topic, Group: name(t, "g"), Handler: handler, MaxReconsumeTimes: 5})
		send := middleware.ChainSend(s.producer().SendFunc(), middleware.Keys())
		keys := map[string]bool{}
		for i := 0; i < 10; i++ {
			for range 2 {
				s.sendWith(send, message.NewMessage(topic, []byte(fmt.Sprintf("order-%d", i))).SetTag("Pay"))
			}
		}
		want := 20
		if tr.Features.ConsumeRetry {
			want = 21
		}
		s.waitFor(fmt.Sprintf("%d deliveries (every message twice)", want), func() bool { return len(rec.list()) >= want }, rec)
		for _, d := range rec.list() {
			keys[middleware.KeyOf(d.msg)] = true
		}
		if len(keys) != 10 {
			t.Fatalf("%d distinct keys delivered, want 10 (Keys sets one per tag and body)", len(keys))
		}
		s.waitFor("an effect for every key", func() bool {
			for k := range keys {
				if effects.Get(k) == 0 {
					return false
				}
			}
			return true
		}, rec)
		// Shutdown lets handler calls in flight finish, so a second effect, had Dedup let
		// one through, is counted before the check.
		s.stop(c)
		for k := range keys {
			if n := effects.Get(k); n != 1 {
				t.Errorf("key %s: %d effects, want 1", k, n)
			}
		}
		if tr.Features.ConsumeRetry && !failedOnce.Load() {
			t.Error("the planned failure did not happen")
		}
		t.Logf("%d deliveries of 20 stored messages (10 keys), 10 effects", len(rec.list()))
	})
}
