package redismw

import (
	"bufio"
	"context"
	"crypto/md5"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// failingSend returns a SendFunc that fails every call with err and counts the calls.
func failingSend(err error, calls *atomic.Int64) middleware.SendFunc {
	return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		calls.Add(1)
		return nil, err
	}
}

func newParker(t *testing.T, c redis.UniversalClient, ns string, mod func(*ParkConfig)) *Parker {
	t.Helper()
	cfg := ParkConfig{Client: c, Namespace: ns, Logger: testkit.Logger(t)}
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewParker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// pending returns the records in the pending list.
func pendingRecords(t *testing.T, c redis.UniversalClient, keys ParkKeys) []*ParkedRecord {
	t.Helper()
	raw, err := c.LRange(context.Background(), keys.Pending, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*ParkedRecord, 0, len(raw))
	for _, s := range raw {
		var r ParkedRecord
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			t.Fatalf("record %q: %v", s, err)
		}
		out = append(out, &r)
	}
	return out
}

// spoolLines returns the JSON lines of a spool file (none if it does not exist).
func spoolLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// waitReachable waits until c answers PING: after an outage go-redis keeps failing fast
// for up to a second before it dials again.
func waitReachable(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() bool { return c.Ping(context.Background()).Err() == nil })
}

// checkOnce asserts that recs hold exactly the ids, each once.
func checkOnce(t *testing.T, recs []*ParkedRecord, ids []string) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.ID]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Fatalf("record %s present %d times", id, seen[id])
		}
	}
	if len(recs) != len(ids) {
		t.Fatalf("%d records, want %d", len(recs), len(ids))
	}
}

