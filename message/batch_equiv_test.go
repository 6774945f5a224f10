package message

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The encoders before the one-pass rewrite, kept as the reference the new ones must
// match byte for byte (and error for error) on the same inputs.

func marshalPropertiesRef(p map[string]string) string {
	var keys []string
	for k, v := range p {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(PropertySeparator)
		}
		b.WriteString(k + "\x01" + p[k])
	}
	return b.String()
}

func validateRef(m *Message, maxMessageSize int) error {
	if err := ValidateTopic(m.Topic); err != nil {
		return err
	}
	if err := ValidateTag(m.Tag()); err != nil {
		return err
	}
	if len(m.Body) == 0 {
		return &ValidationError{Field: "body", Reason: "empty"}
	}
	for k, v := range m.Properties {
		if k == "" {
			return &ValidationError{Field: "properties", Reason: "a property has an empty name"}
		}
		if strings.ContainsAny(k, "\x01\x02") || strings.ContainsAny(v, "\x01\x02") {
			return &ValidationError{Field: "properties", Reason: fmt.Sprintf("property %q contains a separator (0x01 or 0x02)", k)}
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return &ValidationError{Field: "properties", Reason: fmt.Sprintf("property %q is not valid UTF-8 text", k)}
		}
	}
	s := marshalPropertiesRef(m.Properties)
	if len(s) > MaxPropertiesLength {
		return &ValidationError{Field: "properties", Reason: "encoded properties too long", Limit: MaxPropertiesLength, Value: len(s)}
	}
	if size := len(m.Body) + len(s); size > maxMessageSize {
		return &ValidationError{Field: "body", Reason: "message (body + encoded properties) too large", Limit: maxMessageSize, Value: size}
	}
	return nil
}

func encodeBatchRef(msgs []*Message, maxBatchSize int) ([]byte, error) {
	if maxBatchSize <= 0 {
		maxBatchSize = DefaultMaxMessageSize
	}
	if len(msgs) == 0 {
		return nil, &ValidationError{Field: "batch", Reason: "no messages"}
	}
	topic := msgs[0].Topic
	size := 0
	props := make([]string, len(msgs))
	for i, m := range msgs {
		if err := validateRef(m, maxBatchSize); err != nil {
			return nil, err
		}
		switch {
		case m.Topic != topic:
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d has topic %q, batch topic is %q: one topic per batch", i, m.Topic, topic)}
		case m.DelayLevel() > 0:
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d has a delay level: batches cannot be delayed", i)}
		case m.Property(PropertyTransactionPrepared) == "true":
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d is transactional: batches cannot be", i)}
		case IsRetryTopic(m.Topic) || IsDLQTopic(m.Topic):
			return nil, &ValidationError{Field: "batch", Reason: fmt.Sprintf("topic %q is a retry or DLQ topic", m.Topic)}
		}
		props[i] = marshalPropertiesRef(m.Properties)
		size += BatchRecordSize(len(m.Body), len(props[i]))
	}
	if size > maxBatchSize {
		return nil, &ValidationError{Field: "batch", Reason: "encoded batch too large", Limit: maxBatchSize, Value: size}
	}
	var out []byte
	be := binary.BigEndian
	for i, m := range msgs {
		out = be.AppendUint32(out, uint32(BatchRecordSize(len(m.Body), len(props[i]))))
		out = be.AppendUint32(out, 0)
		out = be.AppendUint32(out, 0)
		out = be.AppendUint32(out, uint32(m.Flag))
		out = be.AppendUint32(out, uint32(len(m.Body)))
		out = append(out, m.Body...)
		out = be.AppendUint16(out, uint16(len(props[i])))
		out = append(out, props[i]...)
	}
	return out, nil
}

func decodeBatchRef(b []byte) ([]BatchItem, error) {
	var out []BatchItem
	be := binary.BigEndian
	for off := 0; off < len(b); {
		rest := b[off:]
		if len(rest) < 22 {
			return nil, errors.New("truncated")
		}
		total := int(int32(be.Uint32(rest)))
		bodyLen := int(int32(be.Uint32(rest[16:])))
		if total < 22 || total > len(rest) || bodyLen < 0 || 20+bodyLen+2 > total {
			return nil, errors.New("sizes")
		}
		if 22+bodyLen+int(be.Uint16(rest[20+bodyLen:])) != total {
			return nil, errors.New("sizes")
		}
		out = append(out, BatchItem{Flag: int32(be.Uint32(rest[12:])), Body: rest[20 : 20+bodyLen], Properties: string(rest[22+bodyLen : total])})
		off += total
	}
	return out, nil
}

