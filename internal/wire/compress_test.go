package wire

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestCompressedRegisterBodyRoundTrip(t *testing.T) {
	in := &RegisterBrokerBody{FilterServerList: []string{"1.2.3.4:5"}}
	in.TopicConfigSerializeWrapper.DataVersion = DataVersion{Timestamp: 1700000000000, Counter: 42}
	in.TopicConfigSerializeWrapper.TopicConfigTable = map[string]*TopicConfig{}
	for i := range 1000 {
		name := fmt.Sprintf("topic-%d", i)
		in.TopicConfigSerializeWrapper.TopicConfigTable[name] = &TopicConfig{TopicName: name, ReadQueueNums: i%16 + 1,
			WriteQueueNums: i%8 + 1, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	}
	data, err := EncodeCompressedRegisterBody(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeCompressedRegisterBody(data)
	if err != nil {
		t.Fatal(err)
	}
	if out.TopicConfigSerializeWrapper.DataVersion != in.TopicConfigSerializeWrapper.DataVersion ||
		len(out.FilterServerList) != 1 || len(out.TopicConfigSerializeWrapper.TopicConfigTable) != 1000 {
		t.Fatalf("%+v", out)
	}
	for k, v := range in.TopicConfigSerializeWrapper.TopicConfigTable {
		if got := out.TopicConfigSerializeWrapper.TopicConfigTable[k]; got == nil || *got != *v {
			t.Fatalf("%s: %+v, want %+v", k, got, v)
		}
	}
}

// zlibOf compresses raw for hand-made bodies.
func zlibOf(raw []byte) []byte {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	_, _ = w.Write(raw)
	_ = w.Close()
	return b.Bytes()
}

func TestCompressedRegisterBodyRefusals(t *testing.T) {
	be := func(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	dv := []byte(`{"counter":1,"timestamp":2}`)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	defer func(old int64) { maxInflated = old }(maxInflated)
	maxInflated = 1 << 20
	// A valid prefix, then 2000 topic lines of 1 KiB of zeros: over the (lowered) limit.
	line := cat([]byte("T 1 1 6 "), make([]byte, 1016))
	var lines [][]byte
	for range 2000 {
		lines = append(lines, be(int32(len(line))), line)
	}
	bomb := zlibOf(cat(be(int32(len(dv))), dv, be(2000), cat(lines...)))
	for name, data := range map[string][]byte{
		"not zlib":           []byte("garbage"),
		"negative length":    zlibOf(be(-1)),
		"huge entry":         zlibOf(be(maxRegisterEntry + 1)),
		"truncated":          zlibOf(cat(be(int32(len(dv))), dv, be(3))),
		"bad topic line":     zlibOf(cat(be(int32(len(dv))), dv, be(1), be(5), []byte("a b c"))),
		"count out of range": zlibOf(cat(be(int32(len(dv))), dv, be(1<<30))),
		"bomb":               bomb,
	} {
		_, err := DecodeCompressedRegisterBody(data)
		if !errors.Is(err, ErrBadCompressedBody) {
			t.Errorf("%s: %v", name, err)
		}
		if name == "bomb" && !strings.Contains(fmt.Sprint(err), "inflates to more than") {
			t.Errorf("bomb: %v", err)
		}
	}
}

func FuzzDecodeCompressedRegisterBody(f *testing.F) {
	body := &RegisterBrokerBody{}
	body.TopicConfigSerializeWrapper.TopicConfigTable = map[string]*TopicConfig{"T": {TopicName: "T", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}}
	seed, _ := EncodeCompressedRegisterBody(body)
	f.Add(seed)
	f.Add(zlibOf([]byte{0, 0, 0, 2, '{', '}', 0, 0, 0, 0, 0, 0, 0, 2, '[', ']'}))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := DecodeCompressedRegisterBody(data)
		if err != nil {
			return
		}
		again, err := EncodeCompressedRegisterBody(out)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeCompressedRegisterBody(again); err != nil {
			t.Fatalf("re-encoded body refused: %v", err)
		}
	})
}
