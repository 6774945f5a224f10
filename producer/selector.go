package producer

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicemq/sluice/message"
)

// MessageQueueSelector picks the message queue a send goes to.
//
// queues is the topic's list of writable queues, never empty, sorted the same way on
// every producer that sees the same route: by broker name, then queue id 0..n-1 (or, for
// a topic with an orderTopicConf, in the order that conf lists brokers; docs/protocol.md §7.2).
// So a selector that is a pure function of the message and the list (HashSelector,
// ManualSelector) maps one key to one queue on every producer, Sluice's and the official
// Go client's alike. lastBroker is the broker of the previous failed attempt of the same
// send ("" on the first attempt); selectors that need no order should pick another
// broker when they can, order-preserving ones ignore it (a retry then goes to the same
// queue).
//
// An error fails the send (wrapped in a *SendError with Attempts 0) before anything is
// sent; so does a panic in Select (the error names it; it is logged at ERROR with the
// stack). Select may be called concurrently and must not modify queues.
//
// Ordering: messages sent one after another (each send waiting for the previous one) to
// one queue are stored in that order; a topic with one queue has a global order.
type MessageQueueSelector interface {
	Select(msg *message.Message, queues []message.MessageQueue, lastBroker string) (message.MessageQueue, error)
}

// SelectorFunc adapts a function to MessageQueueSelector.
type SelectorFunc func(msg *message.Message, queues []message.MessageQueue, lastBroker string) (message.MessageQueue, error)

// Select calls f.
func (f SelectorFunc) Select(msg *message.Message, queues []message.MessageQueue, lastBroker string) (message.MessageQueue, error) {
	return f(msg, queues, lastBroker)
}

// faultAwareSelector is implemented by selectors that can skip brokers the latency fault
// tolerance avoids (only the round-robin selector: order-preserving selectors must not).
type faultAwareSelector interface {
	selectAvailable(msg *message.Message, queues []message.MessageQueue, lastBroker string, f *latencyFault) message.MessageQueue
}

// ErrQueueNotFound is wrapped by ManualSelector when the chosen queue is not among the
// topic's writable queues.
var ErrQueueNotFound = errors.New("producer: message queue not in the topic's route")

// RoundRobinSelector returns the default selector: per topic, the next queue of the list
// each send (the first send of a topic takes the first queue). A retry takes the next
// queue on a broker other than lastBroker when the list has one. With latency fault
// tolerance on (Config.SendLatencyFaultEnable) it also skips queues of avoided brokers
// while any queue's broker is available, and when none is, uses the broker whose
// not-available window ends first. Each call of RoundRobinSelector returns a selector
// with its own counters.
func RoundRobinSelector() MessageQueueSelector { return &roundRobin{} }

type roundRobin struct {
	counters sync.Map // topic → *atomic.Uint32
}

func (r *roundRobin) counter(topic string) *atomic.Uint32 {
	if c, ok := r.counters.Load(topic); ok {
		return c.(*atomic.Uint32)
	}
	c, _ := r.counters.LoadOrStore(topic, new(atomic.Uint32))
	return c.(*atomic.Uint32)
}

// Select implements MessageQueueSelector (without fault tolerance).
func (r *roundRobin) Select(msg *message.Message, queues []message.MessageQueue, lastBroker string) (message.MessageQueue, error) {
	if len(queues) == 0 {
		return message.MessageQueue{}, ErrNoQueue
	}
	return selectQueue(queues, r.counter(msg.Topic), lastBroker), nil
}

func (r *roundRobin) selectAvailable(msg *message.Message, queues []message.MessageQueue, lastBroker string, f *latencyFault) message.MessageQueue {
	c := r.counter(msg.Topic)
	if !f.any.Load() {
		return selectQueue(queues, c, lastBroker)
	}
	n := uint32(len(queues))
	// Pass 1: an available broker other than the last one; pass 2: any available one.
	for pass := 0; pass < 2; pass++ {
		for i := uint32(0); i < n; i++ {
			q := queues[(c.Add(1)-1)%n]
			if (pass == 1 || q.BrokerName != lastBroker) && f.available(q.BrokerName) {
				return q
			}
		}
	}
	// Every broker is avoided: the one whose window ends first, next of its queues.
	best, bestLeft := "", -1
	for _, q := range queues {
		if left := int(f.remaining(q.BrokerName)); bestLeft < 0 || left < bestLeft {
			best, bestLeft = q.BrokerName, left
		}
	}
	for i := uint32(0); i < n; i++ {
		if q := queues[(c.Add(1)-1)%n]; q.BrokerName == best {
			return q
		}
	}
	return queues[(c.Add(1)-1)%n]
}

