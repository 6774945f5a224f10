package store

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
)

var (
	testStoreHost = netip.MustParseAddrPort("10.0.0.1:10911")
	testBornHost  = netip.MustParseAddrPort("192.168.1.7:54321")
)

// newMsg returns a message for topic/queueID with a body and a tag.
func newMsg(topic string, queueID int32, body string, tag string) *message.MessageExt {
	m := &message.MessageExt{
		Message:       message.Message{Topic: topic, Body: []byte(body)},
		QueueID:       queueID,
		BornTimestamp: 1700000000000,
		BornHost:      testBornHost,
		StoreHost:     testStoreHost,
	}
	if tag != "" {
		m.SetTag(tag)
	}
	m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
	return m
}

// testConfig returns a config with small files for dir.
func testConfig(dir string) Config {
	return Config{
		Dir:                       dir,
		CommitLogSegmentSize:      64 << 10,
		ConsumeQueueEntries:       64,
		FlushInterval:             20 * time.Millisecond,
		FlushConsumeQueueInterval: 50 * time.Millisecond,
	}
}

func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// put stores one message and fails the test on error.
func put(t *testing.T, s *Store, m *message.MessageExt) PutResult {
	t.Helper()
	res, err := s.PutMessage(context.Background(), m, message.TagHashCode(m.Tag()))
	if err != nil {
		t.Fatalf("PutMessage: %v", err)
	}
	if res.Status != PutOK {
		t.Fatalf("PutMessage status %v", res.Status)
	}
	return res
}

// putN stores n messages "<prefix>-<i>" in topic/queueID.
func putN(t *testing.T, s *Store, topic string, queueID int32, n int, prefix string) []PutResult {
	t.Helper()
	out := make([]PutResult, n)
	for i := range n {
		out[i] = put(t, s, newMsg(topic, queueID, fmt.Sprintf("%s-%d", prefix, i), ""))
	}
	return out
}

// bodies pulls everything from offset 0 of topic/queueID and returns the bodies.
func bodies(t *testing.T, s *Store, topic string, queueID int32) []string {
	t.Helper()
	var out []string
	off := int64(0)
	for range 100000 {
		r, err := s.GetMessage(topic, queueID, off, 32, 0, nil)
		if err != nil {
			t.Fatalf("GetMessage: %v", err)
		}
		if r.Status != Found && r.Status != NoMatchedMessage {
			break
		}
		for _, rec := range r.Records {
			m, _, err := message.DecodeRecord(rec, message.DecodeOptions{CheckCRC: true})
			if err != nil {
				t.Fatalf("decode served record: %v", err)
			}
			out = append(out, string(m.Body))
		}
		off = r.NextBeginOffset
	}
	return out
}
