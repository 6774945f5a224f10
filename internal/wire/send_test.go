package wire

import (
	"errors"
	"maps"
	"reflect"
	"slices"
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
		for _, pair := range sendHeaderKeys {
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
		// The list form (a stale value first: the last of a repeated key wins) reads the same.
		lh, lerr := ParseSendHeader(listRequest(ext, remoting.ExtField{Key: "d", Value: "stale"}), true)
		if lh != h || !sameHeaderError(err, lerr) {
			t.Fatalf("map %+v %v\nlist %+v %v", h, err, lh, lerr)
		}
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
		req := remoting.NewRequest(remoting.SendMessageV2, nil, nil)
		req.ExtList = h.ExtList()
		if again, err := ParseSendHeader(req, true); err != nil || again != h {
			t.Fatalf("list round trip %+v -> %+v %v", h, again, err)
		}
	})
}

// listRequest returns a request carrying first and then ext as an ExtList (sorted keys).
func listRequest(ext map[string]string, first ...remoting.ExtField) *remoting.RemotingCommand {
	req := remoting.NewRequest(remoting.SendMessageV2, nil, nil)
	req.ExtList = append([]remoting.ExtField{}, first...)
	for _, k := range slices.Sorted(maps.Keys(ext)) {
		req.ExtList = append(req.ExtList, remoting.ExtField{Key: k, Value: ext[k]})
	}
	return req
}

// sameHeaderError reports whether a and b are both nil or both *remoting.HeaderError
// with the same text.
func sameHeaderError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var ha, hb *remoting.HeaderError
	return errors.As(a, &ha) && errors.As(b, &hb) && ha.Error() == hb.Error()
}

func TestSendHeaderExtList(t *testing.T) {
	for _, h := range []SendHeader{benchSendHeader, {ProducerGroup: "g", Topic: "T", UnitMode: true, Batch: true}} {
		list := h.ExtList()
		m := map[string]string{}
		for i, f := range list {
			if i > 0 && list[i-1].Key >= f.Key {
				t.Fatalf("keys not in order a..n: %v", list)
			}
			m[f.Key] = f.Value
		}
		if want := h.Ext(); !reflect.DeepEqual(m, want) {
			t.Fatalf("ExtList %v\nExt %v", m, want)
		}
	}
}

// TestAppendExtListAllocatesOnlyTheTimestamp: into a slice with room for every key,
// AppendExtList allocates nothing but the born timestamp's digits (small numbers, -1 and
// booleans are constant strings), and it appends what ExtList returns.
func TestAppendExtListAllocatesOnlyTheTimestamp(t *testing.T) {
	h := benchSendHeader
	h.MaxReconsumeTimes = -1
	var dst [len(sendHeaderKeys)]remoting.ExtField
	if got, want := h.AppendExtList(dst[:0]), h.ExtList(); !reflect.DeepEqual(got, want) {
		t.Fatalf("AppendExtList %v\nExtList %v", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { h.AppendExtList(dst[:0]) }); n > 1 {
		t.Fatalf("AppendExtList made %v allocations per header, want at most 1 (bornTimestamp)", n)
	}
	prefix := []remoting.ExtField{{Key: "x", Value: "y"}}
	if got := h.AppendExtList(prefix); len(got) != 1+len(h.ExtList()) || got[0] != prefix[0] {
		t.Fatalf("AppendExtList did not append after the existing fields: %v", got)
	}
}

// TestParseSendHeaderListMatchesMap: the one-pass list reader gives the map reader's
// header and errors, for valid, missing, malformed and repeated fields and both key sets.
func TestParseSendHeaderListMatchesMap(t *testing.T) {
	valid := benchSendHeader.Ext()
	cases := []map[string]string{valid, {}, {"a": "pg"}}
	for key, value := range map[string]string{"d": "x", "e": "99999999999", "g": "1.5", "l": "many", "m": "yes", "k": "maybe", "b": "", "j": "", "i": "", "n": "-"} {
		ext := maps.Clone(valid)
		ext[key] = value
		cases = append(cases, ext)
		ext = maps.Clone(valid)
		delete(ext, key)
		cases = append(cases, ext)
	}
	v1 := map[string]string{}
	for k, v := range valid {
		v1[sendHeaderKeys[k[0]-'a'][0]] = v
	}
	for _, ext := range cases {
		for _, v2 := range []bool{true, false} {
			want, werr := ParseSendHeader(remoting.NewRequest(remoting.SendMessageV2, ext, nil), v2)
			got, gerr := ParseSendHeader(listRequest(ext, remoting.ExtField{Key: "a", Value: "stale"}), v2)
			if ext["a"] == "" && v2 {
				continue // the stale first entry is then the only one
			}
			if got != want || !sameHeaderError(werr, gerr) {
				t.Fatalf("%v (v2 %v):\nmap  %+v %v\nlist %+v %v", ext, v2, want, werr, got, gerr)
			}
		}
	}
	want, err := ParseSendHeader(remoting.NewRequest(remoting.SendMessage, v1, nil), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParseSendHeader(listRequest(v1), false); err != nil || got != want {
		t.Fatalf("SEND_MESSAGE keys in a list: %+v %v, want %+v", got, err, want)
	}
}
