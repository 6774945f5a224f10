package redismw

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

func newDeduper(t *testing.T, c redis.UniversalClient, ns string, mod func(*DedupConfig)) *Deduper {
	t.Helper()
	cfg := DedupConfig{Client: c, Prefix: "sluice:dedup:" + ns, LockExpiry: 600 * time.Millisecond, Logger: testkit.Logger(t)}
	if mod != nil {
		mod(&cfg)
	}
	d, err := NewDeduper(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDedupConfigValidate(t *testing.T) {
	c := redistest.New(t)
	for _, tc := range []struct {
		cfg  DedupConfig
		want string
	}{
		{DedupConfig{}, "Client"},
		{DedupConfig{Client: c, LockExpiry: time.Millisecond}, "LockExpiry"},
		{DedupConfig{Client: c, DoneTTL: -time.Second}, "DoneTTL"},
		{DedupConfig{Client: c, Prefix: "a{b}"}, "Prefix"},
	} {
		var ce *config.Error
		if _, err := NewDeduper(tc.cfg); !errors.As(err, &ce) || ce.Package != "middleware" || ce.Field != tc.want || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewDeduper(%+v) = %v, want error naming %s", tc.cfg, err, tc.want)
		}
	}
	d, err := NewDeduper(DedupConfig{Client: c})
	if err != nil || d.cfg.Prefix != DefaultMarkerPrefix || d.cfg.DoneTTL != DefaultDoneTTL || d.cfg.LockExpiry != DefaultLockExpiry {
		t.Fatalf("defaults: %+v, %v", d, err)
	}
}

func TestDedupSequentialDuplicates(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		d := newDeduper(t, tg.Client, tg.NS, nil)
		eff := testkit.NewEffects()
		h := middleware.ChainConsume(eff.OK(), d.Middleware())
		msg := testkit.NewExt("Pay", "paid", "order-1", "body")
		for i := 0; i < 3; i++ {
			res, err, reasons := testkit.Call(h, msg)
			if res != message.ConsumeSuccess || err != nil {
				t.Fatalf("delivery %d: %v %v", i, res, err)
			}
			if dup := testkit.HasReason(reasons, middleware.ReasonDuplicate); dup != (i > 0) {
				t.Fatalf("delivery %d: reasons %v", i, reasons)
			}
		}
		if n := eff.Get("order-1"); n != 1 {
			t.Fatalf("effects %d, want 1", n)
		}
		if st, err := d.ProgressState(ctx, "order-1"); err != nil || st != MarkerDone {
			t.Fatalf("marker %v %v", st, err)
		}
		if n := tg.Client.Exists(ctx, d.LockKey("order-1")).Val(); n != 0 {
			t.Fatal("lock not released")
		}
		ttl := tg.Client.PTTL(ctx, d.MarkerKey("order-1")).Val()
		if ttl <= 71*time.Hour || ttl > DefaultDoneTTL {
			t.Fatalf("marker TTL %v, want about %v", ttl, DefaultDoneTTL)
		}
	})
}

// TestDedupConcurrentConsumers delivers the same message to two consumers (separate
// Dedupers and clients, as two processes would have) at the same time, three times each,
// redelivering whatever comes back ReconsumeLater.
func TestDedupConcurrentConsumers(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		eff := testkit.NewEffects()
		started := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			once.Do(func() { close(started) })
			<-release // hold the lock until the other consumer was turned away
			eff.Add(middleware.KeyOf(msgs[0]))
			return message.ConsumeSuccess, nil
		}
		chains := []middleware.ConsumeFunc{
			middleware.ChainConsume(handler, newDeduper(t, tg.Client, tg.NS, nil).Middleware()),
			middleware.ChainConsume(handler, newDeduper(t, redistest.Dial(t, tg.Addr), tg.NS, nil).Middleware()),
		}
		var held sync.WaitGroup
		held.Add(1)
		var heldOnce sync.Once
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for c := 0; c < 2; c++ {
			for d := 0; d < 3; d++ {
				wg.Add(1)
				go func(f middleware.ConsumeFunc) {
					defer wg.Done()
					msg := testkit.NewExt("Pay", "paid", "order-2", "body")
					for attempt := 0; attempt < 400; attempt++ { // redelivery until acked
						res, err, reasons := testkit.Call(f, msg)
						if res == message.ConsumeSuccess && err == nil {
							return
						}
						if !errors.Is(err, ErrLockHeld) || !testkit.HasReason(reasons, middleware.ReasonLockHeld) {
							errs <- err
							return
						}
						heldOnce.Do(held.Done)
						time.Sleep(5 * time.Millisecond) // redelivery delay
					}
					errs <- errors.New("never acknowledged")
				}(chains[c])
			}
		}
		<-started
		held.Wait() // at least one delivery was refused while the lock was held
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := eff.Get("order-2"); n != 1 {
			t.Fatalf("effects %d, want 1", n)
		}
	})
}

