package message

import (
	"strconv"
	"testing"
)

// benchBatch returns 64 messages of 1 KiB with a UNIQ_KEY each, plus the properties of
// benchProps when withProps.
func benchBatch(withProps bool) []*Message {
	body := make([]byte, 1024)
	msgs := make([]*Message, 64)
	for i := range msgs {
		m := NewMessage("BenchTopic", body)
		if withProps {
			for k, v := range benchProps {
				m.SetProperty(k, v)
			}
		}
		msgs[i] = m.SetProperty(PropertyUniqClientMessageIDKeyIdx, NewUniqID())
	}
	return msgs
}

// BenchmarkEncodeBatch: a SEND_BATCH_MESSAGE body of 64 1 KiB messages, with only a
// UNIQ_KEY and with five properties. MB/s counts bodies.
func BenchmarkEncodeBatch(b *testing.B) {
	for _, withProps := range []bool{false, true} {
		b.Run("props="+strconv.FormatBool(withProps), func(b *testing.B) {
			msgs := benchBatch(withProps)
			b.SetBytes(64 * 1024)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeBatch(msgs, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeBatch: splitting the body of BenchmarkEncodeBatch (five properties)
// into its 64 items, as the broker does for every batch.
func BenchmarkDecodeBatch(b *testing.B) {
	body, err := EncodeBatch(benchBatch(true), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(64 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		if items, err := DecodeBatch(body); err != nil || len(items) != 64 {
			b.Fatal(len(items), err)
		}
	}
}

// BenchmarkNewUniqID: one client message id.
func BenchmarkNewUniqID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if len(NewUniqID()) != 32 {
			b.Fatal("bad id")
		}
	}
}

// BenchmarkNewUniqIDs64: the 64 ids of a batch and their joined form, per batch.
func BenchmarkNewUniqIDs64(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if ids, _ := NewUniqIDs(64); len(ids) != 64 {
			b.Fatal("bad ids")
		}
	}
}
