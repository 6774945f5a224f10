package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/message"
)

// lockRetryDelay is how long an orderly consume loop waits before trying again to lock
// a queue whose lock lapsed.
const lockRetryDelay = time.Second

// orderlyLoop consumes one queue in offset order (Config.Orderly): it hands the oldest
// unfinished messages (at most ConsumeMessageBatchMaxSize, one topic) to the handler
// and moves on only when they finished. A failed batch (ReconsumeLater,
// SuspendCurrentQueueAMoment, an error or a panic) runs again after
// SuspendCurrentQueueTime with ReconsumeTimes raised by one, while the rest of the
// queue waits; a message that failed after MaxReconsumeTimes local retries is sent to
// %DLQ%<group> (CONSUMER_SEND_MSG_BACK with delay level -1) and the queue moves on. In
// clustering mode it consumes only while the queue's broker lock is held.
//
// It returns when ctx is done (queue dropped or Shutdown); a handler call in progress
// finishes first, so at most one call per queue ever runs.
func (c *PushConsumer) orderlyLoop(ctx context.Context, pq *processQueue) {
	for {
		if ctx.Err() != nil || pq.dropped.Load() {
			return
		}
		if c.orderlyLocks() && !pq.locked(time.Now()) {
			if !c.relock(ctx, pq) {
				if !sleep(ctx, lockRetryDelay) {
					return
				}
				continue
			}
		}
		msgs := pq.take(c.cfg.ConsumeMessageBatchMaxSize)
		if len(msgs) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-pq.ready:
			}
			continue
		}
		select {
		case c.orderSem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil || c.stopping() {
			// Both were ready and select chose the token: stop wins, no handler starts
			// after Shutdown began. The taken messages stay unfinished.
			<-c.orderSem
			return
		}
		pq.running.Add(1)
		res, err := c.run(msgs[0].Topic, msgs)
		pq.running.Add(-1)
		<-c.orderSem
		if err == nil && res == message.ConsumeSuccess {
			pq.remove(msgs)
			continue
		}
		retry := c.orderlyFailed(pq, msgs, res, err)
		if len(retry) == 0 {
			continue
		}
		if !sleep(ctx, c.cfg.SuspendCurrentQueueTime) {
			return
		}
	}
}

// orderlyFailed handles a failed orderly batch: messages that have used up
// MaxReconsumeTimes local retries go to %DLQ%<group> (and are finished; a broadcasting
// consumer, which has no DLQ, logs and skips them); the others get ReconsumeTimes+1 and
// are returned to run again. A message whose way to the DLQ fails is retried like the
// others, so the offset never passes it.
func (c *PushConsumer) orderlyFailed(pq *processQueue, msgs []*message.MessageExt, res message.ConsumeResult, herr error) []*message.MessageExt {
	maxRe := c.cfg.maxReconsume()
	var retry, dead []*message.MessageExt
	for _, m := range msgs {
		// A body that cannot be decompressed never will be: no local retries.
		exhausted := (maxRe >= 0 && int(m.ReconsumeTimes) >= maxRe) || m.DecodeErr != nil
		if exhausted && c.cfg.MessageModel == Broadcasting {
			// Broadcasting groups have no DLQ: give the message up.
			c.log.Warn("consumer: orderly message failed after its local retries; broadcasting consumers have no DLQ, skipping it",
				"queue", pq.mq.String(), "offset", m.QueueOffset, "msgId", m.MsgID, "reconsumeTimes", m.ReconsumeTimes)
			dead = append(dead, m)
			continue
		}
		if exhausted {
			if err := c.sendBack(m, -1); err != nil {
				c.log.Warn("consumer: moving a message to the DLQ failed; retrying it", "queue", pq.mq.String(),
					"offset", m.QueueOffset, "msgId", m.MsgID, "err", err)
			} else {
				c.log.Warn("consumer: message moved to the DLQ after its local retries", "queue", pq.mq.String(),
					"offset", m.QueueOffset, "msgId", m.MsgID, "reconsumeTimes", m.ReconsumeTimes)
				dead = append(dead, m)
				continue
			}
		}
		m.ReconsumeTimes++
		retry = append(retry, m)
	}
	pq.remove(dead)
	if len(retry) > 0 {
		c.log.Info("consumer: orderly batch failed; suspending the queue", "queue", pq.mq.String(), "offset", retry[0].QueueOffset,
			"count", len(retry), "result", res.String(), "err", herr, "suspend", c.cfg.SuspendCurrentQueueTime)
	}
	return retry
}

