package broker

import "sync/atomic"

// counters are the broker's counters of refusals and name-server registrations; [Stats]
// exports them.
type counters struct {
	RegisterOK            atomic.Int64
	RegisterFailed        atomic.Int64
	LastRegisterBodyBytes atomic.Int64
	LastRegisterTopics    atomic.Int64
	RefusedNames          atomic.Int64
	RefusedACL            atomic.Int64
	RefusedLimits         atomic.Int64
}
