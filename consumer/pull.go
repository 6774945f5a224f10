package consumer

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// flowControlPause is how long a queue's pulling pauses while it has too many cached
// messages (as the Go client does), or while an orderly queue is not locked.
const flowControlPause = 50 * time.Millisecond

// pullLoop long-polls one assigned queue until ctx is done or the queue is dropped.
// Pulling pauses while the queue holds PullThresholdForQueue messages or
// PullThresholdSizeForQueue body bytes that have not finished (flow control), and, for
// orderly clustering consumers, while the queue's broker lock is not held.
func (c *PushConsumer) pullLoop(ctx context.Context, pq *processQueue) {
	mq := pq.mq
	next := pq.commitOffset()
	for ctx.Err() == nil && !pq.dropped.Load() {
		if n, b := pq.load(); n >= c.cfg.PullThresholdForQueue || b >= c.cfg.PullThresholdSizeForQueue ||
			(c.orderlyLocks() && !pq.locked(time.Now())) {
			pq.flowPauses.Add(1)
			if !sleep(ctx, flowControlPause) {
				return
			}
			continue
		}
		a := pullArgs{mq: mq, offset: next, maxNums: c.cfg.PullBatchSize, sysFlag: wire.PullFlagSuspend,
			suspend: c.cfg.suspendTimeout, expressionType: "TAG"} // no SUBSCRIPTION bit: the heartbeat's subscription applies
		if c.cfg.MessageModel == Clustering {
			// The broker stores the committed offset with the pull (docs/protocol.md §7.5).
			if commit := pq.commitOffset(); commit > 0 {
				a.sysFlag |= wire.PullFlagCommitOffset
				a.commitOffset = commit
			}
		}
		r, err := c.broker.pull(ctx, a)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var re *remoting.ResponseError
			if errors.As(err, &re) {
				c.log.Warn("consumer: pull refused", "queue", mq.String(), "code", re.Code.String(), "remark", re.Remark)
			} else {
				// Never skip what we cannot read: pull the same offset again later.
				c.log.Warn("consumer: pull failed", "queue", mq.String(), "offset", next, "err", err)
			}
			if !sleep(ctx, c.cfg.pullErrorBackoff) {
				return
			}
			continue
		}
		switch r.code {
		case remoting.Success:
			kept := c.prepare(mq, r.msgs, r.minOffset, r.maxOffset)
			kept = pq.put(kept, r.nextBegin)
			next = r.nextBegin
			if c.cfg.Orderly {
				pq.signal()
			} else if !c.dispatch(ctx, pq, kept) {
				return
			}
		case remoting.PullNotFound, remoting.PullRetryImmediately:
			pq.advance(r.nextBegin)
			next = r.nextBegin
		case remoting.PullOffsetMoved:
			c.offsetMoved(pq, r.nextBegin)
			return
		}
	}
}

// prepare filters pulled messages by the subscription's exact tags (brokers filter by
// hash code only), restores the original topic of retry messages (property
// RETRY_TOPIC), and sets the MIN_OFFSET / MAX_OFFSET properties.
func (c *PushConsumer) prepare(mq message.MessageQueue, msgs []*message.MessageExt, minOff, maxOff int64) []*message.MessageExt {
	c.mu.Lock()
	sub := c.subs[mq.Topic]
	c.mu.Unlock()
	minS, maxS := strconv.FormatInt(minOff, 10), strconv.FormatInt(maxOff, 10)
	kept := msgs[:0]
	for _, m := range msgs {
		if sub != nil && sub.tags != nil && !sub.tags[m.Tag()] {
			continue
		}
		if c.retryTopic != "" && m.Topic == c.retryTopic {
			if orig := m.Property(message.PropertyRetryTopic); orig != "" {
				m.Topic = orig
			}
		}
		m.SetProperty(message.PropertyMinOffset, minS)
		m.SetProperty(message.PropertyMaxOffset, maxS)
		kept = append(kept, m)
	}
	return kept
}

// offsetMoved handles PULL_OFFSET_MOVED (21; docs/protocol.md §7.4): the queue is dropped, the
// broker's nextBeginOffset is stored as the group's offset, and a rebalance re-adds the
// queue from there. Unlike the official clients there is no 10 s pause: results of
// handlers still running for the dropped queue no longer move its offset.
func (c *PushConsumer) offsetMoved(pq *processQueue, nextBegin int64) {
	c.log.Warn("consumer: pull offset moved", "queue", pq.mq.String(), "nextBeginOffset", nextBegin)
	pq.dropped.Store(true)
	c.mu.Lock()
	mine := c.pqs[pq.mq] == pq
	if mine {
		delete(c.pqs, pq.mq)
	}
	c.mu.Unlock()
	if mine && c.cfg.Orderly {
		c.releaseOrderly(pq, false)
	}
	c.persistMu.Lock()
	if err := c.offsets.update(c.ctx, pq.mq, nextBegin); err != nil {
		c.log.Warn("consumer: storing moved offset failed", "queue", pq.mq.String(), "err", err)
	}
	if err := c.offsets.flush(); err != nil {
		c.log.Warn("consumer: flushing offsets failed", "err", err)
	}
	c.persistMu.Unlock()
	c.kickRebalance()
}
