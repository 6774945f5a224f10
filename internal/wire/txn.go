package wire

import (
	"strconv"

	"github.com/sluicemq/sluice/remoting"
)

// EndTransactionHeader is the custom header of END_TRANSACTION (RocketMQ request code
// 37; Java EndTransactionRequestHeader, docs/protocol.md §3.9): a producer's commit, rollback
// or unknown for a half message. The comments give the ext keys.
type EndTransactionHeader struct {
	ProducerGroup        string // producerGroup
	TranStateTableOffset int64  // tranStateTableOffset: the half message's queue offset
	CommitLogOffset      int64  // commitLogOffset: the half message's commitlog offset
	// CommitOrRollback (commitOrRollback) is message.SysFlagTransactionCommit (8),
	// message.SysFlagTransactionRollback (12) or message.SysFlagTransactionNot (0,
	// unknown: the broker keeps the half message and checks back later).
	CommitOrRollback     int32
	FromTransactionCheck bool   // fromTransactionCheck: the answer to a CHECK_TRANSACTION_STATE
	MsgID                string // msgId: the message's UNIQ_KEY
	TransactionID        string // transactionId
	BrokerName           string // bname: the broker holding the half message (4.9.8); optional
}

// Ext returns the header as END_TRANSACTION ext fields; bname is left out when empty.
func (h EndTransactionHeader) Ext() map[string]string {
	ext := map[string]string{
		"producerGroup":        h.ProducerGroup,
		"tranStateTableOffset": strconv.FormatInt(h.TranStateTableOffset, 10),
		"commitLogOffset":      strconv.FormatInt(h.CommitLogOffset, 10),
		"commitOrRollback":     strconv.FormatInt(int64(h.CommitOrRollback), 10),
		"fromTransactionCheck": strconv.FormatBool(h.FromTransactionCheck),
		"msgId":                h.MsgID,
		"transactionId":        h.TransactionID,
	}
	if h.BrokerName != "" {
		ext["bname"] = h.BrokerName
	}
	return ext
}

// ParseEndTransactionHeader reads the END_TRANSACTION header of req. producerGroup,
// tranStateTableOffset, commitLogOffset and commitOrRollback are required; a malformed
// fromTransactionCheck reads as false. Errors: a [*remoting.HeaderError] naming the
// first missing or malformed required field.
func ParseEndTransactionHeader(req *remoting.RemotingCommand) (EndTransactionHeader, error) {
	r := extReader{req: req}
	h := EndTransactionHeader{
		ProducerGroup:        r.str("producerGroup", true),
		TranStateTableOffset: r.i64("tranStateTableOffset", true),
		CommitLogOffset:      r.i64("commitLogOffset", true),
		CommitOrRollback:     r.i32("commitOrRollback", true),
		MsgID:                req.ExtFields["msgId"],
		TransactionID:        req.ExtFields["transactionId"],
		BrokerName:           req.ExtFields["bname"],
	}
	h.FromTransactionCheck, _ = req.ExtBool("fromTransactionCheck")
	return h, r.err
}

// CheckTransactionStateHeader is the custom header of CHECK_TRANSACTION_STATE (RocketMQ
// request code 39, broker → producer, one-way; Java CheckTransactionStateRequestHeader,
// docs/protocol.md §3.10). The body is the half message's record. The comments give the ext
// keys.
type CheckTransactionStateHeader struct {
	TranStateTableOffset int64  // tranStateTableOffset: the half message's queue offset
	CommitLogOffset      int64  // commitLogOffset: the half message's commitlog offset
	MsgID                string // msgId: the message's UNIQ_KEY
	TransactionID        string // transactionId
	OffsetMsgID          string // offsetMsgId: the half message's offset message id
}

// Ext returns the header as CHECK_TRANSACTION_STATE ext fields.
func (h CheckTransactionStateHeader) Ext() map[string]string {
	return map[string]string{
		"tranStateTableOffset": strconv.FormatInt(h.TranStateTableOffset, 10),
		"commitLogOffset":      strconv.FormatInt(h.CommitLogOffset, 10),
		"msgId":                h.MsgID,
		"transactionId":        h.TransactionID,
		"offsetMsgId":          h.OffsetMsgID,
	}
}

// ParseCheckTransactionStateHeader reads the CHECK_TRANSACTION_STATE header of req.
// tranStateTableOffset and commitLogOffset are required. Errors: a
// [*remoting.HeaderError] naming the first missing or malformed one.
func ParseCheckTransactionStateHeader(req *remoting.RemotingCommand) (CheckTransactionStateHeader, error) {
	r := extReader{req: req}
	h := CheckTransactionStateHeader{
		TranStateTableOffset: r.i64("tranStateTableOffset", true),
		CommitLogOffset:      r.i64("commitLogOffset", true),
		MsgID:                req.ExtFields["msgId"],
		TransactionID:        req.ExtFields["transactionId"],
		OffsetMsgID:          req.ExtFields["offsetMsgId"],
	}
	return h, r.err
}

// SendBackHeader is the custom header of CONSUMER_SEND_MSG_BACK (RocketMQ request code
// 36; Java ConsumerSendMsgBackRequestHeader, docs/protocol.md §3.8): a consumer hands a failed
// message back for a later retry. The comments give the ext keys.
type SendBackHeader struct {
	Offset      int64  // offset: the message's commitlog offset
	Group       string // group: the consumer group
	DelayLevel  int32  // delayLevel: 0 = the broker's choice (3 + reconsume count), < 0 = to the DLQ at once
	OriginMsgID string // originMsgId: the message's id
	OriginTopic string // originTopic: the topic it was consumed from
	UnitMode    bool   // unitMode: always false in Sluice
	// MaxReconsumeTimes (maxReconsumeTimes) moves the message to the DLQ once its
	// reconsume count has reached it. [ParseSendBackHeader] gives -1 when the key is
	// absent (the group's retryMaxTimes applies); [SendBackHeader.Ext] always writes it.
	MaxReconsumeTimes int32
}

// Ext returns the header as CONSUMER_SEND_MSG_BACK ext fields.
func (h SendBackHeader) Ext() map[string]string {
	return map[string]string{
		"offset":            strconv.FormatInt(h.Offset, 10),
		"group":             h.Group,
		"delayLevel":        strconv.FormatInt(int64(h.DelayLevel), 10),
		"originMsgId":       h.OriginMsgID,
		"originTopic":       h.OriginTopic,
		"unitMode":          strconv.FormatBool(h.UnitMode),
		"maxReconsumeTimes": strconv.FormatInt(int64(h.MaxReconsumeTimes), 10),
	}
}

// ParseSendBackHeader reads the CONSUMER_SEND_MSG_BACK header of req. offset, group
// and delayLevel are required; MaxReconsumeTimes is -1 when absent; a malformed
// unitMode reads as false. Errors: a [*remoting.HeaderError] naming the first missing
// or malformed field.
func ParseSendBackHeader(req *remoting.RemotingCommand) (SendBackHeader, error) {
	r := extReader{req: req}
	h := SendBackHeader{
		Offset:            r.i64("offset", true),
		Group:             r.str("group", true),
		DelayLevel:        r.i32("delayLevel", true),
		OriginMsgID:       req.ExtFields["originMsgId"],
		OriginTopic:       req.ExtFields["originTopic"],
		MaxReconsumeTimes: -1,
	}
	if _, ok := req.ExtFields["maxReconsumeTimes"]; ok {
		h.MaxReconsumeTimes = r.i32("maxReconsumeTimes", false)
	}
	h.UnitMode, _ = req.ExtBool("unitMode")
	return h, r.err
}
