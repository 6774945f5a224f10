package remoting

import (
	"context"
	"maps"
	"net"
	"strings"
	"testing"
	"time"
)

// serveOnce listens on a free loopback port and answers the first request of the first
// connection with what answer returns for it and its serialize type (in that type; nil:
// no answer). The listener closes when the test ends.
func serveOnce(t *testing.T, answer func(req *RemotingCommand, st SerializeType) *RemotingCommand) string {
	return serveRawOnce(t, false, func(req *RemotingCommand, st SerializeType) []byte {
		resp := answer(req, st)
		if resp == nil {
			return nil
		}
		resp.Opaque = req.Opaque
		resp.Flag |= FlagResponse
		out, _ := resp.EncodeAs(st)
		return out
	})
}

// serveRawOnce listens on a free loopback port and answers the first request of the
// first connection with the bytes reply returns for it and its serialize type (a whole
// frame, length field included; nil: no answer); with hold it then keeps the connection
// until the client closes it. The listener closes when the test ends.
func serveRawOnce(t *testing.T, hold bool, reply func(req *RemotingCommand, st SerializeType) []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() { // owned by the test: serves one request, ends by the cleanup at the latest
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		f, err := ReadFrame(nc, 0)
		if err != nil {
			return
		}
		req, st, err := DecodeFrame(f)
		if err != nil {
			return
		}
		if out := reply(req, st); out != nil {
			_, _ = nc.Write(out)
		}
		if hold {
			_, _ = ReadFrame(nc, 0) // until the client closes the connection
		}
	}()
	return ln.Addr().String()
}

// TestClientSerializeType: a client configured with SerializeRocketMQ writes its
// requests with the binary header (type byte 1 on the wire, the fields intact) and reads
// the server's binary answer; with the default it writes JSON. An unknown type is
// refused by Validate.
func TestClientSerializeType(t *testing.T) {
	for _, tc := range []struct {
		cfg  SerializeType
		want SerializeType
	}{{0, SerializeJSON}, {SerializeRocketMQ, SerializeRocketMQ}} {
		t.Run(tc.want.String(), func(t *testing.T) {
			seen := make(chan SerializeType, 1)
			addr := serveOnce(t, func(req *RemotingCommand, st SerializeType) *RemotingCommand {
				if req.ExtFields["topic"] != "T" || string(req.Body) != "body" || req.Code != 310 {
					seen <- 99
					return nil
				}
				seen <- st
				resp := NewResponse(Success, "stored")
				resp.ExtFields = map[string]string{"msgId": "M1"}
				return resp
			})
			c := newClient(t, ClientConfig{SerializeType: tc.cfg})
			resp, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), addr, NewRequest(310, map[string]string{"topic": "T"}, []byte("body")))
			if err != nil {
				t.Fatal(err)
			}
			if st := <-seen; st != tc.want {
				t.Fatalf("request written with serialize type %v, want %v", st, tc.want)
			}
			if resp.Code != int16(Success) || resp.Remark != "stored" || resp.ExtFields["msgId"] != "M1" {
				t.Fatalf("answer: code %d remark %q ext %v", resp.Code, resp.Remark, resp.ExtFields)
			}
		})
	}
	if err := (&ClientConfig{SerializeType: 2}).Validate(); err == nil {
		t.Fatal("SerializeType 2 was accepted")
	}
	if _, err := NewClient(ClientConfig{SerializeType: 7}); err == nil {
		t.Fatal("NewClient accepted SerializeType 7")
	}
}

