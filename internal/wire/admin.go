// Sluice-specific request codes and admin bodies that Sluice's broker, admin client and
// consumer share beyond plain RocketMQ 4.x: the codes 7001 and 7002, the ResetOffsetBody
// of RESET_CONSUMER_CLIENT_OFFSET (RocketMQ request code 220) and
// INVOKE_BROKER_TO_RESET_OFFSET (222), and the subscription-consistency comparison of a
// consumer group.
//
// Sluice-specific codes are chosen far from the codes Apache RocketMQ 4.x and 5.x use
// (4.x stops below 400; 5.x uses 1001-1013 for the controller, 2001-2004 and 3001-3012);
// a RocketMQ broker answers them REQUEST_CODE_NOT_SUPPORTED (3), which callers treat as
// "feature not available".

package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Sluice-specific request codes.
const (
	// ReadQueue (7001) reads stored messages of any queue for an admin tool, without the
	// permission, subscription and consumer-group checks of PULL_MESSAGE: it is how
	// dead letters (%DLQ%<group>, a write-only topic that normal pulls are refused) are
	// listed and re-driven. Request ext: topic, queueId, offset (queue offset),
	// maxMsgNums (1..32). Response: the PULL_MESSAGE codes and ext fields
	// (0 SUCCESS with the raw records as body, 19 PULL_NOT_FOUND, 20
	// PULL_RETRY_IMMEDIATELY, 21 PULL_OFFSET_MOVED; ext nextBeginOffset, minOffset,
	// maxOffset). It never moves any consumer offset.
	ReadQueue remoting.RequestCode = 7001
	// GroupSubscriptions (7002) returns, for ext consumerGroup, the subscriptions each
	// live client of the group sent in its last HEART_BEAT: body
	// [GroupSubscriptionsBody] as JSON. An unknown group or a group without clients
	// gives an empty client list (code 0).
	GroupSubscriptions remoting.RequestCode = 7002
	// GroupOffsets (7003) returns every queue offset the broker holds for ext
	// consumerGroup, with each queue's min and max offsets: body [GroupOffsetsBody] as
	// JSON, one round trip per broker for a group's lag on all its topics. An unknown group
	// gives an empty list (code 0).
	GroupOffsets remoting.RequestCode = 7003
	// GroupSummaries (7004) returns every consumer group the broker knows — with a
	// subscription group config, committed offsets or clients online — with its lag per
	// topic and its clients: body [GroupSummariesBody] as JSON, one round trip per broker
	// for a console's or CLI's group list.
	GroupSummaries remoting.RequestCode = 7004
)

// GroupSummariesBody is the JSON body of a GroupSummaries (7004) answer.
type GroupSummariesBody struct {
	Groups []GroupSummary `json:"groups"` // sorted by group
}

// GroupSummary is one consumer group on one broker.
type GroupSummary struct {
	Group string `json:"group"`
	// Configured: the broker holds a subscription group config for it (else the group
	// only committed offsets or has clients online).
	Configured bool `json:"configured"`
	// RetryMaxTimes is the config's retry budget (used when a client does not send its
	// own); 0 without config.
	RetryMaxTimes int `json:"retryMaxTimes"`
	// ClientMaxReconsumeTimes is the maxReconsumeTimes the group's clients last sent with
	// CONSUMER_SEND_MSG_BACK (what actually decides when a message goes to the DLQ); -1
	// when none was sent since the broker started.
	ClientMaxReconsumeTimes int32 `json:"clientMaxReconsumeTimes"`
	// Clients is how many client ids of the group are online; MessageModel, ConsumeType
	// and ConsumeFromWhere come from their last heartbeat ("" with none online).
	Clients          int    `json:"clients"`
	MessageModel     string `json:"messageModel,omitempty"`
	ConsumeType      string `json:"consumeType,omitempty"`
	ConsumeFromWhere string `json:"consumeFromWhere,omitempty"`
	LastHeartbeat    int64  `json:"lastHeartbeat,omitempty"` // unix ms, newest client
	// Protocols are the protocols of the clients online ("grpc", "remoting"), sorted;
	// empty with none online.
	Protocols []string `json:"protocols,omitempty"`
	// Topics are the topics the group committed offsets on, %RETRY%/%DLQ% included.
	Topics []GroupTopicLag `json:"topics"`
}

