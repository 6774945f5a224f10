package message

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestPropertiesRoundTripAndForeignForms(t *testing.T) {
	p := map[string]string{"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC", "empty": ""}
	s := MarshalProperties(p)
	if strings.HasSuffix(s, "\x02") {
		t.Fatalf("trailing separator in %q", s)
	}
	got := UnmarshalProperties(s)
	if len(got) != 3 || got["TAGS"] != "TagA" || got["KEYS"] != "k1 k2" || got["UNIQ_KEY"] != "ABC" {
		t.Fatalf("round trip: %q -> %v", s, got)
	}
	// The Go client writes a trailing 0x02 after every pair; junk pieces are skipped.
	goForm := "TAGS\x01TagA\x02KEYS\x01k\x02\x02junk\x02\x01novalue\x02nokey\x01\x02"
	got = UnmarshalProperties(goForm)
	if len(got) != 2 || got["TAGS"] != "TagA" || got["KEYS"] != "k" {
		t.Fatalf("go form: %v", got)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, host := range []string{"127.0.0.1:10911", "[::1]:10911"} {
		h := netip.MustParseAddrPort(host)
		m := &MessageExt{
			Message: Message{Topic: "T", Flag: 7, Body: []byte("hello"), Properties: map[string]string{"TAGS": "a", "UNIQ_KEY": "U1"}},
			QueueID: 3, QueueOffset: 42, CommitLogOffset: 4096, BornTimestamp: 1, StoreTimestamp: 2,
			BornHost: netip.MustParseAddrPort("10.1.2.3:555"), StoreHost: h, ReconsumeTimes: 2, PreparedTransactionOffset: 9,
		}
		b, err := EncodeRecord(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != int(m.StoreSize) {
			t.Fatalf("size %d vs StoreSize %d", len(b), m.StoreSize)
		}
		got, n, err := DecodeRecord(append(b, 0xFF), DecodeOptions{CheckCRC: true})
		if err != nil || n != len(b) {
			t.Fatalf("decode: n=%d err=%v", n, err)
		}
		if got.Topic != "T" || string(got.Body) != "hello" || got.QueueOffset != 42 || got.CommitLogOffset != 4096 ||
			got.StoreHost != h || got.BornHost != m.BornHost || got.ReconsumeTimes != 2 || got.Tag() != "a" || got.MsgID != "U1" ||
			got.PreparedTransactionOffset != 9 || got.Flag != 7 || got.QueueID != 3 {
			t.Fatalf("decoded %+v", got)
		}
		wantLen := 32
		if h.Addr().Is6() {
			wantLen = 56
		}
		if len(got.OffsetMsgID) != wantLen {
			t.Fatalf("offset msg id %q", got.OffsetMsgID)
		}
		host2, off, err := ParseOffsetMsgID(got.OffsetMsgID)
		if err != nil || host2 != h || off != 4096 {
			t.Fatalf("parse offset id: %v %d %v", host2, off, err)
		}
		// A flipped body byte fails the CRC check; a cut record is short.
		bad := append([]byte(nil), b...)
		bad[bytes.Index(bad, []byte("hello"))] ^= 1
		if _, _, err := DecodeRecord(bad, DecodeOptions{CheckCRC: true}); !errors.Is(err, ErrBodyCRC) {
			t.Fatalf("want ErrBodyCRC, got %v", err)
		}
		if _, _, err := DecodeRecord(b[:len(b)-1], DecodeOptions{}); !errors.Is(err, ErrShortRecord) {
			t.Fatalf("want ErrShortRecord, got %v", err)
		}
	}
}

func TestCompressedBodyDecodes(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 10000)
	z, err := Deflate(body, 5)
	if err != nil {
		t.Fatal(err)
	}
	m := &MessageExt{Message: Message{Topic: "T", Body: z}, SysFlag: SysFlagCompressed}
	b, _ := EncodeRecord(m)
	got, _, err := DecodeRecord(b, DecodeOptions{Decompress: true})
	if err != nil || !bytes.Equal(got.Body, body) {
		t.Fatalf("decompress: %v len=%d", err, len(got.Body))
	}
}

func TestValidate(t *testing.T) {
	var ve *ValidationError
	cases := []struct {
		name  string
		m     *Message
		field string
	}{
		{"empty topic", &Message{Body: []byte("x")}, "topic"},
		{"bad char", &Message{Topic: "a b", Body: []byte("x")}, "topic"},
		{"long topic", &Message{Topic: strings.Repeat("a", 128), Body: []byte("x")}, "topic"},
		{"bad tag", (&Message{Topic: "T", Body: []byte("x")}).SetTag("a||b"), "tag"},
		{"empty body", &Message{Topic: "T"}, "body"},
		{"too large", &Message{Topic: "T", Body: make([]byte, DefaultMaxMessageSize+1)}, "body"},
		{"separator", (&Message{Topic: "T", Body: []byte("x")}).SetProperty("k", "a\x01b"), "properties"},
		{"value not UTF-8", (&Message{Topic: "T", Body: []byte("x")}).SetProperty("k", "a\xffb"), "properties"},
		{"name not UTF-8", (&Message{Topic: "T", Body: []byte("x")}).SetProperty("k\xe4\xb8", "v"), "properties"},
		{"tag not UTF-8", (&Message{Topic: "T", Body: []byte("x")}).SetTag("\xc3"), "properties"},
		{"key not UTF-8", (&Message{Topic: "T", Body: []byte("x")}).SetKeys("ok", "\x80"), "properties"},
	}
	for _, c := range cases {
		err := Validate(c.m, 0)
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%s: want field %q, got %v", c.name, c.field, err)
		}
	}
	if err := Validate(&Message{Topic: "T", Body: make([]byte, DefaultMaxMessageSize)}, 0); err != nil {
		t.Fatalf("exactly the limit must pass: %v", err)
	}
	if err := Validate(&Message{Topic: "%RETRY%g_1-x|y", Body: []byte("x")}, 0); err != nil {
		t.Fatal(err)
	}
}

