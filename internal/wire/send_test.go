package wire

import (
	"reflect"
	"testing"
)

func TestSendHeaderExt(t *testing.T) {
	h := SendHeader{
		ProducerGroup: "pg", Topic: "T", DefaultTopic: "TBW102", DefaultTopicQueueNums: 4, QueueID: 3,
		SysFlag: 1, BornTimestamp: 1700000000000, Flag: 7, Properties: "TAGS\x01a",
		MaxReconsumeTimes: 16, BrokerName: "broker-a",
	}
	want := map[string]string{
		"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "1", "g": "1700000000000", "h": "7",
		"i": "TAGS\x01a", "j": "0", "k": "false", "l": "16", "m": "false", "n": "broker-a",
	}
	if got := h.Ext(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ext %v\nwant %v", got, want)
	}
	h.Properties, h.BrokerName = "", ""
	if ext := h.Ext(); ext["i"] != "" || ext["n"] != "" {
		t.Fatalf("empty optional fields sent: %v", ext)
	}
}
