// Package rocketmqv5 puts the official RocketMQ 5 Go client
// (github.com/apache/rocketmq-clients/golang/v5, which speaks gRPC to a Sluice broker's
// front end or to an Apache RocketMQ 5 proxy) behind Sluice's middleware shapes, so a team
// that runs it gets the reliability middleware (Keys, Park, Dedup, the inbox, …) without
// switching clients:
//
//   - [SendFunc] turns a started rmq.Producer into a [middleware.SendFunc];
//   - [SimpleRunner] receives with a started rmq.SimpleConsumer and runs a
//     [middleware.ConsumeFunc] (a handler wrapped in a consume chain) for each message:
//     acknowledged on success, left invisible (or given back after [SimpleConfig.RetryDelay])
//     on failure;
//   - [Listener] turns a ConsumeFunc into the MessageListener of an rmq.PushConsumer;
//   - [Component] adapts the client's GracefulStop() to the Shutdown(ctx) of package
//     lifecycle.
//
// It is a package of its own so the official client (and gRPC) stays out of the core
// packages' import graph; it imports the client, [message], [middleware] and [config].
//
// Messages map field by field (see [ToV5] and [FromV5]): topic, body, tag (TAGS), keys
// (KEYS), user properties; a message group from __SHARDINGKEY or SHARDING_KEY; a delivery
// time from a delay level (DELAY) or the timer properties (TIMER_DELIVER_MS,
// TIMER_DELAY_SEC, TIMER_DELAY_MS). The v5 client assigns each send its own message id (a
// UNIQ_KEY the caller set is not carried): messages that must stay deduplicated across a
// parked resend need KEYS ([middleware.Keys]).
package rocketmqv5

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// PropertyMessageGroup is the stored property of a v5 message group (Apache RocketMQ 5's
// MessageConst.PROPERTY_SHARDING_KEY, "__SHARDINGKEY"): [FromV5] sets it, [ToV5] reads it.
const PropertyMessageGroup = "__SHARDINGKEY"

// ErrNoReceipt is wrapped when the client answered a send with no receipt and no error.
var ErrNoReceipt = errors.New("rocketmqv5: send answered without a receipt")

// consumed are the properties ToV5 turns into v5 fields (or, UNIQ_KEY and WAIT, drops:
// the client assigns message ids, and a v5 send always waits for the store).
var consumed = map[string]bool{
	message.PropertyTags: true, message.PropertyKeys: true, message.PropertyDelayTimeLevel: true,
	message.PropertyTimerDeliverMs: true, message.PropertyTimerDelaySec: true, message.PropertyTimerDelayMs: true,
	message.PropertyShardingKey: true, PropertyMessageGroup: true,
	message.PropertyUniqClientMessageIDKeyIdx: true, message.PropertyWaitStoreMsgOK: true,
}

// reserved are the RocketMQ system properties a v5 message cannot carry as user
// properties (servers refuse them: ILLEGAL_MESSAGE_PROPERTY_KEY) and ToV5 has no field for.
var reserved = map[string]bool{
	message.PropertyRetryTopic: true, message.PropertyRealTopic: true, message.PropertyRealQueueID: true,
	message.PropertyTransactionPrepared: true, message.PropertyProducerGroup: true,
	message.PropertyMinOffset: true, message.PropertyMaxOffset: true, message.PropertyOriginMessageID: true,
	message.PropertyReconsumeTime: true, message.PropertyMsgRegion: true, message.PropertyTraceSwitch: true,
	message.PropertyMaxReconsumeTimes: true, message.PropertyConsumeStartTimestamp: true,
	message.PropertyTransactionPreparedQueueOffset: true, message.PropertyTransactionCheckTimes: true,
	message.PropertyCheckImmunityTimeInSeconds: true, message.PropertyCluster: true,
	message.PropertyMessageType: true, message.PropertyTransactionID: true, "TRACE_CONTEXT": true,
}

// MaxTimerDelay is the furthest ahead a delivery time may be: 72 h, Apache RocketMQ 5's
// timerMaxDelaySec default (Sluice's broker has the same limit). ToV5 refuses more.
const MaxTimerDelay = 72 * time.Hour

