package producer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/remoting"
)

// latencyFault is the latency fault tolerance table (Java LatencyFaultToleranceImpl):
// per broker name, the time until which the broker is avoided. Only brokers that were
// ever faulty get an entry, so the healthy path is one atomic load.
type latencyFault struct {
	rules     []LatencyFaultRule
	isolation time.Duration
	base      time.Time // monotonic origin of the until values
	now       func() time.Time

	any   atomic.Bool // an entry exists
	mu    sync.RWMutex
	items map[string]*faultItem
}

type faultItem struct {
	until   atomic.Int64 // ns since base; the broker is available from then on
	latency atomic.Int64 // ns, last measured
}

func newLatencyFault(rules []LatencyFaultRule, isolation time.Duration) *latencyFault {
	return &latencyFault{rules: rules, isolation: isolation, base: time.Now(), now: time.Now, items: make(map[string]*faultItem)}
}

// window returns how long a broker that answered after latency is avoided.
func (f *latencyFault) window(latency time.Duration) time.Duration {
	var d time.Duration
	for _, r := range f.rules {
		if latency < r.Latency {
			break
		}
		d = r.NotAvailable
	}
	return d
}

// isolates reports whether a send answered with code makes its broker faulty: the
// codes of an unhealthy broker, not of a topic's configuration (16, 17) or a bad message.
func isolates(code remoting.ResponseCode) bool {
	switch code {
	case remoting.SystemError, remoting.SystemBusy, remoting.ServiceNotAvailable:
		return true
	}
	return false
}

// update records one attempt on broker that took latency; failed isolates it for at
// least the isolation window.
func (f *latencyFault) update(broker string, latency time.Duration, failed bool) {
	d := f.window(latency)
	if failed {
		d = max(d, f.isolation)
	}
	f.mu.RLock()
	it := f.items[broker]
	f.mu.RUnlock()
	if it == nil {
		if d == 0 {
			return // healthy and never faulty: no entry
		}
		f.mu.Lock()
		if it = f.items[broker]; it == nil {
			it = &faultItem{}
			f.items[broker] = it
			f.any.Store(true)
		}
		f.mu.Unlock()
	}
	it.latency.Store(int64(latency))
	it.until.Store(int64(f.now().Sub(f.base) + d))
}

// available reports whether broker is outside its not-available window.
func (f *latencyFault) available(broker string) bool {
	if !f.any.Load() {
		return true
	}
	f.mu.RLock()
	it := f.items[broker]
	f.mu.RUnlock()
	return it == nil || int64(f.now().Sub(f.base)) >= it.until.Load()
}

// remaining returns how long broker is still avoided (0 = available).
func (f *latencyFault) remaining(broker string) time.Duration {
	if !f.any.Load() {
		return 0
	}
	f.mu.RLock()
	it := f.items[broker]
	f.mu.RUnlock()
	if it == nil {
		return 0
	}
	return max(0, time.Duration(it.until.Load())-f.now().Sub(f.base))
}

// avoided returns the brokers currently avoided and how long each still is.
func (f *latencyFault) avoided() map[string]time.Duration {
	out := map[string]time.Duration{}
	if !f.any.Load() {
		return out
	}
	now := f.now().Sub(f.base)
	f.mu.RLock()
	defer f.mu.RUnlock()
	for b, it := range f.items {
		if left := time.Duration(it.until.Load()) - now; left > 0 {
			out[b] = left
		}
	}
	return out
}