// relock asks the broker for pq's lock again (it lapsed: a failed renewal, or the
// client-side validity ran out) and reports whether it is held now.
func (c *PushConsumer) relock(ctx context.Context, pq *processQueue) bool {
	held, err := c.lockQueues(ctx, pq.mq.BrokerName, []message.MessageQueue{pq.mq})
	if err != nil {
		c.log.Warn("consumer: relocking queue failed", "queue", pq.mq.String(), "err", err)
		return false
	}
	if !held[pq.mq] {
		return false
	}
	pq.setLocked(time.Now())
	return true
}

// lockLoop renews the broker locks of all orderly queues — including those being
// released, whose last handler call has not returned yet — every lockRenewInterval
// (LOCK_BATCH_MQ, RocketMQ request code 41; Java RebalanceLockInterval 20 s). A queue
// the broker no longer grants stops consuming until it is locked again.
func (c *PushConsumer) lockLoop() {
	t := time.NewTicker(c.cfg.lockRenewInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		c.renewLocks()
	}
}

// renewLocks is one round of lockLoop. It holds lockMu from the snapshot of the queues
// to the last answer, so a queue whose release (releaseOrderly) unlocks it is either
// renewed before that unlock or not at all.
func (c *PushConsumer) renewLocks() {
	c.lockMu.Lock()
	defer c.lockMu.Unlock()
	c.mu.Lock()
	pqs := make(map[message.MessageQueue]*processQueue, len(c.pqs))
	mqs := make([]message.MessageQueue, 0, len(c.pqs))
	for mq, pq := range c.pqs {
		pqs[mq] = pq
		mqs = append(mqs, mq)
	}
	for mq := range c.draining {
		// Still finishing a handler call: keep the lock, or another consumer could
		// take the queue while this one still works on it.
		if _, ok := pqs[mq]; !ok {
			mqs = append(mqs, mq)
		}
	}
	c.mu.Unlock()
	for name, list := range byBroker(mqs) {
		held, err := c.lockQueuesLocked(c.ctx, name, list)
		if err != nil {
			if c.ctx.Err() == nil {
				c.log.Warn("consumer: renewing queue locks failed", "broker", name, "err", err)
			}
			continue
		}
		now := time.Now()
		for _, mq := range list {
			pq := pqs[mq]
			switch {
			case pq == nil: // draining
			case held[mq]:
				pq.setLocked(now)
			default:
				c.log.Warn("consumer: lost the lock of a queue", "queue", mq.String())
				pq.lockedUntil.Store(0)
			}
		}
	}
}

// lockQueues asks brokerName for the locks of mqs (LOCK_BATCH_MQ, request code 41) and
// returns those held now; see lockQueuesLocked.
func (c *PushConsumer) lockQueues(ctx context.Context, brokerName string, mqs []message.MessageQueue) (map[message.MessageQueue]bool, error) {
	c.lockMu.Lock()
	defer c.lockMu.Unlock()
	return c.lockQueuesLocked(ctx, brokerName, mqs)
}

// lockQueuesLocked is lockQueues with lockMu held. It waits for the broker's answer even
// when ctx is cancelled (up to the broker timeout): a broker handles the requests of a
// connection concurrently, so a lock request abandoned when Shutdown begins could be
// granted after Shutdown's UNLOCK_BATCH_MQ, and hold the queue for a consumer that is
// gone until the lock expires (rebalanceLockMaxLiveTime, 60 s by default). After Shutdown
// unlocked it asks nothing and returns ErrClosed.
func (c *PushConsumer) lockQueuesLocked(ctx context.Context, brokerName string, mqs []message.MessageQueue) (map[message.MessageQueue]bool, error) {
	if c.locksClosed {
		return nil, ErrClosed
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), client.DefaultBrokerTimeout)
	defer cancel()
	return c.broker.lock(lctx, brokerName, mqs)
}

