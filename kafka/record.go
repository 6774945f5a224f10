package kafka

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/message"
)

// Header names Sluice adds to Kafka records beyond the message properties.
const (
	// HeaderFlag carries a non-zero message flag, in decimal.
	HeaderFlag = "FLAG"
	// HeaderOriginTopic is the topic a retry or dead-letter copy was first consumed from.
	HeaderOriginTopic = "SLUICE_ORIGIN_TOPIC"
	// HeaderOriginPartition is the partition of the first consumed record (decimal).
	HeaderOriginPartition = "SLUICE_ORIGIN_PARTITION"
	// HeaderOriginOffset is the offset of the first consumed record (decimal).
	HeaderOriginOffset = "SLUICE_ORIGIN_OFFSET"
	// HeaderReconsumeTimes is how often the message failed before this copy (decimal).
	HeaderReconsumeTimes = "SLUICE_RECONSUME_TIMES"
	// HeaderLastError is the last handler error (at most 1000 bytes).
	HeaderLastError = "SLUICE_LAST_ERROR"
	// HeaderDueMs is when a retry or delayed copy may be consumed, unix ms. A consumer
	// partition reaching such a record waits until then.
	HeaderDueMs = "SLUICE_DUE_MS"
	// HeaderBornMs is the first send's time, unix ms, kept by retry and delayed copies.
	HeaderBornMs = "SLUICE_BORN_MS"
	// HeaderRealTopic is the topic a delayed record is forwarded to (RocketMQ's property
	// REAL_TOPIC plays the same part for its schedule topic).
	HeaderRealTopic = message.PropertyRealTopic
)

// BrokerName is the MessageExt.BrokerName and SendResult queue broker name of records
// read from or written to Kafka.
const BrokerName = "kafka"

// maxLastError bounds HeaderLastError, in bytes.
const maxLastError = 1000

// controlHeaders are the headers Sluice manages; they never become properties.
var controlHeaders = map[string]bool{
	HeaderFlag: true, HeaderOriginTopic: true, HeaderOriginPartition: true, HeaderOriginOffset: true,
	HeaderReconsumeTimes: true, HeaderLastError: true, HeaderDueMs: true, HeaderBornMs: true,
}

// ErrUnsupported is wrapped by every *UnsupportedError: the message or call needs a
// feature Kafka does not have.
var ErrUnsupported = errors.New("kafka: not supported on Kafka")

// UnsupportedError names the feature Kafka cannot honour. It is permanent: resending
// cannot fix it (redismw.Park returns it instead of parking).
type UnsupportedError struct {
	Topic   string // the message's topic
	Feature string // "timed delivery", "transactional half message", "delay level 3 without DelayTopics", ...
}

// Error implements error.
func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("kafka: topic %q: %s is not supported on Kafka", e.Topic, e.Feature)
}

// Unwrap returns ErrUnsupported.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// Permanent reports true: redismw.DefaultRetriable then never parks it.
func (e *UnsupportedError) Permanent() bool { return true }

// ToKafka converts msg to a kafka-go message (see the package doc for the mapping);
// headers are sorted by name so the output is deterministic. It returns an
// *UnsupportedError for a timed delivery or a transactional half message, and a
// *message.ValidationError (Field "properties") for a property named like a header
// Sluice manages (HeaderFlag, HeaderOriginTopic … HeaderBornMs: the consumer acts on
// them). A delay level is kept as header DELAY; [Producer] routes such messages to the
// delay topics.
func ToKafka(msg *message.Message) (kafkago.Message, error) {
	key, names, err := mapMessage(msg)
	if err != nil {
		return kafkago.Message{}, err
	}
	km := kafkago.Message{Topic: msg.Topic, Key: key, Value: msg.Body}
	for _, k := range names {
		km.Headers = append(km.Headers, kafkago.Header{Key: k, Value: []byte(msg.Properties[k])})
	}
	if msg.Flag != 0 {
		km.Headers = append(km.Headers, kafkago.Header{Key: HeaderFlag, Value: []byte(strconv.FormatInt(int64(msg.Flag), 10))})
	}
	return km, nil
}

// mapMessage checks msg for what Kafka cannot carry (see ToKafka) and returns its
// record key (the sharding key, nil when none) and its property names, sorted: each
// becomes a header, followed by HeaderFlag when msg.Flag is not 0.
func mapMessage(msg *message.Message) (key []byte, names []string, err error) {
	if err := checkMessage(msg); err != nil {
		return nil, nil, err
	}
	if sk := msg.ShardingKey(); sk != "" {
		key = []byte(sk)
	}
	names = make([]string, 0, len(msg.Properties))
	for k := range msg.Properties {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if controlHeaders[k] || k == HeaderHMAC {
			return nil, nil, reservedError(k)
		}
	}
	return key, names, nil
}

