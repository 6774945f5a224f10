package message

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// separatorProps is a legal properties string (under MaxPropertiesLength) of one tag and
// 32000 empty pieces, which the parser drops.
var separatorProps = "TAGS\x01A\x02" + strings.Repeat("\x02", 32000)

// TestUnmarshalPropertiesSeparatorsDoNotAmplify: UnmarshalProperties sizes its map by
// counting separators, so a properties string of separators (one property, 32000 empty
// pieces) got a map with room for 32001 entries: about 2.5 MiB for 32 KB of input. The
// broker parses producers' properties with it (send, batch items, tag re-checks) and
// consumers parse every pulled record's.
func TestUnmarshalPropertiesSeparatorsDoNotAmplify(t *testing.T) {
	var p map[string]string
	got := allocated(func() { p = UnmarshalProperties(separatorProps) })
	if len(p) != 1 || p[PropertyTags] != "A" {
		t.Fatalf("UnmarshalProperties = %v, want TAGS=A only", p)
	}
	if limit := uint64(4 * len(separatorProps)); got > limit {
		t.Fatalf("parsing %d bytes of properties into %d entries allocated %d bytes (limit %d)", len(separatorProps), len(p), got, limit)
	}
}

// TestDecodeRecordsSeparatorPropertiesDoNotAmplify: records whose properties are mostly
// separators (a Java broker stores a producer's properties string as sent) must decode
// without allocating out of proportion to the pull body; each decoded message keeps its
// map while it waits in a push consumer's process queue, which flow control does not
// count.
func TestDecodeRecordsSeparatorPropertiesDoNotAmplify(t *testing.T) {
	var b []byte
	for i := range 32 {
		m := &MessageExt{Message: Message{Topic: "T", Body: []byte("x")}, QueueOffset: int64(i),
			CommitLogOffset: int64(40000 * i), StoreHost: netip.MustParseAddrPort("10.0.0.1:10911")}
		var err error
		if b, err = AppendRecord(b, m, separatorProps); err != nil {
			t.Fatal(err)
		}
	}
	var msgs []*MessageExt
	var err error
	got := allocated(func() { msgs, err = DecodeRecords(b, DecodeOptions{Decompress: true, ShareBody: true}) })
	if err != nil || len(msgs) != 32 || msgs[31].Tag() != "A" {
		t.Fatalf("DecodeRecords = %d messages, %v", len(msgs), err)
	}
	if limit := uint64(4 * len(b)); got > limit {
		t.Fatalf("decoding a %d-byte pull body of 32 records allocated %d bytes (limit %d)", len(b), got, limit)
	}
}

// TestDecodeRecordsMalformedBodyDoesNotAmplify: a pull response body of back-to-back
// 8-byte "records" (TOTALSIZE 8, MagicCode, nothing else: none can decode) must fail
// with ErrShortRecord without allocating memory out of proportion to the body.
// DecodeRecords sizes its message block by counting records from their TOTALSIZE fields
// alone, so such a body (from a broken or hostile broker; a consumer accepts frames up to
// 16 MiB) made it allocate one 256-byte MessageExt plus a pointer per 8 bytes, about 33
// times the body (527 MiB for a 15 MiB body), before finding the first record broken.
// A real record is never shorter than RecordSize(0, 0, 0, 0).
func TestDecodeRecordsMalformedBodyDoesNotAmplify(t *testing.T) {
	b := make([]byte, 4<<20)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.BigEndian.PutUint32(b[i:], 8)
		binary.BigEndian.PutUint32(b[i+4:], MagicCode)
	}
	var msgs []*MessageExt
	var err error
	got := allocated(func() { msgs, err = DecodeRecords(b, DecodeOptions{Decompress: true, ShareBody: true}) })
	if !errors.Is(err, ErrShortRecord) || len(msgs) != 0 {
		t.Fatalf("DecodeRecords = %d messages, %v; want none and ErrShortRecord", len(msgs), err)
	}
	if got > uint64(len(b)) {
		t.Fatalf("decoding a malformed %d-byte body allocated %d bytes (%.1f times the body)", len(b), got, float64(got)/float64(len(b)))
	}
}