func TestDedupFirstHolderFailsThenProcessed(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		d := newDeduper(t, tg.Client, tg.NS, nil)
		eff := testkit.NewEffects()
		boom := errors.New("db down")
		refused := make(chan struct{})
		first := true
		handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if first {
				first = false
				<-refused // the other consumer is refused while we hold the lock ...
				return message.ReconsumeLater, boom
			}
			eff.Add(middleware.KeyOf(msgs[0]))
			return message.ConsumeSuccess, nil
		}
		h := middleware.ChainConsume(handler, d.Middleware())
		msg := testkit.NewExt("Pay", "paid", "order-3", "body")
		done := make(chan error, 1)
		go func() {
			res, err, _ := testkit.Call(h, msg)
			if res != message.ReconsumeLater || !errors.Is(err, boom) {
				done <- errors.New("first holder: want ReconsumeLater with its error")
				return
			}
			done <- nil
		}()
		testkit.WaitFor(t, 5*time.Second, func() bool { return tg.Client.Exists(ctx, d.LockKey("order-3")).Val() == 1 })
		res, err, _ := testkit.Call(h, msg)
		if res != message.ReconsumeLater || !errors.Is(err, ErrLockHeld) {
			t.Fatalf("second consumer while held: %v %v", res, err)
		}
		close(refused) // ... and then fails
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st, _ := d.ProgressState(ctx, "order-3"); st != MarkerFailed {
			t.Fatalf("marker after failure %v", st)
		}
		if tg.Client.Exists(ctx, d.LockKey("order-3")).Val() != 0 {
			t.Fatal("lock kept after failure")
		}
		// Redelivery: processed, not lost.
		if res, err, _ := testkit.Call(h, msg); res != message.ConsumeSuccess || err != nil {
			t.Fatalf("redelivery: %v %v", res, err)
		}
		if n := eff.Get("order-3"); n != 1 {
			t.Fatalf("effects %d", n)
		}
	})
}

func TestDedupPanicReleasesAndMarksFailed(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		d := newDeduper(t, tg.Client, tg.NS, nil)
		eff := testkit.NewEffects()
		n := 0
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if n++; n == 1 {
				panic("nil map")
			}
			eff.Add(middleware.KeyOf(msgs[0]))
			return message.ConsumeSuccess, nil
		}, d.Middleware())
		msg := testkit.NewExt("Pay", "", "order-4", "body")
		res, err, reasons := testkit.Call(h, msg)
		var pe *middleware.PanicError
		if res != message.ReconsumeLater || !errors.As(err, &pe) || pe.Value != "nil map" || !testkit.HasReason(reasons, middleware.ReasonPanic) {
			t.Fatalf("panic: %v %v %v", res, err, reasons)
		}
		if st, _ := d.ProgressState(ctx, "order-4"); st != MarkerFailed || tg.Client.Exists(ctx, d.LockKey("order-4")).Val() != 0 {
			t.Fatalf("after panic: marker %v, lock exists %d", st, tg.Client.Exists(ctx, d.LockKey("order-4")).Val())
		}
		if res, err, _ := testkit.Call(h, msg); res != message.ConsumeSuccess || err != nil || eff.Get("order-4") != 1 {
			t.Fatalf("redelivery: %v %v %d", res, err, eff.Get("order-4"))
		}
	})
}