// GroupTopicLag is a consumer group's lag on one topic of one broker.
type GroupTopicLag struct {
	Topic  string `json:"topic"`
	Queues int    `json:"queues"` // queues with a committed offset
	Lag    int64  `json:"lag"`    // messages not consumed: sum of max - committed
	// OldestUnconsumed is the store time (unix ms) of the oldest message not consumed yet
	// over the queues; 0 when nothing lags. now - OldestUnconsumed is the lag in time.
	OldestUnconsumed int64 `json:"oldestUnconsumed,omitempty"`
}

// GroupOffsetsBody is the JSON body of a GroupOffsets (7003) answer.
type GroupOffsetsBody struct {
	Group  string             `json:"group"`
	Queues []GroupQueueOffset `json:"queues"` // sorted by topic, then queue id
}

// GroupQueueOffset is a group's committed offset on one queue of one broker, with the
// queue's first available offset (Min) and next offset to be written (Max).
type GroupQueueOffset struct {
	Topic     string `json:"topic"`
	QueueID   int32  `json:"queueId"`
	Committed int64  `json:"committed"`
	Min       int64  `json:"min"`
	Max       int64  `json:"max"`
}

// ---------------------------------------------------------------------------------
// ResetOffsetBody

// EncodeResetOffsetBody encodes table as the ResetOffsetBody of
// RESET_CONSUMER_CLIENT_OFFSET (220) in the gson layout that valid-JSON parsers and the
// official Go client's hand-written parser both read (docs/protocol.md §3.13):
// {"offsetTable":[[{"topic":"T","brokerName":"b","queueId":0},123],...]}, no spaces,
// queues sorted by (topic, broker name, queue id).
func EncodeResetOffsetBody(table map[message.MessageQueue]int64) []byte {
	mqs := make([]message.MessageQueue, 0, len(table))
	for mq := range table {
		mqs = append(mqs, mq)
	}
	sort.Slice(mqs, func(i, j int) bool { return mqs[i].Less(mqs[j]) })
	var b bytes.Buffer
	b.WriteString(`{"offsetTable":[`)
	for i, mq := range mqs {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(mq) // {"topic":..,"brokerName":..,"queueId":n}; cannot fail
		b.WriteByte('[')
		b.Write(k)
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(table[mq], 10))
		b.WriteByte(']')
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// ErrBadResetOffsetBody is wrapped by DecodeResetOffsetBody for a body it cannot read.
var ErrBadResetOffsetBody = errors.New("wire: bad ResetOffsetBody")

// DecodeResetOffsetBody reads a ResetOffsetBody in either layout a broker sends
// (docs/protocol.md §3.13): the gson form {"offsetTable":[[{mq},123],...]} (valid JSON; what
// Sluice sends) or Java fastjson's object-keyed form {"offsetTable":{{mq}:123,...}}
// (not valid JSON). An empty body or table gives an empty map. Errors wrap
// ErrBadResetOffsetBody.
func DecodeResetOffsetBody(b []byte) (map[message.MessageQueue]int64, error) {
	out := map[message.MessageQueue]int64{}
	if len(bytes.TrimSpace(b)) == 0 {
		return out, nil
	}
	if json.Valid(b) {
		var body struct {
			OffsetTable json.RawMessage `json:"offsetTable"`
		}
		if err := json.Unmarshal(b, &body); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadResetOffsetBody, err)
		}
		if len(body.OffsetTable) == 0 || string(body.OffsetTable) == "null" {
			return out, nil
		}
		var pairs [][2]json.RawMessage
		if err := json.Unmarshal(body.OffsetTable, &pairs); err != nil {
			return nil, fmt.Errorf("%w: offsetTable is not [[queue,offset],...]: %v", ErrBadResetOffsetBody, err)
		}
		for _, p := range pairs {
			var mq message.MessageQueue
			var off int64
			if err := json.Unmarshal(p[0], &mq); err != nil {
				return nil, fmt.Errorf("%w: queue %s: %v", ErrBadResetOffsetBody, p[0], err)
			}
			if err := json.Unmarshal(p[1], &off); err != nil {
				return nil, fmt.Errorf("%w: offset %s: %v", ErrBadResetOffsetBody, p[1], err)
			}
			out[mq] = off
		}
		return out, nil
	}
	// fastjson: {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:123,...}}
	s := string(b)
	i := strings.Index(s, `"offsetTable"`)
	if i < 0 {
		return nil, fmt.Errorf("%w: no offsetTable", ErrBadResetOffsetBody)
	}
	s = s[i+len(`"offsetTable"`):]
	s = strings.TrimLeft(s, " \t\r\n:")
	if !strings.HasPrefix(s, "{") {
		return nil, fmt.Errorf("%w: offsetTable is not an object", ErrBadResetOffsetBody)
	}
	s = s[1:]
	for n := 0; ; n++ {
		if n > 1<<20 {
			return nil, fmt.Errorf("%w: too many entries", ErrBadResetOffsetBody)
		}
		s = strings.TrimLeft(s, " \t\r\n,")
		if s == "" || s[0] == '}' {
			return out, nil
		}
		if s[0] != '{' {
			return nil, fmt.Errorf("%w: expected a queue object at %.20q", ErrBadResetOffsetBody, s)
		}
		end := strings.IndexByte(s, '}') // queue objects hold no nested objects
		if end < 0 {
			return nil, fmt.Errorf("%w: unterminated queue object", ErrBadResetOffsetBody)
		}
		var mq message.MessageQueue
		if err := json.Unmarshal([]byte(s[:end+1]), &mq); err != nil {
			return nil, fmt.Errorf("%w: queue %.60q: %v", ErrBadResetOffsetBody, s[:end+1], err)
		}
		s = strings.TrimLeft(s[end+1:], " \t\r\n")
		if !strings.HasPrefix(s, ":") {
			return nil, fmt.Errorf("%w: expected ':' after queue %s", ErrBadResetOffsetBody, mq)
		}
		s = strings.TrimLeft(s[1:], " \t\r\n")
		j := 0
		for j < len(s) && (s[j] == '-' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		off, err := strconv.ParseInt(s[:j], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: offset of %s: %v", ErrBadResetOffsetBody, mq, err)
		}
		out[mq] = off
		s = s[j:]
	}
}

