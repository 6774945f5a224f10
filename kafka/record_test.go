package kafka

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/message"
)

// A retry copy keeps the first delivery's origin, key, body and user headers through
// several retries; its MessageExt shows the original topic, the copy's own place, the
// reconsume count and no SLUICE_* header; a long error is cut to 1000 bytes of valid
// UTF-8.
func TestRecordCopiesAndMapping(t *testing.T) {
	first := &Record{Topic: "orders", Partition: 2, Offset: 41, Time: time.UnixMilli(1_700_000_000_000), Key: []byte("c-1"), Value: []byte("body"),
		Headers: []kafkago.Header{{Key: message.PropertyTags, Value: []byte("Paid")}, {Key: message.PropertyKeys, Value: []byte("o-1 o-2")},
			{Key: message.PropertyUniqClientMessageIDKeyIdx, Value: []byte("ID1")}, {Key: "amount", Value: []byte("12")}}}
	long := errors.New(strings.Repeat("é", 700)) // 1400 bytes
	set := map[string]string{HeaderReconsumeTimes: "1", HeaderLastError: truncateError(long), HeaderDueMs: "1700000001000", HeaderBornMs: "1700000000000"}
	set[HeaderOriginTopic], set[HeaderOriginPartition], set[HeaderOriginOffset] = first.origin()
	c1 := first.copyFor("g.retry.1", set)
	second := &Record{Topic: c1.Topic, Partition: 0, Offset: 7, Time: time.UnixMilli(1_700_000_001_500), Key: c1.Key, Value: c1.Value, Headers: c1.Headers}
	set2 := map[string]string{HeaderReconsumeTimes: "2", HeaderLastError: "again", HeaderDueMs: ""}
	set2[HeaderOriginTopic], set2[HeaderOriginPartition], set2[HeaderOriginOffset] = second.origin()
	c2 := second.copyFor("g.dlq", set2)
	third := &Record{Topic: "g.dlq", Partition: 0, Offset: 3, Time: time.UnixMilli(1_700_000_002_000), Key: c2.Key, Value: c2.Value, Headers: c2.Headers}

	if le, _ := second.header(HeaderLastError); len(le) > maxLastError || !utf8.ValidString(le) || !strings.HasPrefix(le, "éé") {
		t.Fatalf("last error %d bytes, valid %v", len(le), utf8.ValidString(le))
	}
	if _, ok := third.header(HeaderDueMs); ok {
		t.Fatal("a dead letter kept its due time")
	}
	m := third.ToMessageExt()
	if m.Topic != "orders" || m.Property(message.PropertyRetryTopic) != "g.dlq" || m.QueueID != 0 || m.QueueOffset != 3 || m.ReconsumeTimes != 2 ||
		m.MsgID != "ID1" || m.Tag() != "Paid" || strings.Join(m.Keys(), " ") != "o-1 o-2" || m.Property("amount") != "12" ||
		m.ShardingKey() != "c-1" || string(m.Body) != "body" || m.BornTimestamp != 1_700_000_000_000 || m.StoreTimestamp != 1_700_000_002_000 {
		t.Fatalf("mapped %+v", m)
	}
	if o, p, off := third.origin(); o != "orders" || p != "2" || off != "41" {
		t.Fatalf("origin %s %s %s", o, p, off)
	}
	for k := range m.Properties {
		if strings.HasPrefix(k, "SLUICE_") {
			t.Fatalf("control header %s shown as a property", k)
		}
	}
	// A record sent without UNIQ_KEY gets a stable id from its place.
	bare := (&Record{Topic: "t", Partition: 1, Offset: 9}).ToMessageExt()
	if bare.MsgID != "t-1-9" {
		t.Fatalf("id %q", bare.MsgID)
	}
}
