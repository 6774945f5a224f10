package wire

import (
	"fmt"
	"strconv"

	"github.com/sluicemq/sluice/remoting"
)

// ConsumerOffsetHeader is the custom header of QUERY_CONSUMER_OFFSET (RocketMQ request
// code 14) and UPDATE_CONSUMER_OFFSET (15) (Java QueryConsumerOffsetRequestHeader and
// UpdateConsumerOffsetRequestHeader, docs/protocol.md §3.5). The comments give the ext keys.
type ConsumerOffsetHeader struct {
	ConsumerGroup string // consumerGroup
	Topic         string // topic
	QueueID       int32  // queueId
	// CommitOffset (commitOffset) is the offset to store: UPDATE_CONSUMER_OFFSET only,
	// ≥ 0. Ext writes it when update is true.
	CommitOffset int64
}

// Ext returns the header as ext fields; with update, commitOffset is written too
// (UPDATE_CONSUMER_OFFSET), otherwise it is left out (QUERY_CONSUMER_OFFSET).
func (h ConsumerOffsetHeader) Ext(update bool) map[string]string {
	ext := map[string]string{
		"consumerGroup": h.ConsumerGroup,
		"topic":         h.Topic,
		"queueId":       strconv.FormatInt(int64(h.QueueID), 10),
	}
	if update {
		ext["commitOffset"] = strconv.FormatInt(h.CommitOffset, 10)
	}
	return ext
}

// ParseConsumerOffsetHeader reads the header of QUERY_CONSUMER_OFFSET (update false)
// or UPDATE_CONSUMER_OFFSET (update true): consumerGroup, topic and queueId are
// required, and commitOffset too for an update. Errors: a [*remoting.HeaderError]
// naming the first missing or malformed field, or a negative commitOffset.
func ParseConsumerOffsetHeader(req *remoting.RemotingCommand, update bool) (ConsumerOffsetHeader, error) {
	r := extReader{req: req}
	h := ConsumerOffsetHeader{
		ConsumerGroup: r.str("consumerGroup", true),
		Topic:         r.str("topic", true),
		QueueID:       r.i32("queueId", true),
	}
	if update {
		h.CommitOffset = r.i64("commitOffset", true)
		if r.err == nil && h.CommitOffset < 0 {
			r.err = &remoting.HeaderError{Field: "commitOffset", Reason: fmt.Sprintf("%d is negative", h.CommitOffset)}
		}
	}
	return h, r.err
}

// ResetOffsetHeader is the custom header of INVOKE_BROKER_TO_RESET_OFFSET (RocketMQ
// request code 222, admin → broker; Java ResetOffsetRequestHeader) and of
// RESET_CONSUMER_CLIENT_OFFSET (220, broker → consumer, with a ResetOffsetBody, see
// [EncodeResetOffsetBody]); docs/protocol.md §3.13. The comments give the ext keys.
type ResetOffsetHeader struct {
	Topic     string // topic
	Group     string // group: the consumer group
	Timestamp int64  // timestamp: unix ms; -1 = the end of every queue
	IsForce   bool   // isForce: false = a queue only moves backwards; default true
}

// Ext returns the header as ext fields.
func (h ResetOffsetHeader) Ext() map[string]string {
	return map[string]string{
		"topic":     h.Topic,
		"group":     h.Group,
		"timestamp": strconv.FormatInt(h.Timestamp, 10),
		"isForce":   strconv.FormatBool(h.IsForce),
	}
}

// ParseResetOffsetHeader reads a reset-offset header: topic, group and timestamp are
// required; a missing or empty isForce is true. Errors: a [*remoting.HeaderError]
// naming the first missing or malformed field, or a timestamp below -1.
func ParseResetOffsetHeader(req *remoting.RemotingCommand) (ResetOffsetHeader, error) {
	r := extReader{req: req}
	h := ResetOffsetHeader{
		Topic:     r.str("topic", true),
		Group:     r.str("group", true),
		Timestamp: r.i64("timestamp", true),
		IsForce:   true,
	}
	if req.ExtFields["isForce"] != "" {
		h.IsForce = r.bool("isForce")
	}
	if r.err == nil && h.Timestamp < -1 {
		r.err = &remoting.HeaderError{Field: "timestamp", Reason: fmt.Sprintf("%d: want unix ms or -1 for the end of the queues", h.Timestamp)}
	}
	return h, r.err
}

// QueueHeader is the custom header of GET_MAX_OFFSET (RocketMQ request code 30),
// GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32) and, with Timestamp,
// SEARCH_OFFSET_BY_TIMESTAMP (29); docs/protocol.md §3.5. The comments give the ext keys.
type QueueHeader struct {
	Topic     string // topic
	QueueID   int32  // queueId
	Timestamp int64  // timestamp: unix ms; SEARCH_OFFSET_BY_TIMESTAMP only
}

// Ext returns the header as ext fields; with search, timestamp is written too.
func (h QueueHeader) Ext(search bool) map[string]string {
	ext := map[string]string{"topic": h.Topic, "queueId": strconv.FormatInt(int64(h.QueueID), 10)}
	if search {
		ext["timestamp"] = strconv.FormatInt(h.Timestamp, 10)
	}
	return ext
}

// ParseQueueHeader reads the header of one of those requests: topic and queueId are
// required, and timestamp too with search. Errors: a [*remoting.HeaderError] naming the
// first missing or malformed field.
func ParseQueueHeader(req *remoting.RemotingCommand, search bool) (QueueHeader, error) {
	r := extReader{req: req}
	h := QueueHeader{Topic: r.str("topic", true), QueueID: r.i32("queueId", true)}
	if search {
		h.Timestamp = r.i64("timestamp", true)
	}
	return h, r.err
}
