package pop

import (
	"bytes"
	"testing"
	"time"
)

// FuzzDecodeHandle: any string is refused with a *HandleError or decodes; a decoded
// handle re-encodes to the same string (one encoding per handle), and a handle signed
// for one group is refused for another.
func FuzzDecodeHandle(f *testing.F) {
	secret := bytes.Repeat([]byte{7}, 32)
	f.Add(encodeHandle(secret, "G", "T", Handle{QueueID: 3, Offset: 42, Seq: 9, Attempt: 1, VisibleAt: time.Now().UnixMilli()}))
	f.Add("")
	f.Add("AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	f.Add("!!!")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := decodeHandle(secret, "G", "T", s)
		if err != nil {
			if _, ok := err.(*HandleError); !ok {
				t.Fatalf("error %T %v is not a *HandleError", err, err)
			}
			return
		}
		if got := encodeHandle(secret, "G", "T", h); got != s {
			t.Fatalf("decoded %+v re-encodes to %q, not %q", h, got, s)
		}
		if _, err := decodeHandle(secret, "G2", "T", s); err == nil {
			t.Fatal("a handle of group G was accepted for group G2")
		}
	})
}

// FuzzDecodeRecords: any log contents decode to a valid prefix without panicking, and
// the decoded records re-encode to exactly that prefix.
func FuzzDecodeRecords(f *testing.F) {
	var seed []byte
	for _, r := range []record{
		{typ: recHeader, group: "G"}, {typ: recSeq, seq: 5},
		{typ: recAdvance, topic: "T", queueID: 1, offset: 10},
		{typ: recDeliver, topic: "T", queueID: 1, offset: 9, attempt: 2, seq: 5, visibleAt: 1234},
		{typ: recAck, topic: "T", queueID: 1, offset: 9, seq: 5},
		{typ: recChange, topic: "T", queueID: 1, offset: 9, seq: 6, visibleAt: 99},
		{typ: recDead, topic: "T", queueID: 1, offset: 9},
	} {
		seed = appendRecord(seed, r)
	}
	f.Add(seed)
	f.Add(seed[:len(seed)-3])
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, valid := decodeRecords(data)
		if valid < 0 || valid > len(data) {
			t.Fatalf("valid prefix %d of %d bytes", valid, len(data))
		}
		var again []byte
		for _, r := range recs {
			again = appendRecord(again, r)
		}
		if !bytes.Equal(again, data[:valid]) {
			t.Fatalf("re-encoded records differ from the valid prefix")
		}
		g := &group{queues: map[qkey]*queueState{}}
		for _, r := range recs {
			g.apply(r) // replay never panics, whatever the order
		}
		if g.inflight < 0 {
			t.Fatalf("inflight %d after replay", g.inflight)
		}
	})
}
