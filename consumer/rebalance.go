package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// rebalanceRetryDelay is how soon a rebalance runs again when a queue could not be taken
// (its broker lock is still held by the previous owner, or it is still being released).
const rebalanceRetryDelay = time.Second

func (c *PushConsumer) rebalanceLoop() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.rebalanceKick:
		}
		next := c.cfg.RebalanceInterval
		if c.rebalance(c.ctx) {
			next = min(next, rebalanceRetryDelay)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// rebalance applies pending offset resets, then re-allocates the queues of every
// subscribed topic: in clustering mode with AllocateByAveragely over
// GET_CONSUMER_LIST_BY_GROUP (request code 38) and the topic's readable queues, in
// broadcasting mode all readable queues. A topic whose route or member list cannot be
// read keeps its current queues until the next round. Clustering consumers then check
// that the group's members subscribe alike. It reports whether some queue could not be
// taken and the round should be repeated soon.
func (c *PushConsumer) rebalance(ctx context.Context) (retrySoon bool) {
	c.applyResets(ctx)
	if err := c.cl.EnsureHeartbeat(ctx); err != nil {
		c.log.Warn("consumer: heartbeat before rebalance failed", "err", err)
	}
	c.mu.Lock()
	topics := c.topicsLocked()
	c.mu.Unlock()
	for _, topic := range topics {
		if ctx.Err() != nil {
			return false
		}
		rd, err := c.cl.Route(ctx, topic)
		if err != nil {
			c.log.Debug("consumer: rebalance: no route", "topic", topic, "err", err)
			continue
		}
		all := wire.SubscribeQueues(topic, rd)
		mine := all
		if c.cfg.MessageModel == Clustering {
			cids, err := c.consumerIDs(ctx, rd)
			if err != nil {
				c.log.Warn("consumer: rebalance: member list unavailable", "topic", topic, "err", err)
				continue
			}
			mine = AllocateByAveragely(c.cl.ClientID(), all, cids)
		}
		if c.assign(ctx, topic, mine) {
			retrySoon = true
		}
	}
	if c.cfg.MessageModel == Clustering {
		c.checkConsistency(ctx)
	}
	return retrySoon
}

// consumerIDs asks one broker of the route (the first by name with a master) for the
// client ids of the group.
func (c *PushConsumer) consumerIDs(ctx context.Context, rd *wire.TopicRouteData) ([]string, error) {
	names := make([]string, 0, len(rd.BrokerDatas))
	for _, b := range rd.BrokerDatas {
		names = append(names, b.BrokerName)
	}
	sort.Strings(names)
	var lastErr error = fmt.Errorf("no broker with a master in the route")
	for _, name := range names {
		if _, ok := c.cl.BrokerAddr(name); !ok {
			continue
		}
		resp, err := c.broker.invoke(ctx, name, remoting.GetConsumerListByGroup, map[string]string{"consumerGroup": c.cfg.Group}, nil)
		if err != nil {
			lastErr = err
			continue
		}
		var body wire.ConsumerIDList
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			lastErr = requestError(remoting.GetConsumerListByGroup, name, fmt.Errorf("bad body: %w", err))
			continue
		}
		return body.ConsumerIDList, nil
	}
	return nil, lastErr
}

// assign makes the queues of topic exactly mine: queues no longer assigned are dropped
// (see dropQueues, releaseOrderly); new ones start at their stored offset or per
// ConsumeFromWhere — orderly clustering consumers lock them on their broker first. A
// queue that cannot be taken now (start offset unreadable, lock held elsewhere, still
// being released) is retried next round; assign then returns true.
func (c *PushConsumer) assign(ctx context.Context, topic string, mine []message.MessageQueue) (retrySoon bool) {
	want := make(map[message.MessageQueue]bool, len(mine))
	for _, mq := range mine {
		want[mq] = true
	}
	var drop []*processQueue
	var add []message.MessageQueue
	c.mu.Lock()
	for mq, pq := range c.pqs {
		if mq.Topic == topic && !want[mq] {
			drop = append(drop, pq)
			delete(c.pqs, mq)
		}
	}
	for _, mq := range mine {
		if _, ok := c.pqs[mq]; ok {
			continue
		}
		if _, busy := c.draining[mq]; busy {
			retrySoon = true
			continue
		}
		add = append(add, mq)
	}
	c.mu.Unlock()

	if c.cfg.Orderly {
		for _, pq := range drop {
			c.releaseOrderly(pq, true)
		}
	} else {
		c.dropQueues(ctx, drop, true)
	}
	if len(add) == 0 {
		return retrySoon
	}
	if c.orderlyLocks() {
		var locked []message.MessageQueue
		for name, mqs := range byBroker(add) {
			held, err := c.lockQueues(ctx, name, mqs)
			if err != nil {
				c.log.Warn("consumer: locking queues failed", "broker", name, "err", err)
				retrySoon = true
				continue
			}
			for _, mq := range mqs {
				if held[mq] {
					locked = append(locked, mq)
				} else {
					c.log.Debug("consumer: queue locked by another consumer", "queue", mq.String())
					retrySoon = true
				}
			}
		}
		sort.Slice(locked, func(i, j int) bool { return locked[i].Less(locked[j]) })
		add = locked
	}
	for i, mq := range add {
		start, err := c.startOffset(ctx, mq)
		if err != nil {
			c.log.Warn("consumer: cannot start queue", "queue", mq.String(), "err", err)
			retrySoon = true
			continue
		}
		if !c.startQueue(mq, start) {
			if c.orderlyLocks() {
				c.unlockUnstarted(add[i:]) // Shutdown began: it unlocks only the queues it knows
			}
			return false
		}
	}
	return retrySoon
}

