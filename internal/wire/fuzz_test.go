package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzParseTopicRouteData: no input panics; QuoteNumericKeys leaves valid JSON
// unchanged; every error wraps ErrBadRouteData; whatever parses survives a round trip
// through the strict encoding, and the queue lists derived from it can be built.
func FuzzParseTopicRouteData(f *testing.F) {
	f.Add([]byte(fastjsonRoute))
	f.Add([]byte(`{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"b","cluster":"C"}],"queueDatas":[]}`))
	f.Add([]byte(`{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"C"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}`))
	f.Add([]byte(`{"orderTopicConf":"a:1","queueDatas":[],"brokerDatas":[{"brokerAddrs":{"0":"x:1"}}]}`))
	f.Add([]byte(`{0:{1:[2,{3:"x"}]}}`))
	f.Add([]byte(`{"s":"\"{0:1}"}`))
	f.Add([]byte(`{"a":"\"{0:1}\\"}`))
	f.Add([]byte(`[[[{-1:2}]]]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if q := QuoteNumericKeys(body); json.Valid(body) && !bytes.Equal(q, body) {
			t.Fatalf("valid JSON rewritten: %q -> %q", body, q)
		}
		r, err := ParseTopicRouteData("T", body)
		if err != nil {
			if !errors.Is(err, ErrBadRouteData) {
				t.Fatalf("error %v does not wrap ErrBadRouteData", err)
			}
			return
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("marshal parsed route: %v", err)
		}
		r2, err := ParseTopicRouteData("T", b)
		if err != nil {
			t.Fatalf("re-parse %s: %v", b, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed the route:\n%+v\n%+v", r, r2)
		}
		_, _ = PublishQueues("T", r)
		_ = SubscribeQueues("T", r)
		_ = r.CapQueueNums(4)
	})
}
