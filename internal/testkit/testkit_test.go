package testkit_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/remoting"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fatalTB records the first Fatalf and ends the calling goroutine, like testing.T.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	testkit.WaitFor(t, time.Second, func() bool { return n.Add(1) >= 3 }, "three checks")
	if n.Load() != 3 {
		t.Fatalf("cond checked %d times, want 3", n.Load())
	}
	f := &fatalTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testkit.WaitFor(f, 20*time.Millisecond, func() bool { return false }, "state ", func() string { return "2 of 5" })
	}()
	<-done
	if !strings.Contains(f.msg, "not within 20ms") || !strings.Contains(f.msg, "state 2 of 5") {
		t.Fatalf("failure message %q, want the deadline and the described state", f.msg)
	}
}

func TestEventuallyEvery(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	if !testkit.EventuallyEvery(10*time.Second, 30*time.Millisecond, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("condition that holds on the third check reported as never holding")
	}
	if n.Load() != 3 || time.Since(start) < 60*time.Millisecond {
		t.Fatalf("%d checks in %v, want 3 checks at least 2 intervals of 30ms apart", n.Load(), time.Since(start))
	}
	if testkit.EventuallyEvery(50*time.Millisecond, 10*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds reported as holding")
	}
}

func TestSettle(t *testing.T) {
	// A count that moves for a while and then stops: Settle returns its last value once
	// it has not changed for still.
	var n atomic.Int32
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10 {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				n.Add(1)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	got, ok := testkit.Settle(10*time.Second, 200*time.Millisecond, func() int { return int(n.Load()) }, nil)
	if !ok || got != 10 {
		t.Fatalf("settled at %d (ok %v), want 10 (true)", got, ok)
	}
	// done ends the wait at once.
	start := time.Now()
	if got, ok := testkit.Settle(10*time.Second, time.Hour, func() int { return 7 }, func(v int) bool { return v >= 7 }); !ok || got != 7 {
		t.Fatalf("done: %d %v", got, ok)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("done did not end the wait: %v", time.Since(start))
	}
	// A count that never stops moving is not settled.
	var m atomic.Int32
	if _, ok := testkit.Settle(100*time.Millisecond, time.Hour, func() int { return int(m.Add(1)) }, nil); ok {
		t.Fatal("a count that keeps moving reported as settled")
	}
}

func TestTestbroker(t *testing.T) {
	b, stop := testbroker.Start(t, broker.Config{BrokerName: "kit-b"})
	if b.Name() != "kit-b" || !strings.HasPrefix(b.Addr(), "127.0.0.1:") || len(testbroker.Namesrv(b)) != 1 {
		t.Fatalf("broker %s at %s, name servers %v", b.Name(), b.Addr(), testbroker.Namesrv(b))
	}
	stop()
	stop() // idempotent; the cleanup calls it a third time
}

func TestFakeremote(t *testing.T) {
	f := fakeremote.Start(t, fakeremote.Handlers{remoting.HeartBeat: func(*remoting.RemotingCommand) *remoting.RemotingCommand {
		return remoting.NewResponse(remoting.Success, "hi")
	}})
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.InvokeSync(ctx, f.Addr(), remoting.NewRequest(remoting.HeartBeat, map[string]string{"k": "v"}, nil))
	if err != nil || resp.ResponseCode() != remoting.Success || resp.Remark != "hi" {
		t.Fatalf("answer %v, %v", resp, err)
	}
	if _, err := c.InvokeSync(ctx, f.Addr(), remoting.NewRequest(remoting.SendMessageV2, nil, nil)); err != nil {
		t.Fatal(err)
	}
	reqs := f.Requests(remoting.HeartBeat)
	if len(reqs) != 1 || reqs[0].ExtFields["k"] != "v" || len(f.Requests(remoting.SendMessageV2)) != 0 {
		t.Fatalf("recorded %v; an unhandled code must not be recorded", reqs)
	}
}
