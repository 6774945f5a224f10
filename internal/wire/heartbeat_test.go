package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

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

func TestParseHeartbeatJavaAndGo(t *testing.T) {
	// A Java client (fastjson) writes codeSet as numbers; the official Go client as
	// strings (docs/protocol.md §3.6). Both parse to the same decimal strings.
	java := `{"clientID":"10.0.0.6@4242","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[{"groupName":"cg",` +
		`"consumeType":"CONSUME_ACTIVELY","messageModel":"BROADCASTING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","unitMode":false,` +
		`"subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"TagA || TagB","tagsSet":["TagA","TagB"],` +
		`"codeSet":[2598919, 2598920],"subVersion":1700000000123,"expressionType":"TAG"}]}]}`
	hb, err := ParseHeartbeat([]byte(java))
	if err != nil {
		t.Fatal(err)
	}
	sd := hb.ConsumerDataSet[0].SubscriptionDataSet[0]
	if hb.ClientID != "10.0.0.6@4242" || hb.ProducerDataSet[0].GroupName != "pg" || hb.ConsumerDataSet[0].MessageModel != MessageModelBroadcasting ||
		!reflect.DeepEqual(sd.CodeSet, CodeSet{"2598919", "2598920"}) || sd.SubVersion != 1700000000123 {
		t.Fatalf("java heartbeat = %+v", hb)
	}
	goBody, _ := json.Marshal(HeartbeatData{ClientID: "x@1", ConsumerDataSet: []ConsumerData{{GroupName: "cg",
		SubscriptionDataSet: []SubscriptionData{NewTagSubscription("T", "TagB || TagA", 1)}}}})
	hb2, err := ParseHeartbeat(goBody)
	if err != nil || !reflect.DeepEqual(hb2.ConsumerDataSet[0].SubscriptionDataSet[0].CodeSet, sd.CodeSet) {
		t.Fatalf("go heartbeat = %+v %v", hb2, err)
	}
	// A missing or null codeSet (SQL92 subscriptions of some clients) is fine.
	if hb, err := ParseHeartbeat([]byte(`{"clientID":"c","consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"T","codeSet":null}]}]}`)); err != nil ||
		hb.ConsumerDataSet[0].SubscriptionDataSet[0].CodeSet != nil {
		t.Fatalf("null codeSet: %+v %v", hb, err)
	}
	for name, bad := range map[string]string{
		"not json":    `{"clientID":`,
		"no clientID": `{"producerDataSet":[]}`,
		"bad codeSet": `{"clientID":"c","consumerDataSet":[{"subscriptionDataSet":[{"codeSet":[true]}]}]}`,
		"codeSet obj": `{"clientID":"c","consumerDataSet":[{"subscriptionDataSet":[{"codeSet":{"a":1}}]}]}`,
	} {
		if _, err := ParseHeartbeat([]byte(bad)); !errors.Is(err, ErrBadHeartbeat) {
			t.Errorf("%s: %v, want ErrBadHeartbeat", name, err)
		}
	}
}

// FuzzParseHeartbeat: no input panics, and whatever parses survives a round trip
// through the encoding (codeSet as strings) unchanged.
func FuzzParseHeartbeat(f *testing.F) {
	f.Add([]byte(`{"clientID":"c@1","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[{"groupName":"cg","subscriptionDataSet":[{"topic":"T","subString":"a","tagsSet":["a"],"codeSet":[97],"subVersion":1}]}]}`))
	f.Add([]byte(`{"clientID":"c","consumerDataSet":[{"subscriptionDataSet":[{"codeSet":["1",-2,3.5e1]}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		hb, err := ParseHeartbeat(body)
		if err != nil {
			if !errors.Is(err, ErrBadHeartbeat) {
				t.Fatalf("error %v does not wrap ErrBadHeartbeat", err)
			}
			return
		}
		b, err := json.Marshal(hb)
		if err != nil {
			t.Fatalf("marshal parsed heartbeat: %v", err)
		}
		again, err := ParseHeartbeat(b)
		if err != nil || !reflect.DeepEqual(hb, again) {
			t.Fatalf("round trip %s:\n%+v\n%+v %v", b, hb, again, err)
		}
	})
}
