package redistest

import (
	"context"
	"net"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter counts the Redis round trips a client makes: one per command sent on its own
// and one per pipeline or transaction (however many commands it holds). Commands go-redis
// sends while it sets up a connection (HELLO, CLIENT ..., AUTH, SELECT, READONLY) are not
// counted, so do not count those commands with it. A failed
// EVALSHA followed by EVAL (NOSCRIPT) counts as two.
type Counter struct {
	n atomic.Int64
}

// CountRoundTrips installs a hook on c that counts its round trips from now on.
func CountRoundTrips(c redis.UniversalClient) *Counter {
	cn := &Counter{}
	c.AddHook(cn)
	return cn
}

// N returns the round trips counted so far.
func (c *Counter) N() int64 { return c.n.Load() }

// Reset sets the count to zero and returns the old count.
func (c *Counter) Reset() int64 { return c.n.Swap(0) }

// DialHook implements redis.Hook (passes through).
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook: one round trip per command.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isSetup(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: one round trip per pipeline.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !isSetup(cmd) {
				c.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// isSetup reports whether cmd is one go-redis sends while setting up a connection.
func isSetup(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select", "readonly":
		return true
	}
	return false
}
