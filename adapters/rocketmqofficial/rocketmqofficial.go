// Package rocketmqofficial puts the official RocketMQ Go client
// (github.com/apache/rocketmq-client-go/v2) behind Sluice's middleware shapes, so a team
// that already runs it gets the reliability middleware (Keys, Park, Dedup, Progress, …)
// without switching clients:
//
//   - [SendFunc] turns a started rocketmq.Producer into a [middleware.SendFunc];
//   - [ConsumeHandler] turns a [middleware.ConsumeFunc] (a handler wrapped in a consume
//     chain) into the callback its push consumer's Subscribe takes;
//   - [Component] adapts the client's Shutdown() to the Shutdown(ctx) of package
//     lifecycle.
//
// It is a package of its own so the official client stays out of the core packages'
// import graph. Messages map one to one: topic, body, flag and all properties (TAGS,
// KEYS, DELAY, SHARDING_KEY, UNIQ_KEY, user properties) are RocketMQ properties in both.
package rocketmqofficial

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// ErrUnknownStatus is wrapped when the official client reports SendUnknownError without
// an error of its own.
var ErrUnknownStatus = errors.New("rocketmqofficial: send finished with status SendUnknownError")

// SendFunc returns a [middleware.SendFunc] that sends through p (which must be started)
// with SendSync. Like Sluice's producer it sets property UNIQ_KEY (message.NewUniqID)
// on msg when missing, so a message parked and resent keeps its message id. The result's
// Status, MsgID, OffsetMsgID, Queue, QueueOffset, TransactionID and RegionID come from
// the client's SendResult. Errors: the client's error wrapped ("rocketmqofficial: send
// to topic T: …"; its retries have already been made, so [github.com/sluicemq/sluice/middleware/redismw.Park] treats it as
// retriable unless it is a validation failure), or ErrUnknownStatus.
func SendFunc(p rocketmq.Producer) middleware.SendFunc {
	return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		if msg.UniqKey() == "" {
			msg.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
		}
		res, err := p.SendSync(ctx, ToOfficial(msg))
		if err != nil {
			return nil, fmt.Errorf("rocketmqofficial: send to topic %q: %w", msg.Topic, err)
		}
		if res == nil || res.Status == primitive.SendUnknownError {
			return nil, fmt.Errorf("rocketmqofficial: send to topic %q: %w", msg.Topic, ErrUnknownStatus)
		}
		return FromOfficialResult(res), nil
	}
}

// ToOfficial converts msg to the official client's message: topic, body, flag and a copy
// of every property.
func ToOfficial(msg *message.Message) *primitive.Message {
	m := primitive.NewMessage(msg.Topic, append([]byte(nil), msg.Body...))
	m.Flag = msg.Flag
	for k, v := range msg.Properties {
		m.WithProperty(k, v)
	}
	return m
}

// FromOfficialResult converts the official client's SendResult.
func FromOfficialResult(r *primitive.SendResult) *message.SendResult {
	out := &message.SendResult{
		MsgID:         r.MsgID,
		OffsetMsgID:   r.OffsetMsgID,
		QueueOffset:   r.QueueOffset,
		TransactionID: r.TransactionID,
		RegionID:      r.RegionID,
	}
	switch r.Status {
	case primitive.SendFlushDiskTimeout:
		out.Status = message.SendFlushDiskTimeout
	case primitive.SendFlushSlaveTimeout:
		out.Status = message.SendFlushSlaveTimeout
	case primitive.SendSlaveNotAvailable:
		out.Status = message.SendSlaveNotAvailable
	default:
		out.Status = message.SendOK
	}
	if r.MessageQueue != nil {
		out.Queue = message.MessageQueue{Topic: r.MessageQueue.Topic, BrokerName: r.MessageQueue.BrokerName, QueueID: r.MessageQueue.QueueId}
	}
	return out
}

// FromOfficialExt converts a message the official push consumer delivered: the message
// (topic, body, flag, properties), ids, queue id and offset, commitlog offset, sizes,
// flags, timestamps, hosts (unparsable host strings stay zero), reconsume count and the
// broker name.
func FromOfficialExt(m *primitive.MessageExt) *message.MessageExt {
	out := &message.MessageExt{
		Message: message.Message{Topic: m.Topic, Flag: m.Flag, Body: m.Body, Properties: m.GetProperties()},
		MsgID:   m.MsgId, OffsetMsgID: m.OffsetMsgId, StoreSize: m.StoreSize, BodyCRC: m.BodyCRC,
		QueueOffset: m.QueueOffset, CommitLogOffset: m.CommitLogOffset, SysFlag: m.SysFlag,
		BornTimestamp: m.BornTimestamp, StoreTimestamp: m.StoreTimestamp, ReconsumeTimes: m.ReconsumeTimes,
		PreparedTransactionOffset: m.PreparedTransactionOffset,
	}
	if len(out.Properties) == 0 {
		out.Properties = nil
	}
	if m.Queue != nil {
		out.QueueID = int32(m.Queue.QueueId)
		out.BrokerName = m.Queue.BrokerName
	}
	out.BornHost, _ = netip.ParseAddrPort(m.BornHost)
	out.StoreHost, _ = netip.ParseAddrPort(m.StoreHost)
	return out
}

// ConsumeHandler returns the callback for the official push consumer's Subscribe that
// converts the delivered messages (FromOfficialExt) and runs h — typically a handler
// wrapped by middleware.ChainConsume. message.ConsumeSuccess with a nil error
// acknowledges the batch; ReconsumeLater, a non-nil error or a panic in h returns
// consumer.ConsumeRetryLater (redelivery through %RETRY%<group>), and the error is
// logged to logger (nil: slog.Default()) with topic and message ids only — it is not
// handed to the client, which would log whole messages.
func ConsumeHandler(h middleware.ConsumeFunc, logger *slog.Logger) func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	if logger == nil {
		logger = slog.Default()
	}
	return func(ctx context.Context, msgs ...*primitive.MessageExt) (res consumer.ConsumeResult, err error) {
		batch := make([]*message.MessageExt, len(msgs))
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			batch[i] = FromOfficialExt(m)
			ids[i] = m.MsgId
		}
		defer func() {
			if r := recover(); r != nil {
				logger.Error("rocketmqofficial: consume handler panicked; messages will be redelivered", "panic", r, "msgIds", ids)
				res, err = consumer.ConsumeRetryLater, nil
			}
		}()
		result, herr := h(ctx, batch)
		if herr != nil || result != message.ConsumeSuccess {
			if herr != nil {
				topic := ""
				if len(msgs) > 0 {
					topic = msgs[0].Topic
				}
				logger.Warn("rocketmqofficial: consume handler failed; messages will be redelivered", "topic", topic, "msgIds", ids, "err", herr)
			}
			return consumer.ConsumeRetryLater, nil
		}
		return consumer.ConsumeSuccess, nil
	}
}

// Component adapts a client object with Shutdown() error (rocketmq.Producer,
// rocketmq.PushConsumer) to Shutdown(ctx) error, as package lifecycle expects. When ctx
// ends first it returns ctx's error and the client's Shutdown keeps running in its
// goroutine until it returns (the official client's Shutdown takes no context).
func Component(c interface{ Shutdown() error }) interface {
	Shutdown(ctx context.Context) error
} {
	return shutdowner{c}
}

type shutdowner struct{ c interface{ Shutdown() error } }

func (s shutdowner) Shutdown(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.c.Shutdown() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("rocketmqofficial: client shutdown still running: %w", ctx.Err())
	}
}
