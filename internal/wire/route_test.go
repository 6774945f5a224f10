package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/message"
)

// fastjsonRoute is what a Java name server answers a version-317 client: unquoted
// numeric map keys and the 4.5.x field spelling topicSynFlag.
const fastjsonRoute = `{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-b","cluster":"DefaultCluster"},` +
	`{"brokerAddrs":{0:"10.0.0.3:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"},` +
	`{"brokerAddrs":{1:"10.0.0.9:10911"},"brokerName":"broker-c","cluster":"DefaultCluster"}],` +
	`"filterServerTable":{},` +
	`"queueDatas":[{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSynFlag":3,"writeQueueNums":3},` +
	`{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSynFlag":0,"writeQueueNums":2},` +
	`{"brokerName":"broker-c","perm":6,"readQueueNums":1,"topicSynFlag":0,"writeQueueNums":1}]}`

func TestParseTopicRouteDataFastjson(t *testing.T) {
	rd, err := ParseTopicRouteData("T", []byte(fastjsonRoute))
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.BrokerDatas) != 3 || len(rd.QueueDatas) != 3 {
		t.Fatalf("parsed %+v", rd)
	}
	b, _ := rd.Broker("broker-b")
	if b.BrokerAddrs[0] != "10.0.0.1:10911" || b.BrokerAddrs[1] != "10.0.0.2:10911" {
		t.Fatalf("broker-b addrs %v", b.BrokerAddrs)
	}
	if rd.QueueDatas[0].TopicSysFlag != 3 {
		t.Fatalf("topicSynFlag not read: %+v", rd.QueueDatas[0])
	}
	if rd.BrokerDatas[2].MasterAddr() != "" {
		t.Fatal("broker-c has no master (id 0) but MasterAddr said yes")
	}
}

