package producer

// Async, oneway, not-store-OK retries, latency fault tolerance and Shutdown with
// in-flight sends, against fake brokers on real TCP.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

// flaky answers the first n sends with code, then stores them.
func flaky(n int32, code remoting.ResponseCode) func(*remoting.RemotingCommand) *remoting.RemotingCommand {
	var seen atomic.Int32
	return func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		if seen.Add(1) <= n {
			return remoting.NewResponse(code, "not now")
		}
		return storeOK(remoting.Success)(req)
	}
}

// gated stores a send only once gate is closed (or after 10 s, so a broken test cannot
// hang the server's shutdown).
func gated(gate <-chan struct{}) func(*remoting.RemotingCommand) *remoting.RemotingCommand {
	return func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		select {
		case <-gate:
		case <-time.After(10 * time.Second):
		}
		return storeOK(remoting.Success)(req)
	}
}

func TestSendAsyncCallbackAndChannel(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(4, [2]string{"broker-a", b.Addr()})})
	var mwCalls atomic.Int32
	mw := func(next middleware.SendFunc) middleware.SendFunc {
		return func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
			mwCalls.Add(1)
			m.SetKeys("mw")
			return next(ctx, m)
		}
	}
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, Middlewares: []middleware.SendMiddleware{mw}})
	const n = 200
	var (
		mu    sync.Mutex
		calls = map[string]int{}
		errs  []error
		wg    sync.WaitGroup
	)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage("T", []byte("m"+strconv.Itoa(i)))
		wg.Add(1)
		err := p.SendAsync(context.Background(), msgs[i], func(r *message.SendResult, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			calls[r.MsgID]++
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	for _, m := range msgs {
		if calls[m.UniqKey()] != 1 {
			t.Fatalf("callback of %s ran %d times", m.UniqKey(), calls[m.UniqKey()])
		}
	}
	if mwCalls.Load() != n {
		t.Fatalf("middleware ran %d times", mwCalls.Load())
	}
	reqs := b.Requests(remoting.SendMessageV2)
	if len(reqs) != n || message.UnmarshalProperties(reqs[0].ExtFields["i"])["KEYS"] != "mw" {
		t.Fatalf("%d requests; properties %q", len(reqs), reqs[0].ExtFields["i"])
	}

	res := <-p.SendAsyncChan(context.Background(), message.NewMessage("T", []byte("chan")))
	if res.Err != nil || res.Result.Status != message.SendOK {
		t.Fatalf("channel result %+v", res)
	}
	// Errors known at once come back from SendAsync (and on the channel), without a callback.
	called := false
	err := p.SendAsync(context.Background(), message.NewMessage("T", nil), func(*message.SendResult, error) { called = true })
	var ve *message.ValidationError
	if !errors.As(err, &ve) || ve.Field != "body" || called {
		t.Fatalf("invalid message: %v (callback %v)", err, called)
	}
	if res := <-p.SendAsyncChan(context.Background(), message.NewMessage("a b", []byte("x"))); !errors.As(res.Err, &ve) {
		t.Fatalf("invalid topic on the channel: %+v", res)
	}
	if err := p.SendAsync(context.Background(), message.NewMessage("T", []byte("x")), nil); err == nil {
		t.Fatal("nil callback accepted")
	}
}

func TestSendAsyncRetriesOnSameQueue(t *testing.T) {
	a := fakeremote.Start(t, brokerHandlers(flaky(2, remoting.SystemBusy)))
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(2, [2]string{"broker-a", a.Addr()}, [2]string{"broker-b", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	// The first send goes to broker-a queue 0 (round-robin starts at the first queue):
	// two refusals, then stored there — 3 attempts on the same queue.
	res := <-p.SendAsyncChan(context.Background(), message.NewMessage("T", []byte("x")))
	if res.Err != nil || res.Result.Queue.String() != "T@broker-a#0" {
		t.Fatalf("%+v", res)
	}
	reqs := a.Requests(remoting.SendMessageV2)
	if len(reqs) != 3 || len(b.Requests(remoting.SendMessageV2)) != 0 {
		t.Fatalf("attempts: broker-a %d, broker-b %d", len(reqs), len(b.Requests(remoting.SendMessageV2)))
	}
	for _, r := range reqs {
		if r.ExtFields["e"] != "0" {
			t.Fatalf("retry moved to queue %s", r.ExtFields["e"])
		}
	}

	// Gives up after 1 + RetryTimesWhenSendAsyncFailed attempts.
	c := fakeremote.Start(t, brokerHandlers(refuse(remoting.ServiceNotAvailable, "down")))
	ns2 := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-c", c.Addr()})})
	p2 := newProducer(t, Config{NamesrvAddrs: []string{ns2.Addr()}, RetryTimesWhenSendAsyncFailed: 4})
	res = <-p2.SendAsyncChan(context.Background(), message.NewMessage("T", []byte("x")))
	var se *SendError
	var re *remoting.ResponseError
	if !errors.As(res.Err, &se) || se.Attempts != 5 || !errors.As(res.Err, &re) || re.Code != remoting.ServiceNotAvailable {
		t.Fatalf("%+v", res.Err)
	}
	// Never retried: MESSAGE_ILLEGAL.
	d := fakeremote.Start(t, brokerHandlers(refuse(remoting.MessageIllegal, "too big")))
	ns3 := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-d", d.Addr()})})
	p3 := newProducer(t, Config{NamesrvAddrs: []string{ns3.Addr()}})
	res = <-p3.SendAsyncChan(context.Background(), message.NewMessage("T", []byte("x")))
	if !errors.As(res.Err, &se) || se.Attempts != 1 || len(d.Requests(remoting.SendMessageV2)) != 1 {
		t.Fatalf("%+v", res.Err)
	}
}

func TestSendAsyncContextAndInflightLimit(t *testing.T) {
	gate := make(chan struct{})
	b := fakeremote.Start(t, brokerHandlers(gated(gate)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, MaxAsyncInflight: 2})
	first := p.SendAsyncChan(context.Background(), message.NewMessage("T", []byte("1")))
	second := p.SendAsyncChan(context.Background(), message.NewMessage("T", []byte("2")))
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(b.Requests(remoting.SendMessageV2)) == 2 }, func() string { return "two sends in flight" })

	// A third waits for room until its context ends; nothing is sent for it.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := p.SendAsync(ctx, message.NewMessage("T", []byte("3")), func(*message.SendResult, error) { t.Error("callback of a refused send") })
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third send: %v", err)
	}
	// A caller's context ending while the send is in flight fails that send, not others.
	ctx, cancel = context.WithCancel(context.Background())
	close(gate)
	for _, ch := range []<-chan AsyncResult{first, second} {
		if r := <-ch; r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	gate2 := make(chan struct{})
	b2 := fakeremote.Start(t, brokerHandlers(gated(gate2)))
	ns2 := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b2.Addr()})})
	p2 := newProducer(t, Config{NamesrvAddrs: []string{ns2.Addr()}})
	ch := p2.SendAsyncChan(ctx, message.NewMessage("T", []byte("c")))
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(b2.Requests(remoting.SendMessageV2)) == 1 }, func() string { return "send in flight" })
	cancel()
	r := <-ch
	if !errors.Is(r.Err, context.Canceled) || len(b2.Requests(remoting.SendMessageV2)) != 1 {
		t.Fatalf("cancelled send: %v, %d attempts", r.Err, len(b2.Requests(remoting.SendMessageV2)))
	}
	close(gate2)

	// Room frees up as sends finish: 50 sends through a limit of 2.
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := 0; i < 50; i++ {
		wg.Add(1)
		if err := p.SendAsync(context.Background(), message.NewMessage("T", []byte("x")), func(_ *message.SendResult, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d failed", failed.Load())
	}
}

func TestShutdownWaitsForAsyncSends(t *testing.T) {
	gate := make(chan struct{})
	b := fakeremote.Start(t, brokerHandlers(gated(gate)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	p, err := New(Config{NamesrvAddrs: []string{ns.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var done atomic.Int32
	for i := 0; i < 5; i++ {
		if err := p.SendAsync(context.Background(), message.NewMessage("T", []byte("x")), func(_ *message.SendResult, err error) {
			if err != nil {
				t.Errorf("in-flight send failed: %v", err)
			}
			done.Add(1)
		}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(b.Requests(remoting.SendMessageV2)) == 5 }, func() string { return "5 sends in flight" })
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- p.Shutdown(ctx)
	}()
	// Shutdown refuses new sends at once and waits for the five.
	testkit.WaitFor(t, 5*time.Second, func() bool {
		return errors.Is(p.SendAsync(context.Background(), message.NewMessage("T", []byte("x")), func(*message.SendResult, error) {}), ErrClosed)
	}, func() string { return "new sends still accepted" })
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with sends in flight", err)
	default:
	}
	close(gate)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if done.Load() != 5 {
		t.Fatalf("%d callbacks ran before Shutdown returned", done.Load())
	}
	if len(b.Requests(remoting.UnregisterClient)) != 1 {
		t.Fatal("no UNREGISTER_CLIENT after the sends")
	}

	// A deadline that passes first: Shutdown reports it, the sends fail, none is left.
	gate2 := make(chan struct{})
	defer close(gate2)
	b2 := fakeremote.Start(t, brokerHandlers(gated(gate2)))
	ns2 := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b2.Addr()})})
	p2, err := New(Config{NamesrvAddrs: []string{ns2.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ch := p2.SendAsyncChan(context.Background(), message.NewMessage("T", []byte("x")))
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(b2.Requests(remoting.SendMessageV2)) == 1 }, func() string { return "send in flight" })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p2.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown past its deadline: %v", err)
	}
	select {
	case r := <-ch:
		if r.Err == nil {
			t.Fatal("a send cut off by Shutdown reported success")
		}
	default:
		t.Fatal("Shutdown returned before the cut-off send's callback")
	}
}