func TestTagHashCodeMatchesJava(t *testing.T) {
	// Values of Java "s".hashCode().
	for tag, want := range map[string]int64{"": 0, "TagA": 2598919, "TagB": 2598920, "a": 97, "hello world": 1794106052, "\u4e2d": 20013, "\U0001F600": 1772899} {
		if got := TagHashCode(tag); got != want {
			t.Errorf("TagHashCode(%q) = %d, want %d", tag, got, want)
		}
	}
	if got := ParseTagExpression(" TagA || TagC ||  "); len(got) != 2 || got[0] != "TagA" || got[1] != "TagC" {
		t.Fatalf("parse: %v", got)
	}
	if ParseTagExpression("*") != nil {
		t.Fatal("* must match all")
	}
}

func TestBatchEncodeDecode(t *testing.T) {
	msgs := []*Message{
		(&Message{Topic: "T", Body: []byte("one")}).SetTag("a"),
		(&Message{Topic: "T", Body: []byte("two"), Flag: 3}),
	}
	b, err := EncodeBatch(msgs, 0)
	if err != nil {
		t.Fatal(err)
	}
	items, err := DecodeBatch(b)
	if err != nil || len(items) != 2 || string(items[0].Body) != "one" || string(items[1].Body) != "two" || items[1].Flag != 3 ||
		UnmarshalProperties(items[0].Properties)["TAGS"] != "a" {
		t.Fatalf("decode batch: %v %+v", err, items)
	}
	var ve *ValidationError
	two := []*Message{{Topic: "A", Body: []byte("x")}, {Topic: "B", Body: []byte("x")}}
	if _, err := EncodeBatch(two, 0); !errors.As(err, &ve) || ve.Field != "batch" {
		t.Fatalf("two topics: %v", err)
	}
	delayed := []*Message{(&Message{Topic: "A", Body: []byte("x")}).SetDelayLevel(2)}
	if _, err := EncodeBatch(delayed, 0); !errors.As(err, &ve) {
		t.Fatalf("delay: %v", err)
	}
	// A batch whose encoded size is exactly the limit is accepted; one byte more is refused.
	body := make([]byte, 1000)
	limit := BatchRecordSize(1000, 0) * 2
	ok := []*Message{{Topic: "T", Body: body}, {Topic: "T", Body: body}}
	if _, err := EncodeBatch(ok, limit); err != nil {
		t.Fatalf("exact limit: %v", err)
	}
	if _, err := EncodeBatch(ok, limit-1); !errors.As(err, &ve) || ve.Limit != limit-1 || ve.Value != limit {
		t.Fatalf("over limit: %v", err)
	}
	if _, err := DecodeBatch(b[:len(b)-1]); err == nil {
		t.Fatal("truncated batch decoded")
	}
}

func TestUniqIDs(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 10000; i++ {
		id := NewUniqID()
		if len(id) != 32 || seen[id] {
			t.Fatalf("bad or duplicate id %q", id)
		}
		seen[id] = true
	}
}

func FuzzDecodeRecord(f *testing.F) {
	m := &MessageExt{Message: Message{Topic: "T", Body: []byte("b"), Properties: map[string]string{"TAGS": "x"}},
		StoreHost: netip.MustParseAddrPort("127.0.0.1:1")}
	b, _ := EncodeRecord(m)
	f.Add(b)
	f.Add([]byte{0, 0, 0, 8, 0xDA, 0xA3, 0x20, 0xA7})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeRecords(b, DecodeOptions{CheckCRC: true, Decompress: true})
		_, _ = DecodeBatch(b)
		_ = UnmarshalProperties(string(b))
		_, _, _ = ParseOffsetMsgID(string(b))
	})
}

// A group name is refused when its %RETRY% topic would not be a valid topic: the error
// names the field and the limit, and the longest accepted name makes a 127-byte topic.
func TestValidateGroupTopics(t *testing.T) {
	ok := strings.Repeat("g", MaxGroupLength)
	if err := ValidateGroupTopics(ok); err != nil {
		t.Fatalf("%d-byte group refused: %v", len(ok), err)
	}
	if n := len(RetryTopic(ok)); n != MaxTopicLength {
		t.Fatalf("retry topic of the longest group is %d bytes, want %d", n, MaxTopicLength)
	}
	if err := ValidateTopic(DLQTopic(ok)); err != nil {
		t.Fatalf("DLQ topic of the longest group refused: %v", err)
	}
	for _, tc := range []struct {
		group, want string
		limit       int
	}{
		{ok + "g", "exceed the 127-byte topic limit", MaxGroupLength},
		{"", "empty", 0},
		{"bad group", "character", 0},
	} {
		err := ValidateGroupTopics(tc.group)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "group" || ve.Limit != tc.limit || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("ValidateGroupTopics(%d bytes) = %v, want a group error containing %q with limit %d", len(tc.group), err, tc.want, tc.limit)
		}
	}
}
