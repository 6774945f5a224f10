package wire

import (
	"strconv"

	"github.com/sluicemq/sluice/remoting"
)

// SendHeader is the custom header of SEND_MESSAGE (RocketMQ request code 10, Java
// SendMessageRequestHeader, long keys) and of SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE
// (310 and 320, Java SendMessageRequestHeaderV2, the one-letter keys a..n); PROTOCOL
// §3.3. Each field's comment gives its V2 key; [SendHeaderKeys] lists both spellings.
type SendHeader struct {
	ProducerGroup         string // a: producer group
	Topic                 string // b: topic
	DefaultTopic          string // c: topic new topics inherit from (TBW102)
	DefaultTopicQueueNums int32  // d: queue count of an auto-created topic (4)
	QueueID               int32  // e: queue id; a broker picks one when < 0
	SysFlag               int32  // f: message sysFlag (bit0 compressed, 0x4 half message)
	BornTimestamp         int64  // g: unix ms
	Flag                  int32  // h: user flag
	Properties            string // i: encoded properties (message.MarshalProperties); optional
	ReconsumeTimes        int32  // j: reconsume count (retry-as-normal sends: count+1); optional
	UnitMode              bool   // k: always false in Sluice; optional
	// MaxReconsumeTimes (l) is the retry limit for %RETRY% topics. [ParseSendHeader]
	// gives -1 when the key is absent (the group's retryMaxTimes applies); [SendHeader.Ext]
	// always writes it.
	MaxReconsumeTimes int32
	Batch             bool   // m: true only for SEND_BATCH_MESSAGE (320); optional
	BrokerName        string // n: target broker name (4.9.8 field; older brokers ignore it); optional
}

// Indexes into [SendHeaderKeys], one per [SendHeader] field.
const (
	sendKeyProducerGroup = iota
	sendKeyTopic
	sendKeyDefaultTopic
	sendKeyDefaultTopicQueueNums
	sendKeyQueueID
	sendKeySysFlag
	sendKeyBornTimestamp
	sendKeyFlag
	sendKeyProperties
	sendKeyReconsumeTimes
	sendKeyUnitMode
	sendKeyMaxReconsumeTimes
	sendKeyBatch
	sendKeyBrokerName
)

// SendHeaderKeys lists, in [SendHeader] field order, the SEND_MESSAGE (10) key and the
// compact SEND_MESSAGE_V2 (310) key of each header field (Java
// SendMessageRequestHeaderV2.createSendMessageRequestHeaderV1/V2).
var SendHeaderKeys = [...][2]string{
	{"producerGroup", "a"}, {"topic", "b"}, {"defaultTopic", "c"}, {"defaultTopicQueueNums", "d"},
	{"queueId", "e"}, {"sysFlag", "f"}, {"bornTimestamp", "g"}, {"flag", "h"}, {"properties", "i"},
	{"reconsumeTimes", "j"}, {"unitMode", "k"}, {"maxReconsumeTimes", "l"}, {"batch", "m"},
	{"brokerName", "n"},
}

func v2Key(i int) string { return SendHeaderKeys[i][1] }

