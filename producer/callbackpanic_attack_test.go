package producer

import (
	"context"
	"net"
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

// TestAsyncUserCodePanicEndsTheSend: user code other than the callback that SendAsync
// runs — a selector (route cached: in the caller's goroutine; not cached: in one of the
// producer's goroutines) and a send middleware (in the producer's goroutine of a send
// with middlewares) — may panic. The send then ends with an error to its callback
// (logged with the stack) instead of ending the process or leaving the send in flight
// for ever (Shutdown would wait for it past its ctx, and its MaxAsyncInflight room would
// never come back).
func TestAsyncUserCodePanicEndsTheSend(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", b.Addr()})})
	badSel := SelectorFunc(func(*message.Message, []message.MessageQueue, string) (message.MessageQueue, error) {
		panic("selector blew up")
	})
	badMW := func(next middleware.SendFunc) middleware.SendFunc {
		return func(context.Context, *message.Message) (*message.SendResult, error) { panic("middleware blew up") }
	}
	for _, tc := range []struct {
		name   string
		mws    []middleware.SendMiddleware
		opts   []SendOption
		cached bool
		want   string
	}{
		{"selector, route cached", nil, []SendOption{WithSelector(badSel)}, true, "selector blew up"},
		{"selector, route not cached", nil, []SendOption{WithSelector(badSel)}, false, "selector blew up"},
		{"middleware", []middleware.SendMiddleware{badMW}, nil, true, "middleware blew up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs, log := testkit.CaptureLogs(t)
			p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, Logger: log, MaxAsyncInflight: 1, Middlewares: tc.mws})
			if tc.cached {
				if _, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("warm")), WithoutMiddlewares()); err != nil {
					t.Fatal(err)
				}
			}
			// Twice: with MaxAsyncInflight 1 the second send finds room only if the first ended.
			for i := range 2 {
				ran := make(chan error, 1)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err := p.SendAsyncWith(ctx, message.NewMessage("T", []byte("b")), func(_ *message.SendResult, err error) { ran <- err }, tc.opts...)
				if err != nil {
					t.Fatalf("send %d: SendAsync: %v", i, err)
				}
				select {
				case err := <-ran:
					if err == nil || !strings.Contains(err.Error(), tc.want) {
						t.Fatalf("send %d: callback got %v, want an error naming the panic %q", i, err, tc.want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("send %d: the callback did not run", i)
				}
			}
			if n := len(logs.Find("panicked")); n != 2 {
				t.Fatalf("%d panics logged, want 2", n)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown after panicking user code: %v", err)
			}
		})
	}
}

// TestAsyncCallbackNotOnCallersGoroutine: when every attempt fails before reaching the
// network (the route is cached, the broker refuses the connection), cb still runs in a
// goroutine the producer owns, as SendAsync promises, not inside SendAsync on the
// caller's goroutine: a caller that holds a lock its callback takes does not deadlock.
func TestAsyncCallbackNotOnCallersGoroutine(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // connections to it are refused
	ns := newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", dead})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	if _, err := p.SendSync(context.Background(), message.NewMessage("T", []byte("warm"))); err == nil {
		t.Fatal("a send to a closed port succeeded")
	}
	var mu sync.Mutex
	mu.Lock()
	ran := make(chan error, 1)
	returned := make(chan error, 1)
	go func() {
		returned <- p.SendAsync(context.Background(), message.NewMessage("T", []byte("b")), func(_ *message.SendResult, err error) {
			mu.Lock() // the caller still holds it while SendAsync runs
			mu.Unlock()
			ran <- err
		})
	}()
	select {
	case err := <-returned:
		mu.Unlock()
		if err != nil {
			t.Fatalf("SendAsync: %v", err)
		}
	case <-time.After(5 * time.Second):
		mu.Unlock() // let the stuck SendAsync finish before failing
		<-returned
		t.Fatal("SendAsync ran its callback on the caller's goroutine: it waited for a lock the caller held")
	}
	select {
	case err := <-ran:
		if err == nil {
			t.Fatal("the callback got no error for a refused connection")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the callback did not run")
	}
}
