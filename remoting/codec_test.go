package remoting

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func sampleCommand() *RemotingCommand {
	return &RemotingCommand{
		Code:     int16(SendMessage),
		Language: LanguageGo,
		Version:  DefaultVersion,
		Opaque:   42,
		Flag:     FlagOneway,
		Remark:   "rémark <&> \"quoted\" \\ \n\t\x01",
		ExtFields: map[string]string{
			"topic":      "TopicTest",
			"queueId":    "3",
			"properties": "KEYS\x01k1\x02TAGS\x01tagA\x02",
			"empty":      "",
			"unicode":    "中文\u2028",
		},
		Body: []byte("hello body \x00\xff"),
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		t.Run(st.String(), func(t *testing.T) {
			in := sampleCommand()
			frame, err := in.EncodeAs(st)
			if err != nil {
				t.Fatal(err)
			}
			if got := int(binary.BigEndian.Uint32(frame)); got != len(frame)-4 {
				t.Fatalf("length field %d, want %d", got, len(frame)-4)
			}
			if got := SerializeType(frame[4]); got != st {
				t.Fatalf("serialize type byte %d, want %d", got, st)
			}
			out, gotST, err := DecodeFrame(frame[4:])
			if err != nil {
				t.Fatal(err)
			}
			if gotST != st {
				t.Fatalf("decoded serialize type %v, want %v", gotST, st)
			}
			if !reflect.DeepEqual(in, out) {
				t.Fatalf("round trip mismatch:\n in=%#v\nout=%#v", in, out)
			}
		})
	}
}

func TestRoundTripEmptyCommand(t *testing.T) {
	for _, st := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
		in := &RemotingCommand{Code: -1, Opaque: -7, Flag: FlagResponse, Version: 409, Language: LanguageJava}
		frame, err := in.EncodeAs(st)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := DecodeFrame(frame[4:])
		if err != nil {
			t.Fatalf("%v: %v", st, err)
		}
		if !reflect.DeepEqual(in, out) {
			t.Fatalf("%v: mismatch:\n in=%#v\nout=%#v", st, in, out)
		}
	}
}

// The hand-written JSON encoder must produce exactly what encoding/json produces for
// the Go client's header struct (same key order and escaping), which jsoniter accepts.
func TestJSONHeaderMatchesEncodingJSON(t *testing.T) {
	type goClientHeader struct { // field order of the official client's RemotingCommand
		Code      int16             `json:"code"`
		Language  string            `json:"language"`
		Version   int16             `json:"version"`
		Opaque    int32             `json:"opaque"`
		Flag      int32             `json:"flag"`
		Remark    string            `json:"remark"`
		ExtFields map[string]string `json:"extFields"`
	}
	cmds := []*RemotingCommand{sampleCommand(), NewRequest(HeartBeat, nil, nil), NewResponse(Success, "")}
	cmds[0].Remark += "\xff\xfe invalid utf8 \u2029 \x7f"
	for _, c := range cmds {
		want, err := json.Marshal(goClientHeader{c.Code, c.Language.String(), c.Version, c.Opaque, c.Flag, c.Remark, c.ExtFields})
		if err != nil {
			t.Fatal(err)
		}
		got := c.appendJSONHeader(nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("header mismatch\n got %s\nwant %s", got, want)
		}
	}
}

