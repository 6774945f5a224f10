package message

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"unsafe"
)

// pullBody returns n stored records back to back, as a PULL_MESSAGE response carries them:
// 1 KiB bodies, the benchProps properties, topics alternating between two names every
// third record.
func pullBody(tb testing.TB, n int) []byte {
	tb.Helper()
	var out []byte
	for i := range n {
		topic := "PullTopic"
		if i%3 == 2 {
			topic = "%RETRY%group"
		}
		body := []byte(strings.Repeat(string(rune('a'+i%26)), 1024))
		m := &MessageExt{Message: Message{Topic: topic, Body: body, Properties: benchProps},
			QueueOffset: int64(i), CommitLogOffset: int64(4096 * i), StoreHost: netip.MustParseAddrPort("10.0.0.1:10911")}
		var err error
		if out, err = AppendRecord(out, m, MarshalProperties(m.Properties)); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// TestDecodeRecordsMatchesDecodeRecord: DecodeRecords (one allocation for the batch's
// structs, shared topic strings, shared bodies with ShareBody) gives the same messages as
// DecodeRecord one by one, and a shared body cannot grow into its neighbour.
func TestDecodeRecordsMatchesDecodeRecord(t *testing.T) {
	b := pullBody(t, 7)
	for _, share := range []bool{false, true} {
		opts := DecodeOptions{CheckCRC: true, Decompress: true, ShareBody: share}
		got, err := DecodeRecords(b, opts)
		if err != nil || len(got) != 7 {
			t.Fatalf("share=%t: %d messages, %v", share, len(got), err)
		}
		rest := b
		for i, m := range got {
			want, n, err := DecodeRecord(rest, DecodeOptions{CheckCRC: true})
			if err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
			if m.Topic != want.Topic || string(m.Body) != string(want.Body) || m.QueueOffset != int64(i) ||
				m.MsgID != want.MsgID || m.OffsetMsgID != want.OffsetMsgID || len(m.Properties) != len(benchProps) ||
				m.Tag() != "TagA" || m.StoreSize != want.StoreSize || m.BodyCRC != want.BodyCRC {
				t.Fatalf("share=%t message %d: %+v, want %+v", share, i, m, want)
			}
			if cap(m.Body) != len(m.Body) {
				t.Fatalf("share=%t message %d: body cap %d > len %d: an append would overwrite the next record", share, i, cap(m.Body), len(m.Body))
			}
			// A shared body is the buffer's bytes: writing through it shows in b.
			before := string(b)
			m.Body[0] ^= 0xFF
			inFrame := string(b) != before
			m.Body[0] ^= 0xFF
			if inFrame != share {
				t.Fatalf("share=%t message %d: body in the decoded buffer: %t", share, i, inFrame)
			}
		}
		// Consecutive records of the same topic share one string.
		if got[0].Topic != "PullTopic" || got[2].Topic != "%RETRY%group" ||
			unsafe.StringData(got[0].Topic) != unsafe.StringData(got[1].Topic) ||
			unsafe.StringData(got[3].Topic) != unsafe.StringData(got[4].Topic) {
			t.Fatalf("topics %q %q not shared", got[0].Topic, got[2].Topic)
		}
	}
}

// TestDecodeRecordsPartial: a record that does not decode stops the batch; the messages
// before it are returned with the error.
func TestDecodeRecordsPartial(t *testing.T) {
	b := pullBody(t, 3)
	one := len(b) / 3
	for _, tc := range []struct {
		name string
		body []byte
		n    int
		want error
	}{
		{"cut", b[:len(b)-1], 2, ErrShortRecord},
		{"bad magic", append(append([]byte(nil), b[:one]...), make([]byte, 40)...), 1, ErrBadMagic},
		{"garbage first", []byte{1, 2, 3}, 0, ErrShortRecord},
	} {
		got, err := DecodeRecords(tc.body, DecodeOptions{ShareBody: true})
		if len(got) != tc.n || !errors.Is(err, tc.want) {
			t.Errorf("%s: %d messages, %v; want %d and %v", tc.name, len(got), err, tc.n, tc.want)
		}
	}
	if got, err := DecodeRecords(nil, DecodeOptions{}); len(got) != 0 || err != nil {
		t.Errorf("empty body: %v, %v", got, err)
	}
}

// TestOffsetMsgIDForm pins the offset message id's form: uppercase hex of address, port
// and offset (Java MessageDecoder.createMessageId).
func TestOffsetMsgIDForm(t *testing.T) {
	for _, tc := range []struct {
		host string
		off  int64
		want string
	}{
		{"10.0.0.1:10911", 0x1234, "0A000001" + "00002A9F" + "0000000000001234"},
		{"[::ffff:10.0.0.1]:10911", 255, "0A000001" + "00002A9F" + "00000000000000FF"},
		{"[2001:db8::1]:80", -1, "20010DB8000000000000000000000001" + "00000050" + "FFFFFFFFFFFFFFFF"},
	} {
		if got := OffsetMsgID(netip.MustParseAddrPort(tc.host), tc.off); got != tc.want {
			t.Errorf("OffsetMsgID(%s, %d) = %s, want %s", tc.host, tc.off, got, tc.want)
		}
	}
	if got := OffsetMsgID(netip.AddrPort{}, 1); got != fmt.Sprintf("%08X%08X%016X", 0, 0, 1) {
		t.Errorf("OffsetMsgID of no host = %s", got)
	}
}

// BenchmarkDecodeRecords decodes a pull of 32 records of 1 KiB (what a push consumer does
// with every PULL_MESSAGE answer); ns/op and allocs/op are per pull.
func BenchmarkDecodeRecords(b *testing.B) {
	body := pullBody(b, 32)
	for _, share := range []bool{false, true} {
		b.Run(fmt.Sprintf("share=%t", share), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				ms, err := DecodeRecords(body, DecodeOptions{Decompress: true, ShareBody: share})
				if err != nil || len(ms) != 32 {
					b.Fatal(len(ms), err)
				}
			}
		})
	}
}
