package retrytask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware/redismw"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errBrokerDown = errors.New("broker down")

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.UnixMilli(1_800_000_000_000)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// sent is one call of the recording Send.
type sent struct {
	msg *message.Message
	at  time.Time // by the clock given to the recorder
	err error
}

// recorder is a Send that records every call; fail decides the outcome.
type recorder struct {
	clock func() time.Time
	fail  func(msg *message.Message, at time.Time) error

	mu    sync.Mutex
	calls []sent
	ok    map[string]int // seq property → successful sends
}

func newRecorder(clock func() time.Time) *recorder {
	return &recorder{clock: clock, ok: map[string]int{}}
}

func (r *recorder) Send(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
	at := r.clock()
	var err error
	if r.fail != nil {
		err = r.fail(msg, at)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, sent{msg: msg.Clone(), at: at, err: err})
	if err != nil {
		return nil, err
	}
	r.ok[msg.Property("seq")]++
	return &message.SendResult{Status: message.SendOK, MsgID: "m" + msg.Property("seq")}, nil
}

func (r *recorder) okCount() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.ok))
	for k, v := range r.ok {
		out[k] = v
	}
	return out
}

func (r *recorder) callCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) successes() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sent
	for _, c := range r.calls {
		if c.err == nil {
			out = append(out, c)
		}
	}
	return out
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return testkit.Logger(t)
	}
	return testkit.Quiet()
}

func testMsg(seq int) *message.Message {
	m := message.NewMessage("Orders", []byte("order-"+strconv.Itoa(seq)))
	m.SetTag("Paid").SetKeys("k"+strconv.Itoa(seq), "order"+strconv.Itoa(seq))
	m.SetProperty("seq", strconv.Itoa(seq))
	return m
}

// park writes the record Park would write for msg, failed at `at`, and returns it.
func park(t *testing.T, c redis.UniversalClient, ns string, msg *message.Message, at time.Time) *redismw.ParkedRecord {
	t.Helper()
	r := redismw.NewParkedRecord(msg, errBrokerDown, at, nil)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(context.Background(), redismw.NewParkKeys(ns).Pending, b).Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

func newTask(t *testing.T, cfg Config) *Task {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	task, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := task.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return task
}

func runOnce(t *testing.T, task *Task, shard Shard) Stats {
	t.Helper()
	st, err := task.RunOnce(context.Background(), shard)
	if err != nil {
		t.Fatalf("RunOnce: %v (stats %v)", err, st)
	}
	return st
}

func counts(t *testing.T, task *Task) Counts {
	t.Helper()
	c, err := task.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// MinAge is honoured: nothing is resent before ParkedAtMs + MinAge; then every record is
// resent once with its topic, tag, keys, body and properties, and Redis is left empty.
func TestMinAgeAndResend(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		clk := newFakeClock()
		rec := newRecorder(clk.Now)
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, Clock: clk.Now})
		t0 := clk.Now()
		for i := 0; i < 3; i++ {
			park(t, c, ns, testMsg(i), t0)
		}
		clk.Advance(DefaultMinAge - time.Millisecond)
		if st := runOnce(t, task, Shard{}); st.Intake != 3 || st.Claimed != 0 || rec.callCount() != 0 {
			t.Fatalf("before MinAge: stats %v, %d sends", st, rec.callCount())
		}
		if got := counts(t, task); got.Scheduled != 3 || got.Pending != 0 {
			t.Fatalf("counts %+v, want 3 scheduled", got)
		}
		clk.Advance(time.Millisecond)
		if st := runOnce(t, task, Shard{}); st.Sent != 3 {
			t.Fatalf("at MinAge: stats %v", st)
		}
		for _, s := range rec.successes() {
			seq, _ := strconv.Atoi(s.msg.Property("seq"))
			want := testMsg(seq)
			if s.msg.Topic != want.Topic || s.msg.Tag() != "Paid" || fmt.Sprint(s.msg.Keys()) != fmt.Sprint(want.Keys()) ||
				string(s.msg.Body) != string(want.Body) || s.msg.DelayLevel() != 0 || s.msg.Property(PropertyLate) != "" {
				t.Fatalf("resent message %+v, want %+v", s.msg, want)
			}
		}
		if got := counts(t, task); got.Total() != 0 || got.Dead != 0 {
			t.Fatalf("after resend: %+v", got)
		}
		if st := runOnce(t, task, Shard{}); st.busy() {
			t.Fatalf("idle run did something: %v", st)
		}
	})
}