func TestParkConfigValidate(t *testing.T) {
	c := redistest.New(t)
	for _, tc := range []struct {
		cfg  ParkConfig
		want string
	}{
		{ParkConfig{}, "Client"},
		{ParkConfig{Client: c, Namespace: "a}b"}, "Namespace"},
		{ParkConfig{Client: c, SpoolPath: "/does/not/exist/spool"}, "SpoolPath"},
		{ParkConfig{Client: c, DelayLevels: []time.Duration{time.Second, 0}}, "DelayLevels[1]"},
		{ParkConfig{Client: c, DrainInterval: -1}, "DrainInterval"},
		{ParkConfig{Client: c, SeenTTL: time.Millisecond}, "SeenTTL"},
	} {
		var ce *config.Error
		if _, err := NewParker(tc.cfg); !errors.As(err, &ce) || ce.Package != "middleware" || ce.Field != tc.want || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want error naming %s", tc.cfg, err, tc.want)
		}
	}
	// One Parker per spool file.
	path := filepath.Join(t.TempDir(), "spool")
	p1, err := NewParker(ParkConfig{Client: c, SpoolPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewParker(ParkConfig{Client: c, SpoolPath: path}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Parker on one spool: %v", err)
	}
	if err := p1.Close(); err != nil {
		t.Fatal(err)
	}
	p2, err := NewParker(ParkConfig{Client: c, SpoolPath: path})
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	p2.Close()
}

func TestParkKeysAndRecord(t *testing.T) {
	k := NewParkKeys("orders")
	if k.Pending != "sluice:park:{orders}:pending" || k.Processing != "sluice:park:{orders}:processing" || k.Dead != "sluice:park:{orders}:dead" {
		t.Fatalf("%+v", k)
	}
	if NewParkKeys("").Pending != "sluice:park:{default}:pending" {
		t.Fatal("default namespace")
	}
	now := time.UnixMilli(1_700_000_000_000)
	m := message.NewMessage("T", []byte("b")).SetTag("tg").SetKeys("k1", "k2").SetDelayLevel(99)
	r := NewParkedRecord(m, errors.New("x"), now, nil)
	if r.DeliverAtMs != now.UnixMilli()+(2*time.Hour).Milliseconds() { // clamped to level 18
		t.Fatalf("clamped delay: %d", r.DeliverAtMs-now.UnixMilli())
	}
	m.SetDelayLevel(0).SetProperty(message.PropertyTimerDeliverMs, "1700000300000")
	if r := NewParkedRecord(m, nil, now, nil); r.DeliverAtMs != 1700000300000 || r.LastError != "" {
		t.Fatalf("timer message: %+v", r)
	}
}

func TestParkRetriableErrorParksFullRecord(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		now := time.UnixMilli(1_700_000_000_123)
		p := newParker(t, tg.Client, tg.NS, func(c *ParkConfig) { c.Clock = func() time.Time { return now } })
		cause := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
		var calls atomic.Int64
		send := middleware.ChainSend(failingSend(cause, &calls), middleware.Keys(), p.Middleware())
		msg := message.NewMessage("Orders", []byte("order 42 paid")).SetTag("paid").SetDelayLevel(5).
			SetProperty("traceId", "abc").SetShardingKey("user-7")
		msg.Flag = 7
		res, err := send(context.Background(), msg)
		var pe *middleware.ParkedError
		if res != nil || !errors.As(err, &pe) || !errors.Is(err, middleware.ErrParked) || !errors.Is(err, cause) || errors.Unwrap(err) != cause || pe.Spooled {
			t.Fatalf("send: %v, %v", res, err)
		}
		if calls.Load() != 1 {
			t.Fatalf("producer called %d times", calls.Load())
		}
		recs := pendingRecords(t, tg.Client, p.Keys())
		if len(recs) != 1 {
			t.Fatalf("%d records parked", len(recs))
		}
		r := recs[0]
		wantKey := fmt.Sprintf("paid_%x", md5.Sum([]byte("order 42 paid")))
		if r.ID != pe.RecordID || len(r.ID) != 32 || r.Topic != "Orders" || r.Tags != "paid" || len(r.Keys) != 1 || r.Keys[0] != wantKey ||
			string(r.Body) != "order 42 paid" || r.Flag != 7 || r.DelayLevel != 5 ||
			r.DeliverAtMs != now.UnixMilli()+time.Minute.Milliseconds() || // level 5 = 1m
			r.FirstFailedAtMs != now.UnixMilli() || r.ParkedAtMs != now.UnixMilli() || r.Attempts != 1 ||
			r.LastError != cause.Error() || r.Properties["traceId"] != "abc" || r.Properties[message.PropertyShardingKey] != "user-7" {
			t.Fatalf("record %+v", r)
		}
		for _, name := range []string{message.PropertyTags, message.PropertyKeys, message.PropertyDelayTimeLevel} {
			if _, ok := r.Properties[name]; ok {
				t.Fatalf("property %s kept in Properties", name)
			}
		}
		// The record rebuilds the message (without the delay).
		m := r.Message()
		if m.Topic != "Orders" || m.Tag() != "paid" || middleware.KeyOf(&message.MessageExt{Message: *m}) != wantKey || string(m.Body) != "order 42 paid" ||
			m.Flag != 7 || m.DelayLevel() != 0 || m.Property("traceId") != "abc" || m.ShardingKey() != "user-7" {
			t.Fatalf("rebuilt %+v", m)
		}
		// The JSON field names are the contract with retrytask.
		raw := tg.Client.LIndex(context.Background(), p.Keys().Pending, 0).Val()
		for _, f := range []string{`"id"`, `"topic"`, `"tags"`, `"keys"`, `"body"`, `"flag"`, `"properties"`, `"delayLevel"`, `"deliverAtMs"`, `"firstFailedAtMs"`, `"parkedAtMs"`, `"attempts"`, `"lastError"`} {
			if !strings.Contains(raw, f) {
				t.Fatalf("JSON lacks %s: %s", f, raw)
			}
		}
		// A successful send parks nothing and passes the result through.
		ok := middleware.ChainSend(func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
			return &message.SendResult{MsgID: "stored"}, nil
		}, p.Middleware())
		if res, err := ok(context.Background(), msg); err != nil || res.MsgID != "stored" {
			t.Fatalf("success: %v %v", res, err)
		}
		if n := tg.Client.LLen(context.Background(), p.Keys().Pending).Val(); n != 1 {
			t.Fatalf("pending %d after a success", n)
		}
	})
}

type permanentErr struct{}

func (permanentErr) Error() string   { return "topic not allowed" }
func (permanentErr) Permanent() bool { return true }

type retryableErr struct{ ok bool }

func (e retryableErr) Error() string   { return fmt.Sprintf("broker code (retryable %v)", e.ok) }
func (e retryableErr) Retryable() bool { return e.ok }

func TestParkPermanentErrorsReturnedNotParked(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		p := newParker(t, tg.Client, tg.NS, func(c *ParkConfig) { c.SpoolPath = filepath.Join(t.TempDir(), "spool") })
		for _, cause := range []error{
			&message.ValidationError{Field: "body", Reason: "too large", Limit: 4 << 20, Value: 5 << 20},
			fmt.Errorf("wrapped: %w", &message.ValidationError{Field: "topic", Reason: "empty"}),
			permanentErr{},
			fmt.Errorf("producer: %w", retryableErr{ok: false}),
			context.Canceled,
		} {
			var calls atomic.Int64
			_, err := middleware.ChainSend(failingSend(cause, &calls), p.Middleware())(context.Background(), message.NewMessage("T", []byte("b")))
			if err != cause || errors.Is(err, middleware.ErrParked) || calls.Load() != 1 {
				t.Fatalf("%v: got %v", cause, err)
			}
		}
		if n := tg.Client.LLen(context.Background(), p.Keys().Pending).Val(); n != 0 || p.SpoolPending() {
			t.Fatalf("parked %d, spool pending %v", n, p.SpoolPending())
		}
		// Retryable() true, timeouts and plain errors are retriable.
		for _, cause := range []error{retryableErr{ok: true}, context.DeadlineExceeded, errors.New("producer: closed")} {
			if !DefaultRetriable(cause) {
				t.Fatalf("%v not retriable", cause)
			}
		}
	})
}