func TestGoClientHeaderBytes(t *testing.T) {
	c := NewRequest(HeartBeat, map[string]string{"k": "v"}, nil)
	c.Opaque = 5
	got := string(c.appendJSONHeader(nil))
	want := `{"code":34,"language":"GO","version":317,"opaque":5,"flag":0,"remark":"","extFields":{"k":"v"}}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func jsonFrame(header string, body []byte) []byte {
	f := binary.BigEndian.AppendUint32(nil, uint32(len(header)))
	f = append(f, header...)
	return append(f, body...)
}

func TestDecodeJavaJSONHeader(t *testing.T) {
	h := `{"code":0,"extFields":{"a":"1"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}`
	cmd, st, err := DecodeFrame(jsonFrame(h, []byte("xyz")))
	if err != nil {
		t.Fatal(err)
	}
	want := &RemotingCommand{Code: 0, Language: LanguageJava, Version: 409, Opaque: 5, Flag: 1,
		ExtFields: map[string]string{"a": "1"}, Body: []byte("xyz")}
	if st != SerializeJSON || !reflect.DeepEqual(cmd, want) {
		t.Fatalf("got %#v (%v), want %#v", cmd, st, want)
	}
	if !cmd.IsResponse() || cmd.IsOneway() || cmd.ResponseCode() != Success {
		t.Fatalf("flags/code wrong: %v", cmd)
	}
}

func TestDecodeGoClientJSONHeader(t *testing.T) {
	h := `{"code":34,"language":"GO","version":317,"opaque":5,"flag":0,"remark":"","extFields":{"topic":"T","queueId":"1"}}`
	cmd, _, err := DecodeFrame(jsonFrame(h, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := &RemotingCommand{Code: 34, Language: LanguageGo, Version: 317, Opaque: 5,
		ExtFields: map[string]string{"topic": "T", "queueId": "1"}}
	if !reflect.DeepEqual(cmd, want) {
		t.Fatalf("got %#v, want %#v", cmd, want)
	}
}

func TestDecodeJSONHeaderVariants(t *testing.T) {
	cases := []struct {
		header string
		lang   LanguageCode
		remark string
	}{
		{`{"code":10,"language":9,"version":1,"opaque":1,"flag":0}`, LanguageGo, ""},
		{`{"code":10,"language":"RUST","remark":null,"extFields":null}`, LanguageRust, ""},
		{`{"code":10,"language":"SOMETHING_NEW","remark":"x"}`, LanguageOther, "x"},
		{`{"code":10,"language":{"x":1}}`, LanguageOther, ""},
		{` {"code":10, "language":"java", "unknownKey":[1,2,{"a":null}]} `, LanguageJava, ""},
		{`{"code":10,"remark":"\u0001\ud83d\ude00"}`, LanguageJava, "\x01😀"},
	}
	for _, tc := range cases {
		cmd, _, err := DecodeFrame(jsonFrame(tc.header, nil))
		if err != nil {
			t.Fatalf("%s: %v", tc.header, err)
		}
		if cmd.Code != 10 || cmd.Language != tc.lang || cmd.Remark != tc.remark {
			t.Fatalf("%s: got code=%d lang=%v remark=%q", tc.header, cmd.Code, cmd.Language, cmd.Remark)
		}
	}
}

func TestDecodeFrameErrors(t *testing.T) {
	var he *HeaderError
	var fe *FrameError
	cases := []struct {
		name   string
		frame  []byte
		target any
		field  string
	}{
		{"short", []byte{0, 0}, &fe, "length"},
		{"header beyond frame", jsonFrame(`{"code":1}`, nil)[:8], &fe, "headerLength"},
		{"unknown serialize type", append([]byte{2, 0, 0, 2}, "{}"...), &fe, "serializeType"},
		{"invalid json", jsonFrame(`{"code":`, nil), &he, "header"},
		{"empty json", jsonFrame(``, nil), &he, "header"},
		{"code overflows int16", jsonFrame(`{"code":40000}`, nil), &he, "code"},
		{"ext value not string", jsonFrame(`{"code":1,"extFields":{"a":1}}`, nil), &he, "extFields"},
		{"trailing garbage", jsonFrame(`{"code":1}x`, nil), &he, "header"},
		{"binary truncated", append([]byte{1, 0, 0, 3}, 0, 1, 9), &he, "version"},
		{"binary negative remark", binFrame(binHeader(-1, nil, nil)), &he, "remark"},
		{"binary remark beyond header", binFrame(binHeader(100, []byte("ab"), nil)), &he, "remark"},
		{"binary ext truncated", binFrame(binHeader(0, nil, []byte{0, 3, 'a'})), &he, "extFields"},
		{"binary negative key len", binFrame(binHeader(0, nil, []byte{0xff, 0xff, 'a'})), &he, "extFields"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := DecodeFrame(tc.frame)
			if err == nil {
				t.Fatal("no error")
			}
			switch target := tc.target.(type) {
			case **HeaderError:
				if !errors.As(err, target) || (*target).Field != tc.field {
					t.Fatalf("want *HeaderError field %q, got %T %v", tc.field, err, err)
				}
			case **FrameError:
				if !errors.As(err, target) || (*target).Field != tc.field {
					t.Fatalf("want *FrameError field %q, got %T %v", tc.field, err, err)
				}
			}
		})
	}
}

// binHeader builds a binary header with the given remark length field/bytes and raw ext block.
func binHeader(remarkLen int32, remark, ext []byte) []byte {
	h := []byte{0, 10, 9, 1, 61, 0, 0, 0, 1, 0, 0, 0, 0}
	h = binary.BigEndian.AppendUint32(h, uint32(remarkLen))
	h = append(h, remark...)
	h = binary.BigEndian.AppendUint32(h, uint32(len(ext)))
	return append(h, ext...)
}

func binFrame(h []byte) []byte {
	f := binary.BigEndian.AppendUint32(nil, 1<<24|uint32(len(h)))
	return append(f, h...)
}

func TestBinaryHeaderLayout(t *testing.T) {
	c := &RemotingCommand{Code: 11, Language: LanguageGo, Version: 317, Opaque: 7, Flag: 1, Remark: "ab",
		ExtFields: map[string]string{"k": "vv"}}
	f, err := c.EncodeBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0, 11, 9, 0x01, 0x3d, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 2, 'a', 'b',
		0, 0, 0, 9, 0, 1, 'k', 0, 0, 0, 2, 'v', 'v'}
	if !bytes.Equal(f[8:], want) {
		t.Fatalf("binary header\n got %v\nwant %v", f[8:], want)
	}
	if binary.BigEndian.Uint32(f[4:]) != 1<<24|uint32(len(want)) {
		t.Fatalf("type/header length word %x", f[4:8])
	}
}

func TestReadFrame(t *testing.T) {
	good, _ := NewRequest(PullMessage, map[string]string{"a": "b"}, []byte("body")).Encode()
	// Two frames back to back, then EOF.
	r := bytes.NewReader(append(append([]byte{}, good...), good...))
	for i := 0; i < 2; i++ {
		f, err := ReadFrame(r, 0)
		if err != nil || !bytes.Equal(f, good[4:]) {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if _, err := ReadFrame(r, 0); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	lenOnly := func(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	cases := []struct {
		name  string
		in    []byte
		max   int
		field string
	}{
		{"negative", lenOnly(-5), 0, "length"},
		{"below 4", lenOnly(3), 0, "length"},
		{"above max", lenOnly(1000), 100, "length"},
		{"above default max", lenOnly(DefaultMaxFrameSize - 3), 0, "length"},
		{"partial length", []byte{0, 0}, 0, "length"},
		{"truncated body", good[:len(good)-1], 0, "body"},
		{"truncated large body", append(lenOnly(2<<20), make([]byte, 1<<20)...), 0, "body"},
		{"header length beyond frame", append(lenOnly(6), 0, 0, 0, 3, '{', '}'), 0, "headerLength"},
	}
	for _, tc := range cases {
		_, err := ReadFrame(bytes.NewReader(tc.in), tc.max)
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Fatalf("%s: want *FrameError %q, got %T %v", tc.name, tc.field, err, err)
		}
		if !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("%s: error does not name the field: %v", tc.name, err)
		}
	}
	// Exactly the maximum is accepted: length field + 4 == max.
	max := len(good)
	if _, err := ReadFrame(bytes.NewReader(good), max); err != nil {
		t.Fatalf("frame of exactly max size: %v", err)
	}
	if _, err := ReadFrame(bytes.NewReader(good), max-1); err == nil {
		t.Fatal("frame one byte over max accepted")
	}
	// Large frame (> eager allocation threshold) round trip.
	big := NewRequest(SendMessage, nil, bytes.Repeat([]byte{7}, 3<<20))
	bf, _ := big.Encode()
	f, err := ReadFrame(bytes.NewReader(bf), 0)
	if err != nil || !bytes.Equal(f, bf[4:]) {
		t.Fatalf("large frame: %v", err)
	}
}

func TestEncodeLimits(t *testing.T) {
	c := NewRequest(SendMessage, map[string]string{strings.Repeat("k", 1<<15): "v"}, nil)
	var he *HeaderError
	if _, err := c.EncodeBinary(); !errors.As(err, &he) || he.Field != "extFields" {
		t.Fatalf("want HeaderError for a long binary key, got %v", err)
	}
	c = NewRequest(SendMessage, map[string]string{"k": strings.Repeat("v", 1<<24)}, nil)
	var fe *FrameError
	if _, err := c.Encode(); !errors.As(err, &fe) || fe.Field != "headerLength" {
		t.Fatalf("want FrameError for a header over 16 MiB, got %v", err)
	}
	if _, err := c.EncodeBinary(); !errors.As(err, &fe) || fe.Field != "headerLength" {
		t.Fatalf("want FrameError for a binary header over 16 MiB, got %v", err)
	}
}

func TestLanguageJSON(t *testing.T) {
	b, _ := json.Marshal(LanguageGo)
	if string(b) != `"GO"` {
		t.Fatalf("got %s", b)
	}
	b, _ = json.Marshal(LanguageCode(200))
	if string(b) != `"OTHER"` {
		t.Fatalf("got %s", b)
	}
	for in, want := range map[string]LanguageCode{`"JAVA"`: LanguageJava, `0`: LanguageJava, `"go"`: LanguageGo,
		`12`: LanguageRust, `300`: LanguageOther, `true`: LanguageOther, `null`: LanguageOther, `JAVA`: LanguageJava} {
		var l LanguageCode
		if err := l.UnmarshalJSON([]byte(in)); err != nil || l != want {
			t.Fatalf("%s: got %v %v, want %v", in, l, err, want)
		}
	}
}