func TestSendOneway(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(2, [2]string{"broker-a", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	msg := message.NewMessage("T", []byte("fire")).SetTag("t1")
	if err := p.SendOneway(context.Background(), msg, WithQueue(message.MessageQueue{BrokerName: "broker-a", QueueID: 1})); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(b.Requests(remoting.SendMessageV2)) == 1 }, func() string { return "oneway send arrived" })
	req := b.Requests(remoting.SendMessageV2)[0]
	if !req.IsOneway() || req.ExtFields["e"] != "1" || string(req.Body) != "fire" ||
		message.UnmarshalProperties(req.ExtFields["i"])["UNIQ_KEY"] != msg.UniqKey() {
		t.Fatalf("request flag %d ext %v", req.Flag, req.ExtFields)
	}

	// No retry: a dead broker gives one failed attempt, and the broker is avoided after.
	ns2 := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", deadAddr(t)})})
	p2 := newProducer(t, Config{NamesrvAddrs: []string{ns2.Addr()}})
	err := p2.SendOneway(context.Background(), message.NewMessage("T", []byte("x")))
	var se *SendError
	var ce *remoting.ConnError
	if !errors.As(err, &se) || se.Attempts != 1 || !errors.As(err, &ce) {
		t.Fatalf("dead broker: %v", err)
	}
	if _, ok := p2.AvoidedBrokers()["broker-a"]; !ok {
		t.Fatalf("unreachable broker not avoided: %v", p2.AvoidedBrokers())
	}
	var ve *message.ValidationError
	if err := p2.SendOneway(context.Background(), message.NewMessage("T", nil)); !errors.As(err, &ve) {
		t.Fatalf("invalid: %v", err)
	}
}

