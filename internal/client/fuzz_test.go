package client

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzParseTopicRouteData: no input panics, and QuoteNumericKeys leaves valid JSON
// unchanged and turns fastjson numeric keys into valid JSON.
func FuzzParseTopicRouteData(f *testing.F) {
	f.Add([]byte(fastjsonRoute))
	f.Add([]byte(`{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"b","cluster":"C"}],"queueDatas":[]}`))
	f.Add([]byte(`{0:{1:[2,{3:"x"}]}}`))
	f.Add([]byte(`{"s":"\"{0:1}"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q := QuoteNumericKeys(b)
		if json.Valid(b) && !bytes.Equal(q, b) {
			t.Fatalf("valid JSON rewritten: %q -> %q", b, q)
		}
		rd, err := ParseTopicRouteData("T", b)
		if err == nil {
			_, _ = PublishQueues("T", rd)
			_ = SubscribeQueues("T", rd)
			_ = rd.CapQueueNums(4)
		}
	})
}
