package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

// refuseProduceTo makes the cluster close the connection of every produce request that
// writes to a topic containing part, while *on is true.
func refuseProduceTo(c interface {
	ControlKey(int16, func(kmsg.Request) (kmsg.Response, error, bool))
	KeepControl()
}, part string, on *atomic.Bool) {
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !on.Load() {
			return nil, nil, false
		}
		for _, t := range req.(*kmsg.ProduceRequest).Topics {
			if strings.Contains(t.Topic, part) {
				return nil, errors.New("refused by test"), true
			}
		}
		return nil, nil, false
	})
}

// A failed message whose retry copy cannot be stored is never committed past, however
// many messages after it succeed: after a restart it comes again and is handled.
func TestFailedMessageSurvivesRestart(t *testing.T) {
	const topic = "ledger"
	c := newCluster(t, 1, topic)
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 40*time.Second)
	const n = 10
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, message.NewMessage(topic, []byte("m"+strconv.Itoa(i))).SetKeys("k"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var refuse atomic.Bool
	refuse.Store(true)
	refuseProduceTo(c, ".retry.", &refuse)

	first := testkit.NewEffects()
	cfg := fastConfig(t, brokers, "g-restart")
	a := startConsumer(t, cfg, func(c *Consumer) {
		_ = c.Subscribe(topic, "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if string(msgs[0].Body) == "m0" {
				return message.ReconsumeLater, errors.New("downstream unavailable")
			}
			return first.OK()(ctx, msgs)
		})
	})
	testkit.WaitFor(t, 15*time.Second, func() bool {
		for i := 1; i < n; i++ {
			if first.Get("k"+strconv.Itoa(i)) == 0 {
				return false
			}
		}
		return true
	}, "successes after the failed message")
	// Periodic commits ran (offset 0 committed once the successes were in) and did not
	// pass m0: a commit only ever names the first unfinished offset.
	testkit.WaitFor(t, 10*time.Second, func() bool { return committed(t, brokers, "g-restart", topic, 0) >= 0 }, "a periodic commit")
	if off := committed(t, brokers, "g-restart", topic, 0); off != 0 {
		t.Fatalf("committed %d, want 0 (the failed message's offset)", off)
	}
	shutdown(t, a, 10*time.Second)
	if off := committed(t, brokers, "g-restart", topic, 0); off > 0 {
		t.Fatalf("after shutdown: committed %d past the failed message", off)
	}

	refuse.Store(false)
	second := testkit.NewEffects()
	b := startConsumer(t, cfg, func(c *Consumer) { _ = c.Subscribe(topic, "*", second.OK()) })
	testkit.WaitFor(t, 15*time.Second, func() bool { return second.Get("k0") == 1 }, "the failed message after the restart")
	testkit.WaitFor(t, 10*time.Second, func() bool { return committed(t, brokers, "g-restart", topic, 0) == n }, "commit to the end")
	shutdown(t, b, 10*time.Second)
	t.Logf("after restart: m0 handled %d time(s); m1 (already handled before) redelivered %d time(s) — at-least-once, absorbed by Dedup",
		second.Get("k0"), second.Get("k1"))
}