// ToV5 converts msg to the v5 client's message:
//
//   - topic and body (shared, not copied); tag from TAGS; keys from KEYS (split on spaces);
//   - message group (a FIFO message) from __SHARDINGKEY, else from SHARDING_KEY (the
//     4.x clients' ordering key: v5 orders by message group);
//   - delivery time (a DELAY message): a delay level (DELAY) n waits delayLevels[n-1]
//     (the last entry for higher levels) from now; else TIMER_DELIVER_MS (unix ms), else
//     TIMER_DELAY_SEC or TIMER_DELAY_MS from now — the precedence the broker applies;
//   - every other property as a user property (empty values left out, as the 4.x
//     encoding leaves them out). UNIQ_KEY and WAIT are dropped (see the package doc).
//
// It returns a *[message.ValidationError] naming the field for what a v5 message cannot
// carry: a Flag (the v5 protocol has none), a system property it has no field for
// (RETRY_TOPIC, ORIGIN_MESSAGE_ID, TRAN_MSG, …; Field "properties"), a message group
// together with a delivery time (v5 FIFO messages cannot be delayed), a timer property
// that does not parse or lies more than [MaxTimerDelay] ahead, and what
// [message.Validate] refuses (topic, tag, empty body, properties).
func ToV5(msg *message.Message, now time.Time, delayLevels []time.Duration) (*rmq.Message, error) {
	if err := message.Validate(msg, maxInt); err != nil {
		return nil, err
	}
	if msg.Flag != 0 {
		return nil, &message.ValidationError{Field: "flag", Reason: fmt.Sprintf("%d: the RocketMQ 5 protocol carries no flag", msg.Flag)}
	}
	m := &rmq.Message{Topic: msg.Topic, Body: msg.Body}
	if tag := msg.Tag(); tag != "" {
		m.SetTag(tag)
	}
	if keys := strings.Fields(msg.Property(message.PropertyKeys)); len(keys) > 0 {
		m.SetKeys(keys...)
	}
	group, groupFrom := msg.Property(PropertyMessageGroup), PropertyMessageGroup
	if group == "" {
		group, groupFrom = msg.ShardingKey(), message.PropertyShardingKey
	}
	at, atFrom, err := deliveryTime(msg, now, delayLevels)
	if err != nil {
		return nil, err
	}
	switch {
	case group != "" && !at.IsZero():
		return nil, &message.ValidationError{Field: "properties", Reason: fmt.Sprintf(
			"a message group (%s) and a delivery time (%s) together: a RocketMQ 5 FIFO message cannot be delayed", groupFrom, atFrom)}
	case group != "":
		m.SetMessageGroup(group)
	case !at.IsZero():
		m.SetDelayTimestamp(at)
	}
	for k, v := range msg.Properties {
		if consumed[k] || v == "" {
			continue
		}
		if reserved[k] {
			return nil, &message.ValidationError{Field: "properties", Reason: fmt.Sprintf(
				"property %s is a RocketMQ system property a RocketMQ 5 message cannot carry", k)}
		}
		m.AddProperty(k, v)
	}
	return m, nil
}

const maxInt = int(^uint(0) >> 1)