// randomMessage makes a valid message, or with rule in 0..13 one that breaks or
// stretches that rule.
func randomMessage(r *rand.Rand, topic string, rule int) *Message {
	m := &Message{Topic: topic, Flag: r.Int32(), Body: bytes.Repeat([]byte{byte(r.IntN(256))}, 1+r.IntN(300))}
	names := []string{PropertyTags, PropertyKeys, PropertyUniqClientMessageIDKeyIdx, "a", "zz", "region", "Z", "k_1"}
	for range r.IntN(7) {
		m.SetProperty(names[r.IntN(len(names))], strings.Repeat("v", 1+r.IntN(20)))
	}
	switch rule {
	case 0:
		m.Body = nil
	case 1:
		m.Properties = map[string]string{"": "x"}
	case 2:
		m.SetProperty("bad", "a\x01b")
	case 3:
		m.SetTag("t\x02")
	case 4:
		m.SetTag("*")
	case 5:
		m.SetDelayLevel(1 + r.IntN(18))
	case 6:
		m.SetProperty(PropertyDelayTimeLevel, "x") // unparsable: no delay
	case 7:
		m.SetProperty(PropertyTransactionPrepared, "true")
	case 8:
		m.SetProperty(PropertyTransactionPrepared, "false")
	case 9:
		m.Topic = "Other"
	case 10:
		m.Topic = "bad topic"
	case 11:
		m.SetProperty("big", strings.Repeat("p", MaxPropertiesLength))
	case 12:
		if m.Properties == nil {
			m.Properties = map[string]string{}
		}
		m.Properties["empty"] = "" // left out of the encoding
	case 13:
		m.Body = make([]byte, 5000)
	}
	return m
}

func sameError(a, b error) bool {
	var va, vb *ValidationError
	if !errors.As(a, &va) || !errors.As(b, &vb) {
		return a == nil && b == nil
	}
	return *va == *vb
}

// TestEncodeBatchMatchesReference: on random batches (valid ones and ones breaking each
// rule once, with limits from tight to default), EncodeBatch returns the reference's bytes
// or its exact error; DecodeBatch returns the reference decoder's items.
func TestEncodeBatchMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	valid, refused := 0, 0
	for iter := range 3000 {
		topics := []string{"T", "Topic_1", "%RETRY%g", "%DLQ%g"}
		topic := topics[r.IntN(2)]
		if r.IntN(20) == 0 {
			topic = topics[2+r.IntN(2)]
		}
		n := 1 + r.IntN(80)
		msgs := make([]*Message, n)
		broken, rule := r.IntN(n), -1
		if r.IntN(2) == 0 {
			rule = r.IntN(14)
		}
		for i := range msgs {
			if i == broken {
				msgs[i] = randomMessage(r, topic, rule)
			} else {
				msgs[i] = randomMessage(r, topic, -1)
			}
		}
		limit := 0
		if r.IntN(4) == 0 {
			limit = 1 + r.IntN(n*400)
		}
		want, werr := encodeBatchRef(msgs, limit)
		got, gerr := EncodeBatch(msgs, limit)
		if !sameError(werr, gerr) {
			t.Fatalf("iteration %d: error %v, reference %v", iter, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("iteration %d: %d bytes differ from the reference's %d", iter, len(got), len(want))
		}
		if werr != nil {
			refused++
			continue
		}
		valid++
		items, err := DecodeBatch(got)
		ref, _ := decodeBatchRef(got)
		if err != nil || len(items) != n || len(items) != len(ref) {
			t.Fatalf("iteration %d: decode %d items, %v", iter, len(items), err)
		}
		for i := range items {
			if items[i].Flag != ref[i].Flag || !bytes.Equal(items[i].Body, ref[i].Body) || items[i].Properties != ref[i].Properties ||
				items[i].Properties != MarshalProperties(msgs[i].Properties) {
				t.Fatalf("iteration %d item %d: %+v, reference %+v", iter, i, items[i], ref[i])
			}
		}
	}
	if valid < 1000 || refused < 500 {
		t.Fatalf("%d valid and %d refused of 3000 random batches: the generator tests too little", valid, refused)
	}
}

// TestMarshalPropertiesMatchesReference: MarshalProperties, AppendProperties and
// EncodedPropertiesLen agree with the reference encoder on maps of 0 to 40 entries
// (past the stack buffer and the insertion-sort cut-off), empty names and values included.
func TestMarshalPropertiesMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 2000 {
		p := map[string]string{}
		for range r.IntN(41) {
			k := fmt.Sprintf("%c%d", 'A'+r.IntN(58), r.IntN(100))
			if r.IntN(20) == 0 {
				k = ""
			}
			v := strings.Repeat("x", r.IntN(4))
			p[k] = v
		}
		want := marshalPropertiesRef(p)
		if got := MarshalProperties(p); got != want {
			t.Fatalf("iteration %d: %q, want %q", iter, got, want)
		}
		if got := AppendProperties([]byte("pre"), p); string(got) != "pre"+want {
			t.Fatalf("iteration %d: append %q", iter, got)
		}
		if got := EncodedPropertiesLen(p); got != len(want) {
			t.Fatalf("iteration %d: length %d, want %d", iter, got, len(want))
		}
	}
}