// TestParkRedisDownSpoolsThenDrains parks while Redis is unreachable (records go to the
// fsynced spool), then drains them into Redis when it is back: none lost, none doubled.
func TestParkRedisDownSpoolsThenDrains(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		c, sw := tg.Outage(t)
		path := filepath.Join(t.TempDir(), "park.spool")
		p := newParker(t, c, tg.NS, func(cfg *ParkConfig) { cfg.SpoolPath = path; cfg.RedisTimeout = 500 * time.Millisecond })
		cause := errors.New("broker unreachable")
		var calls atomic.Int64
		send := middleware.ChainSend(failingSend(cause, &calls), p.Middleware())

		sw.Down()
		const n = 20
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ { // concurrent parks while Redis is down
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := send(ctx, message.NewMessage("T", []byte(fmt.Sprintf("msg-%d", i))))
				var pe *middleware.ParkedError
				if !errors.As(err, &pe) || !pe.Spooled || pe.RedisErr == nil || !errors.Is(err, cause) {
					t.Errorf("park %d while redis down: %v", i, err)
					return
				}
				ids[i] = pe.RecordID
			}(i)
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		if lines := spoolLines(t, path); len(lines) != n {
			t.Fatalf("spool has %d lines, want %d", len(lines), n)
		}
		if _, err := p.DrainSpool(ctx); err == nil {
			t.Fatal("drain while redis is down succeeded")
		}

		if err := sw.Up(); err != nil {
			t.Fatal(err)
		}
		waitReachable(t, c)
		st, err := p.DrainSpool(ctx)
		if err != nil || st.Moved != n || st.Skipped != 0 || st.Bad != 0 {
			t.Fatalf("drain: %+v %v", st, err)
		}
		checkOnce(t, pendingRecords(t, tg.Client, p.Keys()), ids)
		if p.SpoolPending() {
			t.Fatal("spool still pending after a full drain")
		}
		if st, err := p.DrainSpool(ctx); err != nil || st != (DrainStats{}) {
			t.Fatalf("second drain: %+v %v", st, err)
		}
		checkOnce(t, pendingRecords(t, tg.Client, p.Keys()), ids)
	})
}

// TestParkDrainInterruptedAndRerun cuts Redis in the middle of a drain and restarts the
// Parker (as a process restart would), adds a torn line, and drains again: every record
// lands once, the torn line goes to the bad file.
func TestParkDrainInterruptedAndRerun(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		c, sw := tg.Outage(t)
		path := filepath.Join(t.TempDir(), "park.spool")
		cfg := ParkConfig{Client: c, Namespace: tg.NS, SpoolPath: path, RedisTimeout: 500 * time.Millisecond, Logger: testkit.Logger(t)}
		p1, err := NewParker(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		send := middleware.ChainSend(failingSend(errors.New("timeout"), &calls), p1.Middleware())
		sw.Down()
		const n = 10
		var ids []string
		for i := 0; i < n; i++ {
			_, err := send(ctx, message.NewMessage("T", []byte(fmt.Sprintf("m%d", i))))
			var pe *middleware.ParkedError
			if !errors.As(err, &pe) || !pe.Spooled {
				t.Fatalf("park %d: %v", i, err)
			}
			ids = append(ids, pe.RecordID)
		}
		if err := sw.Up(); err != nil {
			t.Fatal(err)
		}
		waitReachable(t, c)
		// Cut Redis after the 4th push of the drain.
		var pushes atomic.Int64
		c.AddHook(cutAfter{n: 4, pushes: &pushes, once: &sync.Once{}, cut: sw.Down})
		st, err := p1.DrainSpool(ctx)
		if err == nil || st.Moved != 4 {
			t.Fatalf("interrupted drain: %+v %v", st, err)
		}
		if _, err := os.Stat(path + ".draining"); err != nil {
			t.Fatalf("draining file gone after an interrupted drain: %v", err)
		}
		// A park during the outage goes to a fresh spool file.
		_, err = send(ctx, message.NewMessage("T", []byte("late")))
		var pe *middleware.ParkedError
		if !errors.As(err, &pe) || !pe.Spooled {
			t.Fatalf("late park: %v", err)
		}
		ids = append(ids, pe.RecordID)
		if err := p1.Close(); err != nil { // the process goes away
			t.Fatal(err)
		}
		// A torn, half-written line at the end of the draining file.
		f, err := os.OpenFile(path+".draining", os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(`{"id":"TORN","topic":"T","bo`)
		f.Close()

		if err := sw.Up(); err != nil {
			t.Fatal(err)
		}
		waitReachable(t, c)
		p2, err := NewParker(cfg) // the restarted process
		if err != nil {
			t.Fatal(err)
		}
		defer p2.Close()
		st, err = p2.DrainSpool(ctx)
		if err != nil || st.Moved != n-4+1 || st.Skipped != 4 || st.Bad != 1 {
			t.Fatalf("rerun: %+v %v", st, err)
		}
		checkOnce(t, pendingRecords(t, tg.Client, p2.Keys()), ids)
		if bad := spoolLines(t, path+".bad"); len(bad) != 1 || !strings.Contains(bad[0], "TORN") {
			t.Fatalf("bad file %q", bad)
		}
		for _, f := range []string{path + ".draining"} {
			if _, err := os.Stat(f); !os.IsNotExist(err) {
				t.Fatalf("%s left: %v", f, err)
			}
		}
		// Appending after a torn line starts a new line: a spool file ending mid-line.
		if err := os.WriteFile(path, []byte(`{"id":"HALF"`), 0o600); err != nil {
			t.Fatal(err)
		}
		sw.Down()
		_, err = middleware.ChainSend(failingSend(errors.New("timeout"), &calls), p2.Middleware())(ctx, message.NewMessage("T", []byte("after-torn")))
		if !errors.As(err, &pe) || !pe.Spooled {
			t.Fatalf("park after torn: %v", err)
		}
		ids = append(ids, pe.RecordID)
		if err := sw.Up(); err != nil {
			t.Fatal(err)
		}
		waitReachable(t, c)
		if st, err := p2.DrainSpool(ctx); err != nil || st.Moved != 1 || st.Bad != 1 {
			t.Fatalf("drain after torn: %+v %v", st, err)
		}
		checkOnce(t, pendingRecords(t, tg.Client, p2.Keys()), ids)
	})
}