// TestDedupAbandonedLock simulates a holder that died mid-handler: it took the lock with
// plain go-redsync (the same token layout) and never released it.
func TestDedupAbandonedLock(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		d := newDeduper(t, tg.Client, tg.NS, func(c *DedupConfig) { c.LockExpiry = 400 * time.Millisecond })
		rs := redsync.New(goredis.NewPool(redistest.Dial(t, tg.Addr)))
		dead := rs.NewMutex(d.LockKey("order-5"), redsync.WithExpiry(400*time.Millisecond), redsync.WithTries(1))
		if err := dead.LockContext(ctx); err != nil {
			t.Fatal(err)
		}
		eff := testkit.NewEffects()
		h := middleware.ChainConsume(eff.OK(), d.Middleware())
		msg := testkit.NewExt("Pay", "", "order-5", "body")
		res, err, _ := testkit.Call(h, msg)
		var de *DedupError
		if res != message.ReconsumeLater || !errors.As(err, &de) || de.Kind != ErrLockHeld || de.HeldFor <= 0 || de.HeldFor > 400*time.Millisecond {
			t.Fatalf("while the dead holder's lock lives: %v %v", res, err)
		}
		refusals := 0
		testkit.WaitFor(t, 5*time.Second, func() bool { // redeliveries until the lock expired
			res, err, _ := testkit.Call(h, msg)
			if errors.Is(err, ErrLockHeld) {
				refusals++
				return false
			}
			if res != message.ConsumeSuccess || err != nil {
				t.Fatalf("after expiry: %v %v", res, err)
			}
			return true
		})
		if eff.Get("order-5") != 1 {
			t.Fatalf("effects %d", eff.Get("order-5"))
		}
		if st, _ := d.ProgressState(ctx, "order-5"); st != MarkerDone {
			t.Fatalf("marker %v", st)
		}
		// The dead holder's token no longer owns anything.
		if ok, err := dead.UnlockContext(ctx); ok || err == nil {
			t.Fatalf("dead holder unlocked: %v %v", ok, err)
		}
	})
}

func TestDedupLockLostVersusHeld(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		other := redistest.Dial(t, tg.Addr)
		d := newDeduper(t, tg.Client, tg.NS, func(c *DedupConfig) { c.LockExpiry = 300 * time.Millisecond })

		for _, tc := range []struct {
			name    string
			steal   func(lk string) // what happens to our lock while the handler runs
			ignores bool            // the handler ignores its context and succeeds
		}{
			{"taken over", func(lk string) { other.Set(ctx, lk, "someone-else", time.Minute) }, false},
			{"expired", func(lk string) { other.Del(ctx, lk) }, false},
			{"taken over, handler succeeds anyway", func(lk string) { other.Set(ctx, lk, "someone-else", time.Minute) }, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := "lost-" + strings.ReplaceAll(tc.name, " ", "-")
				var cause error
				h := middleware.ChainConsume(func(hctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
					tc.steal(d.LockKey(key))
					if tc.ignores {
						testkit.WaitFor(t, 5*time.Second, func() bool { return hctx.Err() != nil })
						return message.ConsumeSuccess, nil
					}
					<-hctx.Done()
					cause = context.Cause(hctx)
					return message.ReconsumeLater, hctx.Err()
				}, d.Middleware())
				res, err, reasons := testkit.Call(h, testkit.NewExt("Pay", "", key, "b"))
				if !testkit.HasReason(reasons, middleware.ReasonLockLost) || testkit.HasReason(reasons, middleware.ReasonLockHeld) {
					t.Fatalf("reasons %v", reasons)
				}
				if tc.ignores {
					if res != message.ConsumeSuccess || err != nil {
						t.Fatalf("succeeded after loss: %v %v", res, err)
					}
					if st, _ := d.ProgressState(ctx, key); st != MarkerDone {
						t.Fatalf("marker %v", st)
					}
				} else {
					if res != message.ReconsumeLater || !errors.Is(err, ErrLockLost) || errors.Is(err, ErrLockHeld) || !errors.Is(cause, ErrLockLost) {
						t.Fatalf("lost: %v %v (ctx cause %v)", res, err, cause)
					}
				}
				if v := other.Get(ctx, d.LockKey(key)).Val(); strings.HasPrefix(tc.name, "taken") && v != "someone-else" {
					t.Fatalf("the other holder's lock was touched: %q", v)
				}
			})
		}

		// Held by another: a different error and reason.
		other.Set(ctx, d.LockKey("held"), "someone-else", time.Minute)
		res, err, reasons := testkit.Call(middleware.ChainConsume(testkit.NewEffects().OK(), d.Middleware()), testkit.NewExt("Pay", "", "held", "b"))
		if res != message.ReconsumeLater || !errors.Is(err, ErrLockHeld) || errors.Is(err, ErrLockLost) ||
			!testkit.HasReason(reasons, middleware.ReasonLockHeld) || testkit.HasReason(reasons, middleware.ReasonLockLost) {
			t.Fatalf("held: %v %v %v", res, err, reasons)
		}
	})
}