// selectQueue picks the next queue round-robin. With avoidBroker set (a retry), it takes
// the next queue on a different broker if the list has one.
func selectQueue(queues []message.MessageQueue, counter *atomic.Uint32, avoidBroker string) message.MessageQueue {
	n := uint32(len(queues))
	if avoidBroker != "" {
		for i := uint32(0); i < n; i++ {
			q := queues[(counter.Add(1)-1)%n]
			if q.BrokerName != avoidBroker {
				return q
			}
		}
	}
	return queues[(counter.Add(1)-1)%n]
}

// HashSelector returns the ordered-send selector: the queue at index
// FNV-32a(sharding key) mod len(queues), where the sharding key is the message's
// SHARDING_KEY property (message.SetShardingKey) hashed over its UTF-8 bytes. This is
// the official Go client's hash selector (producer.NewHashQueueSelector), so both map a
// key to the same queue; Java's SelectMessageQueueByHash uses String.hashCode of its
// argument instead and may differ. Messages of one key go to one queue (per-key order)
// as long as the topic's queue count and brokers stay the same. A retry goes to the same
// queue. A message without a sharding key fails with a *message.ValidationError on field
// "shardingKey" (the official client would pick a random queue, silently losing order).
func HashSelector() MessageQueueSelector { return hashSelector{} }

type hashSelector struct{}

// fnv32a is FNV-1a, 32 bits (hash/fnv New32a) over the bytes of s, without allocating.
func fnv32a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// Select implements MessageQueueSelector.
func (hashSelector) Select(msg *message.Message, queues []message.MessageQueue, _ string) (message.MessageQueue, error) {
	key := msg.ShardingKey()
	if key == "" {
		return message.MessageQueue{}, &message.ValidationError{Field: "shardingKey", Reason: "the hash selector needs a sharding key (message.SetShardingKey)"}
	}
	if len(queues) == 0 {
		return message.MessageQueue{}, ErrNoQueue
	}
	return queues[fnv32a(key)%uint32(len(queues))], nil
}

// ManualSelector returns a selector that always picks mq, the caller's choice: the queue
// with mq's BrokerName and QueueID (mq.Topic, when set, must be the message's topic).
// With BrokerName empty the queue id must be unique in the list (a topic on one
// broker). A queue that is not in the route fails the send with an error wrapping
// ErrQueueNotFound; nothing is sent. Retries go to the same queue.
func ManualSelector(mq message.MessageQueue) MessageQueueSelector { return manualSelector{mq} }

type manualSelector struct{ mq message.MessageQueue }

// Select implements MessageQueueSelector.
func (s manualSelector) Select(msg *message.Message, queues []message.MessageQueue, _ string) (message.MessageQueue, error) {
	if s.mq.Topic != "" && s.mq.Topic != msg.Topic {
		return message.MessageQueue{}, fmt.Errorf("%w: chosen queue %s is of topic %q, the message's topic is %q", ErrQueueNotFound, s.mq, s.mq.Topic, msg.Topic)
	}
	found := -1
	for i, q := range queues {
		if q.QueueID == s.mq.QueueID && (s.mq.BrokerName == "" || q.BrokerName == s.mq.BrokerName) {
			if found >= 0 {
				return message.MessageQueue{}, fmt.Errorf("%w: queue id %d exists on brokers %q and %q: set BrokerName",
					ErrQueueNotFound, s.mq.QueueID, queues[found].BrokerName, q.BrokerName)
			}
			found = i
		}
	}
	if found < 0 {
		return message.MessageQueue{}, fmt.Errorf("%w: broker %q queue id %d is not among the %d writable queues of topic %q",
			ErrQueueNotFound, s.mq.BrokerName, s.mq.QueueID, len(queues), msg.Topic)
	}
	return queues[found], nil
}