func TestRetryAnotherBrokerWhenNotStoreOK(t *testing.T) {
	a := fakeremote.Start(t, brokerHandlers(storeOK(remoting.FlushDiskTimeout)))
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	route := routeJSON(1, [2]string{"broker-a", a.Addr()}, [2]string{"broker-b", b.Addr()})
	ns := newNamesrv(t, map[string]string{"T": route})
	ctx := context.Background()

	// Default off: FLUSH_DISK_TIMEOUT reaches the caller (first send goes to broker-a).
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")))
	if err != nil || r.Status != message.SendFlushDiskTimeout || r.Queue.BrokerName != "broker-a" {
		t.Fatalf("%+v %v", r, err)
	}
	// On: retried on broker-b, SEND_OK.
	p2 := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, RetryAnotherBrokerWhenNotStoreOK: true})
	r, err = p2.SendSync(ctx, message.NewMessage("T", []byte("x")))
	if err != nil || r.Status != message.SendOK || r.Queue.BrokerName != "broker-b" {
		t.Fatalf("%+v %v", r, err)
	}
	// On, and every broker answers not OK: the last stored result, no error.
	c := fakeremote.Start(t, brokerHandlers(storeOK(remoting.SlaveNotAvailable)))
	ns2 := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-c", c.Addr()})})
	p3 := newProducer(t, Config{NamesrvAddrs: []string{ns2.Addr()}, RetryAnotherBrokerWhenNotStoreOK: true})
	r, err = p3.SendSync(ctx, message.NewMessage("T", []byte("x")))
	if err != nil || r.Status != message.SendSlaveNotAvailable || len(c.Requests(remoting.SendMessageV2)) != 3 {
		t.Fatalf("%+v %v, %d attempts", r, err, len(c.Requests(remoting.SendMessageV2)))
	}
}

