package client

import (
	"strconv"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// DefaultTopicQueueNums is how many queues a producer asks the broker to create for a
// topic it auto-creates from TBW102 (PROTOCOL §3.3 field defaultTopicQueueNums, §7.2).
const DefaultTopicQueueNums = 4

// InnerProducerGroup is the producer group of messages a consumer re-sends to its retry
// topic itself when CONSUMER_SEND_MSG_BACK fails (Java MixAll.CLIENT_INNER_PRODUCER_GROUP).
const InnerProducerGroup = "CLIENT_INNER_PRODUCER"

// SendHeader is the request header of SEND_MESSAGE_V2 (RocketMQ request code 310; Java
// SendMessageRequestHeaderV2, PROTOCOL §3.3). Ext encodes it with the V2 one-letter keys.
type SendHeader struct {
	ProducerGroup         string // a: producer group
	Topic                 string // b: topic
	DefaultTopic          string // c: topic new topics inherit from (TBW102)
	DefaultTopicQueueNums int    // d: queue count of an auto-created topic (4)
	QueueID               int    // e: queue id
	SysFlag               int32  // f: message sysFlag (bit0 compressed, 0x4 half message)
	BornTimestamp         int64  // g: unix ms
	Flag                  int32  // h: user flag
	Properties            string // i: encoded properties (message.MarshalProperties)
	ReconsumeTimes        int32  // j: reconsume count (retry-as-normal sends: count+1)
	UnitMode              bool   // k: always false in Sluice
	MaxReconsumeTimes     int32  // l: retry limit for %RETRY% topics (0 = broker default)
	Batch                 bool   // m: true only for SEND_BATCH_MESSAGE (320)
	BrokerName            string // n: target broker name (4.9.8 field; older brokers ignore it)
}

// Ext returns the header as ext fields with the V2 keys a..n, every value a string.
func (h SendHeader) Ext() map[string]string {
	ext := map[string]string{
		"a": h.ProducerGroup,
		"b": h.Topic,
		"c": h.DefaultTopic,
		"d": strconv.Itoa(h.DefaultTopicQueueNums),
		"e": strconv.Itoa(h.QueueID),
		"f": strconv.FormatInt(int64(h.SysFlag), 10),
		"g": strconv.FormatInt(h.BornTimestamp, 10),
		"h": strconv.FormatInt(int64(h.Flag), 10),
		"j": strconv.FormatInt(int64(h.ReconsumeTimes), 10),
		"k": strconv.FormatBool(h.UnitMode),
		"l": strconv.FormatInt(int64(h.MaxReconsumeTimes), 10),
		"m": strconv.FormatBool(h.Batch),
	}
	if h.Properties != "" {
		ext["i"] = h.Properties
	}
	if h.BrokerName != "" {
		ext["n"] = h.BrokerName
	}
	return ext
}

// SendStored reports whether a send response code means the broker stored the message:
// 0 SUCCESS, 10 FLUSH_DISK_TIMEOUT, 11 SLAVE_NOT_AVAILABLE, 12 FLUSH_SLAVE_TIMEOUT.
func SendStored(code remoting.ResponseCode) bool {
	switch code {
	case remoting.Success, remoting.FlushDiskTimeout, remoting.SlaveNotAvailable, remoting.FlushSlaveTimeout:
		return true
	}
	return false
}

// ParseSendResponse turns a stored send response (see SendStored) into a SendResult:
// status from the code, OffsetMsgID from ext msgId, queue id and queue offset from ext
// queueId and queueOffset, RegionID from MSG_REGION (default "DefaultRegion"),
// TransactionID from transactionId. msgID is the client's UNIQ_KEY and mq the queue the
// message was sent to (its QueueID is replaced by the response's when present). It
// returns a *remoting.HeaderError when queueOffset does not parse.
func ParseSendResponse(resp *remoting.RemotingCommand, mq message.MessageQueue, msgID string) (*message.SendResult, error) {
	r := &message.SendResult{MsgID: msgID, Queue: mq, RegionID: "DefaultRegion"}
	switch resp.ResponseCode() {
	case remoting.FlushDiskTimeout:
		r.Status = message.SendFlushDiskTimeout
	case remoting.FlushSlaveTimeout:
		r.Status = message.SendFlushSlaveTimeout
	case remoting.SlaveNotAvailable:
		r.Status = message.SendSlaveNotAvailable
	default:
		r.Status = message.SendOK
	}
	r.OffsetMsgID, _ = resp.ExtString("msgId", false)
	if qid, err := resp.ExtInt32("queueId", false); err == nil && resp.ExtFields["queueId"] != "" {
		r.Queue.QueueID = int(qid)
	}
	off, err := resp.ExtInt64("queueOffset", false)
	if err != nil {
		return nil, err
	}
	r.QueueOffset = off
	if v := resp.ExtFields[message.PropertyMsgRegion]; v != "" {
		r.RegionID = v
	}
	r.TransactionID = resp.ExtFields["transactionId"]
	return r, nil
}
