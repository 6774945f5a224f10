package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// dispatch splits pulled messages into handler batches of at most
// ConsumeMessageBatchMaxSize consecutive messages of one (restored) topic and hands them
// to the workers. It returns false if ctx ended first; undispatched messages stay
// unfinished, so the committed offset does not pass them.
func (c *PushConsumer) dispatch(ctx context.Context, pq *processQueue, msgs []*message.MessageExt) bool {
	// One allocation for the pull's requests: at most one per message, usually
	// len/ConsumeMessageBatchMaxSize rounded up.
	reqs := make([]consumeRequest, 0, (len(msgs)+c.cfg.ConsumeMessageBatchMaxSize-1)/c.cfg.ConsumeMessageBatchMaxSize)
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && j-i < c.cfg.ConsumeMessageBatchMaxSize && msgs[j].Topic == msgs[i].Topic {
			j++
		}
		if len(reqs) == cap(reqs) {
			reqs = make([]consumeRequest, 0, len(msgs)-i) // a topic change split a batch
		}
		reqs = append(reqs, consumeRequest{pq: pq, msgs: msgs[i:j:j], topic: msgs[i].Topic})
		if !c.submit(ctx, &reqs[len(reqs)-1]) {
			return false
		}
		i = j
	}
	return true
}

func (c *PushConsumer) submit(ctx context.Context, req *consumeRequest) bool {
	select {
	case c.consumeCh <- req:
		return true
	case <-ctx.Done():
		return false
	}
}

// worker runs handler batches until Shutdown begins. Stop wins over work: Go's select
// picks at random among ready cases, so the worker checks workersStop before it waits and
// again after it took a request (a request it drops stays unfinished, so the committed
// offset never passes it). Once Shutdown has closed workersStop no handler starts.
func (c *PushConsumer) worker() {
	defer c.workers.Done()
	for !c.stopping() {
		select {
		case <-c.workersStop:
			return
		case req := <-c.consumeCh:
			if c.stopping() {
				return
			}
			c.consume(req)
		}
	}
}

// stopping reports whether Shutdown has begun (workersStop is closed); no handler may
// start then.
func (c *PushConsumer) stopping() bool {
	select {
	case <-c.workersStop:
		return true
	default:
		return false
	}
}

// consume runs one batch. Success finishes the messages. ReconsumeLater, an error or a
// panic: in clustering mode each message is sent back for redelivery
// (CONSUMER_SEND_MSG_BACK, else a normal send to %RETRY%<group>), and a message that
// cannot be sent back either stays unfinished and runs again locally after a delay; in
// broadcasting mode the failure is logged and the messages count as finished (no
// consume retry).
func (c *PushConsumer) consume(req *consumeRequest) {
	// Count the call before checking dropped: dropQueues sets dropped before it reads
	// running, so either this call sees the drop, or the drop waits for this call.
	req.pq.running.Add(1)
	defer req.pq.running.Add(-1)
	if req.pq.dropped.Load() {
		return // the queue's next owner delivers these again
	}
	if req = c.deadLetterUndecodable(req); req == nil {
		return
	}
	res, err := c.run(req.topic, req.msgs)
	if err == nil && res == message.ConsumeSuccess {
		req.pq.remove(req.msgs)
		return
	}
	if c.cfg.MessageModel == Broadcasting {
		c.log.Warn("consumer: handler failed; broadcasting consumers do not retry", "topic", req.topic, "queue", req.pq.mq.String(),
			"offset", req.msgs[0].QueueOffset, "count", len(req.msgs), "result", res.String(), "err", err)
		req.pq.remove(req.msgs)
		return
	}
	if c.handlerCtx.Err() != nil {
		// Shutdown gave up waiting and cancelled the handlers: leave the messages
		// unfinished (the stored offset stays below them) rather than also sending
		// them back, which would deliver them twice.
		return
	}
	c.log.Warn("consumer: handler failed, sending back for redelivery", "topic", req.topic, "queue", req.pq.mq.String(),
		"offset", req.msgs[0].QueueOffset, "count", len(req.msgs), "result", res.String(), "err", err)
	if req.pq.dropped.Load() {
		return
	}
	var done, failed []*message.MessageExt
	for _, m := range req.msgs {
		if err := c.sendBack(m, 0); err != nil {
			c.log.Warn("consumer: send-back failed; retrying locally", "msgId", m.MsgID, "err", err)
			m.ReconsumeTimes++
			failed = append(failed, m)
		} else {
			done = append(done, m)
		}
	}
	req.pq.remove(done)
	if len(failed) > 0 {
		c.retryLater(&consumeRequest{pq: req.pq, msgs: failed, topic: req.topic})
	}
}

