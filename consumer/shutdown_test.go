package consumer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// Once Shutdown has begun no handler starts, in concurrent and orderly mode, although
// plenty of pulled messages wait for a worker: the busy handlers (1 to 2 s each) finish,
// and Shutdown returns within the longest of them plus a margin, with the offsets of the
// finished messages committed and none past an unfinished one.
//
// The handlers of the first wave hold until the test has seen Shutdown begin, so every
// worker is busy at that moment: any later start is one the stop signal should have
// prevented (the bug: a worker chose at random between "stop" and "next request").
func TestShutdownStartsNoNewHandler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		orderly bool
		queues  int
		busy    int // handlers running when Shutdown begins
	}{
		{"concurrent", false, 4, 20},
		{"orderly", true, 8, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Not parallel: it keeps 20 workers and a broker busy, which would starve the
			// timing-sensitive lock-renewal tests running beside it.
			e := newEnv(t)
			topic := "Stop" + tc.name
			group := "stopg" + tc.name
			e.createTopic(topic, tc.queues)
			send(t, e.producer(), topic, 200, "m")

			var started, startedAfter, finished atomic.Int64
			release := make(chan struct{})
			var c *PushConsumer
			c = e.push(Config{Group: group, ConsumeFromWhere: ConsumeFromFirstOffset, ConsumeGoroutines: 20, Orderly: tc.orderly})
			if err := c.Subscribe(topic, "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				n := started.Add(1)
				if c.stopping() {
					startedAfter.Add(1)
				}
				<-release
				d := time.Second + time.Duration(n%5)*200*time.Millisecond // 1.0 .. 1.8 s
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return message.ReconsumeLater, ctx.Err()
				}
				finished.Add(1)
				return message.ConsumeSuccess, nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			testkit.WaitFor(t, 30*time.Second, func() bool { return started.Load() >= int64(tc.busy) }, "every worker busy")

			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Shutdown(sctx) }()
			testkit.WaitFor(t, 10*time.Second, c.stopping, "Shutdown to begin")
			before := started.Load()
			releasedAt := time.Now()
			close(release)
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Shutdown did not return")
			}
			took := time.Since(releasedAt)
			if err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			if n := startedAfter.Load(); n != 0 || started.Load() != before {
				t.Fatalf("%d handlers started after Shutdown began (%d before, %d in all)", n, before, started.Load())
			}
			// The longest handler takes 1.8 s after the release; Shutdown then stores
			// offsets and unregisters. A worker that took new work would add 1 s or more.
			if limit := 1800*time.Millisecond + 2*time.Second; took > limit {
				t.Fatalf("Shutdown returned %v after the handlers were released, want at most %v", took, limit)
			}
			if finished.Load() != before {
				t.Fatalf("%d of %d in-flight handlers finished", finished.Load(), before)
			}
			var committed int64
			for q := 0; q < tc.queues; q++ {
				if off := e.committed(group, topic, q); off > 0 {
					committed += off
				}
			}
			if committed > finished.Load() {
				t.Fatalf("committed %d offsets past %d finished messages", committed, finished.Load())
			}
			t.Logf("%d handlers in flight at Shutdown, 0 started after; Shutdown took %v after release; %d offsets committed", before, took.Round(time.Millisecond), committed)
		})
	}
}

// A pull consumer's Shutdown ends a long poll in flight (or, if Shutdown won the race,
// refuses it) at once, and no call starts after it (ErrClosed). The pull consumer runs
// no handlers: its calls register under the same lock Shutdown closes.
func TestPullConsumerShutdownEndsCallsAndRefusesNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createTopic("PullStop", 1)
	c, err := NewPullConsumer(PullConfig{NamesrvAddrs: e.namesrv, Group: "pullstop", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mqs, err := c.MessageQueues(ctx, "PullStop")
	if err != nil || len(mqs) != 1 {
		t.Fatalf("queues %v %v", mqs, err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := c.Pull(ctx, PullRequest{Queue: mqs[0], Offset: 0, MaxNums: 1, Expression: "*", LongPoll: 20 * time.Second})
		res <- err
	}()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-res:
		if err == nil {
			t.Fatal("the long poll in flight returned no error after Shutdown")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll in flight did not end")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Shutdown took %v with a 20 s long poll in flight", took)
	}
	if _, err := c.Pull(ctx, PullRequest{Queue: mqs[0], Offset: 0, MaxNums: 1, Expression: "*"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Pull after Shutdown: %v, want ErrClosed", err)
	}
}
