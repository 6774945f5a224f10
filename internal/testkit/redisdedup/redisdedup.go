// Package redisdedup gives the transport conformance suite (package transporttest) its
// consume-side deduplication: [redismw.Dedup] over an embedded miniredis and, when
// SLUICE_REDIS_ADDR is set, over that Redis too. It is kept out of transporttest so the
// suite itself reaches no Redis module.
package redisdedup

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

// Each runs fn once per Redis target (see redistest.Each), as a subtest, with a
// [redismw.Dedup] middleware over a namespace of its own. Its signature is
// transporttest.Transport.Dedup's.
func Each(t *testing.T, fn func(t *testing.T, dedup middleware.ConsumeMiddleware)) {
	redistest.Each(t, func(t *testing.T, rc redis.UniversalClient) {
		dedup, err := redismw.Dedup(redismw.DedupConfig{Client: rc, Prefix: "tt:" + redistest.NS(t), LockExpiry: 2 * time.Second, Logger: testkit.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		fn(t, dedup)
	})
}