// deadLetterUndecodable moves the messages of req whose body could not be decompressed
// (MessageExt.DecodeErr) straight to %DLQ%<group>, logging why, and returns req with the
// others (nil when none is left). One whose move fails is retried locally later; a
// broadcasting consumer, which has no DLQ, logs and skips it.
func (c *PushConsumer) deadLetterUndecodable(req *consumeRequest) *consumeRequest {
	if !slices.ContainsFunc(req.msgs, func(m *message.MessageExt) bool { return m.DecodeErr != nil }) {
		return req // the usual case: nothing to sort out
	}
	var good, bad, failed []*message.MessageExt
	for _, m := range req.msgs {
		if m.DecodeErr == nil {
			good = append(good, m)
			continue
		}
		c.log.Error("consumer: message body cannot be decompressed; not delivered", "topic", req.topic, "queue", req.pq.mq.String(),
			"offset", m.QueueOffset, "msgId", m.MsgID, "err", m.DecodeErr)
		if c.cfg.MessageModel == Broadcasting {
			bad = append(bad, m)
			continue
		}
		if err := c.sendBack(m, -1); err != nil {
			c.log.Warn("consumer: moving an undecodable message to the DLQ failed; retrying it", "msgId", m.MsgID, "err", err)
			failed = append(failed, m)
			continue
		}
		bad = append(bad, m)
	}
	if len(bad) == 0 && len(failed) == 0 {
		return req
	}
	req.pq.remove(bad)
	if len(failed) > 0 {
		c.retryLater(&consumeRequest{pq: req.pq, msgs: failed, topic: req.topic})
	}
	if len(good) == 0 {
		return nil
	}
	return &consumeRequest{pq: req.pq, msgs: good, topic: req.topic}
}

// run sets CONSUME_START_TIME and calls the handler of topic's subscription. A message
// whose body could not be decompressed fails the batch without running the handler.
func (c *PushConsumer) run(topic string, msgs []*message.MessageExt) (message.ConsumeResult, error) {
	for _, m := range msgs {
		if m.DecodeErr != nil {
			return message.ReconsumeLater, fmt.Errorf("message %s at offset %d: %w", m.MsgID, m.QueueOffset, m.DecodeErr)
		}
	}
	now := c.startStamp.format(time.Now().UnixMilli())
	for _, m := range msgs {
		m.SetProperty(message.PropertyConsumeStartTimestamp, now)
	}
	c.mu.Lock()
	sub := c.subs[topic]
	c.mu.Unlock()
	if sub == nil || sub.handler == nil {
		return message.ReconsumeLater, fmt.Errorf("no subscription for topic %q", topic)
	}
	// The handler gets its own slice: one that reorders or nils its elements must not
	// change which messages the consumer then finishes or sends back.
	return c.call(sub, slices.Clone(msgs))
}

// call runs the handler, turning a panic into an error.
func (c *PushConsumer) call(sub *subscription, msgs []*message.MessageExt) (res message.ConsumeResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = message.ReconsumeLater, fmt.Errorf("handler panic: %v", p)
		}
	}()
	return sub.handler(c.handlerCtx, msgs)
}

// retryLater runs req again after localRetryDelay (5 s). During Shutdown it does
// nothing: the messages stay unfinished and the offset does not pass them.
func (c *PushConsumer) retryLater(req *consumeRequest) {
	c.spawn(func() {
		if sleep(c.ctx, c.cfg.localRetryDelay) {
			c.submit(c.ctx, req)
		}
	})
}

// sendBack asks the broker that holds m to redeliver it later: CONSUMER_SEND_MSG_BACK
// (request code 36; docs/protocol.md §3.8) with maxReconsumeTimes and delayLevel — 0 lets the
// broker delay by level 3 + reconsume count, or move m to %DLQ%<group> once the count
// has reached maxReconsumeTimes; -1 moves m to the DLQ at once. If that fails and m is
// to be retried (not to go to the DLQ), m is sent to %RETRY%<group> as a normal message
// (§7.5).
func (c *PushConsumer) sendBack(m *message.MessageExt, delayLevel int) error {
	ctx, cancel := context.WithTimeout(context.Background(), client.DefaultBrokerTimeout)
	defer cancel()
	maxRe := c.cfg.maxReconsume()
	ext := wire.SendBackHeader{Offset: m.CommitLogOffset, Group: c.cfg.Group, DelayLevel: int32(delayLevel),
		OriginMsgID: m.MsgID, OriginTopic: m.Topic, MaxReconsumeTimes: int32(maxRe)}.Ext()
	addr, ok := c.cl.BrokerAddr(m.BrokerName)
	if !ok && m.StoreHost.IsValid() {
		addr, ok = m.StoreHost.String(), true
	}
	var first error
	if ok {
		resp, err := c.cl.InvokeSync(ctx, addr, remoting.NewRequest(remoting.ConsumerSendMsgBack, ext, nil))
		switch {
		case err != nil:
			first = requestError(remoting.ConsumerSendMsgBack, addr, err)
		case resp.ResponseCode() != remoting.Success:
			first = resp.ResponseErrFor(remoting.ConsumerSendMsgBack, m.BrokerName, addr)
		default:
			return nil
		}
	} else {
		first = fmt.Errorf("no address for broker %q", m.BrokerName)
	}
	if delayLevel < 0 || c.retryTopic == "" || (maxRe >= 0 && int(m.ReconsumeTimes) >= maxRe) {
		// Bound for the DLQ: a normal send could not put it there safely (it would
		// auto-create the DLQ readable); the caller keeps the message and retries.
		return first
	}
	c.log.Debug("consumer: send-back refused; sending to the retry topic", "msgId", m.MsgID, "err", first)
	if err := c.sendToRetryTopic(ctx, m); err != nil {
		return errors.Join(first, err)
	}
	return nil
}

