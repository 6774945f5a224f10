package remoting

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"testing"
)

// decodeBinaryHeaderRef is the binary header decoder as it was before decodeBinaryHeader
// took the keys and values internExt knows as static strings: each header's ext block
// copied into one string, keys and values substrings of it. It is the reference the
// current decoder must agree with (same command, fields and errors).
func decodeBinaryHeaderRef(h []byte, ext0 []ExtField) (*RemotingCommand, []ExtField, bool, error) {
	r := &binReader{b: h}
	cmd := &RemotingCommand{}
	cmd.Code = int16(r.u16("code"))
	cmd.Language = LanguageCode(r.u8("language"))
	cmd.Version = int16(r.u16("version"))
	cmd.Opaque = int32(r.u32("opaque"))
	cmd.Flag = int32(r.u32("flag"))
	remarkLen := int32(r.u32("remark"))
	cmd.Remark = string(r.bytes(int(remarkLen), "remark"))
	extLen := int32(r.u32("extFields"))
	ext := r.bytes(int(extLen), "extFields")
	if r.err != nil {
		return nil, ext0, false, r.err
	}
	if len(r.b) != 0 {
		return nil, ext0, false, &HeaderError{Field: "header", Reason: fmt.Sprintf("%d trailing bytes after the extFields block", len(r.b))}
	}
	if len(ext) == 0 {
		return cmd, ext0, false, nil
	}
	list := ext0
	er := &binReader{b: ext}
	s := string(ext) // keys and values are substrings of it: one allocation per header
	for len(er.b) > 0 {
		kl := int16(er.u16("extFields"))
		kAt := len(ext) - len(er.b)
		k := er.bytes(int(kl), "extFields")
		vl := int32(er.u32("extFields"))
		vAt := len(ext) - len(er.b)
		v := er.bytes(int(vl), "extFields")
		if er.err != nil {
			return nil, ext0, false, er.err
		}
		if len(list)-len(ext0) >= MaxExtFields {
			return nil, ext0, false, tooManyExtFields()
		}
		list = append(list, ExtField{Key: s[kAt : kAt+len(k)], Value: s[vAt : vAt+len(v)]})
	}
	return cmd, list, true, nil
}

// extBlock builds a binary extFields block from key/value pairs.
func extBlock(kv ...string) []byte {
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		b = binary.BigEndian.AppendUint16(b, uint16(len(kv[i])))
		b = append(b, kv[i]...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(kv[i+1])))
		b = append(b, kv[i+1]...)
	}
	return b
}

// internSeeds are binary headers for the reference comparison: send responses and
// requests, fields internExt knows and does not, empty and 1-byte strings, near misses
// of the known strings, and malformed blocks.
func internSeeds() [][]byte {
	tooMany := []byte{}
	for range MaxExtFields + 1 {
		tooMany = append(tooMany, extBlock("k", "v")...)
	}
	truncated := extBlock("msgId", "7F000001")
	return [][]byte{
		binHeader(0, nil, nil),
		binHeader(0, nil, extBlock()),
		binHeader(0, nil, extBlock("MSG_REGION", "DefaultRegion", "TRACE_ON", "true", "msgId", "7F00000100002A9F00000000000F4240", "queueId", "3", "queueOffset", "1234567")),
		binHeader(0, nil, extBlock("MSG_REGION", "DefaultRegion", "TRACE_ON", "false", "queueId", "0", "queueOffset", "0", "transactionId", "tx-1")),
		binHeader(2, []byte("ok"), extBlock("a", "ProducerGroupName", "b", "TopicTest", "c", "TBW102", "d", "4", "l", "-1", "m", "false", "n", "broker-a")),
		binHeader(0, nil, extBlock("", "", "x", "", "", "y", "\x00", "\xff")),
		binHeader(0, nil, extBlock("msgid", "True", "queueID", "-2", "MSG_REGIO", "DefaultRegio", "TBW103", "transactionIx", "falsE", "TRACE_OFF")),
		binHeader(0, nil, extBlock("queueId", "1", "queueId", "2")), // a repeated key
		binHeader(0, nil, tooMany),
		binHeader(0, nil, truncated[:len(truncated)-1]),                         // the value ends early
		binHeader(0, nil, truncated[:3]),                                        // the key ends early
		binHeader(0, nil, []byte{0}),                                            // half a key length
		binHeader(0, nil, []byte{0xff, 0xff, 'a'}),                              // a negative key length
		binHeader(0, nil, append(extBlock("k", "v"), 0, 1, 'k', 0x80, 0, 0, 0)), // a negative value length
		binHeader(0, nil, append(extBlock("k", "v"), 0, 1, 'k', 0, 0)),          // half a value length
	}
}

