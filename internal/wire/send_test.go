package wire

import (
	"errors"
	"reflect"
	"testing"

	"github.com/sluicemq/sluice/remoting"
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

func TestParseSendHeaderRoundTrip(t *testing.T) {
	h := benchSendHeader
	h.UnitMode, h.Batch, h.ReconsumeTimes = true, true, 2
	got, err := ParseSendHeader(remoting.NewRequest(remoting.SendMessageV2, h.Ext(), nil), true)
	if err != nil || got != h {
		t.Fatalf("V2 round trip = %+v %v\nwant %+v", got, err, h)
	}
	// SEND_MESSAGE (10) carries the long keys of the same table.
	v1 := map[string]string{}
	for k, v := range h.Ext() {
		for _, pair := range SendHeaderKeys {
			if pair[1] == k {
				v1[pair[0]] = v
			}
		}
	}
	if got, err := ParseSendHeader(remoting.NewRequest(remoting.SendMessage, v1, nil), false); err != nil || got != h {
		t.Fatalf("V1 = %+v %v", got, err)
	}
	// Read with the wrong key set, the first required field is missing.
	_, err = ParseSendHeader(remoting.NewRequest(remoting.SendMessage, v1, nil), true)
	var he *remoting.HeaderError
	if !errors.As(err, &he) || he.Field != "a" {
		t.Fatalf("V1 keys read as V2: %v", err)
	}
}

func TestParseSendHeaderOptionalAndBad(t *testing.T) {
	required := map[string]string{"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "-1", "f": "0", "g": "1", "h": "0"}
	h, err := ParseSendHeader(remoting.NewRequest(remoting.SendMessageV2, required, nil), true)
	if err != nil {
		t.Fatal(err)
	}
	if h.MaxReconsumeTimes != -1 || h.Properties != "" || h.Batch || h.UnitMode || h.BrokerName != "" || h.QueueID != -1 {
		t.Fatalf("defaults = %+v (MaxReconsumeTimes must be -1 when absent)", h)
	}
	for key, value := range map[string]string{"d": "x", "e": "99999999999", "g": "1.5", "l": "many", "m": "yes", "k": "maybe", "b": ""} {
		ext := map[string]string{}
		for k, v := range required {
			ext[k] = v
		}
		ext[key] = value
		if key == "b" {
			delete(ext, "b")
		}
		_, err := ParseSendHeader(remoting.NewRequest(remoting.SendMessageV2, ext, nil), true)
		var he *remoting.HeaderError
		if !errors.As(err, &he) || he.Field != key {
			t.Errorf("%s=%q: err %v, want a HeaderError naming %s", key, value, err, key)
		}
	}
}

// FuzzParseSendHeader: any ext values either parse or give a *remoting.HeaderError, and
// what parses survives Ext (with l written) unchanged.
func FuzzParseSendHeader(f *testing.F) {
	f.Add("pg", "T", "4", "3", "1", "1700000000000", "TAGS\x01a", "16", "false")
	f.Add("", "", "x", "-1", "", "", "", "", "TRUE")
	f.Fuzz(func(t *testing.T, group, topic, queueNums, queueID, sysFlag, born, props, maxRe, batch string) {
		ext := map[string]string{"a": group, "b": topic, "c": "TBW102", "d": queueNums, "e": queueID, "f": sysFlag,
			"g": born, "h": "0", "i": props, "l": maxRe, "m": batch}
		h, err := ParseSendHeader(remoting.NewRequest(remoting.SendMessageV2, ext, nil), true)
		if err != nil {
			var he *remoting.HeaderError
			if !errors.As(err, &he) {
				t.Fatalf("error %v is not a *remoting.HeaderError", err)
			}
			return
		}
		again, err := ParseSendHeader(remoting.NewRequest(remoting.SendMessageV2, h.Ext(), nil), true)
		if err != nil || again != h {
			t.Fatalf("round trip %+v -> %+v %v", h, again, err)
		}
	})
}