// A second member joining mid-stream moves partitions between members, and the first
// member then dies without committing (Shutdown with a context already over: its
// connections are cut, nothing more is committed). With redismw.Dedup every message has
// exactly one effect and none is lost, counted over every key; the redeliveries are
// absorbed by Dedup.
func TestJoinMidStreamDedup(t *testing.T) {
	const topic, partitions, n = "orders", 4, 300
	c := newCluster(t, partitions, topic)
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 60*time.Second)
	send := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := p.Send(ctx, message.NewMessage(topic, []byte(strconv.Itoa(i))).SetKeys("order-"+strconv.Itoa(i)).SetShardingKey("c"+strconv.Itoa(i%16))); err != nil {
				t.Error(err)
				return
			}
		}
	}
	send(0, n/2)
	rc := redistest.New(t)
	effects := testkit.NewEffects()
	var deliveries atomic.Int64
	var members [2]atomic.Int64
	var started atomic.Int32
	handler := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		time.Sleep(time.Millisecond) // a little work, so the join and the crash land mid-stream
		return effects.OK()(ctx, msgs)
	}
	mk := func() *Consumer {
		me := &members[started.Add(1)-1]
		dedup, err := redismw.Dedup(redismw.DedupConfig{Client: rc, Prefix: "kafka-join", LockExpiry: 300 * time.Millisecond, Logger: testkit.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		count := func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
			return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				deliveries.Add(int64(len(msgs)))
				me.Add(int64(len(msgs)))
				return next(ctx, msgs)
			}
		}
		cfg := fastConfig(t, brokers, "g-join")
		cfg.CommitInterval = time.Second // a crash then replays up to a second of work
		return startConsumer(t, cfg, func(c *Consumer) {
			_ = c.Subscribe(topic, "*", middleware.ChainConsume(handler, count, dedup, middleware.Recover()))
		})
	}
	handled := func() int {
		k := 0
		for i := 0; i < n; i++ {
			if effects.Get("order-"+strconv.Itoa(i)) > 0 {
				k++
			}
		}
		return k
	}
	a := mk()
	testkit.WaitFor(t, 15*time.Second, func() bool { return handled() >= 40 }, "first member under way")
	b := mk()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		send(n/2, n)
	}()
	testkit.WaitFor(t, 15*time.Second, func() bool { return members[1].Load() > 0 }, "second member consuming")
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Shutdown(dead); err == nil {
		t.Fatal("a shutdown with no time left reported success")
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return handled() == n }, "every message handled")
	wg.Wait()
	for i := 0; i < n; i++ {
		if e := effects.Get("order-" + strconv.Itoa(i)); e != 1 {
			t.Fatalf("order-%d: %d effects, want 1", i, e)
		}
	}
	shutdown(t, b, 10*time.Second)
	t.Logf("%d messages, %d deliveries (member 1: %d, member 2: %d; %d repeated after the crash, absorbed by Dedup), 0 lost, 0 double effects",
		n, deliveries.Load(), members[0].Load(), members[1].Load(), deliveries.Load()-n)
}

// Shutdown while a rebalance is under way (a member just joined) returns within its
// deadline, and the remaining member then takes every partition and finishes the work.
func TestShutdownDuringRebalance(t *testing.T) {
	const topic, n = "jobs", 100
	c := newCluster(t, 4, topic)
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 40*time.Second)
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, message.NewMessage(topic, []byte(strconv.Itoa(i))).SetKeys("j"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	effects := testkit.NewEffects()
	slow := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		time.Sleep(5 * time.Millisecond)
		return effects.OK()(ctx, msgs)
	}
	cfg := fastConfig(t, brokers, "g-rebal")
	a := startConsumer(t, cfg, func(c *Consumer) { _ = c.Subscribe(topic, "*", slow) })
	testkit.WaitFor(t, 15*time.Second, func() bool { return effects.Get("j0")+effects.Get("j1")+effects.Get("j2")+effects.Get("j3") > 0 }, "consuming")
	b := startConsumer(t, cfg, func(c *Consumer) { _ = c.Subscribe(topic, "*", slow) })
	testkit.WaitFor(t, 10*time.Second, func() bool {
		gi := c.GroupInfo("g-rebal")
		return gi != nil && gi.State != "Stable"
	}, "rebalance under way")
	const deadline = 3 * time.Second
	sctx, cancel := context.WithTimeout(context.Background(), deadline)
	start := time.Now()
	err := a.Shutdown(sctx)
	cancel()
	if took := time.Since(start); took > deadline+500*time.Millisecond {
		t.Fatalf("shutdown during a rebalance took %v (deadline %v): %v", took, deadline, err)
	}
	t.Logf("shutdown during the rebalance: %v, err %v", time.Since(start).Round(time.Millisecond), err)
	testkit.WaitFor(t, 20*time.Second, func() bool {
		for i := 0; i < n; i++ {
			if effects.Get("j"+strconv.Itoa(i)) == 0 {
				return false
			}
		}
		return true
	}, "the remaining member finishes every message")
	shutdown(t, b, 10*time.Second)
}

