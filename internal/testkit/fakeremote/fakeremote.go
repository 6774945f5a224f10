// Package fakeremote is a real remoting server on 127.0.0.1 for client tests: it answers
// each request code with a handler the test gives and records every request it handled.
// It is a sub-package of testkit because it imports remoting (whose own tests use
// testkit).
package fakeremote

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

// Handler answers one request; nil means no answer (as for a one-way request).
type Handler func(req *remoting.RemotingCommand) *remoting.RemotingCommand

// Handlers maps request codes to their handlers. A request with another code gets the
// remoting server's REQUEST_CODE_NOT_SUPPORTED answer and is not recorded.
type Handlers map[remoting.RequestCode]Handler

// Server is a started fake server.
type Server struct {
	srv  *remoting.Server
	mu   sync.Mutex
	reqs []*remoting.RemotingCommand
}

// Start starts a server on a free 127.0.0.1 port answering with hs, and shuts it down
// (5 s budget) in t's cleanup. It fails t when the server cannot start.
func Start(t testing.TB, hs Handlers) *Server {
	t.Helper()
	srv, err := remoting.NewServer(remoting.ServerConfig{Addr: "127.0.0.1:0", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatalf("fakeremote: %v", err)
	}
	f := &Server{srv: srv}
	for code, h := range hs {
		srv.Handle(code, func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
			f.mu.Lock()
			f.reqs = append(f.reqs, req)
			f.mu.Unlock()
			return h(req)
		})
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("fakeremote: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return f
}

// Addr returns the server's "127.0.0.1:port".
func (f *Server) Addr() string { return f.srv.Addr() }

// Remoting returns the underlying server, for tests that add handlers or shut it down
// early.
func (f *Server) Remoting() *remoting.Server { return f.srv }

// Requests returns the recorded requests with code, in arrival order.
func (f *Server) Requests(code remoting.RequestCode) []*remoting.RemotingCommand {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*remoting.RemotingCommand
	for _, r := range f.reqs {
		if r.Code == int16(code) {
			out = append(out, r)
		}
	}
	return out
}
