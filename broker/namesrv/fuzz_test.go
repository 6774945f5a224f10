package namesrv

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzParseTopicRouteData: any input either parses or returns ErrBadRouteData (never
// panics), and whatever parses survives a round trip through the strict encoding.
func FuzzParseTopicRouteData(f *testing.F) {
	f.Add([]byte(`{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"C"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}`))
	f.Add([]byte(`{"orderTopicConf":"a:1","queueDatas":[],"brokerDatas":[{"brokerAddrs":{"0":"x:1"}}]}`))
	f.Add([]byte(`{"a":"\"{0:1}\\"}`))
	f.Add([]byte(`[[[{-1:2}]]]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseTopicRouteData(body)
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
		r2, err := ParseTopicRouteData(b)
		if err != nil {
			t.Fatalf("re-parse %s: %v", b, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed the route:\n%+v\n%+v", r, r2)
		}
	})
}

func TestQuoteNumericKeys(t *testing.T) {
	for in, want := range map[string]string{
		`{0:"a",12:"b"}`:               `{"0":"a","12":"b"}`,
		`{ -3 : "x" }`:                 `{ "-3" : "x" }`,
		`{"k":[1,2,{5:6}],"s":"{0:1"}`: `{"k":[1,2,{"5":6}],"s":"{0:1"}`,
		`{"e":"\"",7:8}`:               `{"e":"\"","7":8}`,
	} {
		got, err := quoteNumericKeys([]byte(in))
		if err != nil || string(got) != want {
			t.Errorf("quoteNumericKeys(%s) = %s %v, want %s", in, got, err, want)
		}
	}
}
