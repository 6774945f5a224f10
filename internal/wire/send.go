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
	p := sendParser{req: req, v2: v2}
	h := SendHeader{
		ProducerGroup:         p.str(sendKeyProducerGroup, true),
		Topic:                 p.str(sendKeyTopic, true),
		DefaultTopic:          p.str(sendKeyDefaultTopic, true),
		DefaultTopicQueueNums: p.i32(sendKeyDefaultTopicQueueNums, true),
		QueueID:               p.i32(sendKeyQueueID, true),
		SysFlag:               p.i32(sendKeySysFlag, true),
		BornTimestamp:         p.i64(sendKeyBornTimestamp, true),
		Flag:                  p.i32(sendKeyFlag, true),
		Properties:            p.str(sendKeyProperties, false),
		ReconsumeTimes:        p.i32(sendKeyReconsumeTimes, false),
		UnitMode:              p.bool(sendKeyUnitMode),
		MaxReconsumeTimes:     -1,
	}
	if _, ok := req.ExtFields[p.key(sendKeyMaxReconsumeTimes)]; ok {
		h.MaxReconsumeTimes = p.i32(sendKeyMaxReconsumeTimes, false)
	}
	h.Batch = p.bool(sendKeyBatch)
	h.BrokerName = p.str(sendKeyBrokerName, false)
	return h, p.err
}

// sendParser reads ext fields by SendHeaderKeys index and keeps the first error.
type sendParser struct {
	req *remoting.RemotingCommand
	v2  bool
	err error
}

func (p *sendParser) key(i int) string {
	if p.v2 {
		return SendHeaderKeys[i][1]
	}
	return SendHeaderKeys[i][0]
}

func (p *sendParser) str(i int, required bool) string {
	if p.err != nil {
		return ""
	}
	var s string
	s, p.err = p.req.ExtString(p.key(i), required)
	return s
}

func (p *sendParser) i32(i int, required bool) int32 {
	if p.err != nil {
		return 0
	}
	var n int32
	n, p.err = p.req.ExtInt32(p.key(i), required)
	return n
}

func (p *sendParser) i64(i int, required bool) int64 {
	if p.err != nil {
		return 0
	}
	var n int64
	n, p.err = p.req.ExtInt64(p.key(i), required)
	return n
}

func (p *sendParser) bool(i int) bool {
	if p.err != nil {
		return false
	}
	var v bool
	v, p.err = p.req.ExtBool(p.key(i))
	return v
}
