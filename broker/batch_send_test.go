package broker

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// batchExt is the SEND_BATCH_MESSAGE header for topic B, queue 0, with batch
// properties props.
func batchExt(props string) map[string]string {
	return map[string]string{"a": "pg", "b": "B", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0", "i": props, "j": "0", "k": "false", "m": "true"}
}

// TestBatchSendItems: the stored messages carry each item's properties, the batch's own
// (which win) and CLUSTER, without WAIT; an item whose stored properties would exceed
// 32767 bytes is refused while one at exactly the limit is stored; malformed and
// rule-breaking bodies get MESSAGE_ILLEGAL (13) and store nothing.
func TestBatchSendItems(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.BrokerClusterName = "C1" })
	c := newClient(t)
	createTopic(t, c, b.Addr(), "B", 1)
	send := func(body []byte, props string) *remoting.RemotingCommand {
		t.Helper()
		return invoke(t, c, b.Addr(), remoting.NewRequest(remoting.SendBatchMessage, batchExt(props), body))
	}
	encode := func(msgs ...*message.Message) []byte {
		t.Helper()
		body, err := message.EncodeBatch(msgs, 0)
		if err != nil {
			t.Fatal(err)
		}
		return body
	}

	one := (&message.Message{Topic: "B", Body: []byte("one")}).SetTag("t1").SetKeys("k1").SetProperty("x", "item").SetProperty(message.PropertyWaitStoreMsgOK, "true")
	two := (&message.Message{Topic: "B", Body: []byte("two")}).SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
	if r := send(encode(one, two), message.MarshalProperties(map[string]string{"x": "batch", "y": "b"})); r.ResponseCode() != remoting.Success {
		t.Fatalf("batch: %d %s", r.Code, r.Remark)
	}
	got, err := message.DecodeRecords(pull(t, c, b.Addr(), "g", "B", 0, 0, "*", 0).Body, message.DecodeOptions{})
	if err != nil || len(got) != 2 {
		t.Fatalf("pulled %d messages, %v", len(got), err)
	}
	want := []map[string]string{
		{"TAGS": "t1", "KEYS": "k1", "x": "batch", "y": "b", "CLUSTER": "C1"},
		{"UNIQ_KEY": two.UniqKey(), "x": "batch", "y": "b", "CLUSTER": "C1"},
	}
	for i, m := range got {
		if message.MarshalProperties(m.Properties) != message.MarshalProperties(want[i]) || m.QueueOffset != int64(i) {
			t.Fatalf("message %d at %d: properties %q, want %q", i, m.QueueOffset, m.Properties, want[i])
		}
	}

	// CLUSTER\x01C1 and its separator are 11 bytes the broker adds.
	sized := func(n int) *message.Message {
		return (&message.Message{Topic: "B", Body: []byte("s")}).SetProperty("big", strings.Repeat("v", n-len("big\x01")))
	}
	exact := sized(message.MaxPropertiesLength - 11)
	if r := send(encode(exact), ""); r.ResponseCode() != remoting.Success {
		t.Fatalf("properties at the limit: %d %s", r.Code, r.Remark)
	}
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"properties over the limit", encode(sized(message.MaxPropertiesLength - 10)), "properties exceed"},
		{"cut inside a record", encode(one, two)[:40], "inconsistent sizes"},
		{"shorter than a record header", binary.BigEndian.AppendUint32(nil, 0xFFFFFFFF), "truncated"},
		{"delay level", rawBatchItem("d", "DELAY\x013"), "delay level"},
		{"transactional", rawBatchItem("d", "TRAN_MSG\x01true"), "transactional"},
		{"empty body", rawBatchItem("", ""), "body is empty"},
		{"no items", nil, "batch"},
	} {
		r := send(tc.body, "")
		if r.ResponseCode() != remoting.MessageIllegal || !strings.Contains(r.Remark, tc.want) {
			t.Errorf("%s: %d %q, want 13 containing %q", tc.name, r.Code, r.Remark, tc.want)
		}
	}
	if got, _ := message.DecodeRecords(pull(t, c, b.Addr(), "g", "B", 0, 2, "*", 0).Body, message.DecodeOptions{}); len(got) != 1 {
		t.Fatalf("%d messages after the accepted ones, want only the one at the limit", len(got))
	}
}

// rawBatchItem encodes one batch record as the Java client would, without the checks
// of message.EncodeBatch.
func rawBatchItem(body, props string) []byte {
	be := binary.BigEndian
	out := be.AppendUint32(nil, uint32(message.BatchRecordSize(len(body), len(props))))
	out = append(out, make([]byte, 12)...) // MAGICCODE, BODYCRC, FLAG
	out = be.AppendUint32(out, uint32(len(body)))
	out = append(out, body...)
	out = be.AppendUint16(out, uint16(len(props)))
	return append(out, props...)
}