// startQueue creates the process queue of mq at offset start and starts its pull loop
// (and, orderly, its consume loop). False once Shutdown has begun.
func (c *PushConsumer) startQueue(mq message.MessageQueue, start int64) bool {
	pq := newProcessQueue(mq, start)
	if c.orderlyLocks() {
		pq.setLocked(time.Now())
	}
	pctx, cancel := context.WithCancel(c.ctx)
	pq.cancel = cancel
	c.mu.Lock()
	c.pqs[mq] = pq
	c.mu.Unlock()
	if c.cfg.onAssign != nil { // before the pull loop, so no delivery of mq precedes it
		c.cfg.onAssign(mq, start)
	}
	forget := func() {
		cancel()
		c.mu.Lock()
		delete(c.pqs, mq)
		c.mu.Unlock()
	}
	if !c.spawn(func() { defer close(pq.done); c.pullLoop(pctx, pq) }) {
		close(pq.done)
		close(pq.consumeDone)
		forget()
		return false
	}
	if !c.cfg.Orderly {
		close(pq.consumeDone)
	} else if !c.spawnWorker(func() { defer close(pq.consumeDone); c.orderlyLoop(pctx, pq) }) {
		close(pq.consumeDone) // the pull loop ends on its own once cancelled
		forget()
		return false
	}
	c.log.Info("consumer: queue assigned", "group", c.cfg.Group, "queue", mq.String(), "offset", start)
	return true
}

// startOffset is where a newly assigned queue starts: the stored offset, or else per
// ConsumeFromWhere (docs/protocol.md §7.3).
func (c *PushConsumer) startOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	off, err := c.offsets.read(ctx, mq)
	if err != nil || off >= 0 {
		return off, err
	}
	retry := message.IsRetryTopic(mq.Topic)
	switch c.cfg.ConsumeFromWhere {
	case ConsumeFromFirstOffset:
		return 0, nil
	case ConsumeFromTimestamp:
		if retry {
			return c.broker.maxOffset(ctx, mq)
		}
		return c.broker.searchOffset(ctx, mq, c.cfg.ConsumeTimestamp)
	default: // ConsumeFromLastOffset
		if retry {
			return 0, nil
		}
		return c.broker.maxOffset(ctx, mq)
	}
}

// dropQueues stops the pull loops of queues no longer assigned (concurrent
// consumption), waits up to handoverWait for their running handlers, and — when
// persist — stores their offsets (the lowest unfinished message), so the next owner
// starts right after what this consumer finished. Messages pulled but not yet handed
// to a handler are left to the next owner; handlers still running after the wait
// finish, but their messages are delivered again by the next owner.
func (c *PushConsumer) dropQueues(ctx context.Context, pqs []*processQueue, persist bool) {
	if len(pqs) == 0 {
		return
	}
	for _, pq := range pqs {
		pq.dropped.Store(true)
		pq.cancel()
	}
	for _, pq := range pqs {
		<-pq.done
	}
	deadline := time.Now().Add(c.cfg.handoverWait)
	for _, pq := range pqs {
		for pq.running.Load() > 0 && time.Now().Before(deadline) {
			if !sleep(ctx, 5*time.Millisecond) {
				break
			}
		}
	}
	if persist {
		c.persistMu.Lock()
		for _, pq := range pqs {
			if off := pq.commitOffset(); off >= 0 {
				if err := c.offsets.update(ctx, pq.mq, off); err != nil {
					c.log.Warn("consumer: persisting offset of dropped queue failed", "queue", pq.mq.String(), "err", err)
				}
			}
		}
		if err := c.offsets.flush(); err != nil {
			c.log.Warn("consumer: flushing offsets failed", "err", err)
		}
		c.persistMu.Unlock()
	}
	for _, pq := range pqs {
		c.log.Info("consumer: queue dropped", "group", c.cfg.Group, "queue", pq.mq.String())
	}
}

// applyResets carries out RESET_CONSUMER_CLIENT_OFFSET requests (RocketMQ request code
// 220) received since the last round: the affected queues are dropped without storing
// their progress, the new offsets are stored (again: a persist racing the broker's
// reset may have overwritten them), and the rebalance that follows re-adds the queues
// from there.
func (c *PushConsumer) applyResets(ctx context.Context) {
	c.mu.Lock()
	resets := c.resets
	c.resets = nil
	c.mu.Unlock()
	for _, r := range resets {
		var drop []*processQueue
		c.mu.Lock()
		for mq := range r.table {
			if mq.Topic != r.topic {
				continue
			}
			if pq := c.pqs[mq]; pq != nil {
				delete(c.pqs, mq)
				drop = append(drop, pq)
			}
		}
		c.mu.Unlock()
		if c.cfg.Orderly {
			for _, pq := range drop {
				c.releaseOrderly(pq, false)
			}
		} else {
			c.dropQueues(ctx, drop, false)
		}
		dropped := make(map[message.MessageQueue]bool, len(drop))
		for _, pq := range drop {
			dropped[pq.mq] = true
		}
		c.persistMu.Lock()
		for mq, off := range r.table {
			// Broadcasting offsets are local: store them all. Clustering offsets were
			// stored by the broker: store again only those a queue of ours may have
			// overwritten.
			if mq.Topic != r.topic || (c.cfg.MessageModel == Clustering && !dropped[mq]) {
				continue
			}
			if err := c.offsets.update(ctx, mq, off); err != nil {
				c.log.Warn("consumer: storing reset offset failed", "queue", mq.String(), "err", err)
			}
		}
		if err := c.offsets.flush(); err != nil {
			c.log.Warn("consumer: flushing offsets failed", "err", err)
		}
		c.persistMu.Unlock()
		c.log.Info("consumer: offsets reset", "group", c.cfg.Group, "topic", r.topic, "queues", len(r.table), "reassigned", len(drop))
	}
}
