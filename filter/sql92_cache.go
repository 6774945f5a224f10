package filter

import (
	"container/list"
	"sync"
)

// DefaultSQLCacheSize is the number of expressions an [SQLCache] keeps when NewSQLCache is
// given a size <= 0. (RocketMQ's SelectorParser keeps 100.)
const DefaultSQLCacheSize = 256

// SQLCache is a bounded least-recently-used cache of compiled SQL92 expressions, keyed by
// the exact expression text. Like RocketMQ's parse cache it remembers failures too, so a
// consumer re-sending a bad expression with every heartbeat is not re-parsed each time.
// It is safe for concurrent use.
type SQLCache struct {
	max int

	mu      sync.Mutex
	entries map[string]*list.Element // of *sqlCacheEntry
	order   *list.List               // front = most recently used
}

type sqlCacheEntry struct {
	expr   string
	filter *SQLFilter
	err    error
}

// NewSQLCache returns a cache holding at most max expressions (DefaultSQLCacheSize when
// max <= 0).
func NewSQLCache(max int) *SQLCache {
	if max <= 0 {
		max = DefaultSQLCacheSize
	}
	return &SQLCache{max: max, entries: make(map[string]*list.Element), order: list.New()}
}

// Get returns the compiled filter for expr, compiling it on a miss (see [CompileSQL92]
// for the errors). Expressions longer than MaxSQLLength are refused without being cached.
func (c *SQLCache) Get(expr string) (*SQLFilter, error) {
	if len(expr) > MaxSQLLength {
		return CompileSQL92(expr)
	}
	c.mu.Lock()
	if el, ok := c.entries[expr]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*sqlCacheEntry)
		c.mu.Unlock()
		return e.filter, e.err
	}
	c.mu.Unlock()

	// Compile outside the lock; two goroutines missing at once both compile, and the
	// first to store wins, so every caller of one expression gets the same filter.
	f, err := CompileSQL92(expr)

	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[expr]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*sqlCacheEntry)
		return e.filter, e.err
	}
	c.entries[expr] = c.order.PushFront(&sqlCacheEntry{expr: expr, filter: f, err: err})
	for c.order.Len() > c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.entries, oldest.Value.(*sqlCacheEntry).expr)
	}
	return f, err
}

// Len returns the number of cached expressions.
func (c *SQLCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