// Shutdown returns within its deadline when the cluster stops answering (every request
// swallowed) and when it is gone (closed), and leaves no goroutine behind (TestMain's
// goleak check).
func TestShutdownClusterUnreachable(t *testing.T) {
	for _, how := range []string{"silent", "closed"} {
		t.Run(how, func(t *testing.T) {
			const topic = "cut"
			c := newCluster(t, 2, topic)
			brokers := c.ListenAddrs()
			p := newProducer(t, brokers, nil)
			ctx := ctxT(t, 30*time.Second)
			for i := 0; i < 20; i++ {
				if _, err := p.Send(ctx, message.NewMessage(topic, []byte(strconv.Itoa(i)))); err != nil {
					t.Fatal(err)
				}
			}
			var got atomic.Int64
			cfg := fastConfig(t, brokers, "g-cut-"+how)
			cfg.Timeout = 10 * time.Second // longer than the deadline: Shutdown must not wait for it
			cons := startConsumer(t, cfg, func(c *Consumer) {
				_ = c.Subscribe(topic, "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
					got.Add(1)
					return message.ConsumeSuccess, nil
				})
			})
			testkit.WaitFor(t, 15*time.Second, func() bool { return got.Load() == 20 }, "consumed")
			if how == "silent" {
				c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
					c.KeepControl()
					return nil, nil, true
				})
			} else {
				c.Close()
			}
			const deadline = 2 * time.Second
			sctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			start := time.Now()
			err := cons.Shutdown(sctx)
			took := time.Since(start)
			if took > deadline+500*time.Millisecond {
				t.Fatalf("shutdown took %v with the cluster %s (deadline %v)", took, how, deadline)
			}
			t.Logf("cluster %s: shutdown in %v, err %v", how, took.Round(time.Millisecond), err)
			if err == nil {
				t.Fatal("shutdown with an unreachable cluster reported no error (the final commit cannot have worked)")
			}
			if how == "closed" {
				// The producer's cleanup must not wait on a cluster that is gone either.
				sctx2, cancel2 := context.WithTimeout(context.Background(), deadline)
				defer cancel2()
				_ = p.Shutdown(sctx2)
			}
		})
	}
}

// Campaign: 600 messages on 4 partitions, consumed by a group whose members are killed
// without committing (Shutdown with no time left) and replaced, four times, while the
// messages are sent. With redismw.Dedup every message has exactly one effect; the
// deliveries and repeats are counted and reported.
func TestCampaignMemberChurn(t *testing.T) {
	const topic, partitions, n, rounds = "churn", 4, 600, 4
	c := newCluster(t, partitions, topic)
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 90*time.Second)
	rc := redistest.New(t)
	effects := testkit.NewEffects()
	var deliveries atomic.Int64
	mk := func() *Consumer {
		dedup, err := redismw.Dedup(redismw.DedupConfig{Client: rc, Prefix: "kafka-churn", LockExpiry: 300 * time.Millisecond, Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		count := func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
			return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				deliveries.Add(int64(len(msgs)))
				return next(ctx, msgs)
			}
		}
		cfg := fastConfig(t, brokers, "g-churn")
		cfg.Logger = testkit.Quiet()
		cfg.CommitInterval = 300 * time.Millisecond
		cfg.SessionTimeout = 800 * time.Millisecond // a killed member is noticed quickly
		return startConsumer(t, cfg, func(c *Consumer) {
			_ = c.Subscribe(topic, "*", middleware.ChainConsume(effects.OK(), count, dedup, middleware.Recover()))
		})
	}
	handled := func() int {
		k := 0
		for i := 0; i < n; i++ {
			if effects.Get("m-"+strconv.Itoa(i)) > 0 {
				k++
			}
		}
		return k
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			if _, err := p.Send(ctx, message.NewMessage(topic, []byte(strconv.Itoa(i))).SetKeys("m-"+strconv.Itoa(i))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	members := []*Consumer{mk(), mk()}
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	for r := 0; r < rounds; r++ {
		want := (r + 1) * n / (rounds + 1)
		testkit.WaitFor(t, 30*time.Second, func() bool { return handled() >= want }, "progress before kill", r)
		_ = members[0].Shutdown(dead) // killed: nothing more committed
		members = append(members[1:], mk())
	}
	wg.Wait()
	testkit.WaitFor(t, 60*time.Second, func() bool { return handled() == n }, "every message handled")
	for _, m := range members {
		shutdown(t, m, 10*time.Second)
	}
	for i := 0; i < n; i++ {
		if e := effects.Get("m-" + strconv.Itoa(i)); e != 1 {
			t.Fatalf("m-%d: %d effects, want 1", i, e)
		}
	}
	t.Logf("campaign: %d messages, %d members killed, %d deliveries (%d repeats absorbed by Dedup), 0 lost, 0 double effects",
		n, rounds, deliveries.Load(), deliveries.Load()-n)
}