// sendToRetryTopic publishes m to %RETRY%<group> with SEND_MESSAGE_V2 as producer group
// CLIENT_INNER_PRODUCER: properties kept plus ORIGIN_MESSAGE_ID, RETRY_TOPIC (the
// original topic), DELAY = 3 + reconsume count, without TRAN_MSG; header reconsumeTimes
// = count + 1 and maxReconsumeTimes (docs/protocol.md §7.5; see the comment on the limit).
func (c *PushConsumer) sendToRetryTopic(ctx context.Context, m *message.MessageExt) error {
	rd, err := c.cl.Route(ctx, c.retryTopic)
	if err != nil {
		return err
	}
	qs, err := wire.PublishQueues(c.retryTopic, rd)
	if err != nil {
		return err
	}
	if len(qs) == 0 {
		return fmt.Errorf("consumer: no writable queue of %s", c.retryTopic)
	}
	mq := qs[rand.IntN(len(qs))]
	addr, ok := c.cl.BrokerAddr(mq.BrokerName)
	if !ok {
		return fmt.Errorf("consumer: no master address for broker %q", mq.BrokerName)
	}
	props := make(map[string]string, len(m.Properties)+4)
	for k, v := range m.Properties {
		props[k] = v
	}
	for _, k := range []string{message.PropertyTransactionPrepared, message.PropertyMinOffset, message.PropertyMaxOffset, message.PropertyConsumeStartTimestamp} {
		delete(props, k)
	}
	if props[message.PropertyOriginMessageID] == "" {
		props[message.PropertyOriginMessageID] = m.MsgID
	}
	props[message.PropertyRetryTopic] = m.Topic
	props[message.PropertyDelayTimeLevel] = strconv.Itoa(3 + int(m.ReconsumeTimes))
	props[message.PropertyReconsumeTime] = strconv.Itoa(int(m.ReconsumeTimes) + 1)
	props[message.PropertyMaxReconsumeTimes] = strconv.Itoa(c.cfg.maxReconsume())
	h := wire.SendHeader{
		ProducerGroup:         client.InnerProducerGroup,
		Topic:                 c.retryTopic,
		DefaultTopic:          message.AutoCreateTopicKey,
		DefaultTopicQueueNums: client.DefaultTopicQueueNums,
		QueueID:               int32(mq.QueueID),
		BornTimestamp:         time.Now().UnixMilli(),
		Flag:                  m.Flag,
		Properties:            message.MarshalProperties(props),
		ReconsumeTimes:        m.ReconsumeTimes + 1,
		// The broker moves a retry-topic send to the DLQ once the header's reconsume
		// count reaches this limit; the count here is already one higher than the
		// send-back path compares, so the limit is one higher too (sendBack only comes
		// here for a message still under the limit).
		MaxReconsumeTimes: int32(c.cfg.maxReconsume() + 1),
		BrokerName:        mq.BrokerName,
	}
	resp, err := c.cl.InvokeSync(ctx, addr, remoting.NewRequest(remoting.SendMessageV2, h.Ext(), m.Body))
	if err != nil {
		return requestError(remoting.SendMessageV2, addr, err)
	}
	if !client.SendStored(resp.ResponseCode()) {
		return &remoting.ResponseError{Code: resp.ResponseCode(), Remark: resp.Remark, Request: remoting.SendMessageV2, Broker: mq.BrokerName, Addr: addr}
	}
	return nil
}

// msStamp formats unix-millisecond timestamps as decimal strings (the
// CONSUME_START_TIME property), reusing the last string while the millisecond is the
// same: at high rates most handler calls of a millisecond share one string instead of
// allocating one each. Safe for concurrent use; the zero value is ready.
type msStamp struct{ last atomic.Pointer[stamp] }

type stamp struct {
	ms int64
	s  string
}

// format returns ms in decimal.
func (t *msStamp) format(ms int64) string {
	if p := t.last.Load(); p != nil && p.ms == ms {
		return p.s
	}
	p := &stamp{ms: ms, s: strconv.FormatInt(ms, 10)}
	t.last.Store(p)
	return p.s
}
