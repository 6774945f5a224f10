package consumer

import (
	"context"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// PULL_MESSAGE sysFlag bits (Java PullSysFlag; PROTOCOL §3.4).
const (
	pullFlagCommitOffset = 1 << 0 // the broker stores commitOffset for the group
	pullFlagSuspend      = 1 << 1 // long polling allowed
	pullFlagSubscription = 1 << 2 // use the request's subscription, not the heartbeat's
)

// flowControlPause is how long a queue's pulling pauses while it has too many cached
// messages (as the Go client does).
const flowControlPause = 50 * time.Millisecond

// pullRPCExtra is added to the long-polling suspend time to get the pull RPC timeout
// (20 s suspend → 30 s timeout, PROTOCOL §3.4).
const pullRPCExtra = 10 * time.Second

// pullLoop long-polls one assigned queue until ctx is done or the queue is dropped.
func (c *PushConsumer) pullLoop(ctx context.Context, pq *processQueue) {
	mq := pq.mq
	next := pq.commitOffset()
	for ctx.Err() == nil && !pq.dropped.Load() {
		if n, b := pq.load(); n >= c.cfg.PullThresholdForQueue || b >= c.cfg.PullThresholdSizeForQueue {
			if !sleep(ctx, flowControlPause) {
				return
			}
			continue
		}
		addr, ok := c.cl.BrokerAddr(mq.BrokerName)
		if !ok {
			c.log.Warn("consumer: no master address for queue", "queue", mq.String())
			if !sleep(ctx, c.cfg.pullErrorBackoff) {
				return
			}
			continue
		}
		commit := pq.commitOffset()
		sysFlag := pullFlagSuspend
		if commit > 0 {
			sysFlag |= pullFlagCommitOffset
		}
		ext := map[string]string{
			"consumerGroup":        c.cfg.Group,
			"topic":                mq.Topic,
			"queueId":              strconv.Itoa(mq.QueueID),
			"queueOffset":          strconv.FormatInt(next, 10),
			"maxMsgNums":           strconv.Itoa(c.cfg.PullBatchSize),
			"sysFlag":              strconv.Itoa(sysFlag),
			"commitOffset":         strconv.FormatInt(commit, 10),
			"suspendTimeoutMillis": strconv.FormatInt(c.cfg.suspendTimeout.Milliseconds(), 10),
			"subscription":         "", // the broker uses the heartbeat's subscription (no SUBSCRIPTION bit)
			"subVersion":           "0",
			"expressionType":       "TAG",
		}
		pctx, cancel := context.WithTimeout(ctx, c.cfg.suspendTimeout+pullRPCExtra)
		resp, err := c.cl.InvokeSync(pctx, addr, remoting.NewRequest(remoting.PullMessage, ext, nil))
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("consumer: pull failed", "queue", mq.String(), "err", err)
			if !sleep(ctx, c.cfg.pullErrorBackoff) {
				return
			}
			continue
		}
		code := resp.ResponseCode()
		switch code {
		case remoting.Success, remoting.PullNotFound, remoting.PullRetryImmediately, remoting.PullOffsetMoved:
		default:
			c.log.Warn("consumer: pull refused", "queue", mq.String(), "code", code.String(), "remark", resp.Remark)
			if !sleep(ctx, c.cfg.pullErrorBackoff) {
				return
			}
			continue
		}
		nextBegin, err := resp.ExtInt64("nextBeginOffset", true)
		if err != nil {
			c.log.Warn("consumer: bad pull response", "queue", mq.String(), "err", err)
			if !sleep(ctx, c.cfg.pullErrorBackoff) {
				return
			}
			continue
		}
		switch code {
		case remoting.Success:
			msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{Decompress: true})
			if err != nil {
				// Never skip what we cannot read: pull the same offset again later.
				c.log.Error("consumer: cannot decode pulled messages", "queue", mq.String(), "offset", next, "err", err)
				if !sleep(ctx, c.cfg.pullErrorBackoff) {
					return
				}
				continue
			}
			minOff, _ := resp.ExtInt64("minOffset", false)
			maxOff, _ := resp.ExtInt64("maxOffset", false)
			kept := c.prepare(mq, msgs, minOff, maxOff)
			kept = pq.put(kept, nextBegin)
			next = nextBegin
			if !c.dispatch(ctx, pq, kept) {
				return
			}
		case remoting.PullNotFound, remoting.PullRetryImmediately:
			pq.advance(nextBegin)
			next = nextBegin
		case remoting.PullOffsetMoved:
			c.offsetMoved(pq, nextBegin)
			return
		}
	}
}

// prepare filters pulled messages by the subscription's exact tags (brokers filter by
// hash code only), restores the original topic of retry messages (property
// RETRY_TOPIC), and sets BrokerName and the MIN_OFFSET / MAX_OFFSET properties.
func (c *PushConsumer) prepare(mq message.MessageQueue, msgs []*message.MessageExt, minOff, maxOff int64) []*message.MessageExt {
	c.mu.Lock()
	sub := c.subs[mq.Topic]
	c.mu.Unlock()
	kept := msgs[:0]
	for _, m := range msgs {
		if sub != nil && sub.tags != nil && !sub.tags[m.Tag()] {
			continue
		}
		m.BrokerName = mq.BrokerName
		if m.Topic == c.retryTopic {
			if orig := m.Property(message.PropertyRetryTopic); orig != "" {
				m.Topic = orig
			}
		}
		m.SetProperty(message.PropertyMinOffset, strconv.FormatInt(minOff, 10))
		m.SetProperty(message.PropertyMaxOffset, strconv.FormatInt(maxOff, 10))
		kept = append(kept, m)
	}
	return kept
}

// offsetMoved handles PULL_OFFSET_MOVED (21; PROTOCOL §7.4): the queue is dropped, the
// broker's nextBeginOffset is stored as the group's offset, and a rebalance re-adds the
// queue from there. Unlike the official clients there is no 10 s pause: results of
// handlers still running for the dropped queue are ignored anyway.
func (c *PushConsumer) offsetMoved(pq *processQueue, nextBegin int64) {
	c.log.Warn("consumer: pull offset moved", "queue", pq.mq.String(), "nextBeginOffset", nextBegin)
	pq.dropped.Store(true)
	c.mu.Lock()
	if c.pqs[pq.mq] == pq {
		delete(c.pqs, pq.mq)
	}
	c.mu.Unlock()
	if err := c.updateOffset(c.ctx, pq.mq, nextBegin); err != nil {
		c.log.Warn("consumer: storing moved offset failed", "queue", pq.mq.String(), "err", err)
	}
	c.kickRebalance()
}
