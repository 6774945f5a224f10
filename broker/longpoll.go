package broker

import "sync"

// arrivals lets a held pull wait for the next message of its topic and queue (RocketMQ
// long polling, Java PullRequestHoldService). A waiter takes the channel for its queue
// *before* it reads the store, so a message that arrives between the read and the wait
// still wakes it; the store's dispatch hook closes the channel and the next waiter gets
// a fresh one.
type arrivals struct {
	mu    sync.Mutex
	chans map[queueKey]chan struct{}
}

// queueKey names one queue of a topic.
type queueKey struct {
	topic   string
	queueID int32
}

func newArrivals() *arrivals { return &arrivals{chans: map[queueKey]chan struct{}{}} }

// watch returns a channel closed at the next arrival on topic/queueID.
func (a *arrivals) watch(topic string, queueID int32) <-chan struct{} {
	k := queueKey{topic, queueID}
	a.mu.Lock()
	defer a.mu.Unlock()
	ch, ok := a.chans[k]
	if !ok {
		ch = make(chan struct{})
		a.chans[k] = ch
	}
	return ch
}

// arrived wakes every waiter of topic/queueID. Cheap when nobody waits.
func (a *arrivals) arrived(topic string, queueID int32) {
	k := queueKey{topic, queueID}
	a.mu.Lock()
	ch, ok := a.chans[k]
	if ok {
		delete(a.chans, k)
	}
	a.mu.Unlock()
	if ok {
		close(ch)
	}
}
