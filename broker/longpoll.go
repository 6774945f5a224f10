package broker

import (
	"sync"

	"github.com/sluicemq/sluice/broker/store"
)

// arrivals lets a held pull wait for the next message of its topic and queue that its
// subscription matches (RocketMQ long polling, Java PullRequestHoldService, which asks
// the pull's MessageFilter with the consume-queue tag code and the message's properties
// before it wakes a hold). A waiter registers *before* it reads the store, so a message
// that arrives between the read and the wait still wakes it; the store's dispatch hook
// closes the channel of every matching waiter and forgets it. A non-matching message
// (tag B for a pull of tag A, or a SQL92 expression that is false) wakes nobody: no
// empty answer and no wasted round trip.
type arrivals struct {
	mu      sync.Mutex
	waiters map[queueKey]map[*waiter]struct{}
}

// queueKey names one queue of a topic.
type queueKey struct {
	topic   string
	queueID int32
}

// waiter is one held pull (or the schedule loop of one level).
type waiter struct {
	f  store.Filter // nil: every message
	ch chan struct{}
}

// propertyMatcher is the part of a SQL92 filter ([filter.SQLFilter]) that decides on a
// message's properties.
type propertyMatcher interface {
	Evaluate(props map[string]string) bool
}

func newArrivals() *arrivals { return &arrivals{waiters: map[queueKey]map[*waiter]struct{}{}} }

// watch returns a channel closed at the next arrival on topic/queueID that f matches
// (nil f: any arrival), and a cancel that forgets the waiter; call it when done waiting.
func (a *arrivals) watch(topic string, queueID int32, f store.Filter) (<-chan struct{}, func()) {
	k := queueKey{topic, queueID}
	w := &waiter{f: f, ch: make(chan struct{})}
	a.mu.Lock()
	ws := a.waiters[k]
	if ws == nil {
		ws = map[*waiter]struct{}{}
		a.waiters[k] = ws
	}
	ws[w] = struct{}{}
	a.mu.Unlock()
	return w.ch, func() { a.forget(k, w) }
}

func (a *arrivals) forget(k queueKey, w *waiter) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ws := a.waiters[k]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(a.waiters, k)
		}
	}
}

// matches reports whether a waiter with filter f is interested in the dispatched message.
func matches(f store.Filter, e store.DispatchEvent) bool {
	if f == nil {
		return true
	}
	if !f.MatchTagsCode(e.TagsCode) {
		return false
	}
	if pm, ok := f.(propertyMatcher); ok {
		return pm.Evaluate(e.Properties)
	}
	return true // a tag hash match; the pull re-checks the exact tag when it reads
}

// arrived wakes the waiters of the event's queue whose filter matches it. Cheap when
// nobody waits; filters are evaluated outside the lock.
func (a *arrivals) arrived(e store.DispatchEvent) {
	k := queueKey{e.Topic, e.QueueID}
	a.mu.Lock()
	ws := a.waiters[k]
	if len(ws) == 0 {
		a.mu.Unlock()
		return
	}
	cands := make([]*waiter, 0, len(ws))
	for w := range ws {
		cands = append(cands, w)
	}
	a.mu.Unlock()
	wake := cands[:0]
	for _, w := range cands {
		if matches(w.f, e) {
			wake = append(wake, w)
		}
	}
	if len(wake) == 0 {
		return
	}
	a.mu.Lock()
	ws = a.waiters[k]
	n := 0
	for _, w := range wake {
		if _, ok := ws[w]; ok { // not woken or forgotten meanwhile
			delete(ws, w)
			wake[n] = w
			n++
		}
	}
	if ws != nil && len(ws) == 0 {
		delete(a.waiters, k)
	}
	a.mu.Unlock()
	for _, w := range wake[:n] {
		close(w.ch)
	}
}
