package broker

import (
	"context"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// DefaultRebalanceLockMaxLiveTime is how long a queue lock lives without renewal, in ms
// (Java rocketmq.broker.rebalance.lockMaxLiveTime, 60 s).
const DefaultRebalanceLockMaxLiveTime = 60000

// queueLocks grants orderly consumers exclusive ownership of message queues (Java
// RebalanceLockManager). A client locks the queues it was allocated before consuming
// them in order, and renews the locks every 20 s; a lock not renewed within its live
// time, or held by a client whose connection closed, may be taken by another client of
// the group.
type queueLocks struct {
	maxLive time.Duration

	mu    sync.Mutex
	locks map[string]map[message.MessageQueue]*queueLock // group -> queue -> lock
}

type queueLock struct {
	clientID string
	renewed  time.Time
}

func newQueueLocks(maxLive time.Duration) *queueLocks {
	return &queueLocks{maxLive: maxLive, locks: map[string]map[message.MessageQueue]*queueLock{}}
}

// tryLock locks (or renews) each queue that is free, expired, or already held by
// clientID, and returns those it now holds.
func (l *queueLocks) tryLock(group, clientID string, mqs []message.MessageQueue, now time.Time) []message.MessageQueue {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.locks[group]
	if g == nil {
		if len(mqs) == 0 {
			return []message.MessageQueue{}
		}
		g = map[message.MessageQueue]*queueLock{}
		l.locks[group] = g
	}
	held := make([]message.MessageQueue, 0, len(mqs))
	for _, mq := range mqs {
		cur := g[mq]
		if cur == nil || cur.clientID == clientID || now.Sub(cur.renewed) > l.maxLive {
			g[mq] = &queueLock{clientID: clientID, renewed: now}
			held = append(held, mq)
		}
	}
	return held
}

// unlock releases the queues clientID holds.
func (l *queueLocks) unlock(group, clientID string, mqs []message.MessageQueue) {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.locks[group]
	for _, mq := range mqs {
		if cur := g[mq]; cur != nil && cur.clientID == clientID {
			delete(g, mq)
		}
	}
}

// releaseClient drops every lock clientID holds in group (its connection closed).
func (l *queueLocks) releaseClient(group, clientID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for mq, cur := range l.locks[group] {
		if cur.clientID == clientID {
			delete(l.locks[group], mq)
		}
	}
}

func parseLockBody(req *remoting.RemotingCommand) (*wire.LockBatchBody, *remoting.RemotingCommand) {
	body, err := wire.ParseLockBatchBody(req.Body)
	if err != nil {
		return nil, errResponse(remoting.SystemError, "%v", err)
	}
	return body, nil
}

// handleLockBatch serves LOCK_BATCH_MQ (RocketMQ request code 41): the response body
// {"lockOKMQSet":[...]} lists the queues the client holds now, among those of the body
// that exist on this broker (its name, a topic it has, a queue id below the topic's queue
// count); others are never locked.
func (b *Broker) handleLockBatch(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	body, resp := parseLockBody(req)
	if resp != nil {
		return resp
	}
	// Only queues this broker has are locked: a body naming invented queues (any broker
	// name, topic or queue id) would otherwise grow the lock table without bound.
	mqs := body.MQSet[:0:0]
	for _, mq := range body.MQSet {
		if mq.BrokerName != b.cfg.BrokerName || mq.QueueID < 0 {
			continue
		}
		if tc := b.topics.get(mq.Topic); tc != nil && mq.QueueID < max(tc.ReadQueueNums, tc.WriteQueueNums) {
			mqs = append(mqs, mq)
		}
	}
	held := b.locks.tryLock(body.ConsumerGroup, body.ClientID, mqs, time.Now())
	return jsonResponse(wire.LockBatchResult{LockOKMQSet: held})
}

// handleUnlockBatch serves UNLOCK_BATCH_MQ (RocketMQ request code 42).
func (b *Broker) handleUnlockBatch(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	body, resp := parseLockBody(req)
	if resp != nil {
		return resp
	}
	b.locks.unlock(body.ConsumerGroup, body.ClientID, body.MQSet)
	return okResponse()
}