// cutAfter is a go-redis hook that lets n EVAL/EVALSHA calls succeed and then calls cut
// (once) before the next one.
type cutAfter struct {
	n      int64
	pushes *atomic.Int64
	once   *sync.Once
	cut    func()
}

func (h cutAfter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h cutAfter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		if h.pushes.Load() == h.n {
			h.once.Do(h.cut)
		}
		err := next(ctx, cmd)
		if err == nil {
			h.pushes.Add(1)
		}
		return err
	}
}
func (h cutAfter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestParkNoSpoolReturnsParkFailed(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		c, sw := tg.Outage(t)
		p := newParker(t, c, tg.NS, nil)
		sw.Down()
		cause := errors.New("broker down")
		var calls atomic.Int64
		_, err := middleware.ChainSend(failingSend(cause, &calls), p.Middleware())(context.Background(), message.NewMessage("T", []byte("b")))
		var pf *middleware.ParkFailedError
		if !errors.As(err, &pf) || !errors.Is(err, cause) || errors.Is(err, middleware.ErrParked) || !strings.Contains(err.Error(), "could not be parked") {
			t.Fatalf("got %v", err)
		}
		if st, err := p.DrainSpool(context.Background()); err != nil || st != (DrainStats{}) {
			t.Fatalf("drain without spool: %+v %v", st, err)
		}
	})
}

func TestParkBackgroundDrain(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		c, sw := tg.Outage(t)
		path := filepath.Join(t.TempDir(), "spool")
		p := newParker(t, c, tg.NS, func(cfg *ParkConfig) {
			cfg.SpoolPath = path
			cfg.DrainInterval = 20 * time.Millisecond
			cfg.RedisTimeout = 300 * time.Millisecond
		})
		var calls atomic.Int64
		send := middleware.ChainSend(failingSend(errors.New("timeout"), &calls), p.Middleware())
		sw.Down()
		var ids []string
		for i := 0; i < 5; i++ {
			_, err := send(ctx, message.NewMessage("T", []byte(fmt.Sprint(i))))
			var pe *middleware.ParkedError
			if !errors.As(err, &pe) || !pe.Spooled {
				t.Fatalf("park: %v", err)
			}
			ids = append(ids, pe.RecordID)
		}
		if err := sw.Up(); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, func() bool { return tg.Client.LLen(ctx, p.Keys().Pending).Val() == 5 && !p.SpoolPending() })
		checkOnce(t, pendingRecords(t, tg.Client, p.Keys()), ids)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		// After Close the spool is gone: a park that needs it fails loudly.
		sw.Down()
		_, err := send(ctx, message.NewMessage("T", []byte("after close")))
		var pf *middleware.ParkFailedError
		if !errors.As(err, &pf) || !errors.Is(err, ErrSpoolClosed) {
			t.Fatalf("park after Close: %v", err)
		}
	})
}
