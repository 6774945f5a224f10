package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

// pathRecorder is a send middleware that stamps KEYS=<tag> on the message it passes on
// and records, per message tag, whether the chain ran and what the inner send returned.
type pathRecorder struct {
	mu   sync.Mutex
	seen map[string]pathCall
}

type pathCall struct {
	result *message.SendResult
	err    error
}

func (r *pathRecorder) mw() middleware.SendMiddleware {
	return func(next middleware.SendFunc) middleware.SendFunc {
		return func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
			cp := *m
			cp.Properties = map[string]string{}
			for k, v := range m.Properties {
				cp.Properties[k] = v
			}
			cp.SetKeys("mw-" + m.Tag())
			res, err := next(ctx, &cp)
			r.mu.Lock()
			r.seen[m.Tag()] = pathCall{res, err}
			r.mu.Unlock()
			if err != nil {
				return res, fmt.Errorf("wrapped by the middleware: %w", err)
			}
			return res, nil
		}
	}
}

func (r *pathRecorder) call(tag string) (pathCall, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.seen[tag]
	return c, ok
}

// keysOnWire returns the KEYS property of the send request whose tag is tag ("" when
// there is none).
func keysOnWire(b *fakeremote.Server, code remoting.RequestCode, tag string) (string, bool) {
	for _, req := range b.Requests(code) {
		props := message.UnmarshalProperties(req.ExtFields["i"])
		if props[message.PropertyTags] == tag {
			return props[message.PropertyKeys], true
		}
	}
	return "", false
}

