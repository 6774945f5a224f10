package wire

import (
	"encoding/json"
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