// A failed resend backs off (BackoffBase doubling, capped at BackoffMax) and the record
// moves to the dead list after MaxAttempts failed sends (Park's first one included),
// with Attempts and LastError updated.
func TestBackoffAndDeadList(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		clk := newFakeClock()
		rec := newRecorder(clk.Now)
		rec.fail = func(*message.Message, time.Time) error { return errBrokerDown }
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, Clock: clk.Now,
			MinAge: time.Minute, MaxAttempts: 4, BackoffBase: 10 * time.Second, BackoffMax: 15 * time.Second})
		park(t, c, ns, testMsg(1), clk.Now())
		step := func(d time.Duration, wantCalls int) {
			t.Helper()
			clk.Advance(d)
			runOnce(t, task, Shard{})
			if got := rec.callCount(); got != wantCalls {
				t.Fatalf("after +%v: %d sends, want %d", d, got, wantCalls)
			}
		}
		step(time.Minute, 1) // attempt 2 fails → due +10s
		step(10*time.Second-time.Millisecond, 1)
		step(time.Millisecond, 2) // attempt 3 fails → due +20s capped to +15s
		step(15*time.Second-time.Millisecond, 2)
		step(time.Millisecond, 3) // attempt 4 fails → dead
		step(time.Hour, 3)
		got := counts(t, task)
		if got.Total() != 0 || got.Dead != 1 {
			t.Fatalf("counts %+v, want only one dead record", got)
		}
		raw, err := c.LIndex(context.Background(), redismw.NewParkKeys(ns).Dead, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		var dead redismw.ParkedRecord
		if err := json.Unmarshal([]byte(raw), &dead); err != nil {
			t.Fatal(err)
		}
		if dead.Attempts != 4 || dead.LastError != errBrokerDown.Error() || dead.Properties["seq"] != "1" {
			t.Fatalf("dead record %+v", dead)
		}
	})
}

// A permanent error (the message breaks the rules) sends the record to the dead list at
// once; an undecodable pending element goes there as it is.
func TestPermanentAndUndecodableToDead(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		clk := newFakeClock()
		rec := newRecorder(clk.Now)
		rec.fail = func(*message.Message, time.Time) error {
			return &message.ValidationError{Field: "body", Limit: 4, Value: 9, Reason: "too large"}
		}
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, Clock: clk.Now, MinAge: -1})
		park(t, c, ns, testMsg(1), clk.Now())
		pk := redismw.NewParkKeys(ns)
		if err := c.RPush(context.Background(), pk.Pending, "not json").Err(); err != nil {
			t.Fatal(err)
		}
		st := runOnce(t, task, Shard{})
		if st.Dead != 2 || rec.callCount() != 1 {
			t.Fatalf("stats %v, %d sends", st, rec.callCount())
		}
		dead, _ := c.LRange(context.Background(), pk.Dead, 0, -1).Result()
		if len(dead) != 2 || dead[0] != "not json" {
			t.Fatalf("dead list %q", dead)
		}
	})
}

// A resender killed between claim and ack: the record stays in processing until its
// lease expires, then the next run reclaims and resends it — exactly once. The dead
// resender's late ack changes nothing.
func TestReclaimAfterLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		clk := newFakeClock()
		rec := newRecorder(clk.Now)
		cfg := Config{Client: c, Namespace: ns, Send: rec.Send, Clock: clk.Now, MinAge: -1, Lease: 2 * time.Minute}
		dying := newTask(t, cfg)
		live := newTask(t, cfg)
		park(t, c, ns, testMsg(7), clk.Now())

		// The dying resender takes the record in and claims it, then "crashes".
		ctx := context.Background()
		var st Stats
		if err := dying.intake(ctx, &st); err != nil {
			t.Fatal(err)
		}
		if err := dying.promote(ctx, &st); err != nil {
			t.Fatal(err)
		}
		cl, err := dying.claim(ctx, Shard{}.buckets())
		if err != nil || cl == nil {
			t.Fatalf("claim: %v %v", cl, err)
		}
		if got := counts(t, live); got.Processing != 1 || got.Total() != 1 {
			t.Fatalf("after claim: %+v", got)
		}

		clk.Advance(2*time.Minute - time.Millisecond)
		if st := runOnce(t, live, Shard{}); st.Reclaimed != 0 || rec.callCount() != 0 {
			t.Fatalf("before the lease expired: %v, %d sends", st, rec.callCount())
		}
		clk.Advance(time.Millisecond)
		if st := runOnce(t, live, Shard{}); st.Reclaimed != 1 || st.Sent != 1 {
			t.Fatalf("after the lease expired: %v", st)
		}
		clk.Advance(time.Hour)
		runOnce(t, live, Shard{})
		if got := rec.okCount(); got["7"] != 1 || len(got) != 1 {
			t.Fatalf("sends %v, want record 7 exactly once", got)
		}
		// The dead resender wakes up and acks: its token is gone, nothing changes.
		ok, err := dying.finish(ctx, cl, "ack", "", 0)
		if err != nil || ok {
			t.Fatalf("stale ack: ok=%v err=%v, want lease lost", ok, err)
		}
		if got := counts(t, live); got.Total() != 0 || got.Dead != 0 {
			t.Fatalf("final counts %+v", got)
		}
	})
}

