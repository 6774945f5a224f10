package producer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// SendBatch sends msgs in one SEND_BATCH_MESSAGE request (RocketMQ request code 320;
// body layout docs/protocol.md §4.5): the broker stores them in one message queue at
// consecutive queue offsets. All must share one topic, none may have a delay level or
// be transactional (TRAN_MSG), and the topic may not be a retry (%RETRY%) or DLQ (%DLQ%)
// topic or a system topic. The encoded batch — per message 22 bytes + body bytes +
// encoded properties bytes (message.BatchRecordSize), UNIQ_KEY included — must be at
// most MaxMessageSize bytes (default 4 MiB, the broker's maxMessageSize); SplitBatch cuts
// a larger slice into batches that fit. Each rule is checked before anything is sent,
// and a violation is a *message.ValidationError (Field "batch" or the message field).
//
// Each message without a UNIQ_KEY gets one (restored to none when the batch is
// refused); the result's MsgID and OffsetMsgID are the ids joined by ",", QueueOffset
// the first message's. Bodies are not compressed. The queue comes from Config.Selector
// (or WithSelector / WithQueue; a hash selector uses the first message's sharding key),
// retries as SendSync.
//
// Config.Middlewares cannot run around a batch: a middleware.SendFunc sends one message
// and returns its result, while a batch is one request with one result for all of them,
// so a step that changes, parks or resends single messages has nothing to act on. So
// that no step is skipped silently, SendBatch with Config.Middlewares set fails with a
// *MiddlewareError (errors.Is ErrMiddlewaresUnsupported) before anything is sent, unless
// the caller passes WithoutMiddlewares to send the batch as given (set keys yourself,
// e.g. with middleware.ContentKey).
func (p *Producer) SendBatch(ctx context.Context, msgs []*message.Message, opts ...SendOption) (*message.SendResult, error) {
	o := p.options(opts)
	if len(p.middlewares(o)) > 0 {
		return nil, &MiddlewareError{Path: "SendBatch", Reason: "a batch is one request with one result; pass WithoutMiddlewares to send it without the chain"}
	}
	pr, err := p.prepareBatch(msgs)
	if err != nil {
		return nil, err
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.inflight.Done()
	return p.sendPrepared(ctx, pr, o.selector, modeSync)
}

// prepareBatch checks and encodes a batch.
func (p *Producer) prepareBatch(msgs []*message.Message) (*prepared, error) {
	if err := checkBatchMessages(msgs); err != nil {
		return nil, err
	}
	assigned, joined := assignUniqKeys(msgs)
	body, err := message.EncodeBatch(msgs, p.cfg.MaxMessageSize)
	if err != nil {
		for _, m := range assigned {
			m.RemoveProperty(message.PropertyUniqClientMessageIDKeyIdx)
		}
		return nil, err
	}
	msgID := joined // every message got a new id: their ids joined by ","
	if len(assigned) < len(msgs) {
		var b strings.Builder
		for i, m := range msgs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(m.UniqKey())
		}
		msgID = b.String()
	}
	return &prepared{
		code: remoting.SendBatchMessage,
		header: wire.SendHeader{
			ProducerGroup:         p.cfg.Group,
			Topic:                 msgs[0].Topic,
			DefaultTopic:          message.AutoCreateTopicKey,
			DefaultTopicQueueNums: client.DefaultTopicQueueNums,
			BornTimestamp:         time.Now().UnixMilli(),
			Batch:                 true,
		},
		body:   body,
		msgID:  msgID,
		selMsg: msgs[0],
	}, nil
}

// checkBatchMessages checks what message.EncodeBatch does not: no messages, nil
// messages and system topics.
func checkBatchMessages(msgs []*message.Message) error {
	if len(msgs) == 0 {
		return &message.ValidationError{Field: "batch", Reason: "no messages"}
	}
	for i, m := range msgs {
		if m == nil {
			return &message.ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d is nil", i)}
		}
	}
	if message.IsSendForbiddenTopic(msgs[0].Topic) {
		return &message.ValidationError{Field: "topic", Reason: fmt.Sprintf("%q is a system topic producers may not send to", msgs[0].Topic)}
	}
	return nil
}

