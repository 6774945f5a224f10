package client

import (
	"encoding/json"
	"errors"
	"reflect"
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
	if _, ok := rd.BrokerDatas[2].MasterAddr(); ok {
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
	if a, ok := rd.BrokerDatas[0].MasterAddr(); !ok || a != "127.0.0.1:10911" {
		t.Fatalf("master %q %v", a, ok)
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
		`{0:"a",1:"b"}`:               `{"0":"a","1":"b"}`,
		`{ 0 : "a", -1:"b"}`:          `{ "0" : "a", "-1":"b"}`,
		`{"k":[1,2,{3:4}]}`:           `{"k":[1,2,{"3":4}]}`,
		`{"s":"{0:\"x\",1:y}","n":5}`: `{"s":"{0:\"x\",1:y}","n":5}`, // inside strings: untouched
		`{"0":"a"}`:                   `{"0":"a"}`,
		`[1, 2, 3]`:                   `[1, 2, 3]`,
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

func TestHeartbeatJSONShape(t *testing.T) {
	hb := HeartbeatData{
		ClientID:        "10.0.0.5@12345",
		ProducerDataSet: []ProducerData{},
		ConsumerDataSet: []ConsumerData{{
			GroupName:        "cg",
			ConsumeType:      ConsumeTypePassively,
			MessageModel:     MessageModelClustering,
			ConsumeFromWhere: ConsumeFromLastOffset,
			SubscriptionDataSet: []SubscriptionData{
				NewTagSubscription("T", "TagB || TagA||TagA", 1700000000123456789),
				NewTagSubscription("%RETRY%cg", "*", 1700000000000000000),
			},
		}},
	}
	got, err := json.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	// TagA = 2598919, TagB = 2598920 (Java "TagA".hashCode()).
	want := `{"clientID":"10.0.0.5@12345","producerDataSet":[],"consumerDataSet":[{"groupName":"cg","consumeType":"CONSUME_PASSIVELY",` +
		`"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,"subscriptionDataSet":[` +
		`{"classFilterMode":false,"topic":"T","subString":"TagB || TagA||TagA","tagsSet":["TagA","TagB"],"codeSet":["2598919","2598920"],"subVersion":1700000000123456789,"expressionType":"TAG"},` +
		`{"classFilterMode":false,"topic":"%RETRY%cg","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1700000000000000000,"expressionType":"TAG"}]}]}`
	if string(got) != want {
		t.Fatalf("heartbeat JSON\n got %s\nwant %s", got, want)
	}
	// Empty expression is "*"; negative Java hash codes stay int32.
	sd := NewTagSubscription("T", "", 1)
	if sd.SubString != "*" || len(sd.TagsSet) != 0 {
		t.Fatalf("empty expr: %+v", sd)
	}
	sd = NewTagSubscription("T", "ZZZZZZZZZZ", 1)
	if len(sd.CodeSet) != 1 || sd.CodeSet[0] != "-1095886784" { // Java "ZZZZZZZZZZ".hashCode()
		t.Fatalf("code for long tag %v", sd.CodeSet)
	}
}