// Overlapping runs — four resenders, two of them sharded — over many records never send
// one record twice, and together send all of them.
func TestOverlappingRunsSendOnce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		const n = 300
		rec := newRecorder(time.Now)
		cfg := Config{Client: c, Namespace: ns, Send: rec.Send, MinAge: -1, BatchSize: 7}
		for i := 0; i < n; i++ {
			park(t, c, ns, testMsg(i), time.Now())
		}
		shards := []Shard{{}, {}, {Index: 0, Total: 2}, {Index: 1, Total: 2}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, len(shards))
		for _, sh := range shards {
			task := newTask(t, cfg)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if _, err := task.RunOnce(ctx, sh); err != nil && ctx.Err() == nil {
						errs <- err
						return
					}
				}
			}()
		}
		probe := newTask(t, cfg)
		testkit.WaitFor(t, 60*time.Second, func() bool {
			cn, err := probe.Counts(context.Background())
			return err == nil && cn.Total() == 0 && len(rec.okCount()) == n
		}, func() string { return fmt.Sprintf("%d of %d sent", len(rec.okCount()), n) })
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for seq, k := range rec.okCount() {
			if k != 1 {
				t.Fatalf("record %s sent %d times", seq, k)
			}
		}
	})
}

// Sharding: each shard's run claims only its own records (bucket mod Total == Index) and
// leaves the others in their ready lists; the shards together send everything.
func TestShardsSplitWork(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		clk := newFakeClock()
		rec := newRecorder(clk.Now)
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, Clock: clk.Now, MinAge: -1})
		const n = 120
		ids := map[string]string{} // seq → record id
		for i := 0; i < n; i++ {
			r := park(t, c, ns, testMsg(i), clk.Now())
			ids[strconv.Itoa(i)] = r.ID
		}
		total := 3
		sentBefore := 0
		for idx := 0; idx < total; idx++ {
			sh := Shard{Index: idx, Total: total}
			want := 0
			for _, id := range ids {
				if sh.Owns(id) {
					want++
				}
			}
			st := runOnce(t, task, sh)
			if st.Sent != want {
				t.Fatalf("shard %d: sent %d, want %d (%v)", idx, st.Sent, want, st)
			}
			for _, s := range rec.successes()[sentBefore:] {
				if !sh.Owns(ids[s.msg.Property("seq")]) {
					t.Fatalf("shard %d sent record %s of another shard", idx, s.msg.Property("seq"))
				}
			}
			sentBefore += st.Sent
			if idx < total-1 {
				if got := counts(t, task); got.Ready != int64(n-sentBefore) {
					t.Fatalf("after shard %d: %d ready, want %d", idx, got.Ready, n-sentBefore)
				}
			}
		}
		if sentBefore != n || counts(t, task).Total() != 0 {
			t.Fatalf("sent %d of %d", sentBefore, n)
		}
	})
}

// The promote script's bucket (redis.sha1hex in Lua) is BucketOf's.
func TestBucketOfMatchesScript(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		clk := newFakeClock()
		task := newTask(t, Config{Client: c, Namespace: ns, Send: newRecorder(clk.Now).Send, Clock: clk.Now, MinAge: -1})
		var recs []*redismw.ParkedRecord
		for i := 0; i < 40; i++ {
			recs = append(recs, park(t, c, ns, testMsg(i), clk.Now()))
		}
		ctx := context.Background()
		var st Stats
		if err := task.intake(ctx, &st); err != nil {
			t.Fatal(err)
		}
		if err := task.promote(ctx, &st); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			pos, err := c.LPos(ctx, task.keys.ready[BucketOf(r.ID)], r.ID, redis.LPosArgs{}).Result()
			if err != nil || pos < 0 {
				t.Fatalf("record %s not in ready list %d: %v", r.ID, BucketOf(r.ID), err)
			}
		}
	})
}