// checkMessage refuses what Kafka cannot do: timed delivery, a transactional half
// message (*UnsupportedError).
func checkMessage(msg *message.Message) error {
	for _, p := range []string{message.PropertyTimerDeliverMs, message.PropertyTimerDelaySec, message.PropertyTimerDelayMs} {
		if msg.Property(p) != "" {
			return &UnsupportedError{Topic: msg.Topic, Feature: "timed delivery (" + p + ")"}
		}
	}
	if msg.Property(message.PropertyTransactionPrepared) == "true" {
		return &UnsupportedError{Topic: msg.Topic, Feature: "transactional half message"}
	}
	return nil
}

// reservedError refuses property k, named like a header the consumer acts on: a user's
// SLUICE_DUE_MS in the future would hold the whole partition, SLUICE_RECONSUME_TIMES
// would spend the retry budget, SLUICE_ORIGIN_TOPIC would show the message under
// another topic.
func reservedError(k string) error {
	return &message.ValidationError{Field: "properties", Reason: "property " + k + " is reserved: Sluice sets it on Kafka records itself"}
}

// Record is one Kafka record as the consumer read it: where it is and what it holds.
type Record struct {
	Topic     string           // the topic it was read from
	Partition int              // its partition
	Offset    int64            // its offset in the partition
	Time      time.Time        // the record timestamp (CreateTime, or LogAppendTime when the topic says so)
	Key       []byte           // the record key (the sharding key), nil when none
	Value     []byte           // the body
	Headers   []kafkago.Header // in record order
}

// header returns the value of the last header named name.
func (r *Record) header(name string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == name {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

func (r *Record) headerInt(name string) (int64, bool) {
	s, ok := r.header(name)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// dueAt returns when the record may be consumed (zero when it has no due header).
func (r *Record) dueAt() time.Time {
	if ms, ok := r.headerInt(HeaderDueMs); ok {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// ToMessageExt maps a consumed record to a [message.MessageExt] (see the package doc).
// A retry copy is shown under its original topic (HeaderOriginTopic), as RocketMQ shows
// %RETRY% messages, with property RETRY_TOPIC naming the retry topic; QueueID and
// QueueOffset are always the record's own partition and offset. MsgID is property
// UNIQ_KEY, or "<topic>-<partition>-<offset>" for records sent without one.
func (r *Record) ToMessageExt() *message.MessageExt {
	m := &message.MessageExt{Message: message.Message{Topic: r.Topic, Body: r.Value}}
	m.Properties = make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		if controlHeaders[h.Key] || h.Key == HeaderHMAC {
			continue
		}
		m.Properties[h.Key] = string(h.Value)
	}
	if f, ok := r.headerInt(HeaderFlag); ok {
		m.Flag = int32(f)
	}
	if len(r.Key) > 0 && m.ShardingKey() == "" {
		m.SetShardingKey(string(r.Key))
	}
	if orig, ok := r.header(HeaderOriginTopic); ok && orig != "" {
		m.Topic = orig
		m.SetProperty(message.PropertyRetryTopic, r.Topic)
	}
	m.QueueID = int32(r.Partition)
	m.QueueOffset = r.Offset
	m.BrokerName = BrokerName
	m.StoreTimestamp = r.Time.UnixMilli()
	m.BornTimestamp = m.StoreTimestamp
	if born, ok := r.headerInt(HeaderBornMs); ok {
		m.BornTimestamp = born
	}
	if n, ok := r.headerInt(HeaderReconsumeTimes); ok && n >= 0 {
		m.ReconsumeTimes = int32(n)
	}
	m.OffsetMsgID = r.Topic + "-" + strconv.Itoa(r.Partition) + "-" + strconv.FormatInt(r.Offset, 10)
	m.MsgID = m.UniqKey()
	if m.MsgID == "" {
		m.MsgID = m.OffsetMsgID
	}
	return m
}

// copyFor returns a copy of r for topic with Sluice's control headers set from set
// (other control headers of r are kept, so the origin survives several retries).
func (r *Record) copyFor(topic string, set map[string]string) kafkago.Message {
	km := kafkago.Message{Topic: topic, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		if _, replaced := set[h.Key]; replaced {
			continue
		}
		km.Headers = append(km.Headers, h)
	}
	names := make([]string, 0, len(set))
	for k := range set {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if set[k] == "" {
			continue
		}
		km.Headers = append(km.Headers, kafkago.Header{Key: k, Value: []byte(set[k])})
	}
	return km
}

// origin returns the first-consumed location of r (its own for a first delivery).
func (r *Record) origin() (topic string, partition, offset string) {
	topic, _ = r.header(HeaderOriginTopic)
	if topic == "" {
		return r.Topic, strconv.Itoa(r.Partition), strconv.FormatInt(r.Offset, 10)
	}
	partition, _ = r.header(HeaderOriginPartition)
	offset, _ = r.header(HeaderOriginOffset)
	return topic, partition, offset
}

// bornMs returns the first send's time of r, unix ms.
func (r *Record) bornMs() int64 {
	if b, ok := r.headerInt(HeaderBornMs); ok {
		return b
	}
	return r.Time.UnixMilli()
}

// truncateError returns err's text cut to maxLastError bytes (on a rune boundary).
func truncateError(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) <= maxLastError {
		return s
	}
	cut := maxLastError
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "")
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