// TestMiddlewaresOnEverySendPath checks, per send path, that Config.Middlewares either run
// around the send (their change reaches the wire, they see the inner result) or the path
// refuses with a *MiddlewareError before anything is sent.
func TestMiddlewaresOnEverySendPath(t *testing.T) {
	b := fakeremote.Start(t, fakeremote.Handlers{
		remoting.SendMessageV2: storeOK(remoting.Success), remoting.SendBatchMessage: storeOK(remoting.Success),
		remoting.HeartBeat: ok, remoting.UnregisterClient: ok,
	})
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	rec := &pathRecorder{seen: map[string]pathCall{}}
	cfg := Config{NamesrvAddrs: []string{ns.Addr()}, Middlewares: []middleware.SendMiddleware{rec.mw()}}
	p := newProducer(t, cfg)
	ctx := context.Background()
	ran := func(t *testing.T, tag string, wantResult bool) {
		t.Helper()
		c, ok := rec.call(tag)
		if !ok {
			t.Fatalf("%s: the middleware did not run", tag)
		}
		if c.err != nil || (c.result != nil) != wantResult {
			t.Fatalf("%s: the middleware saw result %+v, error %v (want a result: %v)", tag, c.result, c.err, wantResult)
		}
		testkit.WaitFor(t, 5*time.Second, func() bool { _, ok := keysOnWire(b, remoting.SendMessageV2, tag); return ok }, func() string { return tag + " on the wire" })
		if k, _ := keysOnWire(b, remoting.SendMessageV2, tag); k != "mw-"+tag {
			t.Fatalf("%s: KEYS on the wire %q, want the middleware's %q", tag, k, "mw-"+tag)
		}
	}

	t.Run("SendSync", func(t *testing.T) {
		if _, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")).SetTag("sync")); err != nil {
			t.Fatal(err)
		}
		ran(t, "sync", true)
	})
	t.Run("SendFunc", func(t *testing.T) {
		if _, err := p.SendFunc()(ctx, message.NewMessage("T", []byte("x")).SetTag("func")); err != nil {
			t.Fatal(err)
		}
		ran(t, "func", true)
	})
	t.Run("SendAsync", func(t *testing.T) {
		r := <-p.SendAsyncChan(ctx, message.NewMessage("T", []byte("x")).SetTag("async"))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ran(t, "async", true)
	})
	t.Run("SendOneway", func(t *testing.T) {
		if err := p.SendOneway(ctx, message.NewMessage("T", []byte("x")).SetTag("oneway")); err != nil {
			t.Fatal(err)
		}
		// The chain ran around the send; the inner send reports "queued": no result.
		ran(t, "oneway", false)
	})
	t.Run("SendOnewayError", func(t *testing.T) {
		// A failed one-way send goes back out through the chain, which may act on it.
		ns2 := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", deadAddr(t)})})
		p2 := newProducer(t, Config{NamesrvAddrs: []string{ns2.Addr()}, Middlewares: []middleware.SendMiddleware{rec.mw()}})
		err := p2.SendOneway(ctx, message.NewMessage("T", []byte("x")).SetTag("oneway-dead"))
		var se *SendError
		if !errors.As(err, &se) || !strings.HasPrefix(err.Error(), "wrapped by the middleware") {
			t.Fatalf("dead broker: %v (want the middleware's wrapping of a *SendError)", err)
		}
		if c, ok := rec.call("oneway-dead"); !ok || !errors.As(c.err, &se) {
			t.Fatalf("the middleware saw %+v, %v", c, ok)
		}
	})
	t.Run("WithoutMiddlewares", func(t *testing.T) {
		if _, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")).SetTag("bypass"), WithoutMiddlewares()); err != nil {
			t.Fatal(err)
		}
		if err := p.SendOneway(ctx, message.NewMessage("T", []byte("x")).SetTag("bypass-oneway"), WithoutMiddlewares()); err != nil {
			t.Fatal(err)
		}
		r := <-p.SendAsyncChan(ctx, message.NewMessage("T", []byte("x")).SetTag("bypass-async"), WithoutMiddlewares())
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		for _, tag := range []string{"bypass", "bypass-oneway", "bypass-async"} {
			if _, ok := rec.call(tag); ok {
				t.Errorf("%s: the middleware ran although the send asked for none", tag)
			}
			testkit.WaitFor(t, 5*time.Second, func() bool { _, ok := keysOnWire(b, remoting.SendMessageV2, tag); return ok }, func() string { return tag + " on the wire" })
			if k, _ := keysOnWire(b, remoting.SendMessageV2, tag); k != "" {
				t.Errorf("%s: KEYS %q on the wire", tag, k)
			}
		}
	})
	t.Run("SendBatch", func(t *testing.T) {
		batch := []*message.Message{message.NewMessage("T", []byte("a")).SetTag("batch"), message.NewMessage("T", []byte("b")).SetTag("batch")}
		_, err := p.SendBatch(ctx, batch)
		var me *MiddlewareError
		if !errors.As(err, &me) || me.Path != "SendBatch" || !errors.Is(err, ErrMiddlewaresUnsupported) {
			t.Fatalf("SendBatch with middlewares: %v, want a *MiddlewareError", err)
		}
		if n := len(b.Requests(remoting.SendBatchMessage)); n != 0 {
			t.Fatalf("%d batch requests sent although the batch was refused", n)
		}
		if batch[0].UniqKey() != "" {
			t.Fatal("a refused batch got UNIQ_KEYs")
		}
		if _, err := p.SendBatch(ctx, batch, WithoutMiddlewares()); err != nil {
			t.Fatalf("SendBatch WithoutMiddlewares: %v", err)
		}
		if n := len(b.Requests(remoting.SendBatchMessage)); n != 1 {
			t.Fatalf("%d batch requests, want 1", n)
		}
		if _, ok := rec.call("batch"); ok {
			t.Fatal("the middleware ran on a batch")
		}
		// Without Config.Middlewares a batch needs no option.
		plain := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
		if _, err := plain.SendBatch(ctx, []*message.Message{message.NewMessage("T", []byte("c"))}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("NewTransactionProducer", func(t *testing.T) {
		_, err := NewTransactionProducer(cfg, nopListener{})
		var me *MiddlewareError
		if !errors.As(err, &me) || me.Path != "NewTransactionProducer" || !errors.Is(err, ErrMiddlewaresUnsupported) {
			t.Fatalf("NewTransactionProducer with middlewares: %v, want a *MiddlewareError", err)
		}
		cfg.Middlewares = nil
		tp, err := NewTransactionProducer(cfg, nopListener{})
		if err != nil {
			t.Fatalf("without middlewares: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	})
}

type nopListener struct{}

func (nopListener) ExecuteLocalTransaction(context.Context, *message.Message) LocalTransactionState {
	return CommitMessage
}

func (nopListener) CheckLocalTransaction(context.Context, *message.MessageExt) LocalTransactionState {
	return CommitMessage
}