// TestSlowBrokerAvoided: a broker answering above a latency threshold is avoided for the
// rule's window and used again afterwards.
func TestSlowBrokerAvoided(t *testing.T) {
	slow := func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		time.Sleep(120 * time.Millisecond) // the broker under test is slow by design
		return storeOK(remoting.Success)(req)
	}
	a := fakeremote.Start(t, brokerHandlers(slow))
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(2, [2]string{"broker-a", a.Addr()}, [2]string{"broker-b", b.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()},
		LatencyFaultRules: []LatencyFaultRule{{Latency: 100 * time.Millisecond, NotAvailable: 500 * time.Millisecond}}})
	ctx := context.Background()
	r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")))
	if err != nil || r.Queue.BrokerName != "broker-a" {
		t.Fatalf("first send %+v %v", r, err)
	}
	left, ok := p.AvoidedBrokers()["broker-a"]
	if !ok || left > 500*time.Millisecond {
		t.Fatalf("slow broker-a not avoided: %v", p.AvoidedBrokers())
	}
	for i := 0; i < 10 && len(p.AvoidedBrokers()) > 0; i++ {
		r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		if r.Queue.BrokerName != "broker-b" && len(p.AvoidedBrokers()) > 0 {
			t.Fatalf("avoided broker used: %v", r.Queue)
		}
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(p.AvoidedBrokers()) == 0 }, func() string { return "window never passed" })
	seenA := false
	for i := 0; i < 4 && !seenA; i++ {
		r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		seenA = r.Queue.BrokerName == "broker-a"
	}
	if !seenA {
		t.Fatal("broker-a not used again after its window")
	}
}

func TestConfigDefaultsAndValidate(t *testing.T) {
	c := Config{NamesrvAddrs: []string{"127.0.0.1:9876"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.setDefaults()
	if c.Group != "DEFAULT_PRODUCER" || c.SendTimeout != 3*time.Second || c.RetryTimesWhenSendFailed != 2 ||
		c.RetryTimesWhenSendAsyncFailed != 2 || c.RetryAnotherBrokerWhenNotStoreOK || !*c.SendLatencyFaultEnable ||
		c.FaultIsolationDuration != 30*time.Second || len(c.LatencyFaultRules) != 5 || c.MaxMessageSize != 4194304 ||
		c.CompressMsgBodyOverHowmuch != 4096 || c.CompressLevel != 5 || c.MaxAsyncInflight != 1000 || c.MaxAsyncInflightBytes != 128<<20 {
		t.Fatalf("defaults %+v", c)
	}
	neg := Config{NamesrvAddrs: []string{"127.0.0.1:9876"}, RetryTimesWhenSendFailed: -1, RetryTimesWhenSendAsyncFailed: -5}
	neg.setDefaults()
	if neg.RetryTimesWhenSendFailed != 0 || neg.RetryTimesWhenSendAsyncFailed != 0 {
		t.Fatalf("negative retries: %+v", neg)
	}
	ns := []string{"127.0.0.1:9876"}
	for field, cfg := range map[string]Config{
		"RetryTimesWhenSendFailed":      {NamesrvAddrs: ns, RetryTimesWhenSendFailed: 33},
		"RetryTimesWhenSendAsyncFailed": {NamesrvAddrs: ns, RetryTimesWhenSendAsyncFailed: 100},
		"FaultIsolationDuration":        {NamesrvAddrs: ns, FaultIsolationDuration: -1},
		"MaxAsyncInflight":              {NamesrvAddrs: ns, MaxAsyncInflight: -1},
		"MaxAsyncInflightBytes":         {NamesrvAddrs: ns, MaxAsyncInflightBytes: -1},
		"LatencyFaultRules[1]":          {NamesrvAddrs: ns, LatencyFaultRules: []LatencyFaultRule{{time.Second, time.Second}, {time.Second, time.Minute}}},
		"LatencyFaultRules[0]":          {NamesrvAddrs: ns, LatencyFaultRules: []LatencyFaultRule{{-time.Second, time.Second}}},
	} {
		err := cfg.Validate()
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Package != "producer" || ce.Field != field || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want a *config.Error naming the field", field, err)
		}
	}
	// The name server addresses are checked by the shared client, reported as the producer's.
	var ce *config.Error
	if err := (&Config{NamesrvAddrs: []string{"127.0.0.1:9876", "nohostport"}}).Validate(); !errors.As(err, &ce) ||
		ce.Package != "producer" || ce.Field != "NamesrvAddrs[1]" || ce.Value != "nohostport" {
		t.Errorf("bad second name server: %v", err)
	}
}
