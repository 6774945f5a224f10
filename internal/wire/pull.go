package wire

import (
	"fmt"
	"strconv"

	"github.com/sluicemq/sluice/remoting"
)

// PULL_MESSAGE sysFlag bits (Java PullSysFlag; docs/protocol.md §3.4).
const (
	PullFlagCommitOffset = 1 << 0 // the broker stores CommitOffset for the group
	PullFlagSuspend      = 1 << 1 // long polling allowed
	PullFlagSubscription = 1 << 2 // use the request's subscription, not the heartbeat's
	PullFlagClassFilter  = 1 << 3 // class filter (not supported by Sluice)
)

// PullHeader is the custom header of PULL_MESSAGE (RocketMQ request code 11; Java
// PullMessageRequestHeader, docs/protocol.md §3.4). The comments give the ext keys.
type PullHeader struct {
	ConsumerGroup        string // consumerGroup
	Topic                string // topic
	QueueID              int32  // queueId
	QueueOffset          int64  // queueOffset: the first offset wanted, ≥ 0
	MaxMsgNums           int32  // maxMsgNums: at most this many messages (a broker caps it at 32)
	SysFlag              int32  // sysFlag: PullFlag* bits
	CommitOffset         int64  // commitOffset: stored for the group with PullFlagCommitOffset
	SuspendTimeoutMillis int64  // suspendTimeoutMillis: long-polling hold in ms
	Subscription         string // subscription: the expression, with PullFlagSubscription; optional
	SubVersion           int64  // subVersion: the heartbeat's subscription version; optional
	ExpressionType       string // expressionType: ExpressionTypeTag ("" too) or ExpressionTypeSQL92; optional
}

// Ext returns the header as PULL_MESSAGE ext fields, every key written.
func (h PullHeader) Ext() map[string]string {
	return map[string]string{
		"consumerGroup":        h.ConsumerGroup,
		"topic":                h.Topic,
		"queueId":              strconv.FormatInt(int64(h.QueueID), 10),
		"queueOffset":          strconv.FormatInt(h.QueueOffset, 10),
		"maxMsgNums":           strconv.FormatInt(int64(h.MaxMsgNums), 10),
		"sysFlag":              strconv.FormatInt(int64(h.SysFlag), 10),
		"commitOffset":         strconv.FormatInt(h.CommitOffset, 10),
		"suspendTimeoutMillis": strconv.FormatInt(h.SuspendTimeoutMillis, 10),
		"subscription":         h.Subscription,
		"subVersion":           strconv.FormatInt(h.SubVersion, 10),
		"expressionType":       h.ExpressionType,
	}
}

// ParsePullHeader reads the PULL_MESSAGE header of req. consumerGroup, topic, queueId,
// queueOffset, maxMsgNums, sysFlag, commitOffset and suspendTimeoutMillis are
// required. Errors: a [*remoting.HeaderError] naming the first missing or malformed
// field, or a negative queueOffset.
func ParsePullHeader(req *remoting.RemotingCommand) (PullHeader, error) {
	r := extReader{req: req}
	h := PullHeader{
		ConsumerGroup:        r.str("consumerGroup", true),
		Topic:                r.str("topic", true),
		QueueID:              r.i32("queueId", true),
		QueueOffset:          r.i64("queueOffset", true),
		MaxMsgNums:           r.i32("maxMsgNums", true),
		SysFlag:              r.i32("sysFlag", true),
		CommitOffset:         r.i64("commitOffset", true),
		SuspendTimeoutMillis: r.i64("suspendTimeoutMillis", true),
		Subscription:         r.str("subscription", false),
		ExpressionType:       r.str("expressionType", false),
		SubVersion:           r.i64("subVersion", false),
	}
	if r.err == nil && h.QueueOffset < 0 {
		r.err = &remoting.HeaderError{Field: "queueOffset", Reason: fmt.Sprintf("%d is negative", h.QueueOffset)}
	}
	return h, r.err
}

