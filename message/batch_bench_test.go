package message_test

import (
	"strconv"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// batchProps are the properties of a typical produced message (as benchProps).
var batchProps = map[string]string{
	message.PropertyTags:    "TagA",
	message.PropertyKeys:    "order-1234567",
	message.PropertyCluster: "DefaultCluster",
	"region":                "eu-west",
}

// benchBatch returns 64 messages of 1 KiB with a UNIQ_KEY each, plus the properties of
// benchProps when withProps.
func benchBatch(withProps bool) []*message.Message {
	body := make([]byte, 1024)
	msgs := make([]*message.Message, 64)
	for i := range msgs {
		m := message.NewMessage("BenchTopic", body)
		if withProps {
			for k, v := range batchProps {
				m.SetProperty(k, v)
			}
		}
		msgs[i] = m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
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
			defer testkit.ReportCPU(b)()
			for b.Loop() {
				if _, err := message.EncodeBatch(msgs, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeBatch: splitting the body of BenchmarkEncodeBatch (five properties)
// into its 64 items, as the broker does for every batch.
func BenchmarkDecodeBatch(b *testing.B) {
	body, err := message.EncodeBatch(benchBatch(true), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(64 * 1024)
	b.ReportAllocs()
	defer testkit.ReportCPU(b)()
	for b.Loop() {
		if items, err := message.DecodeBatch(body); err != nil || len(items) != 64 {
			b.Fatal(len(items), err)
		}
	}
}

// BenchmarkNewUniqID: one client message id.
func BenchmarkNewUniqID(b *testing.B) {
	b.ReportAllocs()
	defer testkit.ReportCPU(b)()
	for b.Loop() {
		if len(message.NewUniqID()) != 32 {
			b.Fatal("bad id")
		}
	}
}

// BenchmarkNewUniqIDs64: the 64 ids of a batch and their joined form, per batch.
func BenchmarkNewUniqIDs64(b *testing.B) {
	b.ReportAllocs()
	defer testkit.ReportCPU(b)()
	for b.Loop() {
		if ids, _ := message.NewUniqIDs(64); len(ids) != 64 {
			b.Fatal("bad ids")
		}
	}
}
