package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/sluicemq/sluice/message"
)

func TestLockBatchBodies(t *testing.T) {
	mqs := []message.MessageQueue{{Topic: "T", BrokerName: "b", QueueID: 0}, {Topic: "T", BrokerName: "b", QueueID: 1}}
	body, _ := json.Marshal(LockBatchBody{ConsumerGroup: "g", ClientID: "c@1", MQSet: mqs})
	want := `{"consumerGroup":"g","clientId":"c@1","mqSet":[{"topic":"T","brokerName":"b","queueId":0},{"topic":"T","brokerName":"b","queueId":1}]}`
	if string(body) != want {
		t.Fatalf("lock body %s\nwant %s", body, want)
	}
	got, err := ParseLockBatchBody(body)
	if err != nil || got.ConsumerGroup != "g" || got.ClientID != "c@1" || !reflect.DeepEqual(got.MQSet, mqs) {
		t.Fatalf("parse = %+v %v", got, err)
	}
	for _, bad := range []string{``, `[]`, `{"clientId":"c"}`, `{"consumerGroup":"g"}`, `{"consumerGroup":"g","clientId":"c","mqSet":{}}`} {
		if _, err := ParseLockBatchBody([]byte(bad)); !errors.Is(err, ErrBadLockBody) {
			t.Errorf("ParseLockBatchBody(%q) = %v, want ErrBadLockBody", bad, err)
		}
	}
	res, _ := json.Marshal(LockBatchResult{LockOKMQSet: mqs[:1]})
	if r, err := ParseLockBatchResult(res); err != nil || !reflect.DeepEqual(r.LockOKMQSet, mqs[:1]) {
		t.Fatalf("result %s: %+v %v", res, r, err)
	}
	if r, err := ParseLockBatchResult(nil); err != nil || len(r.LockOKMQSet) != 0 {
		t.Fatalf("empty result: %+v %v", r, err)
	}
	if _, err := ParseLockBatchResult([]byte(`{"lockOKMQSet":7}`)); !errors.Is(err, ErrBadLockBody) {
		t.Fatalf("bad result: %v", err)
	}
}

// FuzzParseLockBatchBody: no input panics; errors wrap ErrBadLockBody; what parses
// survives a round trip.
func FuzzParseLockBatchBody(f *testing.F) {
	f.Add([]byte(`{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"T","brokerName":"b","queueId":3}]}`))
	f.Add([]byte(`{"consumerGroup":"g","clientId":"c","mqSet":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := ParseLockBatchBody(body)
		if err != nil {
			if !errors.Is(err, ErrBadLockBody) {
				t.Fatalf("error %v does not wrap ErrBadLockBody", err)
			}
			return
		}
		out, _ := json.Marshal(b)
		again, err := ParseLockBatchBody(out)
		if err != nil || !reflect.DeepEqual(b, again) {
			t.Fatalf("round trip %s: %+v %+v %v", out, b, again, err)
		}
	})
}