// assignUniqKeys gives every message without a UNIQ_KEY a new one (all made by one
// message.NewUniqIDs) and returns those messages and the new ids joined by ",".
func assignUniqKeys(msgs []*message.Message) ([]*message.Message, string) {
	var arr [64]int
	missing := arr[:0]
	for i, m := range msgs {
		if m.UniqKey() == "" {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return nil, ""
	}
	ids, joined := message.NewUniqIDs(len(missing))
	assigned := make([]*message.Message, len(missing))
	for j, i := range missing {
		assigned[j] = msgs[i].SetProperty(message.PropertyUniqClientMessageIDKeyIdx, ids[j])
	}
	return assigned, joined
}

// SplitBatch cuts msgs into consecutive batches, in order, each with an encoded size
// of at most maxBatchSize bytes (DefaultMaxMessageSize when <= 0; pass the producer's
// Config.MaxMessageSize if it differs), so that each can go to SendBatch. The size is
// the one SendBatch checks: per message 22 + body bytes + encoded properties bytes. To
// measure what will be sent, SplitBatch first gives every message without a UNIQ_KEY
// one, as SendBatch would. The batches share msgs' backing array.
//
// It checks the batch rules first and changes nothing when they fail: a
// *message.ValidationError for nil or invalid messages, a message that alone exceeds
// maxBatchSize, mixed topics, a delay level, a transactional message, or a retry, DLQ
// or system topic. An empty msgs gives no batches and no error.
func SplitBatch(msgs []*message.Message, maxBatchSize int) ([][]*message.Message, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	if maxBatchSize <= 0 {
		maxBatchSize = DefaultMaxMessageSize
	}
	if err := checkBatchMessages(msgs); err != nil {
		return nil, err
	}
	assigned, _ := assignUniqKeys(msgs)
	sizes, err := batchRecordSizes(msgs, maxBatchSize)
	if err != nil {
		for _, m := range assigned {
			m.RemoveProperty(message.PropertyUniqClientMessageIDKeyIdx)
		}
		return nil, err
	}
	var out [][]*message.Message
	start, size := 0, 0
	for i, s := range sizes {
		if size+s > maxBatchSize {
			out = append(out, msgs[start:i:i])
			start, size = i, 0
		}
		size += s
	}
	return append(out, msgs[start:]), nil
}

// batchRecordSizes checks every message against the batch rules (as message.EncodeBatch
// does) and returns its encoded record size.
func batchRecordSizes(msgs []*message.Message, maxBatchSize int) ([]int, error) {
	sizes := make([]int, len(msgs))
	topic := msgs[0].Topic
	for i, m := range msgs {
		if err := message.Validate(m, maxBatchSize); err != nil {
			return nil, err
		}
		switch {
		case m.Topic != topic:
			return nil, &message.ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d has topic %q, batch topic is %q: one topic per batch", i, m.Topic, topic)}
		case m.DelayLevel() > 0:
			return nil, &message.ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d has a delay level: batches cannot be delayed", i)}
		case m.Property(message.PropertyTransactionPrepared) == "true":
			return nil, &message.ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d is transactional: batches cannot be", i)}
		case message.IsRetryTopic(m.Topic) || message.IsDLQTopic(m.Topic):
			return nil, &message.ValidationError{Field: "batch", Reason: fmt.Sprintf("topic %q is a retry or DLQ topic", m.Topic)}
		}
		sizes[i] = message.BatchRecordSize(len(m.Body), message.EncodedPropertiesLen(m.Properties))
		if sizes[i] > maxBatchSize {
			return nil, &message.ValidationError{Field: "batch", Reason: fmt.Sprintf("message %d alone encodes larger than the batch limit", i),
				Limit: maxBatchSize, Value: sizes[i]}
		}
	}
	return sizes, nil
}
