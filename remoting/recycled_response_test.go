package remoting

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// TestBodylessResponseOwnsItsStrings: the reader gives a body-less response's frame back
// to the pool as soon as it is decoded, so the response's remark and ext fields must not
// share the frame's bytes. For each header decoder (the fast JSON path, its escaped
// strings, encoding/json for a header the fast path declines, the binary header) and both
// ext forms (map, list), the response read back is unchanged after every free pooled
// frame of its size class has been taken and overwritten.
func TestBodylessResponseOwnsItsStrings(t *testing.T) {
	const remark, value = "remark that must survive its frame", "value that must survive its frame"
	jsonFrame := func(header string) func(int32) []byte {
		return func(opaque int32) []byte {
			h := []byte(fmt.Sprintf(header, opaque))
			f := binary.BigEndian.AppendUint32(nil, uint32(4+len(h)))
			f = binary.BigEndian.AppendUint32(f, uint32(len(h)))
			return append(f, h...)
		}
	}
	binFrame := func(opaque int32) []byte {
		r := NewResponse(Success, remark)
		r.SetExt("k", value)
		r.Opaque = opaque
		r.Flag |= FlagResponse
		f, err := r.EncodeBinary()
		if err != nil {
			panic(err)
		}
		return f
	}
	for _, tc := range []struct {
		name  string
		frame func(int32) []byte
	}{
		{"json fast", jsonFrame(`{"code":0,"flag":1,"opaque":%d,"remark":"` + remark + `","extFields":{"k":"` + value + `"}}`)},
		{"json escaped", jsonFrame(`{"code":0,"flag":1,"opaque":%d,"remark":"remark that must survive\u0020its frame","extFields":{"k":"value that must survive\u0020its frame"}}`)},
		{"encoding/json", jsonFrame(`{"code":0,"flag":1,"opaque":%d,"remark":"` + remark + `","extFields":{"k":"` + value + `","n":null}}`)},
		{"binary", binFrame},
	} {
		for _, list := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s list=%v", tc.name, list), func(t *testing.T) {
				addr := serveRawOnce(t, true, func(req *RemotingCommand, _ SerializeType) []byte { return tc.frame(req.Opaque) })
				cfg := ClientConfig{}
				if list {
					cfg.ExtListCodes = []RequestCode{500}
				}
				c := newClient(t, cfg)
				resp, err := c.InvokeSync(ctxTimeout(t, 5*time.Second), addr, NewRequest(500, nil, nil))
				if err != nil {
					t.Fatal(err)
				}
				n := len(tc.frame(1))
				var taken [][]byte
				for range 256 { // every free buffer of the class, overwritten
					b := frameBuf(n, false)[:n]
					copy(b, bytes.Repeat([]byte{'X'}, n))
					taken = append(taken, b)
				}
				if got := resp.Remark; got != remark {
					t.Errorf("remark %q after its frame was reused, want %q", got, remark)
				}
				if got, _ := resp.Ext("k"); got != value {
					t.Errorf("ext field k %q after its frame was reused, want %q", got, value)
				}
				if resp.Body != nil {
					t.Errorf("body %q, want none", resp.Body)
				}
				for _, b := range taken {
					recycleFrame(b)
				}
			})
		}
	}
}
