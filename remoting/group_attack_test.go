package remoting

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// A malformed frame behind well-formed requests in the same write closes the
// connection, but only after every request read before it was handled and answered:
// grouped requests (a run, or runs of one when the codes alternate) and inline ones
// alike. Otherwise a request could be carried out (a send stored) with its answer
// dropped, or left undone depending on how TCP cut the bytes. The same holds when the
// peer half-closes after its requests.
func TestMalformedFrameAnswersRequestsBeforeIt(t *testing.T) {
	s := startServer(t, ServerConfig{})
	var handled atomic.Int32
	group := func(_ context.Context, _ *Conn, reqs, resps []*RemotingCommand) {
		for i, req := range reqs {
			handled.Add(1)
			r := NewResponse(Success, "")
			r.Body = req.Body
			resps[i] = r
		}
	}
	s.HandleInlineGroup(SendMessage, group)
	s.HandleInlineGroup(SendMessageV2, group)
	s.HandleInline(HeartBeat, func(_ context.Context, _ *Conn, req *RemotingCommand) *RemotingCommand {
		handled.Add(1)
		r := NewResponse(Success, "")
		if string(req.Body) == "big" { // more than the sockets hold: the writer goroutine writes the rest
			r.Body = make([]byte, 6<<20)
		}
		return r
	})
	badHeader := make([]byte, 12)
	binary.BigEndian.PutUint32(badHeader[0:], 8)
	binary.BigEndian.PutUint32(badHeader[4:], 1000) // a 1000-byte header in an 8-byte frame
	for _, tc := range []struct {
		name string
		tail []byte
		reqs func() []*RemotingCommand
	}{
		{"run then bad header", badHeader, func() []*RemotingCommand {
			var reqs []*RemotingCommand
			for i := range 20 {
				reqs = append(reqs, NewRequest(SendMessage, nil, []byte(strconv.Itoa(i))))
			}
			return reqs
		}},
		{"alternating codes then short length", []byte{0, 0, 0, 2}, func() []*RemotingCommand {
			var reqs []*RemotingCommand
			for i := range 40 {
				code := SendMessage
				if i%2 == 1 {
					code = SendMessageV2
				}
				if i%10 == 5 {
					code = HeartBeat
				}
				reqs = append(reqs, NewRequest(code, nil, []byte(strconv.Itoa(i))))
			}
			return reqs
		}},
		// The peer half-closes after its requests (a nil tail) while a large answer keeps
		// the writer busy: the answers queued behind it are written before the close.
		{"half-close behind a large answer", nil, func() []*RemotingCommand {
			reqs := []*RemotingCommand{NewRequest(HeartBeat, nil, []byte("big"))}
			for i := range 30 {
				reqs = append(reqs, NewRequest(SendMessage, nil, []byte(strconv.Itoa(i))))
			}
			return reqs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handled.Store(0)
			reqs := tc.reqs()
			out := encodeRequests(t, reqs)
			nc := rawDial(t, s.Addr())
			_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := nc.Write(append(out, tc.tail...)); err != nil {
				t.Fatal(err)
			}
			if tc.tail == nil {
				if err := nc.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			got := map[int32]bool{}
			var err error
			for {
				var f []byte
				if f, err = ReadFrame(nc, 0); err != nil {
					break
				}
				resp, _, derr := DecodeFrame(f)
				if derr != nil {
					t.Fatal(derr)
				}
				got[resp.Opaque] = true
			}
			if !errors.Is(err, io.EOF) {
				t.Fatalf("after %d answers: %v, want the connection closed", len(got), err)
			}
			if len(got) != len(reqs) || int(handled.Load()) != len(reqs) {
				t.Fatalf("%d requests before the malformed frame: %d handled, %d answered", len(reqs), handled.Load(), len(got))
			}
		})
	}
}
