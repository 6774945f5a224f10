package message

import (
	"sort"
	"strconv"
	"strings"
)

// Property names a RocketMQ 4.x broker and client understand (Java MessageConst).
const (
	PropertyKeys                           = "KEYS"                           // user keys, joined by KeySeparator; indexed for message queries
	PropertyTags                           = "TAGS"                           // the tag; its Java hashCode goes into the consume queue
	PropertyWaitStoreMsgOK                 = "WAIT"                           // "true"/"false"; removed by the broker before storing
	PropertyDelayTimeLevel                 = "DELAY"                          // delay level 1..18
	PropertyRetryTopic                     = "RETRY_TOPIC"                    // original topic of a retry message
	PropertyRealTopic                      = "REAL_TOPIC"                     // original topic of a scheduled or half message
	PropertyRealQueueID                    = "REAL_QID"                       // original queue id of a scheduled or half message
	PropertyTransactionPrepared            = "TRAN_MSG"                       // "true" for half messages
	PropertyProducerGroup                  = "PGROUP"                         // producer group of a transactional message
	PropertyMinOffset                      = "MIN_OFFSET"                     // set by the client after a pull
	PropertyMaxOffset                      = "MAX_OFFSET"                     // set by the client after a pull
	PropertyOriginMessageID                = "ORIGIN_MESSAGE_ID"              // first message id of a retried message
	PropertyReconsumeTime                  = "RECONSUME_TIME"                 // reconsume count carried by some clients
	PropertyMsgRegion                      = "MSG_REGION"                     // region id; also a send-response ext field
	PropertyTraceSwitch                    = "TRACE_ON"                       // trace switch; also a send-response ext field
	PropertyUniqClientMessageIDKeyIdx      = "UNIQ_KEY"                       // the client-assigned unique message id
	PropertyMaxReconsumeTimes              = "MAX_RECONSUME_TIMES"            // maximum reconsume count for this message
	PropertyConsumeStartTimestamp          = "CONSUME_START_TIME"             // set by the client before consuming (ms)
	PropertyTransactionPreparedQueueOffset = "TRAN_PREPARED_QUEUE_OFFSET"     // half-queue offset before a check re-put
	PropertyTransactionCheckTimes          = "TRANSACTION_CHECK_TIMES"        // how often the broker checked a half message
	PropertyCheckImmunityTimeInSeconds     = "CHECK_IMMUNITY_TIME_IN_SECONDS" // no check before this many seconds
	PropertyCluster                        = "CLUSTER"                        // cluster name, added by the broker on every send
	PropertyMessageType                    = "MSG_TYPE"                       // "reply" for request/reply
	PropertyShardingKey                    = "SHARDING_KEY"                   // client-side key for hash queue selection (Go client)
	PropertyTransactionID                  = "__transactionId__"              // broker transaction id (Go client)
)

// KeySeparator separates several keys in the KEYS property (Java MessageConst.KEY_SEPARATOR).
const KeySeparator = " "

// Message is what a producer hands to the broker: a topic, a body and properties.
// Tags, keys, delay level and sharding key are properties with typed accessors.
// A Message is not safe for concurrent mutation.
type Message struct {
	// Topic is the destination topic: at most 127 bytes of [%|a-zA-Z0-9_-] (see ValidateTopic).
	Topic string
	// Flag is an opaque user flag stored with the message (RocketMQ FLAG).
	Flag int32
	// Body is the payload. Its size, with the encoded properties, is limited by maxMessageSize
	// (default 4 MiB = 4194304 bytes).
	Body []byte
	// Properties are string name/value pairs; names and values must not contain the
	// separators 0x01 and 0x02.
	Properties map[string]string
}

// NewMessage returns a message for topic with body and no properties.
func NewMessage(topic string, body []byte) *Message {
	return &Message{Topic: topic, Body: body}
}

// Property returns the value of property name, or "" when it is not set.
func (m *Message) Property(name string) string {
	if m.Properties == nil {
		return ""
	}
	return m.Properties[name]
}

// SetProperty sets property name to value; an empty value removes it (RocketMQ stores no
// empty values). It returns m for chaining.
func (m *Message) SetProperty(name, value string) *Message {
	if value == "" {
		delete(m.Properties, name)
		return m
	}
	if m.Properties == nil {
		m.Properties = make(map[string]string)
	}
	m.Properties[name] = value
	return m
}

// RemoveProperty deletes property name.
func (m *Message) RemoveProperty(name string) { delete(m.Properties, name) }

// Tag returns the message tag (property TAGS), "" if none.
func (m *Message) Tag() string { return m.Property(PropertyTags) }

// SetTag sets the message tag (property TAGS). It returns m for chaining.
func (m *Message) SetTag(tag string) *Message { return m.SetProperty(PropertyTags, tag) }

// Keys returns the message keys (property KEYS split on KeySeparator), nil if none.
func (m *Message) Keys() []string {
	k := m.Property(PropertyKeys)
	if k == "" {
		return nil
	}
	return strings.Fields(k)
}

// SetKeys sets the message keys (property KEYS, joined by KeySeparator). Keys must not
// contain spaces. It returns m for chaining.
func (m *Message) SetKeys(keys ...string) *Message {
	return m.SetProperty(PropertyKeys, strings.Join(keys, KeySeparator))
}

// DelayLevel returns the delay level (property DELAY), 0 when none or unparsable.
func (m *Message) DelayLevel() int {
	v := m.Property(PropertyDelayTimeLevel)
	if v == "" {
		return 0 // the common case, without Atoi's error allocation
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0
	}
	return n
}

// SetDelayLevel sets the delay level (property DELAY); level <= 0 removes it.
// The broker maps level n to the n-th entry of messageDelayLevel
// (default "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h") and clamps
// levels above the maximum. It returns m for chaining.
func (m *Message) SetDelayLevel(level int) *Message {
	if level <= 0 {
		m.RemoveProperty(PropertyDelayTimeLevel)
		return m
	}
	return m.SetProperty(PropertyDelayTimeLevel, strconv.Itoa(level))
}

// ShardingKey returns the sharding key used by hash queue selection (property SHARDING_KEY).
func (m *Message) ShardingKey() string { return m.Property(PropertyShardingKey) }

// SetShardingKey sets the sharding key (property SHARDING_KEY). It returns m for chaining.
func (m *Message) SetShardingKey(key string) *Message { return m.SetProperty(PropertyShardingKey, key) }

// UniqKey returns the client-assigned unique message id (property UNIQ_KEY).
func (m *Message) UniqKey() string { return m.Property(PropertyUniqClientMessageIDKeyIdx) }

// Clone returns a deep copy of m (body and properties copied).
func (m *Message) Clone() *Message {
	c := *m
	c.Body = append([]byte(nil), m.Body...)
	if m.Properties != nil {
		c.Properties = make(map[string]string, len(m.Properties))
		for k, v := range m.Properties {
			c.Properties[k] = v
		}
	}
	return &c
}

// sortedKeys returns the property names of p in byte order.
func sortedKeys(p map[string]string) []string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