// deliveryTime is msg's delivery time (zero when none) and the property it came from.
func deliveryTime(msg *message.Message, now time.Time, levels []time.Duration) (time.Time, string, error) {
	if lvl := msg.DelayLevel(); lvl > 0 {
		if len(levels) == 0 {
			return time.Time{}, "", &message.ValidationError{Field: "properties", Reason: fmt.Sprintf("delay level %d with an empty delay table", lvl)}
		}
		return now.Add(levels[min(lvl, len(levels))-1]), message.PropertyDelayTimeLevel, nil
	}
	var at time.Time
	var from string
	parse := func(name string, max int64) (int64, error) {
		v, err := strconv.ParseInt(msg.Property(name), 10, 64)
		if err != nil || v < 0 || v > max {
			return 0, &message.ValidationError{Field: "properties", Reason: fmt.Sprintf("property %s %q: not a number from 0 to %d", name, msg.Property(name), max)}
		}
		return v, nil
	}
	switch {
	case msg.Property(message.PropertyTimerDeliverMs) != "":
		from = message.PropertyTimerDeliverMs
		v, err := parse(from, 1<<62)
		if err != nil {
			return time.Time{}, "", err
		}
		at = time.UnixMilli(v)
	case msg.Property(message.PropertyTimerDelaySec) != "":
		from = message.PropertyTimerDelaySec
		v, err := parse(from, int64(MaxTimerDelay/time.Second))
		if err != nil {
			return time.Time{}, "", err
		}
		at = now.Add(time.Duration(v) * time.Second)
	case msg.Property(message.PropertyTimerDelayMs) != "":
		from = message.PropertyTimerDelayMs
		v, err := parse(from, MaxTimerDelay.Milliseconds())
		if err != nil {
			return time.Time{}, "", err
		}
		at = now.Add(time.Duration(v) * time.Millisecond)
	default:
		return time.Time{}, "", nil
	}
	if at.After(now.Add(MaxTimerDelay)) {
		return time.Time{}, "", &message.ValidationError{Field: "properties", Reason: fmt.Sprintf("property %s: delivery time %s is more than %v ahead", from, at.UTC().Format(time.RFC3339), MaxTimerDelay)}
	}
	return at, from, nil
}

// SendOption configures [SendFunc].
type SendOption func(*sendOptions)

type sendOptions struct {
	levels  []time.Duration
	maxBody int
	now     func() time.Time
}

// WithDelayLevels sets the delay table [ToV5] maps delay levels (DELAY) with: level n
// waits levels[n-1]. Default message.DefaultDelayLevels() (RocketMQ's 18 levels); use
// the broker's messageDelayLevel when it differs.
func WithDelayLevels(levels []time.Duration) SendOption {
	return func(o *sendOptions) { o.levels = append([]time.Duration(nil), levels...) }
}

// WithMaxBodySize sets the largest body SendFunc sends, in bytes; a larger one is refused
// with a *message.ValidationError (Field "body") before the client sees it (the client
// refuses it too, with an error that does not say it is permanent). Default
// message.DefaultMaxMessageSize (4 MiB, the max_body_size Sluice and Apache RocketMQ 5
// announce by default).
func WithMaxBodySize(n int) SendOption {
	return func(o *sendOptions) { o.maxBody = n }
}

// SendFunc returns a [middleware.SendFunc] that converts each message with [ToV5] and
// sends it through p (which must be started) with Send; the client makes its own
// retries (rmq.WithMaxAttempts, default 3). The result ([FromReceipt]): Status SEND_OK,
// MsgID = the id the client gave the message, QueueOffset, Queue.Topic; the v5 receipt
// names no queue or broker (Queue.QueueID -1, Queue.BrokerName "") and no offset message
// id. msg is not modified.
//
// Errors: a message ToV5 refuses, or a body over [WithMaxBodySize], is a
// *[message.ValidationError] wrapped with the topic (so
// [github.com/sluicemq/sluice/middleware/redismw.Park] does not park it); a failed send
// is a *[SendError] (see there for what it wraps and when it is retryable).
func SendFunc(p rmq.Producer, opts ...SendOption) middleware.SendFunc {
	o := sendOptions{levels: message.DefaultDelayLevels(), maxBody: message.DefaultMaxMessageSize, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		if msg == nil {
			return nil, fmt.Errorf("rocketmqv5: send: %w", &message.ValidationError{Field: "message", Reason: "nil"})
		}
		if len(msg.Body) > o.maxBody {
			return nil, fmt.Errorf("rocketmqv5: send to topic %q: %w", msg.Topic,
				&message.ValidationError{Field: "body", Reason: "body too large", Limit: o.maxBody, Value: len(msg.Body)})
		}
		m, err := ToV5(msg, o.now(), o.levels)
		if err != nil {
			return nil, fmt.Errorf("rocketmqv5: send to topic %q: %w", msg.Topic, err)
		}
		receipts, err := p.Send(ctx, m)
		if err != nil {
			return nil, newSendError(ctx, msg.Topic, err)
		}
		if len(receipts) == 0 || receipts[0] == nil {
			return nil, &SendError{Topic: msg.Topic, Err: ErrNoReceipt}
		}
		return FromReceipt(msg.Topic, receipts[0]), nil
	}
}

