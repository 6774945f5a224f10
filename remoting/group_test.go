package remoting

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// groupRecorder is a GroupHandler for SEND_MESSAGE that records each call's bodies and
// the order of everything handled, and echoes each body.
type groupRecorder struct {
	mu    sync.Mutex
	calls [][]string // the bodies of each call
	order []string   // bodies of every request handled, group or not, in order
}

func (g *groupRecorder) handle(_ context.Context, _ *Conn, reqs, resps []*RemotingCommand) {
	var bodies []string
	for i, req := range reqs {
		b := string(req.Body)
		bodies = append(bodies, b)
		if b == "panic" {
			panic("boom")
		}
		r := NewResponse(Success, "")
		r.Body = []byte(b)
		resps[i] = r
	}
	g.mu.Lock()
	g.calls = append(g.calls, bodies)
	g.order = append(g.order, bodies...)
	g.mu.Unlock()
}

func (g *groupRecorder) note(b string) {
	g.mu.Lock()
	g.order = append(g.order, b)
	g.mu.Unlock()
}

// writeRequests encodes the requests (code, body, one-way) with opaques from 1 and
// writes them with one socket write.
func writeRequests(t *testing.T, nc net.Conn, reqs []*RemotingCommand) {
	t.Helper()
	if _, err := nc.Write(encodeRequests(t, reqs)); err != nil {
		t.Fatal(err)
	}
}

// encodeRequests encodes the requests one after another, with opaques from 1.
func encodeRequests(t *testing.T, reqs []*RemotingCommand) []byte {
	t.Helper()
	var out []byte
	for i, req := range reqs {
		req.Opaque = int32(i + 1)
		f, err := req.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f...)
	}
	return out
}

// readAnswers reads n answers and returns them by opaque.
func readAnswers(t *testing.T, nc net.Conn, n int) map[int32]*RemotingCommand {
	t.Helper()
	got := map[int32]*RemotingCommand{}
	for range n {
		f, err := ReadFrame(nc, 0)
		if err != nil {
			t.Fatalf("after %d answers: %v", len(got), err)
		}
		resp, _, err := DecodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		got[resp.Opaque] = resp
	}
	return got
}