// unlockUnstarted releases the locks of queues that were locked but not started because
// Shutdown began (unless Shutdown has unlocked already).
func (c *PushConsumer) unlockUnstarted(mqs []message.MessageQueue) {
	c.lockMu.Lock()
	defer c.lockMu.Unlock()
	if c.locksClosed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), client.DefaultBrokerTimeout)
	defer cancel()
	for name, list := range byBroker(mqs) {
		if err := c.broker.unlock(ctx, name, list); err != nil {
			c.log.Warn("consumer: unlocking queues not started failed", "broker", name, "err", err)
		}
	}
}

// releaseOrderly gives up an orderly queue: pulling and consuming stop; once the
// handler call in progress (if any) returned, its offset is stored when persist, and
// the broker lock is released (clustering), so that the next owner goes on exactly
// after the last finished message and never runs a message of this queue while this
// consumer still does. Until then the queue counts as draining and is not taken again.
// It does not wait.
func (c *PushConsumer) releaseOrderly(pq *processQueue, persist bool) {
	pq.dropped.Store(true)
	pq.cancel()
	pq.signal()
	released := make(chan struct{})
	c.mu.Lock()
	c.draining[pq.mq] = released
	c.mu.Unlock()
	finish := func() {
		defer func() {
			c.mu.Lock()
			if c.draining[pq.mq] == released {
				delete(c.draining, pq.mq)
			}
			c.mu.Unlock()
			close(released)
			c.kickRebalance()
		}()
		<-pq.done
		<-pq.consumeDone
		ctx, cancel := context.WithTimeout(context.Background(), client.DefaultBrokerTimeout)
		defer cancel()
		if persist {
			c.persistMu.Lock()
			if off := pq.commitOffset(); off >= 0 {
				if err := c.offsets.update(ctx, pq.mq, off); err != nil {
					c.log.Warn("consumer: persisting offset of released queue failed", "queue", pq.mq.String(), "err", err)
				}
			}
			if err := c.offsets.flush(); err != nil {
				c.log.Warn("consumer: flushing offsets failed", "err", err)
			}
			c.persistMu.Unlock()
		}
		if persist && c.orderlyLocks() {
			// Under lockMu, and no longer draining when lockMu is let go: no renewal of
			// this queue follows the unlock. After Shutdown's unlockAll there is nothing
			// left to unlock.
			c.lockMu.Lock()
			if !c.locksClosed {
				if err := c.broker.unlock(ctx, pq.mq.BrokerName, []message.MessageQueue{pq.mq}); err != nil && !errors.Is(err, context.Canceled) {
					c.log.Warn("consumer: unlocking released queue failed", "queue", pq.mq.String(), "err", err)
				}
			}
			c.mu.Lock()
			if c.draining[pq.mq] == released {
				delete(c.draining, pq.mq)
			}
			c.mu.Unlock()
			c.lockMu.Unlock()
		}
		c.log.Info("consumer: orderly queue released", "group", c.cfg.Group, "queue", pq.mq.String())
	}
	// Shutting down when this fails: Shutdown stores the offsets and unlocks the queues
	// still marked draining.
	c.spawnWorker(finish)
}

// unlockAll releases the broker locks of every queue this consumer holds or is
// releasing (Shutdown); no lock is asked for after it (lockQueuesLocked).
func (c *PushConsumer) unlockAll(ctx context.Context) error {
	c.lockMu.Lock()
	defer c.lockMu.Unlock()
	c.locksClosed = true
	c.mu.Lock()
	mqs := make([]message.MessageQueue, 0, len(c.pqs)+len(c.draining))
	for mq := range c.pqs {
		mqs = append(mqs, mq)
	}
	for mq := range c.draining {
		mqs = append(mqs, mq)
	}
	c.mu.Unlock()
	var errs []error
	for name, list := range byBroker(mqs) {
		if err := c.broker.unlock(ctx, name, list); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
