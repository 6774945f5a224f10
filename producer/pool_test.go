package producer

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

// TestRecycledSendsKeepTheirOwnRequests: a send's prepared state (its header, request
// and async state) is recycled once the send is over. With async, sync and one-way
// sends running at once and the first attempt of every third message key refused (so
// that retries rebuild requests), every request the broker sees carries its own message's body, key and
// queue, and every callback reports its own message's key exactly once.
func TestRecycledSendsKeepTheirOwnRequests(t *testing.T) {
	var (
		mu      sync.Mutex
		bad     []string
		seen    atomic.Int64
		oneways atomic.Int64
	)
	check := func(req *remoting.RemotingCommand) {
		props := message.UnmarshalProperties(req.ExtFields["i"])
		if want := "body-" + props["KEYS"]; string(req.Body) != want {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("request with KEYS %q carries body %q", props["KEYS"], req.Body))
			mu.Unlock()
		}
	}
	attempts := map[string]int{} // by KEYS (under mu)
	send := func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		check(req)
		seen.Add(1)
		key := message.UnmarshalProperties(req.ExtFields["i"])["KEYS"]
		mu.Lock()
		attempts[key]++
		first := attempts[key] == 1
		mu.Unlock()
		if i, _ := strconv.Atoi(key); first && i%3 == 0 { // the first attempt of every third key
			return remoting.NewResponse(remoting.SystemBusy, "again")
		}
		return storeOK(remoting.Success)(req)
	}
	h := brokerHandlers(send)
	h[remoting.SendMessageV2] = func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		if req.IsOneway() {
			check(req)
			oneways.Add(1)
			return nil
		}
		return send(req)
	}
	b := fakeremote.Start(t, h)
	ns := newNamesrv(t, map[string]string{"T": routeJSON(4, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, RetryTimesWhenSendAsyncFailed: 2, RetryTimesWhenSendFailed: 2})

	const n = 300
	var wg sync.WaitGroup
	results := make([]atomic.Int32, n)
	errs := make(chan error, 3*n)
	msg := func(i int) *message.Message {
		m := message.NewMessage("T", []byte("body-"+strconv.Itoa(i)))
		m.SetKeys(strconv.Itoa(i))
		return m
	}
	for i := range n {
		m := msg(i)
		wg.Add(1)
		if err := p.SendAsync(context.Background(), m, func(r *message.SendResult, err error) {
			defer wg.Done()
			switch {
			case err != nil:
				errs <- fmt.Errorf("async send %d: %w", i, err)
			case r.MsgID != m.UniqKey():
				errs <- fmt.Errorf("async send %d: result for %s, message key %s", i, r.MsgID, m.UniqKey())
			default:
				results[i].Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			m := msg(i)
			if r, err := p.SendSync(context.Background(), m); err != nil {
				errs <- fmt.Errorf("sync send %d: %w", i, err)
			} else if r.MsgID != m.UniqKey() {
				errs <- fmt.Errorf("sync send %d: result for %s, message key %s", i, r.MsgID, m.UniqKey())
			}
		}()
		go func() {
			defer wg.Done()
			if err := p.SendOneway(context.Background(), msg(i)); err != nil {
				errs <- fmt.Errorf("one-way send %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range results {
		if got := results[i].Load(); got != 1 {
			t.Errorf("async send %d: callback succeeded %d times, want 1", i, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range bad {
		t.Error(s)
	}
	if want := int64(2*n + n/3); seen.Load() < want || oneways.Load() == 0 {
		t.Fatalf("broker saw %d answered sends and %d one-way sends, want at least %d and some", seen.Load(), oneways.Load(), want)
	}
}

// TestAsyncCallbackPanicEndsTheSend: a SendAsync callback that panics (the remoting
// client recovers and logs it) still ends its send: Shutdown does not wait for it until
// its context runs out, later sends find room, and the prepared send goes back to its
// pool only after the callback.
func TestAsyncCallbackPanicEndsTheSend(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, MaxAsyncInflight: 1})
	ran := make(chan struct{}, 2)
	for range 2 { // with room for one send in flight, the second waits for the first to end
		if err := p.SendAsync(context.Background(), message.NewMessage("T", []byte("b")), func(*message.SendResult, error) {
			ran <- struct{}{}
			panic("callback blew up")
		}); err != nil {
			t.Fatal(err)
		}
		<-ran
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after panicking callbacks: %v", err)
	}
}

// TestAsyncCallbackPanicInProducerGoroutines: a panicking callback run from one of the
// producer's own goroutines — the first attempt of a topic whose route is not cached
// (here its lookup fails), and the goroutine of a send with middlewares — is logged and
// does not end the process; Shutdown then returns at once.
func TestAsyncCallbackPanicInProducerGoroutines(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	passThrough := func(next middleware.SendFunc) middleware.SendFunc { return next }
	for _, tc := range []struct {
		name  string
		cfg   Config
		topic string
	}{
		{"uncached route", Config{NamesrvAddrs: []string{ns.Addr()}}, "NoSuchTopic"},
		{"middleware", Config{NamesrvAddrs: []string{ns.Addr()}, Middlewares: []middleware.SendMiddleware{passThrough}}, "T"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProducer(t, tc.cfg)
			ran := make(chan error, 1)
			if err := p.SendAsync(context.Background(), message.NewMessage(tc.topic, []byte("b")), func(_ *message.SendResult, err error) {
				ran <- err
				panic("callback blew up")
			}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ran:
			case <-time.After(10 * time.Second):
				t.Fatal("the callback did not run")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown after a panicking callback: %v", err)
			}
		})
	}
}