// A message with a 5-minute delivery time (delay level 9) parked while the broker is
// down for 90 s arrives at its original time ± 1 s: it stays parked until then and is
// sent without a delay level, not late, and no attempt is used up. A plain message parked
// at the same time is resent once the broker is back (fake clock, scheduler every 250 ms).
func TestDeliveryTimeKept(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		clk := newFakeClock()
		t0 := clk.Now()
		rec := newRecorder(clk.Now)
		rec.fail = func(_ *message.Message, at time.Time) error {
			if at.Before(t0.Add(90 * time.Second)) {
				return errBrokerDown
			}
			return nil
		}
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, Clock: clk.Now,
			MinAge: time.Minute, BackoffBase: 10 * time.Second})
		delayed := testMsg(1)
		delayed.SetDelayLevel(9) // 5 minutes
		r := park(t, c, ns, delayed, t0)
		if want := t0.Add(5 * time.Minute).UnixMilli(); r.DeliverAtMs != want {
			t.Fatalf("DeliverAtMs %d, want %d", r.DeliverAtMs, want)
		}
		park(t, c, ns, testMsg(2), t0)
		for clk.Now().Before(t0.Add(7 * time.Minute)) {
			// A scheduler period of 250 ms around the delivery time; coarser elsewhere
			// only to keep the test short.
			step := 250 * time.Millisecond
			if d := clk.Now().Sub(t0); d < 4*time.Minute+50*time.Second || d > 5*time.Minute+10*time.Second {
				step = 2 * time.Second
			}
			clk.Advance(step)
			runOnce(t, task, Shard{})
		}
		var got *sent
		for _, s := range rec.successes() {
			if s.msg.Property("seq") == "1" {
				s := s
				got = &s
			}
		}
		if got == nil {
			t.Fatal("the delayed message was never sent")
		}
		if d := got.at.Sub(t0.Add(5 * time.Minute)); d < -time.Second || d > time.Second {
			t.Fatalf("delayed message sent %v from its delivery time, want within ±1s", d)
		}
		if got.msg.DelayLevel() != 0 || got.msg.Property(PropertyLate) != "" {
			t.Fatalf("delayed message sent with DELAY=%d late=%q", got.msg.DelayLevel(), got.msg.Property(PropertyLate))
		}
		if ok := rec.okCount(); ok["1"] != 1 || ok["2"] != 1 {
			t.Fatalf("sends %v", ok)
		}
		for _, s := range rec.calls {
			if s.msg.Property("seq") == "1" && s.err != nil {
				t.Fatalf("the delayed message was tried during the outage at %v", s.at.Sub(t0))
			}
		}
	})
}

// A delayed message whose delivery time passed while it was parked is sent at once
// without a delay level and marked late (SLUICE_LATE, SLUICE_LATE_MS).
func TestPastDueSentLate(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		clk := newFakeClock()
		t0 := clk.Now()
		rec := newRecorder(clk.Now)
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, Clock: clk.Now, MinAge: time.Minute})
		m := testMsg(3)
		m.SetDelayLevel(3) // 10 s
		park(t, c, ns, m, t0)
		clk.Advance(time.Minute)
		if st := runOnce(t, task, Shard{}); st.Sent != 1 || st.Late != 1 {
			t.Fatalf("stats %v", st)
		}
		s := rec.successes()[0]
		if s.msg.Property(PropertyLate) != "true" || s.msg.Property(PropertyLateMs) != "50000" || s.msg.DelayLevel() != 0 {
			t.Fatalf("late message properties %v", s.msg.Properties)
		}
	})
}

// The built-in scheduler with the real clock: a timed message due 3 s after it was
// parked (while the broker was down for 1 s) is sent within ±1 s of its delivery time.
func TestSchedulerKeepsDeliveryTime(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		t0 := time.Now()
		deliverAt := t0.Add(3 * time.Second)
		rec := newRecorder(time.Now)
		rec.fail = func(_ *message.Message, at time.Time) error {
			if at.Before(t0.Add(time.Second)) {
				return errBrokerDown
			}
			return nil
		}
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, MinAge: -1, BackoffBase: 100 * time.Millisecond})
		m := testMsg(4)
		m.SetProperty(message.PropertyTimerDeliverMs, strconv.FormatInt(deliverAt.UnixMilli(), 10))
		park(t, c, ns, m, t0)
		park(t, c, ns, testMsg(5), t0) // a plain one, resent once the "broker" is back
		if err := task.Start(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, func() bool { return rec.okCount()["4"] == 1 }, func() string { return "timed message not sent" })
		s := rec.successes()
		for _, x := range s {
			if x.msg.Property("seq") != "4" {
				continue
			}
			if d := x.at.Sub(time.UnixMilli(deliverAt.UnixMilli())); d < -time.Second || d > time.Second {
				t.Fatalf("timed message sent %v from its delivery time", d)
			}
		}
		testkit.WaitFor(t, 10*time.Second, func() bool { return rec.okCount()["5"] == 1 }, func() string { return "plain message not sent" })
	})
}

