package consumer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/message"
)

// processQueue is the client-side state of one assigned message queue: the messages
// pulled and not yet finished, and the offset that may be committed.
//
// Offset accounting: high is the next offset to pull (the broker's nextBeginOffset).
// Every offset below high is either in flight (in msgs) or done — consumed, safely sent
// back for retry, or never handed to a handler because a tag filter dropped it. The
// committable offset is therefore the lowest in-flight offset, or high when nothing is in
// flight; it never passes an unfinished message, whatever order handlers finish in.
type processQueue struct {
	mq message.MessageQueue

	mu    sync.Mutex
	msgs  map[int64]inflight // in flight, by queue offset
	order []int64            // in-flight offsets ascending; finished ones are popped lazily from the front
	high  int64              // next offset to pull; -1 before the start offset is known
	bytes int64              // body bytes in flight

	dropped    atomic.Bool
	running    atomic.Int32       // handler calls in progress for this queue
	flowPauses atomic.Int64       // times pulling paused for flow control (tests observe it)
	cancel     context.CancelFunc // stops the pull loop (and the orderly consume loop)
	done       chan struct{}      // closed when the pull loop returned

	// Orderly consumption only.
	ready       chan struct{} // buffered 1: new messages for the consume loop
	consumeDone chan struct{} // closed when the orderly consume loop returned
	lockedUntil atomic.Int64  // unix ns until which the broker lock counts as held; 0 = not locked
}

// inflight is a message in flight and the body size put counted for it.
type inflight struct {
	m    *message.MessageExt
	size int64
}

func newProcessQueue(mq message.MessageQueue, start int64) *processQueue {
	return &processQueue{mq: mq, msgs: make(map[int64]inflight), high: start, done: make(chan struct{}),
		ready: make(chan struct{}, 1), consumeDone: make(chan struct{})}
}

// signal wakes the orderly consume loop.
func (pq *processQueue) signal() {
	select {
	case pq.ready <- struct{}{}:
	default:
	}
}

// setLocked records that the broker granted (or renewed) this queue's lock at now.
func (pq *processQueue) setLocked(now time.Time) {
	pq.lockedUntil.Store(now.Add(LockValidity).UnixNano())
}

// locked reports whether the queue's lock still counts as held at now.
func (pq *processQueue) locked(now time.Time) bool { return now.UnixNano() < pq.lockedUntil.Load() }

// take returns up to n in-flight messages from the lowest offset on, in offset order,
// all with the topic of the first (retry messages carry their original topic), without
// removing them (orderly consumption).
func (pq *processQueue) take(n int) []*message.MessageExt {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	pq.commitOffsetLocked() // pops finished offsets from the front
	var out []*message.MessageExt
	for _, off := range pq.order {
		f, ok := pq.msgs[off]
		if !ok {
			continue
		}
		m := f.m
		if len(out) > 0 && m.Topic != out[0].Topic {
			break
		}
		out = append(out, m)
		if len(out) == n {
			break
		}
	}
	return out
}

// put records msgs (ascending queue offsets, as pulled) as in flight, moves high to next
// (nextBeginOffset) and returns the messages it accepted, in msgs' own array (msgs is
// overwritten). Messages below the previous high (already pulled), at or above next, not
// above the last in-flight offset, or already in flight are left out.
func (pq *processQueue) put(msgs []*message.MessageExt, next int64) []*message.MessageExt {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	accepted := msgs[:0]
	for _, m := range msgs {
		if _, dup := pq.msgs[m.QueueOffset]; dup || m.QueueOffset >= next || m.QueueOffset < pq.high {
			continue
		}
		if n := len(pq.order); n > 0 && pq.order[n-1] >= m.QueueOffset {
			continue // out of order or replayed: never regress the accounting
		}
		size := int64(len(m.Body))
		pq.msgs[m.QueueOffset] = inflight{m: m, size: size}
		pq.order = append(pq.order, m.QueueOffset)
		pq.bytes += size
		accepted = append(accepted, m)
	}
	if next > pq.high {
		pq.high = next
	}
	return accepted
}

// advance moves high to next when no message came with the answer (PULL_NOT_FOUND,
// PULL_RETRY_IMMEDIATELY: everything below next was filtered out or does not exist).
func (pq *processQueue) advance(next int64) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	if next > pq.high {
		pq.high = next
	}
}

// remove marks msgs finished and returns the new committable offset.
func (pq *processQueue) remove(msgs []*message.MessageExt) int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	for _, m := range msgs {
		if f, ok := pq.msgs[m.QueueOffset]; ok {
			pq.bytes -= f.size // as counted by put: a handler may have changed the body since
			delete(pq.msgs, m.QueueOffset)
		}
	}
	return pq.commitOffsetLocked()
}

// commitOffset returns the offset to commit: the lowest in-flight offset, or high when
// nothing is in flight (-1 when unknown).
func (pq *processQueue) commitOffset() int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.commitOffsetLocked()
}

func (pq *processQueue) commitOffsetLocked() int64 {
	for len(pq.order) > 0 {
		if _, inFlight := pq.msgs[pq.order[0]]; inFlight {
			return pq.order[0]
		}
		pq.order = pq.order[1:]
	}
	return pq.high
}

// nextPull returns the next offset to pull (high).
func (pq *processQueue) nextPull() int64 {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return pq.high
}

// load returns the number of in-flight messages and their body bytes (flow control).
func (pq *processQueue) load() (count int, bytes int64) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	return len(pq.msgs), pq.bytes
}