// Ext returns the header as SEND_MESSAGE_V2 ext fields (keys a..n), every value a
// string; i (properties) and n (broker name) are left out when empty.
func (h SendHeader) Ext() map[string]string {
	ext := make(map[string]string, len(SendHeaderKeys))
	ext[v2Key(sendKeyProducerGroup)] = h.ProducerGroup
	ext[v2Key(sendKeyTopic)] = h.Topic
	ext[v2Key(sendKeyDefaultTopic)] = h.DefaultTopic
	ext[v2Key(sendKeyDefaultTopicQueueNums)] = strconv.FormatInt(int64(h.DefaultTopicQueueNums), 10)
	ext[v2Key(sendKeyQueueID)] = strconv.FormatInt(int64(h.QueueID), 10)
	ext[v2Key(sendKeySysFlag)] = strconv.FormatInt(int64(h.SysFlag), 10)
	ext[v2Key(sendKeyBornTimestamp)] = strconv.FormatInt(h.BornTimestamp, 10)
	ext[v2Key(sendKeyFlag)] = strconv.FormatInt(int64(h.Flag), 10)
	ext[v2Key(sendKeyReconsumeTimes)] = strconv.FormatInt(int64(h.ReconsumeTimes), 10)
	ext[v2Key(sendKeyUnitMode)] = strconv.FormatBool(h.UnitMode)
	ext[v2Key(sendKeyMaxReconsumeTimes)] = strconv.FormatInt(int64(h.MaxReconsumeTimes), 10)
	ext[v2Key(sendKeyBatch)] = strconv.FormatBool(h.Batch)
	if h.Properties != "" {
		ext[v2Key(sendKeyProperties)] = h.Properties
	}
	if h.BrokerName != "" {
		ext[v2Key(sendKeyBrokerName)] = h.BrokerName
	}
	return ext
}

// ParseSendHeader reads the send header of req: the long keys of SEND_MESSAGE (10)
// when v2 is false, the one-letter keys of SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
// (310 / 320) when true. producerGroup, topic, defaultTopic, defaultTopicQueueNums,
// queueId, sysFlag, bornTimestamp and flag are required; MaxReconsumeTimes is -1 when
// absent. Errors: a [*remoting.HeaderError] naming the first missing or malformed
// field.
func ParseSendHeader(req *remoting.RemotingCommand, v2 bool) (SendHeader, error) {
	col := 0
	if v2 {
		col = 1
	}
	k := func(i int) string { return SendHeaderKeys[i][col] }
	r := extReader{req: req}
	h := SendHeader{
		ProducerGroup:         r.str(k(sendKeyProducerGroup), true),
		Topic:                 r.str(k(sendKeyTopic), true),
		DefaultTopic:          r.str(k(sendKeyDefaultTopic), true),
		DefaultTopicQueueNums: r.i32(k(sendKeyDefaultTopicQueueNums), true),
		QueueID:               r.i32(k(sendKeyQueueID), true),
		SysFlag:               r.i32(k(sendKeySysFlag), true),
		BornTimestamp:         r.i64(k(sendKeyBornTimestamp), true),
		Flag:                  r.i32(k(sendKeyFlag), true),
		Properties:            r.str(k(sendKeyProperties), false),
		ReconsumeTimes:        r.i32(k(sendKeyReconsumeTimes), false),
		UnitMode:              r.bool(k(sendKeyUnitMode)),
		MaxReconsumeTimes:     -1,
	}
	if _, ok := req.ExtFields[k(sendKeyMaxReconsumeTimes)]; ok {
		h.MaxReconsumeTimes = r.i32(k(sendKeyMaxReconsumeTimes), false)
	}
	h.Batch = r.bool(k(sendKeyBatch))
	h.BrokerName = r.str(k(sendKeyBrokerName), false)
	return h, r.err
}

// extReader reads ext fields of a request and keeps the first error; later reads
// after an error return zero values.
type extReader struct {
	req *remoting.RemotingCommand
	err error
}

func (r *extReader) str(key string, required bool) string {
	if r.err != nil {
		return ""
	}
	var s string
	s, r.err = r.req.ExtString(key, required)
	return s
}

func (r *extReader) i32(key string, required bool) int32 {
	if r.err != nil {
		return 0
	}
	var n int32
	n, r.err = r.req.ExtInt32(key, required)
	return n
}

func (r *extReader) i64(key string, required bool) int64 {
	if r.err != nil {
		return 0
	}
	var n int64
	n, r.err = r.req.ExtInt64(key, required)
	return n
}

func (r *extReader) bool(key string) bool {
	if r.err != nil {
		return false
	}
	var v bool
	v, r.err = r.req.ExtBool(key)
	return v
}