// ---------------------------------------------------------------------------------
// Subscription consistency

// Subscription is one topic subscription of a client as its heartbeat stated it.
type Subscription struct {
	Topic          string   `json:"topic"`
	SubString      string   `json:"subString"`      // "*", "a || b", or an SQL92 expression
	ExpressionType string   `json:"expressionType"` // "TAG" or "SQL92" ("" is read as TAG)
	Tags           []string `json:"tags,omitempty"` // the expression's tags, sorted; empty for "*"
}

// ClientSubscriptions is what one client of a group subscribes to, and who the client
// is.
type ClientSubscriptions struct {
	ClientID      string         `json:"clientId"`
	MessageModel  string         `json:"messageModel,omitempty"` // CLUSTERING or BROADCASTING as the group last stated it
	LastHeartbeat int64          `json:"lastHeartbeat"`          // unix ms of the client's last heartbeat
	Subscriptions []Subscription `json:"subscriptions"`          // sorted by topic
	// Protocol is how the client speaks to the broker: "remoting" (RocketMQ 4.x
	// HEART_BEAT) or "grpc" (a RocketMQ 5 client on the gRPC port); "" from a broker
	// that does not say (before the field existed).
	Protocol string `json:"protocol,omitempty"`
	// Language is the client's language: the remoting header's LanguageCode name ("GO",
	// "JAVA"), or a v5 client's x-mq-language ("GO", "JAVA").
	Language string `json:"language,omitempty"`
	// Version is the client's version: for remoting the MQVersion name of the header's
	// ordinal ("V4_9_7"; "V4_5_2" from the official Go client 4.x), for a v5 client its
	// x-mq-client-version ("5.1.4").
	Version string `json:"version,omitempty"`
	Addr    string `json:"addr,omitempty"` // the client's ip:port as the broker sees it
	// ConsumeType is CONSUME_PASSIVELY (push; a v5 PushConsumer) or CONSUME_ACTIVELY
	// (pull; a v5 SimpleConsumer).
	ConsumeType string `json:"consumeType,omitempty"`
}

// GroupSubscriptionsBody is the response body of [GroupSubscriptions] (7002).
type GroupSubscriptionsBody struct {
	Group   string                `json:"group"`
	Clients []ClientSubscriptions `json:"clients"` // sorted by client id
}