// A burst of requests of a group code written at once reaches the handler in runs:
// fewer calls than requests, each at most maxRunFrames long; a request of another code
// in the middle ends the run and is handled after it, in arrival order; each request
// gets its own answer.
func TestHandleInlineGroupRuns(t *testing.T) {
	s := startServer(t, ServerConfig{})
	g := &groupRecorder{}
	s.HandleInlineGroup(SendMessage, g.handle)
	s.HandleInline(HeartBeat, func(_ context.Context, _ *Conn, req *RemotingCommand) *RemotingCommand {
		g.note(string(req.Body))
		return NewResponse(Success, "")
	})
	nc := rawDial(t, s.Addr())
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 150
	var reqs []*RemotingCommand
	for i := range n {
		if i == 100 {
			reqs = append(reqs, NewRequest(HeartBeat, nil, []byte("hb")))
		}
		reqs = append(reqs, NewRequest(SendMessage, nil, []byte(strconv.Itoa(i))))
	}
	writeRequests(t, nc, reqs)
	got := readAnswers(t, nc, len(reqs))
	for i, req := range reqs {
		resp := got[int32(i+1)]
		if resp == nil || resp.ResponseCode() != Success || (req.Code == int16(SendMessage) && string(resp.Body) != string(req.Body)) {
			t.Fatalf("answer to request %d (%q): %+v", i, req.Body, resp)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var want []string
	for _, req := range reqs {
		want = append(want, string(req.Body))
	}
	if strings.Join(g.order, ",") != strings.Join(want, ",") {
		t.Fatalf("handled in order %v", g.order)
	}
	longest := 0
	for _, c := range g.calls {
		longest = max(longest, len(c))
		if len(c) > maxRunFrames {
			t.Fatalf("a run of %d requests, limit %d", len(c), maxRunFrames)
		}
		for _, b := range c[:len(c)-1] {
			if b == "99" { // the heartbeat came right after request 99
				t.Fatalf("run %v goes on past the heartbeat", c)
			}
		}
	}
	// One write of 151 small frames: the reader holds many complete requests at once.
	if len(g.calls) >= n/2 || longest < 8 {
		t.Fatalf("%d calls for %d requests (longest run %d): requests were not taken together", len(g.calls), n, longest)
	}
}

// ServerConfig.Before runs for each request of a run: those it answers stay out of the
// handler's call and get Before's answer; one-way requests get no answer; a handler that
// panics answers the rest of its run SYSTEM_ERROR and the connection goes on serving.
func TestHandleInlineGroupBeforeOnewayAndPanic(t *testing.T) {
	s := startServer(t, ServerConfig{Before: func(_ context.Context, _ *Conn, req *RemotingCommand) *RemotingCommand {
		if string(req.Body) == "refuse" {
			return NewResponse(NoPermission, "refused")
		}
		return nil
	}})
	g := &groupRecorder{}
	s.HandleInlineGroup(SendMessage, g.handle)
	nc := rawDial(t, s.Addr())
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	oneway := NewRequest(SendMessage, nil, []byte("oneway"))
	oneway.Flag |= FlagOneway
	writeRequests(t, nc, []*RemotingCommand{
		NewRequest(SendMessage, nil, []byte("a")),
		NewRequest(SendMessage, nil, []byte("refuse")),
		oneway,
		NewRequest(SendMessage, nil, []byte("b")),
	})
	got := readAnswers(t, nc, 3)
	if got[1].ResponseCode() != Success || string(got[1].Body) != "a" || got[2].ResponseCode() != NoPermission || got[4].ResponseCode() != Success || string(got[4].Body) != "b" {
		t.Fatalf("answers %+v %+v %+v", got[1], got[2], got[4])
	}
	g.mu.Lock()
	for _, b := range g.order {
		if b == "refuse" {
			t.Fatalf("the refused request reached the handler: %v", g.order)
		}
	}
	g.mu.Unlock()

	writeRequests(t, nc, []*RemotingCommand{
		NewRequest(SendMessage, nil, []byte("c")),
		NewRequest(SendMessage, nil, []byte("panic")),
		NewRequest(SendMessage, nil, []byte("d")),
	})
	got = readAnswers(t, nc, 3)
	// "c" has its answer before the panic; "panic" and what follows it in its run get
	// SYSTEM_ERROR ("d" is answered normally if the reader took it in a run of its own).
	if got[1].ResponseCode() != Success || string(got[1].Body) != "c" {
		t.Fatalf("answer before the panic: %+v", got[1])
	}
	if got[2].ResponseCode() != SystemError || !strings.Contains(got[2].Remark, "handler panic: boom") {
		t.Fatalf("the panicking request answered %+v", got[2])
	}
	if d := got[3]; !(d.ResponseCode() == SystemError && strings.Contains(d.Remark, "handler panic")) && !(d.ResponseCode() == Success && string(d.Body) == "d") {
		t.Fatalf("answer after the panic: %+v", d)
	}
	// The connection still serves.
	writeRequests(t, nc, []*RemotingCommand{NewRequest(SendMessage, nil, []byte("e"))})
	if got := readAnswers(t, nc, 1); got[1].ResponseCode() != Success || string(got[1].Body) != "e" {
		t.Fatalf("after the panic: %+v", got[1])
	}
}

// Registering a code with another Handle* takes it out of the groups, a nil group handler
// removes it, a request that reaches the handler table is a run of one, and after
// Shutdown began no code is a group code.
func TestHandleInlineGroupRegistration(t *testing.T) {
	s := startServer(t, ServerConfig{})
	g := &groupRecorder{}
	s.HandleInlineGroup(SendMessage, g.handle)
	if s.routeFor(int16(SendMessage)).group == nil || s.routeFor(int16(SendMessage)).inline {
		t.Fatal("HandleInlineGroup: the code is not a group code")
	}
	resp := s.serve(context.Background(), nil, NewRequest(SendMessage, nil, []byte("alone")))
	if resp == nil || string(resp.Body) != "alone" {
		t.Fatalf("through the handler table: %+v", resp)
	}
	s.HandleInline(SendMessage, echoHandler)
	if s.routeFor(int16(SendMessage)).group != nil || !s.routeFor(int16(SendMessage)).inline {
		t.Fatal("HandleInline after HandleInlineGroup: still a group code")
	}
	s.HandleInlineGroup(SendMessage, g.handle)
	s.HandleAsync(SendMessage, func(context.Context, *Conn, *RemotingCommand, func(*RemotingCommand)) {})
	if s.routeFor(int16(SendMessage)).group != nil {
		t.Fatal("HandleAsync after HandleInlineGroup: still a group code")
	}
	s.HandleInlineGroup(SendMessage, g.handle)
	s.HandleInlineGroup(SendMessage, nil)
	if s.routeFor(int16(SendMessage)).group != nil || s.serve(context.Background(), nil, NewRequest(SendMessage, nil, nil)).ResponseCode() != RequestCodeNotSupported {
		t.Fatal("a nil group handler did not remove the code")
	}
	s.HandleInlineGroup(SendMessage, g.handle)
	if err := s.Shutdown(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if s.routeFor(int16(SendMessage)).group != nil {
		t.Fatal("after Shutdown began a code is still a group code")
	}
}
