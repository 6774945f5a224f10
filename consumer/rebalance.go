package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func (c *PushConsumer) rebalanceLoop() {
	t := time.NewTicker(c.cfg.RebalanceInterval)
	defer t.Stop()
	for {
		c.rebalance(c.ctx)
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		case <-c.rebalanceKick:
		}
	}
}

// rebalance re-allocates the queues of every subscribed topic among the group's members
// with AllocateByAveragely: GET_CONSUMER_LIST_BY_GROUP (request code 38) and the topic's
// readable queues. A topic whose route or member list cannot be read keeps its current
// queues until the next round.
func (c *PushConsumer) rebalance(ctx context.Context) {
	if err := c.cl.EnsureHeartbeat(ctx); err != nil {
		c.log.Warn("consumer: heartbeat before rebalance failed", "err", err)
	}
	c.mu.Lock()
	topics := c.topicsLocked()
	c.mu.Unlock()
	for _, topic := range topics {
		if ctx.Err() != nil {
			return
		}
		rd, err := c.cl.Route(ctx, topic)
		if err != nil {
			c.log.Debug("consumer: rebalance: no route", "topic", topic, "err", err)
			continue
		}
		cids, err := c.consumerIDs(ctx, rd)
		if err != nil {
			c.log.Warn("consumer: rebalance: member list unavailable", "topic", topic, "err", err)
			continue
		}
		mine := AllocateByAveragely(c.cl.ClientID(), client.SubscribeQueues(topic, rd), cids)
		c.assign(ctx, topic, mine)
	}
}

// consumerIDs asks one broker of the route (the first by name with a master) for the
// client ids of the group.
func (c *PushConsumer) consumerIDs(ctx context.Context, rd *client.TopicRouteData) ([]string, error) {
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
		resp, err := c.invokeBroker(ctx, name, remoting.GetConsumerListByGroup, map[string]string{"consumerGroup": c.cfg.Group})
		if err != nil {
			lastErr = err
			continue
		}
		if resp.ResponseCode() != remoting.Success {
			lastErr = &BrokerError{Request: remoting.GetConsumerListByGroup, Broker: name, Code: resp.ResponseCode(), Remark: resp.Remark}
			continue
		}
		var body struct {
			ConsumerIDList []string `json:"consumerIdList"`
		}
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			lastErr = &BrokerError{Request: remoting.GetConsumerListByGroup, Broker: name, Err: fmt.Errorf("bad body: %w", err)}
			continue
		}
		return body.ConsumerIDList, nil
	}
	return nil, lastErr
}

// assign makes the queues of topic exactly mine: queues no longer assigned are dropped
// (pull loop stopped, offset persisted); new ones start at their stored offset or per
// ConsumeFromWhere. A queue whose start offset cannot be read is retried next round.
func (c *PushConsumer) assign(ctx context.Context, topic string, mine []message.MessageQueue) {
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
		if _, ok := c.pqs[mq]; !ok {
			add = append(add, mq)
		}
	}
	c.mu.Unlock()

	for _, pq := range drop {
		c.dropQueue(ctx, pq)
	}
	for _, mq := range add {
		start, err := c.startOffset(ctx, mq)
		if err != nil {
			c.log.Warn("consumer: cannot start queue", "queue", mq.String(), "err", err)
			continue
		}
		pq := newProcessQueue(mq, start)
		pctx, cancel := context.WithCancel(c.ctx)
		pq.cancel = cancel
		c.mu.Lock()
		c.pqs[mq] = pq
		c.mu.Unlock()
		if !c.spawn(func() { defer close(pq.done); c.pullLoop(pctx, pq) }) {
			cancel()
			close(pq.done)
			c.mu.Lock()
			delete(c.pqs, mq)
			c.mu.Unlock()
			return
		}
		c.log.Info("consumer: queue assigned", "group", c.cfg.Group, "queue", mq.String(), "offset", start)
	}
}

// dropQueue stops the pull loop of a queue no longer assigned and persists its offset
// (the lowest unfinished message). Handlers still running for it finish, but their
// results no longer move the offset: the new owner may deliver those messages again.
func (c *PushConsumer) dropQueue(ctx context.Context, pq *processQueue) {
	pq.dropped.Store(true)
	pq.cancel()
	<-pq.done
	if off := pq.commitOffset(); off >= 0 {
		if err := c.updateOffset(ctx, pq.mq, off); err != nil {
			c.log.Warn("consumer: persisting offset of dropped queue failed", "queue", pq.mq.String(), "err", err)
		}
	}
	c.log.Info("consumer: queue dropped", "group", c.cfg.Group, "queue", pq.mq.String())
}
