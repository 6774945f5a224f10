package store

import (
	"testing"

	"github.com/sluicemq/sluice/message"
)

func TestPutGetRoundTrip(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	m := newMsg("TopicA", 3, "hello", "TagA")
	m.SetKeys("k1", "k2")
	res := put(t, s, m)
	if res.QueueOffset != 0 || res.CommitLogOffset != 0 || res.Count != 1 || len(res.OffsetMsgIDs) != 1 {
		t.Fatalf("result %+v", res)
	}
	if res.OffsetMsgIDs[0] != message.OffsetMsgID(testStoreHost, 0) || m.OffsetMsgID != res.OffsetMsgIDs[0] {
		t.Fatalf("offset msg id %q", res.OffsetMsgIDs[0])
	}
	r, err := s.GetMessage("TopicA", 3, 0, 32, 0, nil)
	if err != nil || r.Status != Found || r.MessageCount != 1 || r.NextBeginOffset != 1 {
		t.Fatalf("get %+v %v", r, err)
	}
	got, _, err := message.DecodeRecord(r.Body, message.DecodeOptions{CheckCRC: true})
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Body) != "hello" || got.Tag() != "TagA" || got.QueueID != 3 || got.StoreTimestamp != res.StoreTimestamp || got.UniqKey() != m.UniqKey() {
		t.Fatalf("decoded %+v", got)
	}
}
