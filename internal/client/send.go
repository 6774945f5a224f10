package client

import (
	"strconv"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// DefaultTopicQueueNums is how many queues a producer asks the broker to create for a
// topic it auto-creates from TBW102 (docs/protocol.md §3.3 field defaultTopicQueueNums, §7.2).
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
// message was sent to (its QueueID is replaced by the response's when present and a
// decimal int32; otherwise it stays). It returns a *remoting.HeaderError when
// queueOffset does not parse. resp may be in list form (remoting.ClientConfig.ExtListCodes,
// as a producer receives it): the list is then read in one pass (the last of a repeated
// key wins, as with the accessors), the numbers parsed from the values as they are, and
// the only allocation is the SendResult.
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
	var queueID, queueOffset, region string
	if resp.ExtFields == nil {
		for _, f := range resp.ExtList {
			switch f.Key {
			case "msgId":
				r.OffsetMsgID = f.Value
			case "queueId":
				queueID = f.Value
			case "queueOffset":
				queueOffset = f.Value
			case message.PropertyMsgRegion:
				region = f.Value
			case "transactionId":
				r.TransactionID = f.Value
			}
		}
	} else { // a map, perhaps with a list too: the accessors' lookup order
		r.OffsetMsgID, _ = resp.Ext("msgId")
		queueID, _ = resp.Ext("queueId")
		queueOffset, _ = resp.Ext("queueOffset")
		region, _ = resp.Ext(message.PropertyMsgRegion)
		r.TransactionID, _ = resp.Ext("transactionId")
	}
	if queueID != "" {
		if qid, err := strconv.ParseInt(queueID, 10, 32); err == nil {
			r.Queue.QueueID = int(qid)
		}
	}
	if queueOffset != "" {
		off, err := strconv.ParseInt(queueOffset, 10, 64)
		if err != nil {
			// The accessor reads the same value: its *remoting.HeaderError names the
			// field and the value.
			if _, herr := resp.ExtInt64("queueOffset", false); herr != nil {
				err = herr
			}
			return nil, err
		}
		r.QueueOffset = off
	}
	if region != "" {
		r.RegionID = region
	}
	return r, nil
}
