// Package lograte bounds the log records a remote peer can cause: for each key (a remote
// address, as addrkey.Of groups them) the first record is written, then at most one per
// interval, which carries how many were left out since the previous one. A client that
// repeats a refused request thousands of times a second thus writes one line per
// interval, not one per attempt.
package lograte

import (
	"sync"
	"time"
)

// Limiter decides which records about a key are written. Safe for concurrent use; the
// zero value is not usable (New).
type Limiter struct {
	interval time.Duration
	maxKeys  int

	mu        sync.Mutex // guards the fields below
	keys      map[string]*entry
	other     entry // shared by keys that found the table full
	lastPrune int64 // unix ns of the last prune
}

type entry struct {
	next       int64 // unix ns before which records are left out
	suppressed int64 // records left out since the last one written
}

// New returns a limiter writing at most one record per key per interval, keeping at
// most maxKeys keys (at least 1). Keys beyond that, while the table is full of keys
// written within the last interval, share one entry: together they write at most one
// record per interval. So at most maxKeys+1 records are written per interval, whatever
// the number of keys.
func New(interval time.Duration, maxKeys int) *Limiter {
	return &Limiter{interval: interval, maxKeys: max(maxKeys, 1), keys: make(map[string]*entry)}
}

// Allow reports whether a record about key may be written at now, and, when it may, how
// many records about key were left out since the last one written (for a key that shared
// the overflow entry: about every key sharing it).
func (l *Limiter) Allow(key string, now time.Time) (ok bool, suppressed int64) {
	t := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil {
		if len(l.keys) >= l.maxKeys && t-l.lastPrune >= int64(l.interval)/4 {
			l.prune(t)
		}
		if len(l.keys) < l.maxKeys {
			e = &entry{}
			l.keys[key] = e
		} else {
			e = &l.other
		}
	}
	if t < e.next {
		e.suppressed++
		return false, 0
	}
	suppressed = e.suppressed
	e.next, e.suppressed = t+int64(l.interval), 0
	return true, suppressed
}

// prune forgets the keys whose interval has passed (their next record is written as a
// first one; a count left out since their last one is dropped with them).
func (l *Limiter) prune(t int64) {
	l.lastPrune = t
	for k, e := range l.keys {
		if t >= e.next {
			delete(l.keys, k)
		}
	}
}

// Len returns the number of keys kept (tests and metrics).
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