func TestDedupRenewalKeepsLockAndFailureCancels(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		c, sw := tg.Outage(t)
		// Renewed every 667 ms: with a 600 ms expiry (renewed every 200 ms) a loaded CI
		// machine delayed a renewal past the expiry and the lock was lost.
		d := newDeduper(t, c, tg.NS, func(c *DedupConfig) { c.LockExpiry = 2 * time.Second })

		// A handler running for several lock expiries keeps the lock through renewals.
		long := middleware.ChainConsume(func(hctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			until := time.Now().Add(5 * time.Second) // 2.5 lock expiries
			testkit.WaitFor(t, 15*time.Second, func() bool { return time.Now().After(until) || hctx.Err() != nil })
			if hctx.Err() != nil {
				return message.ReconsumeLater, context.Cause(hctx)
			}
			if tg.Client.Exists(ctx, d.LockKey("long")).Val() != 1 {
				return message.ReconsumeLater, errors.New("lock gone although renewed")
			}
			return message.ConsumeSuccess, nil
		}, d.Middleware())
		if res, err, _ := testkit.Call(long, testkit.NewExt("Pay", "", "long", "b")); res != message.ConsumeSuccess || err != nil {
			t.Fatalf("long handler: %v %v", res, err)
		}

		// Redis goes away mid-handler: renewals fail, the handler's ctx is cancelled.
		var cause error
		h := middleware.ChainConsume(func(hctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			sw.Down()
			<-hctx.Done()
			cause = context.Cause(hctx)
			return message.ReconsumeLater, hctx.Err()
		}, d.Middleware())
		res, err, reasons := testkit.Call(h, testkit.NewExt("Pay", "", "renew", "b"))
		if res != message.ReconsumeLater || !errors.Is(err, ErrRenewFailed) || !errors.Is(cause, ErrRenewFailed) ||
			!testkit.HasReason(reasons, middleware.ReasonRenewFailed) || !testkit.HasReason(reasons, middleware.ReasonMarkerNotSaved) {
			t.Fatalf("renewal failure: %v %v (cause %v) %v", res, err, cause, reasons)
		}
		if err := sw.Up(); err != nil {
			t.Fatal(err)
		}
		// Our lock expires on its own; the message then runs.
		eff := testkit.NewEffects()
		ok := middleware.ChainConsume(eff.OK(), d.Middleware())
		testkit.WaitFor(t, 15*time.Second, func() bool {
			res, _, _ := testkit.Call(ok, testkit.NewExt("Pay", "", "renew", "b"))
			return res == message.ConsumeSuccess
		})
		if eff.Get("renew") != 1 {
			t.Fatalf("effects %d", eff.Get("renew"))
		}
	})
}