// FromReceipt converts the v5 client's send receipt for a message sent to topic:
// Status SEND_OK (a v5 answer reports flush and replication problems as errors,
// MASTER_PERSISTENCE_TIMEOUT and the like), MsgID, QueueOffset, Queue.Topic, QueueID -1
// (not reported). TransactionID is left empty: servers answer a non-transactional send
// with the message id there.
func FromReceipt(topic string, r *rmq.SendReceipt) *message.SendResult {
	return &message.SendResult{
		Status:      message.SendOK,
		MsgID:       r.MessageID,
		QueueOffset: r.Offset,
		Queue:       message.MessageQueue{Topic: topic, QueueID: -1},
	}
}

// SendError is a send the v5 client did not complete: the server refused it (Code is its
// status code) or there was no answer (Code 0: no route, connection, deadline, or one of
// the client's own checks). Err is the client's error (an *rmq.ErrRpcStatus when the
// server answered); Unwrap also gives ctx's error when the caller's context ended, and a
// *[message.ValidationError] naming the field for the codes that refuse the message itself
// (ILLEGAL_TOPIC, ILLEGAL_MESSAGE_TAG, ILLEGAL_MESSAGE_KEY, ILLEGAL_MESSAGE_GROUP,
// ILLEGAL_MESSAGE_PROPERTY_KEY, MESSAGE_PROPERTIES_TOO_LARGE, MESSAGE_BODY_EMPTY,
// MESSAGE_BODY_TOO_LARGE, PAYLOAD_TOO_LARGE, ILLEGAL_DELIVERY_TIME,
// MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, ILLEGAL_MESSAGE_ID).
type SendError struct {
	// Topic is the message's topic.
	Topic string
	// Code is the server's status code; 0 when the send failed without an answer.
	Code v2.Code
	// Err is the client's error.
	Err error

	ctxErr  error
	invalid *message.ValidationError
}

func newSendError(ctx context.Context, topic string, err error) *SendError {
	e := &SendError{Topic: topic, Err: err, ctxErr: ctx.Err()}
	if rs, ok := rmq.AsErrRpcStatus(err); ok {
		e.Code = v2.Code(rs.GetCode())
		if field := invalidField[e.Code]; field != "" {
			e.invalid = &message.ValidationError{Field: field, Reason: fmt.Sprintf("refused by the server: %s: %s", e.Code, rs.GetMessage())}
		}
	}
	return e
}

// invalidField names the message field a status code refuses.
var invalidField = map[v2.Code]string{
	v2.Code_ILLEGAL_TOPIC: "topic", v2.Code_ILLEGAL_MESSAGE_TAG: "tag", v2.Code_ILLEGAL_MESSAGE_KEY: "keys",
	v2.Code_ILLEGAL_MESSAGE_GROUP: "message group", v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY: "properties",
	v2.Code_MESSAGE_PROPERTIES_TOO_LARGE: "properties", v2.Code_MESSAGE_BODY_EMPTY: "body",
	v2.Code_MESSAGE_BODY_TOO_LARGE: "body", v2.Code_PAYLOAD_TOO_LARGE: "body",
	v2.Code_ILLEGAL_DELIVERY_TIME: "delivery time", v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: "properties",
	v2.Code_ILLEGAL_MESSAGE_ID: "message id",
}

// Error implements error: "rocketmqv5: send to topic T: <the client's error>".
func (e *SendError) Error() string {
	return fmt.Sprintf("rocketmqv5: send to topic %q: %v", e.Topic, e.Err)
}

// Unwrap returns Err, ctx's error when the caller's context had ended, and the
// *message.ValidationError of a code that refuses the message.
func (e *SendError) Unwrap() []error {
	out := []error{e.Err}
	if e.ctxErr != nil {
		out = append(out, e.ctxErr)
	}
	if e.invalid != nil {
		out = append(out, e.invalid)
	}
	return out
}