// TestDecodeBatchMalformed: truncated and inconsistent bodies are *ValidationErrors with
// Field "batch", never a panic, for every cut of a valid batch and every corrupted length.
func TestDecodeBatchMalformed(t *testing.T) {
	msgs := []*Message{
		(&Message{Topic: "T", Body: []byte("one")}).SetTag("a"),
		{Topic: "T", Body: []byte("two")},
	}
	b, err := EncodeBatch(msgs, 0)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, body []byte) {
		t.Helper()
		items, err := DecodeBatch(body)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != "batch" || items != nil {
			t.Fatalf("%s: %d items, %v; want a batch error", what, len(items), err)
		}
	}
	for cut := 1; cut < len(b); cut++ {
		if cut == int(binary.BigEndian.Uint32(b)) {
			continue // a whole first record is a valid batch of one
		}
		check(fmt.Sprintf("cut at %d", cut), b[:cut])
	}
	for _, tc := range []struct {
		pos int
		val uint32
	}{{0, 0}, {0, 21}, {0, 0xFFFFFFFF}, {0, 1 << 30}, {16, 0xFFFFFFFF}, {16, 1 << 30}, {16, 0}} {
		c := bytes.Clone(b)
		binary.BigEndian.PutUint32(c[tc.pos:], tc.val)
		check(fmt.Sprintf("field at %d = %#x", tc.pos, tc.val), c)
	}
	c := bytes.Clone(b)
	binary.BigEndian.PutUint16(c[20+3:], 0xFFFF) // properties length past the record
	check("properties length", c)
}

// TestNewUniqIDs: ids have NewUniqID's layout (prefix, time, counter), are distinct
// from each other and from NewUniqID's, and joined is them joined by ",".
func TestNewUniqIDs(t *testing.T) {
	if ids, joined := NewUniqIDs(0); ids != nil || joined != "" {
		t.Fatalf("NewUniqIDs(0) = %v, %q", ids, joined)
	}
	seen := map[string]bool{}
	for _, n := range []int{1, 2, 64, 1000, 70000} {
		one := NewUniqID()
		ids, joined := NewUniqIDs(n)
		if len(ids) != n || joined != strings.Join(ids, ",") {
			t.Fatalf("n=%d: %d ids, joined %d bytes", n, len(ids), len(joined))
		}
		for _, id := range append(ids, one) {
			if len(id) != 32 || id[:20] != one[:20] || strings.Trim(id, "0123456789ABCDEF") != "" {
				t.Fatalf("id %q: not 32 uppercase hex digits with the prefix of %q", id, one)
			}
		}
		if n <= 65536 { // the 16-bit counter wraps after 65536 ids in one millisecond
			for _, id := range append(ids, one) {
				if seen[id] {
					t.Fatalf("n=%d: duplicate id %q", n, id)
				}
				seen[id] = true
			}
		}
		clear(seen)
	}
}

// FuzzDecodeBatch: on any bytes DecodeBatch agrees with the reference decoder (both
// fail, or the same items) and never panics.
func FuzzDecodeBatch(f *testing.F) {
	b, _ := EncodeBatch([]*Message{(&Message{Topic: "T", Body: []byte("one")}).SetTag("a"), {Topic: "T", Body: []byte("two")}}, 0)
	f.Add(b)
	f.Add(b[:30])
	f.Add([]byte{0, 0, 0, 22, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		items, err := DecodeBatch(b)
		ref, rerr := decodeBatchRef(b)
		if (err == nil) != (rerr == nil) || len(items) != len(ref) {
			t.Fatalf("decode: %d items, %v; reference %d items, %v", len(items), err, len(ref), rerr)
		}
		for i := range items {
			if items[i].Flag != ref[i].Flag || !bytes.Equal(items[i].Body, ref[i].Body) || items[i].Properties != ref[i].Properties {
				t.Fatalf("item %d: %+v, reference %+v", i, items[i], ref[i])
			}
		}
	})
}

// TestAppendRecordPropertiesMatchesAppendRecord: encoding the properties from the map
// into the record gives the bytes of AppendRecord with MarshalProperties, and the same
// error for properties over the limit.
func TestAppendRecordPropertiesMatchesAppendRecord(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for iter := range 500 {
		m := randomMessage(r, "T", r.IntN(20))
		ext := func() *MessageExt {
			return &MessageExt{Message: *m.Clone(), QueueID: 3, SysFlag: 0, BornTimestamp: 7,
				BornHost: netip.MustParseAddrPort("10.0.0.1:5"), StoreHost: netip.MustParseAddrPort("[::1]:9")}
		}
		a, b := ext(), ext()
		want, werr := AppendRecord([]byte("pre"), a, MarshalProperties(a.Properties))
		got, gerr := AppendRecordProperties([]byte("pre"), b)
		if !sameError(werr, gerr) || !bytes.Equal(got, want) || a.StoreSize != b.StoreSize || a.SysFlag != b.SysFlag {
			t.Fatalf("iteration %d: %d bytes, %v; AppendRecord %d bytes, %v", iter, len(got), gerr, len(want), werr)
		}
	}
}