func TestDedupRedisUnreachable(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		c, sw := tg.Outage(t)
		sw.Down()
		for _, failOpen := range []bool{false, true} {
			eff := testkit.NewEffects()
			d := newDeduper(t, c, tg.NS, func(c *DedupConfig) { c.FailOpen = failOpen })
			res, err, reasons := testkit.Call(middleware.ChainConsume(eff.OK(), d.Middleware()), testkit.NewExt("Pay", "", "down", "b"))
			if failOpen {
				if res != message.ConsumeSuccess || err != nil || eff.Get("down") != 1 || !testkit.HasReason(reasons, middleware.ReasonFailOpen) {
					t.Fatalf("fail open: %v %v effects %d %v", res, err, eff.Get("down"), reasons)
				}
			} else {
				if res != message.ReconsumeLater || !errors.Is(err, ErrRedisUnavailable) || eff.Get("down") != 0 || !testkit.HasReason(reasons, middleware.ReasonRedisUnavailable) {
					t.Fatalf("fail closed: %v %v effects %d %v", res, err, eff.Get("down"), reasons)
				}
			}
		}
		if err := sw.Up(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestDedupBatchOneAtATime(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		d := newDeduper(t, tg.Client, tg.NS, nil)
		eff := testkit.NewEffects()
		failB := true
		var sizes []int
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			sizes = append(sizes, len(msgs))
			if middleware.KeyOf(msgs[0]) == "b" && failB {
				failB = false
				return message.ReconsumeLater, nil
			}
			eff.Add(middleware.KeyOf(msgs[0]))
			return message.ConsumeSuccess, nil
		}, d.Middleware())
		batch := []*message.MessageExt{testkit.NewExt("T", "", "a", "1"), testkit.NewExt("T", "", "b", "2"), testkit.NewExt("T", "", "c", "3")}
		if res, _, _ := testkit.Call(h, batch...); res != message.ReconsumeLater {
			t.Fatalf("batch with a failure: %v", res)
		}
		if eff.Get("a") != 1 || eff.Get("b") != 0 || eff.Get("c") != 0 {
			t.Fatalf("after first delivery: %v", eff)
		}
		res, err, reasons := testkit.Call(h, batch...)
		if res != message.ConsumeSuccess || err != nil || !testkit.HasReason(reasons, middleware.ReasonDuplicate) {
			t.Fatalf("redelivered batch: %v %v %v", res, err, reasons)
		}
		if eff.Get("a") != 1 || eff.Get("b") != 1 || eff.Get("c") != 1 {
			t.Fatalf("after redelivery: %v", eff)
		}
		for _, s := range sizes {
			if s != 1 {
				t.Fatalf("handler saw batch sizes %v", sizes)
			}
		}
	})
}

func TestDedupNoKeyPassesThrough(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		d := newDeduper(t, tg.Client, tg.NS, nil)
		rt := redistest.CountRoundTrips(tg.Client)
		ran := 0
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			ran++
			return message.ConsumeSuccess, nil
		}, d.Middleware())
		for i := 0; i < 2; i++ {
			res, err, reasons := testkit.Call(h, testkit.NewExt("T", "", "", "same body"))
			if res != message.ConsumeSuccess || err != nil || !testkit.HasReason(reasons, middleware.ReasonNoKey) {
				t.Fatalf("%v %v %v", res, err, reasons)
			}
		}
		if ran != 2 || rt.N() != 0 {
			t.Fatalf("ran %d, redis round trips %d", ran, rt.N())
		}
	})
}

func TestDedupTwoRoundTripsPerMessage(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		d := newDeduper(t, tg.Client, tg.NS, nil)
		p, err := NewProgressTracker(ProgressConfig{Client: tg.Client, Prefix: "sluice:dedup:" + tg.NS})
		if err != nil {
			t.Fatal(err)
		}
		h := middleware.ChainConsume(testkit.NewEffects().OK(), middleware.ConsumeKeys(), d.Middleware(), p.Middleware())
		// Load the scripts first (EVALSHA → NOSCRIPT → EVAL costs one extra trip once).
		testkit.Call(h, testkit.NewExt("T", "warm", "", "warm-up"))
		rt := redistest.CountRoundTrips(tg.Client)
		const n = 50
		for i := 0; i < n; i++ {
			if res, err, _ := testkit.Call(h, testkit.NewExt("T", "tag", "", "body-"+string(rune('A'+i)))); res != message.ConsumeSuccess || err != nil {
				t.Fatal(res, err)
			}
		}
		if got := rt.N(); got != 2*n {
			t.Fatalf("%d round trips for %d messages, want %d", got, n, 2*n)
		}
		if st, _ := p.ProgressState(context.Background(), middleware.ContentKey(message.NewMessage("T", []byte("body-A")).SetTag("tag"))); st != MarkerDone {
			t.Fatalf("progress state of a dedup'd message: %v", st)
		}
	})
}
