package message

import (
	"fmt"
	"strings"
)

// Topic and group name conventions (Java MixAll and TopicValidator).
const (
	// RetryGroupTopicPrefix prefixes a consumer group's retry topic: %RETRY%<group>.
	RetryGroupTopicPrefix = "%RETRY%"
	// DLQGroupTopicPrefix prefixes a consumer group's dead-letter topic: %DLQ%<group>.
	DLQGroupTopicPrefix = "%DLQ%"
	// AutoCreateTopicKey is the default topic whose config new topics inherit (TBW102).
	AutoCreateTopicKey = "TBW102"
	// ScheduleTopic holds delayed messages; queue id = delay level - 1.
	ScheduleTopic = "SCHEDULE_TOPIC_XXXX"
	// TransHalfTopic holds transactional half messages.
	TransHalfTopic = "RMQ_SYS_TRANS_HALF_TOPIC"
	// TransOpHalfTopic records final transaction decisions.
	TransOpHalfTopic = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
	// TransCheckMaxTimeTopic receives half messages checked transactionCheckMax times.
	TransCheckMaxTimeTopic = "TRANS_CHECK_MAX_TIME_TOPIC"
)

// RetryTopic returns the retry topic of a consumer group: %RETRY%<group>.
func RetryTopic(group string) string { return RetryGroupTopicPrefix + group }

// DLQTopic returns the dead-letter topic of a consumer group: %DLQ%<group>.
func DLQTopic(group string) string { return DLQGroupTopicPrefix + group }

// IsRetryTopic reports whether topic is a %RETRY% topic.
func IsRetryTopic(topic string) bool { return strings.HasPrefix(topic, RetryGroupTopicPrefix) }

// IsDLQTopic reports whether topic is a %DLQ% topic.
func IsDLQTopic(topic string) bool { return strings.HasPrefix(topic, DLQGroupTopicPrefix) }

// MessageQueue names one queue of a topic on one broker. Its JSON form is the one RocketMQ
// uses in LOCK_BATCH_MQ bodies: {"topic":..,"brokerName":..,"queueId":n}.
type MessageQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int    `json:"queueId"`
}

// String returns "topic@brokerName#queueId".
func (q MessageQueue) String() string {
	return fmt.Sprintf("%s@%s#%d", q.Topic, q.BrokerName, q.QueueID)
}

// Less orders queues by topic, broker name, then queue id (the order RocketMQ clients sort
// queues in before allocation).
func (q MessageQueue) Less(o MessageQueue) bool {
	if q.Topic != o.Topic {
		return q.Topic < o.Topic
	}
	if q.BrokerName != o.BrokerName {
		return q.BrokerName < o.BrokerName
	}
	return q.QueueID < o.QueueID
}

// SendStatus is the outcome of a stored send (RocketMQ SendStatus).
type SendStatus int

// Send statuses. All four mean the broker stored the message; the last three report a
// flush or replication problem (response codes 10, 12, 11).
const (
	SendOK SendStatus = iota
	SendFlushDiskTimeout
	SendFlushSlaveTimeout
	SendSlaveNotAvailable
)

func (s SendStatus) String() string {
	switch s {
	case SendOK:
		return "SEND_OK"
	case SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	}
	return fmt.Sprintf("SendStatus(%d)", int(s))
}

// SendResult is what a successful send returns.
type SendResult struct {
	Status SendStatus
	// MsgID is the client message id (property UNIQ_KEY); for a batch, the ids joined by ",".
	MsgID string
	// OffsetMsgID is the broker's offset message id; for a batch, the ids joined by ",".
	OffsetMsgID string
	// Queue is the message queue the message went to.
	Queue MessageQueue
	// QueueOffset is the consume-queue offset of the (first) message.
	QueueOffset int64
	// TransactionID is the transaction id of a half message ("" otherwise).
	TransactionID string
	// RegionID is the broker's region (response ext MSG_REGION), default "DefaultRegion".
	RegionID string
}

// ConsumeResult is what a consume handler returns.
type ConsumeResult int

const (
	// ConsumeSuccess acknowledges the messages.
	ConsumeSuccess ConsumeResult = iota
	// ReconsumeLater asks for redelivery: through %RETRY%<group> for concurrent clustering
	// consumers, by suspending the queue for orderly consumers.
	ReconsumeLater
	// SuspendCurrentQueueAMoment is an orderly consumer's "retry later": the queue is
	// suspended (1000 ms by default) and the same messages are consumed again, blocking
	// the messages behind them.
	SuspendCurrentQueueAMoment
)

func (r ConsumeResult) String() string {
	switch r {
	case ConsumeSuccess:
		return "CONSUME_SUCCESS"
	case ReconsumeLater:
		return "RECONSUME_LATER"
	case SuspendCurrentQueueAMoment:
		return "SUSPEND_CURRENT_QUEUE_A_MOMENT"
	}
	return fmt.Sprintf("ConsumeResult(%d)", int(r))
}