// checkAgainstRef decodes h with decodeBinaryHeader and decodeBinaryHeaderRef (each into
// a scratch list with an entry already in it, as a caller may pass) and fails on any
// difference: the command, the fields, hasExt, the error.
func checkAgainstRef(t *testing.T, h []byte) {
	t.Helper()
	prefix := []ExtField{{"pre", "x"}}
	var a, b [4]ExtField
	cmd, list, has, err := decodeBinaryHeader(h, append(a[:0], prefix...))
	rcmd, rlist, rhas, rerr := decodeBinaryHeaderRef(h, append(b[:0], prefix...))
	if (err == nil) != (rerr == nil) || err != nil && err.Error() != rerr.Error() {
		t.Fatalf("header %q: error %v, reference %v", h, err, rerr)
	}
	if !reflect.DeepEqual(cmd, rcmd) || has != rhas || !reflect.DeepEqual(list, rlist) {
		t.Fatalf("header %q:\n got %#v %v %q\nwant %#v %v %q", h, cmd, has, list, rcmd, rhas, rlist)
	}
}

// TestDecodeBinaryHeaderMatchesReference: taking known keys and values as static strings
// changes nothing a caller sees: same command, fields (wire order, repeats kept) and
// errors as the reference decoder, for valid, odd and malformed headers.
func TestDecodeBinaryHeaderMatchesReference(t *testing.T) {
	for _, h := range internSeeds() {
		checkAgainstRef(t, h)
	}
}

// FuzzDecodeBinaryHeaderRef: decodeBinaryHeader agrees with the reference decoder on any
// header bytes.
func FuzzDecodeBinaryHeaderRef(f *testing.F) {
	for _, h := range internSeeds() {
		f.Add(h)
	}
	f.Fuzz(checkAgainstRef)
}

// TestInternExt: internExt gives every 0- and 1-byte string and the listed strings, each
// equal to its input, and nothing else (near misses included).
func TestInternExt(t *testing.T) {
	for c := range 256 {
		if s, ok := internExt([]byte{byte(c)}); !ok || s != string([]byte{byte(c)}) {
			t.Fatalf("byte %d: %q %v", c, s, ok)
		}
	}
	known := []string{"", "msgId", "queueId", "queueOffset", "transactionId", "MSG_REGION", "TRACE_ON",
		"true", "false", "-1", "TBW102", "DefaultRegion"}
	for _, k := range known {
		if s, ok := internExt([]byte(k)); !ok || s != k {
			t.Fatalf("%q: %q %v", k, s, ok)
		}
	}
	for _, k := range []string{"-2", "True", "msgid", "falsE", "TBW103", "queueID", "TRACE_OFF", "MSG_REGIOn",
		"queueOffsex", "transactionIx", "DefaultRegioN", "12", "1700000000000"} {
		if s, ok := internExt([]byte(k)); ok {
			t.Fatalf("%q interned as %q", k, s)
		}
	}
}

// TestDecodeSendResponseAllocs pins what a client's reader allocates to decode a send
// response header into its scratch list: the command and one string holding only
// msgId and queueOffset's values (keys, region, trace switch and a 1-digit queue id are
// static); with every string static, the command alone.
func TestDecodeSendResponseAllocs(t *testing.T) {
	frame := sendResponseFrame(t, SerializeRocketMQ)
	var scratch [32]ExtField
	check := func(name string, frame []byte, want float64) {
		t.Helper()
		got := testing.AllocsPerRun(200, func() {
			if _, _, _, _, err := decodeFrameExt(frame, scratch[:0]); err != nil {
				t.Fatal(err)
			}
		})
		if got != want {
			t.Fatalf("%s: %v allocations per decode, want %v", name, got, want)
		}
	}
	check("send response", frame, 2)
	r := NewResponse(Success, "")
	r.ExtList = []ExtField{{"MSG_REGION", "DefaultRegion"}, {"TRACE_ON", "true"}, {"queueId", "3"}, {"queueOffset", "7"}}
	f, err := r.EncodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	check("static fields only", f[4:], 1)
}

// BenchmarkDecodeHeaderRef compares the reference decoder ("ref") with
// decodeBinaryHeader ("new") on the headers of BenchmarkDecodeHeader, alternating, in
// one process (a fairer comparison on a busy machine than two runs).
func BenchmarkDecodeHeaderRef(b *testing.B) {
	impls := []struct {
		name string
		f    func([]byte, []ExtField) (*RemotingCommand, []ExtField, bool, error)
	}{{"ref", decodeBinaryHeaderRef}, {"new", decodeBinaryHeader}}
	for _, tc := range decodeHeaderCases(b) {
		for range 2 {
			for _, impl := range impls {
				b.Run(tc.name+"/"+impl.name, func(b *testing.B) {
					b.ReportAllocs()
					var scratch [32]ExtField
					h := tc.frame[4 : 4+binary.BigEndian.Uint32(tc.frame)&maxHeaderLen]
					for b.Loop() {
						cmd, ext, _, err := impl.f(h, scratch[:0])
						if err != nil {
							b.Fatal(err)
						}
						cmd.ExtList = extListOf(ext)
					}
				})
			}
		}
	}
}
