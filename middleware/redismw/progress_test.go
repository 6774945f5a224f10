package redismw

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

func newProgress(t *testing.T, c redis.UniversalClient, ns string, mod func(*ProgressConfig)) *ProgressTracker {
	t.Helper()
	cfg := ProgressConfig{Client: c, Prefix: "sluice:dedup:" + ns, Logger: testkit.Logger(t)}
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewProgressTracker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProgressConfigValidate(t *testing.T) {
	c := redistest.New(t)
	for _, tc := range []struct {
		cfg  ProgressConfig
		want string
	}{
		{ProgressConfig{}, "Client"},
		{ProgressConfig{Client: c, TTL: -1}, "TTL"},
		{ProgressConfig{Client: c, Prefix: "{x}"}, "Prefix"},
	} {
		var ce *config.Error
		if _, err := NewProgressTracker(tc.cfg); !errors.As(err, &ce) || ce.Package != "middleware" || ce.Field != tc.want || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want error naming %s", tc.cfg, err, tc.want)
		}
	}
}

func TestProgressMarkers(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		p := newProgress(t, tg.Client, tg.NS, func(c *ProgressConfig) { c.TTL = time.Hour })
		eff := testkit.NewEffects()
		fail := true
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if fail {
				fail = false
				return message.ReconsumeLater, errors.New("transient")
			}
			eff.Add(middleware.KeyOf(msgs[0]))
			return message.ConsumeSuccess, nil
		}, p.Middleware())
		msg := testkit.NewExt("T", "", "k1", "b")
		if st, err := p.ProgressState(ctx, "k1"); st != MarkerNone || err != nil {
			t.Fatalf("initial %v %v", st, err)
		}
		if res, err, _ := testkit.Call(h, msg); res != message.ReconsumeLater || err == nil {
			t.Fatalf("failing run: %v %v", res, err)
		}
		if st, _ := p.ProgressState(ctx, "k1"); st != MarkerFailed {
			t.Fatalf("after failure %v", st)
		}
		if res, err, _ := testkit.Call(h, msg); res != message.ConsumeSuccess || err != nil {
			t.Fatalf("second run: %v %v", res, err)
		}
		if st, _ := p.ProgressState(ctx, "k1"); st != MarkerDone {
			t.Fatalf("after success %v", st)
		}
		if ttl := tg.Client.PTTL(ctx, p.MarkerKey("k1")).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("TTL %v", ttl)
		}
		res, err, reasons := testkit.Call(h, msg)
		if res != message.ConsumeSuccess || err != nil || !testkit.HasReason(reasons, middleware.ReasonDuplicate) || eff.Get("k1") != 1 {
			t.Fatalf("duplicate: %v %v %v effects %d", res, err, reasons, eff.Get("k1"))
		}
		// A failed marker never replaces a done one.
		if err := p.Mark(ctx, "k1", MarkerFailed); err != nil {
			t.Fatal(err)
		}
		if st, _ := p.ProgressState(ctx, "k1"); st != MarkerDone {
			t.Fatalf("done downgraded to %v", st)
		}
		if err := p.Mark(ctx, "k1", MarkerNone); err != nil {
			t.Fatal(err)
		}
		if st, _ := p.ProgressState(ctx, "k1"); st != MarkerNone {
			t.Fatalf("after delete %v", st)
		}
		if err := p.Mark(ctx, "k1", MarkerState(7)); err == nil {
			t.Fatal("bad state accepted")
		}
	})
}

func TestProgressMarkOnlyAndPanic(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		p := newProgress(t, tg.Client, tg.NS, func(c *ProgressConfig) { c.MarkOnly = true })
		rt := redistest.CountRoundTrips(tg.Client)
		runs := 0
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if runs++; runs == 3 {
				panic("boom")
			}
			return message.ConsumeSuccess, nil
		}, p.Middleware())
		msg := testkit.NewExt("T", "", "k2", "b")
		testkit.Call(h, msg)
		testkit.Call(h, msg) // MarkOnly: runs again although done
		if runs != 2 {
			t.Fatalf("runs %d", runs)
		}
		res, err, _ := testkit.Call(h, msg)
		var pe *middleware.PanicError
		if res != message.ReconsumeLater || !errors.As(err, &pe) {
			t.Fatalf("panic: %v %v", res, err)
		}
		if st, _ := p.ProgressState(ctx, "k2"); st != MarkerDone {
			t.Fatalf("panic after done downgraded the marker to %v", st)
		}
		if n := rt.N(); n < 3 || n > 5 { // one mark per run (+ one NOSCRIPT retry at most), one GET
			t.Fatalf("round trips %d for 3 MarkOnly runs and one read", n)
		}
	})
}

func TestProgressRedisDown(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		c, sw := tg.Outage(t)
		sw.Down()
		for _, failOpen := range []bool{false, true} {
			p := newProgress(t, c, tg.NS, func(cfg *ProgressConfig) { cfg.FailOpen = failOpen })
			ran := false
			h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				ran = true
				return message.ConsumeSuccess, nil
			}, p.Middleware())
			res, err, reasons := testkit.Call(h, testkit.NewExt("T", "", "k3", "b"))
			if failOpen {
				// Ran and acknowledged; the marker could not be written.
				if !ran || res != message.ConsumeSuccess || err != nil || !testkit.HasReason(reasons, middleware.ReasonFailOpen) || !testkit.HasReason(reasons, middleware.ReasonMarkerNotSaved) {
					t.Fatalf("fail open: ran %v %v %v %v", ran, res, err, reasons)
				}
			} else if ran || res != message.ReconsumeLater || !errors.Is(err, ErrRedisUnavailable) {
				t.Fatalf("fail closed: ran %v %v %v", ran, res, err)
			}
		}
	})
}

func TestProgressBatch(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		p := newProgress(t, tg.Client, tg.NS, nil)
		eff := testkit.NewEffects()
		h := middleware.ChainConsume(eff.OK(), p.Middleware())
		if err := p.Mark(ctx, "b", MarkerDone); err != nil {
			t.Fatal(err)
		}
		res, err, reasons := testkit.Call(h, testkit.NewExt("T", "", "a", "1"), testkit.NewExt("T", "", "b", "2"), testkit.NewExt("T", "", "c", "3"))
		if res != message.ConsumeSuccess || err != nil || !testkit.HasReason(reasons, middleware.ReasonDuplicate) {
			t.Fatalf("%v %v %v", res, err, reasons)
		}
		if eff.Get("a") != 1 || eff.Get("b") != 0 || eff.Get("c") != 1 {
			t.Fatalf("effects %v", eff)
		}
	})
}