// normalize returns the comparable form of a subscription expression: "*" for all
// tags, the sorted distinct tags joined by " || " for a tag expression, or
// "SQL92:<trimmed expression>".
func normalize(s Subscription) string {
	switch strings.ToUpper(s.ExpressionType) {
	case "", "TAG":
		tags := message.ParseTagExpression(s.SubString)
		if tags == nil {
			return "*"
		}
		set := map[string]bool{}
		var uniq []string
		for _, t := range tags {
			if !set[t] {
				set[t] = true
				uniq = append(uniq, t)
			}
		}
		sort.Strings(uniq)
		return strings.Join(uniq, " || ")
	default:
		return strings.ToUpper(s.ExpressionType) + ":" + strings.TrimSpace(s.SubString)
	}
}

// Compared returns a client's subscriptions as topic → normalized expression, leaving
// out %RETRY% topics (added automatically for clustering consumers).
func Compared(c ClientSubscriptions) map[string]string {
	out := make(map[string]string, len(c.Subscriptions))
	for _, s := range c.Subscriptions {
		if message.IsRetryTopic(s.Topic) {
			continue
		}
		out[s.Topic] = normalize(s)
	}
	return out
}

// Difference is one way two clients of a group subscribe differently.
type Difference struct {
	ClientID string `json:"clientId"` // the client being compared
	Other    string `json:"other"`    // the client it is compared with
	Topic    string `json:"topic"`
	Mine     string `json:"mine"`   // ClientID's expression; "" = not subscribed
	Theirs   string `json:"theirs"` // Other's expression; "" = not subscribed
}

// String describes the difference in one line.
func (d Difference) String() string {
	show := func(s string) string {
		if s == "" {
			return "not subscribed"
		}
		return strconv.Quote(s)
	}
	return fmt.Sprintf("topic %s: %s has %s, %s has %s", d.Topic, d.ClientID, show(d.Mine), d.Other, show(d.Theirs))
}

// Diff lists how other's subscriptions differ from mine, topic by topic, sorted by
// topic; nil when they are the same. %RETRY% topics are ignored.
func Diff(mine, other ClientSubscriptions) []Difference {
	a, b := Compared(mine), Compared(other)
	topics := map[string]bool{}
	for t := range a {
		topics[t] = true
	}
	for t := range b {
		topics[t] = true
	}
	var out []Difference
	for t := range topics {
		if a[t] != b[t] {
			out = append(out, Difference{ClientID: mine.ClientID, Other: other.ClientID, Topic: t, Mine: a[t], Theirs: b[t]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

// SubscriptionSet is a set of clients of a group that subscribe identically.
type SubscriptionSet struct {
	Clients       []string          `json:"clients"`       // sorted
	Subscriptions map[string]string `json:"subscriptions"` // topic → normalized expression (%RETRY% left out)
}

// Report is the subscription-consistency verdict for a group.
type Report struct {
	Group      string `json:"group"`
	Consistent bool   `json:"consistent"` // every client subscribes to the same topics with the same expressions
	// Sets partitions the clients by identical subscriptions, largest first (ties: by
	// first client id). More than one set means the group is inconsistent.
	Sets []SubscriptionSet `json:"sets"`
	// Differences compares the first client of every other set with the first client
	// of Sets[0], topic by topic.
	Differences []Difference          `json:"differences,omitempty"`
	Clients     []ClientSubscriptions `json:"clients"` // as reported, sorted by client id
}

func signature(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return b.String()
}

// Analyze builds the Report of a group from its clients' subscriptions.
func Analyze(group string, clients []ClientSubscriptions) Report {
	cs := append([]ClientSubscriptions(nil), clients...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].ClientID < cs[j].ClientID })
	bySig := map[string]*SubscriptionSet{}
	first := map[string]ClientSubscriptions{}
	var order []string
	for _, c := range cs {
		m := Compared(c)
		sig := signature(m)
		s := bySig[sig]
		if s == nil {
			s = &SubscriptionSet{Subscriptions: m}
			bySig[sig] = s
			first[sig] = c
			order = append(order, sig)
		}
		s.Clients = append(s.Clients, c.ClientID)
	}
	sort.SliceStable(order, func(i, j int) bool { return len(bySig[order[i]].Clients) > len(bySig[order[j]].Clients) })
	r := Report{Group: group, Consistent: len(order) <= 1, Clients: cs, Sets: []SubscriptionSet{}}
	for _, sig := range order {
		r.Sets = append(r.Sets, *bySig[sig])
	}
	for _, sig := range order[min(1, len(order)):] {
		r.Differences = append(r.Differences, Diff(first[sig], first[order[0]])...)
	}
	return r
}
