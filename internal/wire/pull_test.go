package wire

import (
	"errors"
	"testing"

	"github.com/sluicemq/sluice/remoting"
)

func TestPullHeaderRoundTrip(t *testing.T) {
	h := PullHeader{ConsumerGroup: "g", Topic: "T", QueueID: 2, QueueOffset: 100, MaxMsgNums: 32,
		SysFlag: PullFlagCommitOffset | PullFlagSuspend | PullFlagSubscription, CommitOffset: 90,
		SuspendTimeoutMillis: 20000, Subscription: "a || b", SubVersion: 7, ExpressionType: ExpressionTypeTag}
	ext := h.Ext()
	if ext["sysFlag"] != "7" || ext["suspendTimeoutMillis"] != "20000" || ext["queueId"] != "2" || len(ext) != 11 {
		t.Fatalf("ext %v", ext)
	}
	got, err := ParsePullHeader(remoting.NewRequest(remoting.PullMessage, ext, nil))
	if err != nil || got != h {
		t.Fatalf("round trip = %+v %v", got, err)
	}
}

func TestParsePullHeaderErrors(t *testing.T) {
	base := PullHeader{ConsumerGroup: "g", Topic: "T", MaxMsgNums: 32}.Ext()
	for key, value := range map[string]string{"consumerGroup": "", "queueId": "x", "queueOffset": "-1", "maxMsgNums": "", "commitOffset": "1e3", "suspendTimeoutMillis": "", "subVersion": "new"} {
		ext := map[string]string{}
		for k, v := range base {
			ext[k] = v
		}
		if value == "" {
			delete(ext, key)
		} else {
			ext[key] = value
		}
		_, err := ParsePullHeader(remoting.NewRequest(remoting.PullMessage, ext, nil))
		var he *remoting.HeaderError
		if !errors.As(err, &he) || he.Field != key {
			t.Errorf("%s=%q: err %v, want a HeaderError naming %s", key, value, err, key)
		}
	}
	// Optional fields may be missing.
	for _, k := range []string{"subscription", "subVersion", "expressionType"} {
		delete(base, k)
	}
	if _, err := ParsePullHeader(remoting.NewRequest(remoting.PullMessage, base, nil)); err != nil {
		t.Fatalf("without optional fields: %v", err)
	}
}

// FuzzParsePullHeader: any ext values either parse or give a *remoting.HeaderError,
// and what parses survives Ext unchanged.
func FuzzParsePullHeader(f *testing.F) {
	f.Add("g", "1", "100", "32", "6", "0", "20000", "*", "0")
	f.Add("", "-1", "-5", "", "x", "9223372036854775808", "", "", "")
	f.Fuzz(func(t *testing.T, group, queueID, offset, maxNums, sysFlag, commit, suspend, sub, subVersion string) {
		ext := map[string]string{"consumerGroup": group, "topic": "T", "queueId": queueID, "queueOffset": offset,
			"maxMsgNums": maxNums, "sysFlag": sysFlag, "commitOffset": commit, "suspendTimeoutMillis": suspend,
			"subscription": sub, "subVersion": subVersion, "expressionType": "TAG"}
		h, err := ParsePullHeader(remoting.NewRequest(remoting.PullMessage, ext, nil))
		if err != nil {
			var he *remoting.HeaderError
			if !errors.As(err, &he) {
				t.Fatalf("error %v is not a *remoting.HeaderError", err)
			}
			return
		}
		again, err := ParsePullHeader(remoting.NewRequest(remoting.PullMessage, h.Ext(), nil))
		if err != nil || again != h {
			t.Fatalf("round trip %+v -> %+v %v", h, again, err)
		}
	})
}

func TestPullResponseHeader(t *testing.T) {
	resp := remoting.NewResponse(remoting.Success, "")
	PullResponseHeader{NextBeginOffset: 12, MinOffset: 3, MaxOffset: 40}.SetExt(resp)
	if resp.ExtFields["suggestWhichBrokerId"] != "0" || resp.ExtFields["nextBeginOffset"] != "12" {
		t.Fatalf("ext %v", resp.ExtFields)
	}
	h, err := ParsePullResponseHeader(resp)
	if err != nil || h != (PullResponseHeader{NextBeginOffset: 12, MinOffset: 3, MaxOffset: 40}) {
		t.Fatalf("parse = %+v %v", h, err)
	}
	// Informational fields are lenient; nextBeginOffset is not.
	resp.SetExt("minOffset", "x")
	if h, err := ParsePullResponseHeader(resp); err != nil || h.MinOffset != 0 || h.NextBeginOffset != 12 {
		t.Fatalf("lenient minOffset: %+v %v", h, err)
	}
	delete(resp.ExtFields, "nextBeginOffset")
	var he *remoting.HeaderError
	if _, err := ParsePullResponseHeader(resp); !errors.As(err, &he) || he.Field != "nextBeginOffset" {
		t.Fatalf("missing nextBeginOffset: %v", err)
	}
}

func TestReadQueueHeader(t *testing.T) {
	h := ReadQueueHeader{Topic: "%DLQ%g", QueueID: 0, Offset: 5, MaxMsgNums: 32}
	got, err := ParseReadQueueHeader(remoting.NewRequest(ReadQueue, h.Ext(), nil))
	if err != nil || got != h {
		t.Fatalf("round trip = %+v %v", got, err)
	}
	for field, bad := range map[string]ReadQueueHeader{"offset": {Topic: "T", Offset: -1}, "queueId": {Topic: "T", QueueID: -2}} {
		var he *remoting.HeaderError
		if _, err := ParseReadQueueHeader(remoting.NewRequest(ReadQueue, bad.Ext(), nil)); !errors.As(err, &he) || he.Field != field {
			t.Errorf("%+v: %v, want a HeaderError naming %s", bad, err, field)
		}
	}
	ext := h.Ext()
	delete(ext, "maxMsgNums")
	var he *remoting.HeaderError
	if _, err := ParseReadQueueHeader(remoting.NewRequest(ReadQueue, ext, nil)); !errors.As(err, &he) || he.Field != "maxMsgNums" {
		t.Fatalf("missing maxMsgNums: %v", err)
	}
}
