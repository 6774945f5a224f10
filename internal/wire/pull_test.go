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
