package remoting

import (
	"net"
	"testing"
	"time"
)

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
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			seen := make(chan SerializeType, 1)
			go func() { // owned by the test: ends with the one connection it serves
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
				if err != nil || req.ExtFields["topic"] != "T" || string(req.Body) != "body" || req.Code != 310 {
					seen <- 99
					return
				}
				seen <- st
				resp := NewResponse(Success, "stored")
				resp.Opaque = req.Opaque
				resp.ExtFields = map[string]string{"msgId": "M1"}
				out, _ := resp.EncodeAs(st)
				_, _ = nc.Write(out)
			}()
			c := newClient(t, ClientConfig{SerializeType: tc.cfg})
			resp, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), ln.Addr().String(), NewRequest(310, map[string]string{"topic": "T"}, []byte("body")))
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
	if err := (ClientConfig{SerializeType: 2}).Validate(); err == nil {
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
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			got := make(chan *RemotingCommand, 1)
			go func() { // owned by the test: ends with the one connection it serves
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
				req, _, err := DecodeFrame(f)
				if err != nil {
					return
				}
				got <- req
				resp := NewResponse(Success, "")
				resp.Opaque = req.Opaque
				out, _ := resp.EncodeAs(st)
				_, _ = nc.Write(out)
			}()
			cred := Credentials{AccessKey: "ak", SecretKey: "sk"}
			c := newClient(t, ClientConfig{SerializeType: st, Credentials: cred})
			req := NewRequest(11, map[string]string{"subscription": "", "topic": "T", "expressionType": ""}, []byte("b"))
			if _, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), ln.Addr().String(), req); err != nil {
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
