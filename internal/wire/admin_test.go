package wire

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/message"
)

func TestResetOffsetBodyRoundTrip(t *testing.T) {
	table := map[message.MessageQueue]int64{
		{Topic: "T", BrokerName: "b", QueueID: 1}: 456,
		{Topic: "T", BrokerName: "b", QueueID: 0}: 123,
		{Topic: "T", BrokerName: "a", QueueID: 3}: 0,
	}
	b := EncodeResetOffsetBody(table)
	want := `{"offsetTable":[[{"topic":"T","brokerName":"a","queueId":3},0],[{"topic":"T","brokerName":"b","queueId":0},123],[{"topic":"T","brokerName":"b","queueId":1},456]]}`
	if string(b) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", b, want)
	}
	got, err := DecodeResetOffsetBody(b)
	if err != nil || !reflect.DeepEqual(got, table) {
		t.Fatalf("decoded %v, %v", got, err)
	}
	empty := EncodeResetOffsetBody(nil)
	if string(empty) != `{"offsetTable":[]}` {
		t.Fatalf("empty table encoded as %s", empty)
	}
	if got, err := DecodeResetOffsetBody(empty); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v %v", got, err)
	}
}

func TestResetOffsetBodyFastjson(t *testing.T) {
	// Java fastjson writes MessageQueue objects as map keys (not valid JSON).
	b := []byte(`{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:17,{"brokerName":"broker-a","queueId":1,"topic":"T"}:-1}}`)
	got, err := DecodeResetOffsetBody(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[message.MessageQueue]int64{
		{Topic: "T", BrokerName: "broker-a", QueueID: 0}: 17,
		{Topic: "T", BrokerName: "broker-a", QueueID: 1}: -1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
	for _, bad := range []string{`{"offsetTable":{{"topic":"T"}:x}}`, `{"offsetTable":{{"topic":"T"`, `{"x":1`, `{"offsetTable":[[{"topic":1},2]]}`, `{"offsetTable":[[{},"a"]]}`} {
		if _, err := DecodeResetOffsetBody([]byte(bad)); !errors.Is(err, ErrBadResetOffsetBody) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func FuzzDecodeResetOffsetBody(f *testing.F) {
	f.Add([]byte(`{"offsetTable":[[{"topic":"T","brokerName":"a","queueId":3},0]]}`))
	f.Add([]byte(`{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		table, err := DecodeResetOffsetBody(b)
		if err != nil {
			return
		}
		again, err := DecodeResetOffsetBody(EncodeResetOffsetBody(table))
		if err != nil || !reflect.DeepEqual(again, table) {
			t.Fatalf("re-encoding %v: %v %v", table, again, err)
		}
	})
}

func sub(topic, expr string) Subscription {
	return Subscription{Topic: topic, SubString: expr, ExpressionType: "TAG"}
}

func TestAnalyze(t *testing.T) {
	a := ClientSubscriptions{ClientID: "a", Subscriptions: []Subscription{sub("T", "x || y"), sub("%RETRY%g", "*")}}
	b := ClientSubscriptions{ClientID: "b", Subscriptions: []Subscription{sub("T", "y||x")}} // same tags, other order, no retry topic
	c := ClientSubscriptions{ClientID: "c", Subscriptions: []Subscription{sub("T", "x"), sub("U", "*")}}
	r := Analyze("g", []ClientSubscriptions{c, b, a})
	if r.Consistent || len(r.Sets) != 2 {
		t.Fatalf("report %+v", r)
	}
	if !reflect.DeepEqual(r.Sets[0].Clients, []string{"a", "b"}) || !reflect.DeepEqual(r.Sets[1].Clients, []string{"c"}) {
		t.Fatalf("sets %+v", r.Sets)
	}
	want := []Difference{
		{ClientID: "c", Other: "a", Topic: "T", Mine: "x", Theirs: "x || y"},
		{ClientID: "c", Other: "a", Topic: "U", Mine: "*", Theirs: ""},
	}
	if !reflect.DeepEqual(r.Differences, want) {
		t.Fatalf("differences %+v", r.Differences)
	}
	if s := want[1].String(); !strings.Contains(s, `c has "*"`) || !strings.Contains(s, "a has not subscribed") {
		t.Fatalf("String: %s", s)
	}
	if r := Analyze("g", []ClientSubscriptions{a, b}); !r.Consistent || len(r.Differences) != 0 {
		t.Fatalf("a and b: %+v", r)
	}
	if r := Analyze("g", nil); !r.Consistent || len(r.Sets) != 0 {
		t.Fatalf("empty: %+v", r)
	}
	sqlA := ClientSubscriptions{ClientID: "a", Subscriptions: []Subscription{{Topic: "T", SubString: " a > 1 ", ExpressionType: "SQL92"}}}
	sqlB := ClientSubscriptions{ClientID: "b", Subscriptions: []Subscription{{Topic: "T", SubString: "a > 1", ExpressionType: "SQL92"}}}
	if d := Diff(sqlA, sqlB); d != nil {
		t.Fatalf("SQL92 with other spacing: %v", d)
	}
}
