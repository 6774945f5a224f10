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