func TestParseTopicRouteDataStrict(t *testing.T) {
	body := `{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"b","cluster":"C"}],` +
		`"orderTopicConf":"","queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"topicSysFlag":1,"writeQueueNums":4}]}`
	rd, err := ParseTopicRouteData("T", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if a := rd.BrokerDatas[0].MasterAddr(); a != "127.0.0.1:10911" {
		t.Fatalf("master %q", a)
	}
	if rd.QueueDatas[0].TopicSysFlag != 1 {
		t.Fatalf("topicSysFlag %+v", rd.QueueDatas[0])
	}
}

func TestParseTopicRouteDataErrors(t *testing.T) {
	for name, body := range map[string]string{
		"empty":         "",
		"not json":      "{brokerDatas:",
		"no queueDatas": `{"brokerDatas":[]}`,
		"null queues":   `{"queueDatas":null}`,
		"wrong type":    `{"queueDatas":[{"brokerName":"b","perm":"six"}]}`,
		"huge queues":   `{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":1,"writeQueueNums":2000000000}]}`,
		"negative":      `{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":-1,"writeQueueNums":1}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseTopicRouteData("T", []byte(body))
			var re *RouteError
			if !errors.As(err, &re) || re.Topic != "T" {
				t.Fatalf("want *RouteError for topic T, got %v", err)
			}
		})
	}
}

func TestQuoteNumericKeys(t *testing.T) {
	cases := map[string]string{
		`{0:"a",1:"b"}`:                `{"0":"a","1":"b"}`,
		`{ 0 : "a", -1:"b"}`:           `{ "0" : "a", "-1":"b"}`,
		`{"k":[1,2,{3:4}]}`:            `{"k":[1,2,{"3":4}]}`,
		`{"s":"{0:\"x\",1:y}","n":5}`:  `{"s":"{0:\"x\",1:y}","n":5}`, // inside strings: untouched
		`{"0":"a"}`:                    `{"0":"a"}`,
		`[1, 2, 3]`:                    `[1, 2, 3]`,
		`{0:"a",12:"b"}`:               `{"0":"a","12":"b"}`,
		`{ -3 : "x" }`:                 `{ "-3" : "x" }`,
		`{"k":[1,2,{5:6}],"s":"{0:1"}`: `{"k":[1,2,{"5":6}],"s":"{0:1"}`,
		`{"e":"\"",7:8}`:               `{"e":"\"","7":8}`,
	}
	for in, want := range cases {
		if got := string(QuoteNumericKeys([]byte(in))); got != want {
			t.Errorf("QuoteNumericKeys(%s) = %s, want %s", in, got, want)
		}
	}
}

func mq(topic, broker string, id int) message.MessageQueue {
	return message.MessageQueue{Topic: topic, BrokerName: broker, QueueID: id}
}

func TestPublishAndSubscribeQueues(t *testing.T) {
	rd, err := ParseTopicRouteData("T", []byte(fastjsonRoute))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := PublishQueues("T", rd)
	if err != nil {
		t.Fatal(err)
	}
	// Sorted by broker name, write queue nums, broker-c skipped (no master).
	want := []message.MessageQueue{mq("T", "broker-a", 0), mq("T", "broker-a", 1), mq("T", "broker-b", 0), mq("T", "broker-b", 1), mq("T", "broker-b", 2)}
	if !reflect.DeepEqual(pub, want) {
		t.Fatalf("publish queues %v, want %v", pub, want)
	}
	// Read queue nums; broker-c has no master but is readable (slave reads).
	sub := SubscribeQueues("T", rd)
	wantSub := []message.MessageQueue{mq("T", "broker-a", 0), mq("T", "broker-a", 1), mq("T", "broker-b", 0), mq("T", "broker-b", 1), mq("T", "broker-c", 0)}
	if !reflect.DeepEqual(sub, wantSub) {
		t.Fatalf("subscribe queues %v, want %v", sub, wantSub)
	}

	// Permissions: write-only and read-only brokers.
	rd.QueueDatas[0].Perm = PermRead    // broker-b: not writable
	rd.QueueDatas[1].Perm = PermWrite   // broker-a: not readable
	rd.QueueDatas[2].Perm = PermInherit // broker-c: neither
	pub, _ = PublishQueues("T", rd)
	if !reflect.DeepEqual(pub, []message.MessageQueue{mq("T", "broker-a", 0), mq("T", "broker-a", 1)}) {
		t.Fatalf("perm-filtered publish queues %v", pub)
	}
	sub = SubscribeQueues("T", rd)
	if !reflect.DeepEqual(sub, []message.MessageQueue{mq("T", "broker-b", 0), mq("T", "broker-b", 1)}) {
		t.Fatalf("perm-filtered subscribe queues %v", sub)
	}

	// orderTopicConf overrides the queue datas, in listed order.
	rd.OrderTopicConf = "broker-b:2;broker-a:1"
	pub, err = PublishQueues("T", rd)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pub, []message.MessageQueue{mq("T", "broker-b", 0), mq("T", "broker-b", 1), mq("T", "broker-a", 0)}) {
		t.Fatalf("ordered publish queues %v", pub)
	}
	rd.OrderTopicConf = "broker-b"
	if _, err := PublishQueues("T", rd); !errors.Is(err, ErrBadOrderTopicConf) {
		t.Fatalf("bad orderTopicConf: %v", err)
	}
}

func TestCapQueueNums(t *testing.T) {
	rd := &TopicRouteData{
		QueueDatas:  []QueueData{{BrokerName: "b", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 7}, {BrokerName: "c", ReadQueueNums: 2, WriteQueueNums: 3, Perm: 6}},
		BrokerDatas: []BrokerData{{BrokerName: "b", BrokerAddrs: map[int64]string{0: "x:1"}}},
	}
	c := rd.CapQueueNums(4)
	if c.QueueDatas[0].ReadQueueNums != 4 || c.QueueDatas[0].WriteQueueNums != 4 || c.QueueDatas[1].WriteQueueNums != 3 || c.QueueDatas[1].ReadQueueNums != 2 {
		t.Fatalf("capped %+v", c.QueueDatas)
	}
	if rd.QueueDatas[0].WriteQueueNums != 8 {
		t.Fatal("CapQueueNums modified its receiver")
	}
	c.BrokerDatas[0].BrokerAddrs[0] = "changed"
	if rd.BrokerDatas[0].BrokerAddrs[0] != "x:1" {
		t.Fatal("Clone shares broker address maps")
	}
}

func TestParseTopicRouteData(t *testing.T) {
	// fastjson dialect of a Java name server answering an old client (docs/protocol.md §3.1).
	fast := `{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"},` +
		`{"brokerAddrs":{ 0 : "10.0.0.3:10911" },"brokerName":"b,1:x","cluster":"C"}],"filterServerTable":{},` +
		`"orderTopicConf":"broker-a:4;broker-b:4",` +
		`"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSynFlag":1,"writeQueueNums":4}]}`
	r, err := ParseTopicRouteData("T", []byte(fast))
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int64]string{0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}; !reflect.DeepEqual(r.BrokerDatas[0].BrokerAddrs, want) {
		t.Errorf("brokerAddrs = %v", r.BrokerDatas[0].BrokerAddrs)
	}
	if r.BrokerDatas[1].BrokerName != "b,1:x" || r.BrokerDatas[1].MasterAddr() != "10.0.0.3:10911" {
		t.Errorf("second broker = %+v", r.BrokerDatas[1])
	}
	if q := r.QueueDatas[0]; q.TopicSysFlag != 1 || q.WriteQueueNums != 4 || q.Perm != 6 {
		t.Errorf("queue data = %+v (topicSynFlag must be read)", q)
	}
	if r.OrderTopicConf != "broker-a:4;broker-b:4" {
		t.Errorf("orderTopicConf = %q", r.OrderTopicConf)
	}
	// Round trip through our strict encoding.
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}`) {
		t.Errorf("strict encoding = %s", b)
	}
	r2, err := ParseTopicRouteData("T", b)
	if err != nil || !reflect.DeepEqual(r, r2) {
		t.Errorf("round trip = %+v %v", r2, err)
	}
	// Missing brokerDatas and filterServerTable become empty; a missing queueDatas and
	// broken input are typed errors.
	r3, err := ParseTopicRouteData("T", []byte(`{"queueDatas":[]}`))
	if err != nil || r3.QueueDatas == nil || r3.BrokerDatas == nil || r3.FilterServerTable == nil {
		t.Errorf("empty route: %+v %v", r3, err)
	}
	for _, bad := range []string{``, `  `, `{`, `{}`, `{"queueDatas":[}`, `{"brokerDatas":[{"brokerAddrs":{x:"a"}}]}`, `{"queueDatas":[null]}`, `{"a":"unterminated}`} {
		if _, err := ParseTopicRouteData("T", []byte(bad)); !errors.Is(err, ErrBadRouteData) {
			t.Errorf("ParseTopicRouteData(%q) err = %v, want ErrBadRouteData", bad, err)
		}
	}
}

func TestOrderTopicConfFormat(t *testing.T) {
	e, err := ParseOrderTopicConf("broker-a:4;broker-b:2")
	if err != nil || len(e) != 2 || e[1] != (OrderTopicEntry{BrokerName: "broker-b", QueueNums: 2}) {
		t.Fatalf("parse = %+v %v", e, err)
	}
	if s := FormatOrderTopicConf(e); s != "broker-a:4;broker-b:2" {
		t.Errorf("format = %q", s)
	}
	for _, bad := range []string{"a", "a:", ":3", "a:x", "a:-1", "a:65537", "a:1;b"} {
		if _, err := ParseOrderTopicConf(bad); !errors.Is(err, ErrBadOrderTopicConf) {
			t.Errorf("ParseOrderTopicConf(%q) = %v, want ErrBadOrderTopicConf", bad, err)
		}
	}
	// Read as the Java client reads it: a trailing ";" and a count of 0 are fine (the
	// name server refuses to store them, see namesrv's validOrderTopicConf).
	if e, err := ParseOrderTopicConf("a:1;b:0;"); err != nil || len(e) != 2 || e[1].QueueNums != 0 {
		t.Errorf("lenient parse = %+v %v", e, err)
	}
}
