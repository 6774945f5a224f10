package middleware

import (
	"context"
	"sync"
)

// Reason labels a notable outcome of a reliability step, for logs and metrics: why a
// handler was skipped, why a message comes back later, what went wrong around it. The
// steps record reasons with [Note]; [Logging] and [Metrics] read them back through the
// [Report] they put into the context. The values are stable metric label values.
type Reason string

// Reasons recorded by this package's middlewares.
const (
	// ReasonDuplicate: a done marker was found; the handler was skipped and the message
	// acknowledged (Dedup, Progress).
	ReasonDuplicate Reason = "duplicate"
	// ReasonLockHeld: another holder has the message's dedup lock; ReconsumeLater
	// ([ErrLockHeld]).
	ReasonLockHeld Reason = "lock_held"
	// ReasonLockLost: our dedup lock expired or was taken over while the handler ran
	// ([ErrLockLost]).
	ReasonLockLost Reason = "lock_lost"
	// ReasonRenewFailed: the dedup lock could not be renewed (Redis error) and the handler's
	// context was cancelled ([ErrRenewFailed]).
	ReasonRenewFailed Reason = "renew_failed"
	// ReasonRedisUnavailable: Redis failed before the handler ran and the policy is fail
	// closed; ReconsumeLater ([ErrRedisUnavailable]).
	ReasonRedisUnavailable Reason = "redis_unavailable"
	// ReasonFailOpen: Redis failed before the handler ran and the policy is fail open; the
	// handler ran without dedup.
	ReasonFailOpen Reason = "fail_open"
	// ReasonMarkerNotSaved: the handler finished but its marker could not be written
	// (Redis failed afterwards). A later duplicate delivery will run the handler again.
	ReasonMarkerNotSaved Reason = "marker_not_saved"
	// ReasonNoKey: the message has no key; it passed through Dedup/Progress unchecked.
	ReasonNoKey Reason = "no_key"
	// ReasonPanic: the handler panicked; the panic became a [*PanicError].
	ReasonPanic Reason = "panic"
	// ReasonParked: a failed send was parked in Redis ([*ParkedError], Spooled false).
	ReasonParked Reason = "parked"
	// ReasonSpooled: a failed send was written to the local spool file ([*ParkedError],
	// Spooled true).
	ReasonSpooled Reason = "spooled"
	// ReasonNotParked: a retriable failed send could be neither parked nor spooled
	// ([*ParkFailedError]).
	ReasonNotParked Reason = "not_parked"
)

// Report collects the reasons recorded during one call of a chain. It is safe for
// concurrent use.
type Report struct {
	mu      sync.Mutex
	reasons []Reason
}

type reportKey struct{}

// WithReport returns ctx carrying a [Report], and that report. When ctx already carries
// one it is reused, so [Logging] and [Metrics] in one chain see the same reasons.
func WithReport(ctx context.Context) (context.Context, *Report) {
	if r, ok := ctx.Value(reportKey{}).(*Report); ok {
		return ctx, r
	}
	r := &Report{}
	return context.WithValue(ctx, reportKey{}, r), r
}

// Note records reason in ctx's [Report], if it carries one; otherwise it does nothing.
func Note(ctx context.Context, reason Reason) {
	if r, ok := ctx.Value(reportKey{}).(*Report); ok {
		r.mu.Lock()
		r.reasons = append(r.reasons, reason)
		r.mu.Unlock()
	}
}

// Reasons returns a copy of the reasons recorded so far, in order (a batch may record one
// per message).
func (r *Report) Reasons() []Reason {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Reason(nil), r.reasons...)
}

// Has reports whether reason was recorded.
func (r *Report) Has(reason Reason) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.reasons {
		if x == reason {
			return true
		}
	}
	return false
}
