package client

import (
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// DefaultTopicQueueNums is how many queues a producer asks the broker to create for a
// topic it auto-creates from TBW102 (PROTOCOL §3.3 field defaultTopicQueueNums, §7.2).
const DefaultTopicQueueNums = 4

// InnerProducerGroup is the producer group of messages a consumer re-sends to its retry
// topic itself when CONSUMER_SEND_MSG_BACK fails (Java MixAll.CLIENT_INNER_PRODUCER_GROUP).
const InnerProducerGroup = "CLIENT_INNER_PRODUCER"

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
// returns a *remoting.HeaderError when queueOffset does not parse. resp may be in list
// form (remoting.ClientConfig.ExtListCodes): no map is needed.
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
	if qid, err := resp.ExtInt32("queueId", false); err == nil {
		if v, _ := resp.Ext("queueId"); v != "" {
			r.Queue.QueueID = int(qid)
		}
	}
	off, err := resp.ExtInt64("queueOffset", false)
	if err != nil {
		return nil, err
	}
	r.QueueOffset = off
	if v, _ := resp.Ext(message.PropertyMsgRegion); v != "" {
		r.RegionID = v
	}
	r.TransactionID, _ = resp.Ext("transactionId")
	return r, nil
}
