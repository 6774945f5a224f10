package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/sluicemq/sluice/message"
)

// Values of ConsumerData and SubscriptionData fields (Java ConsumeType, MessageModel,
// ConsumeFromWhere and ExpressionType names; docs/protocol.md §3.6).
const (
	ConsumeTypePassively = "CONSUME_PASSIVELY" // push consumer
	ConsumeTypeActively  = "CONSUME_ACTIVELY"  // pull consumer

	MessageModelClustering   = "CLUSTERING"   // each message to one consumer of the group
	MessageModelBroadcasting = "BROADCASTING" // each message to every consumer of the group

	ConsumeFromLastOffset  = "CONSUME_FROM_LAST_OFFSET"  // a new group starts at the queue's end
	ConsumeFromFirstOffset = "CONSUME_FROM_FIRST_OFFSET" // a new group starts at the queue's start
	ConsumeFromTimestamp   = "CONSUME_FROM_TIMESTAMP"    // a new group starts at a time

	ExpressionTypeTag   = "TAG"   // tag expression ("*" or "a || b"); "" means TAG too
	ExpressionTypeSQL92 = "SQL92" // SQL92 property filter (brokers need enablePropertyFilter=true)
)

// HeartbeatData is the JSON body of HEART_BEAT (RocketMQ request code 34; docs/protocol.md §3.6):
// the client id and the producer and consumer groups this client takes part in.
type HeartbeatData struct {
	ClientID        string         `json:"clientID"`        // "<ip>@<instance>"
	ProducerDataSet []ProducerData `json:"producerDataSet"` // producer groups; [] when none
	ConsumerDataSet []ConsumerData `json:"consumerDataSet"` // consumer groups; [] when none
}

// ErrBadHeartbeat is wrapped by every error [ParseHeartbeat] returns.
var ErrBadHeartbeat = errors.New("wire: bad heartbeat body")

// ParseHeartbeat decodes a HEART_BEAT body as the official Go and Java clients and
// Sluice's SDK write it. Errors (wrapping [ErrBadHeartbeat]): a body that is not
// HeartbeatData JSON, or one without clientID.
func ParseHeartbeat(body []byte) (*HeartbeatData, error) {
	hb := new(HeartbeatData)
	if err := json.Unmarshal(body, hb); err != nil {
		return nil, fmt.Errorf("%w: not HeartbeatData JSON: %v", ErrBadHeartbeat, err)
	}
	if hb.ClientID == "" {
		return nil, fmt.Errorf("%w: no clientID", ErrBadHeartbeat)
	}
	return hb, nil
}

// ProducerData names a producer group (Java ProducerData).
type ProducerData struct {
	GroupName string `json:"groupName"` // producer group
}

// ConsumerData describes one consumer group of a client (Java ConsumerData).
type ConsumerData struct {
	GroupName           string             `json:"groupName"`           // consumer group
	ConsumeType         string             `json:"consumeType"`         // ConsumeTypePassively or ConsumeTypeActively
	MessageModel        string             `json:"messageModel"`        // MessageModelClustering or MessageModelBroadcasting
	ConsumeFromWhere    string             `json:"consumeFromWhere"`    // ConsumeFromLastOffset, ...
	UnitMode            bool               `json:"unitMode"`            // always false in Sluice
	SubscriptionDataSet []SubscriptionData `json:"subscriptionDataSet"` // one per topic, %RETRY%<group> included
}

// SubscriptionData is one topic subscription of a consumer group (Java SubscriptionData).
// TagsSet holds the tags of SubString and CodeSet their Java String.hashCode values;
// both are empty for "*". A broker ignores CodeSet and computes the codes from the tags
// itself.
type SubscriptionData struct {
	ClassFilterMode bool     `json:"classFilterMode"` // always false (class filters are not supported)
	Topic           string   `json:"topic"`           // subscribed topic
	SubString       string   `json:"subString"`       // the tag expression ("*" for all) or an SQL92 expression
	TagsSet         []string `json:"tagsSet"`         // the expression's tags, sorted; [] for "*"
	CodeSet         CodeSet  `json:"codeSet"`         // Java hash codes of TagsSet, sorted
	SubVersion      int64    `json:"subVersion"`      // only grows; Java clients send ms, the Go clients unix ns
	ExpressionType  string   `json:"expressionType"`  // ExpressionTypeTag (also ""), or ExpressionTypeSQL92
}

// CodeSet is the codeSet of a SubscriptionData: tag hash codes as decimal strings. It
// is written as JSON strings, the official Go client's form; it reads strings or
// numbers, since Java clients (fastjson, Set<Integer>) send numbers (docs/protocol.md §3.6).
type CodeSet []string

// UnmarshalJSON reads an array of strings or numbers (null gives nil).
func (c *CodeSet) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if raw == nil {
		*c = nil
		return nil
	}
	out := make(CodeSet, 0, len(raw))
	for _, r := range raw {
		r = bytes.TrimSpace(r)
		if len(r) > 0 && r[0] == '"' {
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				return err
			}
			out = append(out, s)
			continue
		}
		var n json.Number
		if err := json.Unmarshal(r, &n); err != nil {
			return fmt.Errorf("codeSet entry %s is neither a string nor a number", r)
		}
		out = append(out, n.String())
	}
	*c = out
	return nil
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
		CodeSet:        CodeSet{},
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
