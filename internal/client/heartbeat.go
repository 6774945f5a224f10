package client

import (
	"sort"
	"strconv"

	"github.com/sluicemq/sluice/message"
)

// Values of ConsumerData fields (Java ConsumeType, MessageModel, ConsumeFromWhere names;
// PROTOCOL §3.6).
const (
	ConsumeTypePassively = "CONSUME_PASSIVELY" // push consumer
	ConsumeTypeActively  = "CONSUME_ACTIVELY"  // pull consumer

	MessageModelClustering   = "CLUSTERING"
	MessageModelBroadcasting = "BROADCASTING"

	ConsumeFromLastOffset  = "CONSUME_FROM_LAST_OFFSET"
	ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET"
	ConsumeFromTimestamp   = "CONSUME_FROM_TIMESTAMP"

	ExpressionTypeTag   = "TAG"   // tag expression ("*" or "a || b")
	ExpressionTypeSQL92 = "SQL92" // SQL92 property filter (brokers need enablePropertyFilter=true)
)

// HeartbeatData is the JSON body of HEART_BEAT (RocketMQ request code 34; PROTOCOL §3.6):
// the client id and the producer and consumer groups this client takes part in.
type HeartbeatData struct {
	ClientID        string         `json:"clientID"`        // "<ip>@<instance>"; filled in by Client
	ProducerDataSet []ProducerData `json:"producerDataSet"` // producer groups; [] when none
	ConsumerDataSet []ConsumerData `json:"consumerDataSet"` // consumer groups; [] when none
}

// ProducerData names a producer group (Java ProducerData).
type ProducerData struct {
	GroupName string `json:"groupName"` // producer group
}

// ConsumerData describes one consumer group of this client (Java ConsumerData).
type ConsumerData struct {
	GroupName           string             `json:"groupName"`           // consumer group
	ConsumeType         string             `json:"consumeType"`         // ConsumeTypePassively or ConsumeTypeActively
	MessageModel        string             `json:"messageModel"`        // MessageModelClustering or MessageModelBroadcasting
	ConsumeFromWhere    string             `json:"consumeFromWhere"`    // ConsumeFromLastOffset, ...
	UnitMode            bool               `json:"unitMode"`            // always false in Sluice
	SubscriptionDataSet []SubscriptionData `json:"subscriptionDataSet"` // one per topic, %RETRY%<group> included
}

// SubscriptionData is one topic subscription of a consumer group (Java SubscriptionData).
// TagsSet holds the tags of SubString and CodeSet their Java String.hashCode values as
// decimal strings (the Go client's form; Java's fastjson accepts strings or numbers);
// both are empty for "*".
type SubscriptionData struct {
	ClassFilterMode bool     `json:"classFilterMode"` // always false (class filters are not supported)
	Topic           string   `json:"topic"`           // subscribed topic
	SubString       string   `json:"subString"`       // the tag expression, "*" for all
	TagsSet         []string `json:"tagsSet"`         // the expression's tags, sorted; [] for "*"
	CodeSet         []string `json:"codeSet"`         // Java hash codes of TagsSet as decimal strings, sorted
	SubVersion      int64    `json:"subVersion"`      // a version that only grows; Sluice uses unix ns like the Go client
	ExpressionType  string   `json:"expressionType"`  // ExpressionTypeTag or ExpressionTypeSQL92
}

// NewTagSubscription builds the SubscriptionData for topic and a tag expression ("*",
// "" or "a || b", parsed with message.ParseTagExpression): SubString is the expression as
// given ("*" when empty), TagsSet the sorted distinct tags, CodeSet their
// message.TagHashCode values as int32 decimal strings, sorted. Empty sets are [] in
// JSON, never null.
func NewTagSubscription(topic, expr string, subVersion int64) SubscriptionData {
	sd := SubscriptionData{
		Topic:          topic,
		SubString:      expr,
		TagsSet:        []string{},
		CodeSet:        []string{},
		SubVersion:     subVersion,
		ExpressionType: ExpressionTypeTag,
	}
	tags := message.ParseTagExpression(expr)
	if tags == nil {
		sd.SubString = message.SubscribeAll
		return sd
	}
	seenTag := map[string]bool{}
	seenCode := map[string]bool{}
	for _, t := range tags {
		if !seenTag[t] {
			seenTag[t] = true
			sd.TagsSet = append(sd.TagsSet, t)
		}
		c := strconv.FormatInt(int64(int32(message.TagHashCode(t))), 10)
		if !seenCode[c] {
			seenCode[c] = true
			sd.CodeSet = append(sd.CodeSet, c)
		}
	}
	sort.Strings(sd.TagsSet)
	sort.Strings(sd.CodeSet)
	return sd
}
