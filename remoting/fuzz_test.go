package remoting

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for _, c := range []*RemotingCommand{sampleCommand(), NewRequest(HeartBeat, nil, nil), NewResponse(SystemError, "x")} {
		j, _ := c.Encode()
		b, _ := c.EncodeBinary()
		seeds = append(seeds, j, b)
	}
	java := `{"code":0,"extFields":{"a":"1"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}`
	seeds = append(seeds,
		lengthPrefix(jsonFrame(java, []byte("body"))),
		lengthPrefix(jsonFrame(`{"code":40000}`, nil)),
		lengthPrefix(jsonFrame(`{"code":1,"extFields":{"a":1}}`, nil)),
		lengthPrefix(binFrame(binHeader(-1, nil, nil))),
		lengthPrefix(binFrame(binHeader(0, nil, []byte{0xff, 0xff, 'a'}))),
		[]byte{0xff, 0xff, 0xff, 0xf0},
		[]byte{0, 0, 0, 3},
		[]byte{0, 0, 0, 8, 0, 0, 0, 100, '{', '}', 0, 0},
		[]byte{0, 0, 0, 6, 9, 0, 0, 2, '{', '}'},
		nil,
	)
	return seeds
}

// FuzzDecodeFrame: DecodeFrame never panics, and whatever it accepts re-encodes to a
// frame that decodes to the same command (encode∘decode is idempotent after one pass).
// DecodeFrameExtList accepts and refuses the same frames, its list gives DecodeFrame's
// map, and the list form re-encodes to a frame that decodes to that map.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range fuzzSeeds() {
		if len(s) >= 4 {
			f.Add(s[4:])
		}
		f.Add(s)
	}
	f.Add(jsonFrame(`{"code":310,"extFields":{"a":"1","b":"\u0001x","a":"3"}}`, []byte("b")))
	f.Fuzz(func(t *testing.T, frame []byte) {
		cmd, st, err := DecodeFrame(frame)
		lcmd, lst, lerr := DecodeFrameExtList(frame)
		if (err == nil) != (lerr == nil) || st != lst {
			t.Fatalf("map decode %v (%v), list decode %v (%v)", err, st, lerr, lst)
		}
		if err != nil {
			if cmd != nil || lcmd != nil {
				t.Fatal("command returned with an error")
			}
			return
		}
		if lcmd.ExtFields != nil {
			t.Fatal("list decode set ExtFields")
		}
		if lenc, err := lcmd.EncodeAs(st); err == nil {
			back, _, err := DecodeFrame(lenc[4:])
			if err != nil || !reflect.DeepEqual(back.ExtFields, cmd.ExtFields) {
				t.Fatalf("list form re-encoded: %v\n%v\nwant %v", err, back.ExtFields, cmd.ExtFields)
			}
		}
		lcmd.ExtMap()
		if !reflect.DeepEqual(lcmd, cmd) {
			t.Fatalf("list decode + ExtMap\n%#v\nmap decode\n%#v", lcmd, cmd)
		}
		enc1, err := cmd.EncodeAs(st)
		if err != nil {
			return // e.g. a binary ext key > 32767 bytes cannot exist in a decoded header
		}
		cmd2, st2, err := DecodeFrame(enc1[4:])
		if err != nil || st2 != st {
			t.Fatalf("re-decoding our own encoding failed: %v (%v vs %v)", err, st2, st)
		}
		enc2, err := cmd2.EncodeAs(st)
		if err != nil {
			t.Fatal(err)
		}
		cmd3, _, err := DecodeFrame(enc2[4:])
		if err != nil {
			t.Fatal(err)
		}
		enc3, _ := cmd3.EncodeAs(st)
		if !bytes.Equal(enc2, enc3) {
			t.Fatalf("encoding not stable:\n%q\n%q", enc2, enc3)
		}
	})
}

// FuzzReadFrame: ReadFrame never panics, never returns a frame beyond the limit, and
// always consumes exactly 4+len(frame) bytes per frame, which it returns as they were
// sent although each frame is recycled after use (as a released request's frame is), so
// that the next one may be read into a buffer holding stale bytes. The limit is above
// the largest pooled frame (128 KiB), so both allocation paths are taken.
func FuzzReadFrame(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
		f.Add(append(append([]byte{}, s...), s...))
	}
	f.Add(binary.BigEndian.AppendUint32(bytes.Repeat([]byte{0xAB}, 8), 5)) // a 5-byte frame after junk: refused
	for _, n := range []int{4, 5, 7, 8, 64<<10 + 1, maxPooledFrame, maxPooledFrame + 1} {
		fr := binary.BigEndian.AppendUint32(nil, uint32(n))
		fr = append(fr, bytes.Repeat([]byte{byte(n)}, n)...)
		binary.BigEndian.PutUint32(fr[4:], 0) // header length 0
		f.Add(append(fr, fr...))
	}
	const max = 1 << 18
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for i := 0; i < 1000; i++ {
			before := r.Len()
			frame, err := ReadFrame(r, max)
			if err != nil {
				return
			}
			if len(frame)+4 > max || len(frame) < 4 {
				t.Fatalf("frame of %d bytes with max %d", len(frame), max)
			}
			if consumed := before - r.Len(); consumed != len(frame)+4 {
				t.Fatalf("consumed %d bytes for a %d-byte frame", consumed, len(frame))
			}
			at := len(data) - before
			if int(binary.BigEndian.Uint32(data[at:])) != len(frame) {
				t.Fatal("frame length does not match the length field")
			}
			if !bytes.Equal(frame, data[at+4:at+4+len(frame)]) {
				t.Fatalf("frame %d of %d bytes is not the bytes sent", i, len(frame))
			}
			_, _, _ = DecodeFrame(frame)
			clear(frame) // leave a mark if the next frame is read into it unfilled
			recycleFrame(frame)
		}
	})
}

// FuzzJSONFastPath: whenever the reflection-free header parser accepts an input,
// encoding/json must accept it too and produce the same command.
func FuzzJSONFastPath(f *testing.F) {
	for _, s := range fuzzSeeds() {
		if len(s) >= 8 && s[4] == 0 {
			f.Add(s[8:])
		}
	}
	for _, h := range []string{
		`{"code":0,"extFields":{"a":"1"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}`,
		`{"code":34,"language":"GO","version":317,"opaque":5,"flag":0,"remark":"","extFields":{"properties":"KEYS\u0001k\u0002\ud83d\ude00\u00e9\/"}}`,
		`{"Code":1}`, `{"code":1,"code":2}`, `{"code":-0,"language":300,"x":[1]}`, `{"language":"\ud800"}`,
		`{"remark":null,"extFields":{"a":null}}`, `{"extFields":{"a":"1","a":"2"}}`, ` { } `, `{"code":1e1}`,
		`{"remar\u212a":"x"}`, "{\"remark\":\"\xff\"}", `{"flag":2147483648}`, `{"k":true,"n":null,"f":false}`,
	} {
		f.Add([]byte(h))
	}
	f.Fuzz(func(t *testing.T, h []byte) {
		fast, ext, hasExt, ok, _ := decodeJSONHeaderFast(h, nil)
		std, err := decodeJSONHeaderStd(h)
		if !ok {
			return
		}
		if hasExt {
			fast.ExtFields = extMapOf(ext)
		}
		if err != nil {
			t.Fatalf("fast path accepted %q, encoding/json: %v", h, err)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("input %q\nfast %#v\n std %#v", h, fast, std)
		}
	})
}