// TestBinaryRequestLeavesOutEmptyValues: a client writing binary headers leaves out the
// ext fields whose value is empty, since RocketMQ's binary decoder (4.9.x) reads a
// zero-length value as null: a RocketMQ broker with ACL then signs "null" where the
// client signed nothing, and refuses the request (and a null is what an absent field
// gives it anyway). A signed request is still verified, by Sluice's own check too. With
// JSON headers the empty values are written.
func TestBinaryRequestLeavesOutEmptyValues(t *testing.T) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		t.Run(st.String(), func(t *testing.T) {
			got := make(chan *RemotingCommand, 1)
			addr := serveOnce(t, func(req *RemotingCommand, _ SerializeType) *RemotingCommand {
				got <- req
				return NewResponse(Success, "")
			})
			cred := Credentials{AccessKey: "ak", SecretKey: "sk"}
			c := newClient(t, ClientConfig{SerializeType: st, Credentials: cred})
			req := NewRequest(11, map[string]string{"subscription": "", "topic": "T", "expressionType": ""}, []byte("b"))
			if _, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), addr, req); err != nil {
				t.Fatal(err)
			}
			r := <-got
			_, sub := r.ExtFields["subscription"]
			_, typ := r.ExtFields["expressionType"]
			if sub != (st == SerializeJSON) || typ != (st == SerializeJSON) || r.ExtFields["topic"] != "T" {
				t.Fatalf("%v request arrived with ext %v", st, r.ExtFields)
			}
			if !VerifySignature("sk", r) {
				t.Fatalf("%v request: signature does not verify; ext %v", st, r.ExtFields)
			}
		})
	}
}

// TestEncodingsCarrySameValues: through a real server, a request and its answer carry
// the same ext values and remark in both header encodings: quotes, backslashes, control
// characters, HTML characters, U+2028, non-ASCII text and a 100 KiB value arrive
// unchanged, and the answer comes back in the request's encoding. An empty ext value is
// the one difference: a binary request leaves it out (see
// TestBinaryRequestLeavesOutEmptyValues), so it reads as "" either way through Ext but
// is absent in binary.
func TestEncodingsCarrySameValues(t *testing.T) {
	s := startServer(t, ServerConfig{})
	const remark = `refused: "quoted" \ <b>&</b> ✓ — 日本語 🎉` + "\u2028\t\x01"
	s.Handle(310, func(_ context.Context, _ *Conn, req *RemotingCommand) *RemotingCommand {
		resp := NewResponse(SystemError, remark+req.ExtFields["quotes"])
		resp.ExtFields = req.ExtFields
		return resp
	})
	ext := map[string]string{
		"quotes":  `"a" \b\ <c>&amp;`,
		"control": "\x00\x01\x02\x1f\x7f\t\n\r",
		"unicode": "ключ 世界 🎉 \u2028\u2029 é",
		"json":    `{"extFields":{"x":"y"}}`,
		"long":    strings.Repeat("ü", 50<<10),
		"empty":   "",
	}
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		t.Run(st.String(), func(t *testing.T) {
			c := newClient(t, ClientConfig{SerializeType: st})
			resp, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), s.Addr(), NewRequest(310, maps.Clone(ext), nil))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Remark != remark+ext["quotes"] {
				t.Errorf("remark %q, want %q", resp.Remark, remark+ext["quotes"])
			}
			for k, v := range ext {
				got, ok := resp.Ext(k)
				if got != v || ok != (v != "" || st == SerializeJSON) {
					t.Errorf("ext %q: %.40q present %v (%d bytes), want %.40q (%d bytes)", k, got, ok, len(got), v, len(v))
				}
			}
			// the server's answer, read off the wire, is in the request's encoding
			nc := rawDial(t, s.Addr())
			req := NewRequest(310, map[string]string{"quotes": ext["quotes"]}, nil)
			frame, err := req.EncodeAs(st)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := nc.Write(frame); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			f, err := ReadFrame(nc, 0)
			if err != nil {
				t.Fatal(err)
			}
			r, rst, err := DecodeFrame(f)
			if err != nil {
				t.Fatal(err)
			}
			if rst != st || r.Remark != remark+ext["quotes"] {
				t.Fatalf("answer to a %v request: %v, remark %q", st, rst, r.Remark)
			}
		})
	}
}