// PullResponseHeader is the custom header of a PULL_MESSAGE answer (Java
// PullMessageResponseHeader, docs/protocol.md §3.4), also used by Sluice's READ_QUEUE (7001).
// The comments give the ext keys.
type PullResponseHeader struct {
	NextBeginOffset      int64 // nextBeginOffset: where the next pull starts
	MinOffset            int64 // minOffset: the queue's smallest stored offset
	MaxOffset            int64 // maxOffset: the queue's next offset to write
	SuggestWhichBrokerID int64 // suggestWhichBrokerId: 0 (the master) from a Sluice broker
}

// SetExt writes all four fields into resp's ext fields: the official Go client reads a
// missing nextBeginOffset as 0, so none is ever left out.
func (h PullResponseHeader) SetExt(resp *remoting.RemotingCommand) {
	resp.SetExt("nextBeginOffset", strconv.FormatInt(h.NextBeginOffset, 10))
	resp.SetExt("minOffset", strconv.FormatInt(h.MinOffset, 10))
	resp.SetExt("maxOffset", strconv.FormatInt(h.MaxOffset, 10))
	resp.SetExt("suggestWhichBrokerId", strconv.FormatInt(h.SuggestWhichBrokerID, 10))
}

// ParsePullResponseHeader reads the header of a PULL_MESSAGE or READ_QUEUE answer.
// nextBeginOffset is required: its absence or a malformed value is a
// [*remoting.HeaderError]. minOffset, maxOffset and suggestWhichBrokerId are
// informational; a missing or malformed one reads as 0.
func ParsePullResponseHeader(resp *remoting.RemotingCommand) (PullResponseHeader, error) {
	var h PullResponseHeader
	var err error
	if h.NextBeginOffset, err = resp.ExtInt64("nextBeginOffset", true); err != nil {
		return PullResponseHeader{}, err
	}
	h.MinOffset, _ = resp.ExtInt64("minOffset", false)
	h.MaxOffset, _ = resp.ExtInt64("maxOffset", false)
	h.SuggestWhichBrokerID, _ = resp.ExtInt64("suggestWhichBrokerId", false)
	return h, nil
}

// ReadQueueHeader is the request header of Sluice's READ_QUEUE ([ReadQueue], 7001).
// The comments give the ext keys; all four are required.
type ReadQueueHeader struct {
	Topic      string // topic
	QueueID    int32  // queueId
	Offset     int64  // offset: the first queue offset wanted
	MaxMsgNums int32  // maxMsgNums: at most this many messages (a broker caps it at 32)
}

// Ext returns the header as READ_QUEUE ext fields.
func (h ReadQueueHeader) Ext() map[string]string {
	return map[string]string{
		"topic":      h.Topic,
		"queueId":    strconv.FormatInt(int64(h.QueueID), 10),
		"offset":     strconv.FormatInt(h.Offset, 10),
		"maxMsgNums": strconv.FormatInt(int64(h.MaxMsgNums), 10),
	}
}

// ParseReadQueueHeader reads the READ_QUEUE header of req. Errors: a
// [*remoting.HeaderError] naming the first missing or malformed field, or a negative
// offset or queueId.
func ParseReadQueueHeader(req *remoting.RemotingCommand) (ReadQueueHeader, error) {
	r := extReader{req: req}
	h := ReadQueueHeader{
		Topic:      r.str("topic", true),
		QueueID:    r.i32("queueId", true),
		Offset:     r.i64("offset", true),
		MaxMsgNums: r.i32("maxMsgNums", true),
	}
	switch {
	case r.err != nil:
	case h.Offset < 0:
		r.err = &remoting.HeaderError{Field: "offset", Reason: fmt.Sprintf("%d is negative", h.Offset)}
	case h.QueueID < 0:
		r.err = &remoting.HeaderError{Field: "queueId", Reason: fmt.Sprintf("%d is negative", h.QueueID)}
	}
	return h, r.err
}