// A cancelled run stops between records: what was claimed is finished, the rest stays.
func TestCancelStopsBetweenRecords(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rec := newRecorder(time.Now)
		rec.fail = func(*message.Message, time.Time) error { cancel(); return nil } // cancel during the first send
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, MinAge: -1})
		for i := 0; i < 5; i++ {
			park(t, c, ns, testMsg(i), time.Now())
		}
		st, err := task.RunOnce(ctx, Shard{})
		if !errors.Is(err, context.Canceled) || st.Sent != 1 || st.Claimed != 1 {
			t.Fatalf("RunOnce: %v %v", st, err)
		}
		if got := counts(t, task); got.Total() != 4 || got.Processing != 0 {
			t.Fatalf("counts %+v, want 4 left and nothing in processing", got)
		}
	})
}

// Shutdown mid-batch: the in-flight send finishes, the rest stays in Redis, Shutdown
// returns promptly; with a Send that hangs, Shutdown's deadline aborts it and the record
// is handed back. Nothing is lost, no goroutine is left (goleak in TestMain).
func TestShutdownMidBatch(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		for _, hang := range []bool{false, true} {
			t.Run(fmt.Sprintf("hang=%v", hang), func(t *testing.T) {
				ns := redistest.NS(t)
				const n = 40
				inSend := make(chan struct{}, n)
				rec := newRecorder(time.Now)
				release := make(chan struct{})
				var calls atomic.Int32
				send := func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
					inSend <- struct{}{}
					if hang {
						<-ctx.Done() // a send that only ends when aborted
						return nil, ctx.Err()
					}
					if calls.Add(1) == 3 {
						<-release // the third send is in flight when Shutdown starts
					}
					return rec.Send(ctx, m)
				}
				task, err := New(Config{Client: c, Namespace: ns, Send: send, MinAge: -1, Logger: testLogger(t)})
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < n; i++ {
					park(t, c, ns, testMsg(i), time.Now())
				}
				if err := task.Start(20 * time.Millisecond); err != nil {
					t.Fatal(err)
				}
				<-inSend
				if !hang {
					<-inSend
					<-inSend
				}
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				if !hang {
					// Let the in-flight send finish once Shutdown has begun.
					go func() { <-task.soft.Done(); close(release) }()
				}
				start := time.Now()
				err = task.Shutdown(ctx)
				if took := time.Since(start); took > 5*time.Second {
					t.Fatalf("Shutdown took %v", took)
				}
				if hang != (err != nil) || (hang && !errors.Is(err, context.DeadlineExceeded)) {
					t.Fatalf("Shutdown: %v", err)
				}
				got := counts(t, task)
				sentN := len(rec.okCount())
				if got.Processing != 0 || got.Total()+int64(sentN) != n || got.Dead != 0 {
					t.Fatalf("after Shutdown: %+v and %d sent, want %d in all and nothing in processing", got, sentN, n)
				}
				if !hang && sentN != 3 {
					t.Fatalf("sent %d, want the 3 started before Shutdown", sentN)
				}
				if _, err := task.RunOnce(context.Background(), Shard{}); !errors.Is(err, ErrClosed) {
					t.Fatalf("RunOnce after Shutdown: %v", err)
				}
			})
		}
	})
}

func TestConfigAndShardValidation(t *testing.T) {
	c := redistest.New(t)
	send := newRecorder(time.Now).Send
	bad := []Config{
		{Send: send},
		{Client: c},
		{Client: c, Send: send, Namespace: "a{b"},
		{Client: c, Send: send, MaxAttempts: -1},
		{Client: c, Send: send, Lease: time.Minute, SendTimeout: 31 * time.Second},
		{Client: c, Send: send, DelayLevels: []time.Duration{time.Second, 0}},
	}
	for i, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("config %d accepted: %+v", i, cfg)
		}
	}
	task := newTask(t, Config{Client: c, Send: send})
	for _, sh := range []Shard{{Index: 3, Total: 3}, {Index: -1, Total: 2}, {Index: 1, Total: 0}} {
		var se *ShardError
		if _, err := task.RunOnce(context.Background(), sh); !errors.As(err, &se) {
			t.Errorf("shard %+v: %v, want *ShardError", sh, err)
		}
	}
	if got := (Shard{Index: 70, Total: 80}).buckets(); len(got) != 0 {
		t.Errorf("shard 70/80 owns buckets %v", got)
	}
	if err := task.Run(context.Background(), 0); err == nil {
		t.Error("Run every 0 accepted")
	}
}