// Retryable reports whether the same send may succeed later: no answer (Code 0: the
// message may or may not be stored), the server codes 5xxxx except NOT_IMPLEMENTED,
// UNSUPPORTED, VERSION_UNSUPPORTED and VERIFY_FIFO_MESSAGE_UNSUPPORTED, and
// REQUEST_TIMEOUT, TOO_MANY_REQUESTS and TOPIC_NOT_FOUND (a topic may be created, as
// the 4.x producer retries TOPIC_NOT_EXIST). Every other 4xxxx code (a bad message,
// UNAUTHORIZED, FORBIDDEN, …) is not. [github.com/sluicemq/sluice/middleware/redismw.Park]
// parks only retryable sends.
func (e *SendError) Retryable() bool {
	switch c := e.Code; {
	case c == 0:
		return true
	case c == v2.Code_REQUEST_TIMEOUT, c == v2.Code_TOO_MANY_REQUESTS, c == v2.Code_TOPIC_NOT_FOUND:
		return true
	case c == v2.Code_NOT_IMPLEMENTED, c == v2.Code_UNSUPPORTED, c == v2.Code_VERSION_UNSUPPORTED, c == v2.Code_VERIFY_FIFO_MESSAGE_UNSUPPORTED:
		return false
	default:
		return c >= 50000 && c < 60000
	}
}

// FromV5 converts a message the v5 client delivered: topic, body (shared), user
// properties (copied) plus TAGS (its tag), KEYS (its keys, space-separated), UNIQ_KEY
// (its message id, so [middleware.StableKey] falls back to it), __SHARDINGKEY (its
// message group) and TIMER_DELIVER_MS (its delivery time); MsgID = the message id,
// QueueOffset, BornTimestamp, BornHost (zero unless it is an ip:port; the v5 clients send
// a host name), ReconsumeTimes = delivery attempt − 1. The v5 client does not show the
// queue (QueueID -1), store time or host, or broker name.
func FromV5(mv *rmq.MessageView) *message.MessageExt {
	props := make(map[string]string, len(mv.GetProperties())+5)
	for k, v := range mv.GetProperties() {
		props[k] = v
	}
	if tag := mv.GetTag(); tag != nil && *tag != "" {
		props[message.PropertyTags] = *tag
	}
	if keys := mv.GetKeys(); len(keys) > 0 {
		props[message.PropertyKeys] = strings.Join(keys, message.KeySeparator)
	}
	if id := mv.GetMessageId(); id != "" {
		props[message.PropertyUniqClientMessageIDKeyIdx] = id
	}
	if g := mv.GetMessageGroup(); g != nil && *g != "" {
		props[PropertyMessageGroup] = *g
	}
	if at := mv.GetDeliveryTimestamp(); at != nil {
		props[message.PropertyTimerDeliverMs] = strconv.FormatInt(at.UnixMilli(), 10)
	}
	out := &message.MessageExt{
		Message:        message.Message{Topic: mv.GetTopic(), Body: mv.GetBody(), Properties: props},
		MsgID:          mv.GetMessageId(),
		QueueID:        -1,
		QueueOffset:    mv.GetOffset(),
		ReconsumeTimes: max(mv.GetDeliveryAttempt()-1, 0),
	}
	if bt := mv.GetBornTimestamp(); bt != nil {
		out.BornTimestamp = bt.UnixMilli()
	}
	if bh := mv.GetBornHost(); bh != nil {
		out.BornHost, _ = netip.ParseAddrPort(*bh)
	}
	return out
}

// Component adapts a client object with GracefulStop() error (rmq.Producer,
// rmq.SimpleConsumer, rmq.PushConsumer) to Shutdown(ctx) error, as package lifecycle
// expects. When ctx ends first it returns ctx's error and GracefulStop keeps running in
// its goroutine until it returns (the official client's GracefulStop takes no context).
func Component(c interface{ GracefulStop() error }) interface {
	Shutdown(ctx context.Context) error
} {
	return stopper{c}
}

type stopper struct {
	c interface{ GracefulStop() error }
}

func (s stopper) Shutdown(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.c.GracefulStop() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("rocketmqv5: client stop still running: %w", ctx.Err())
	}
}
