package redismw

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// benchRedis returns a client to the real Redis at SLUICE_REDIS_ADDR (keys under a fresh
// namespace, deleted afterwards) or else to a miniredis, and the namespace.
func benchRedis(b *testing.B) (redis.UniversalClient, string) {
	ns := redistest.NS(b)
	if addr := os.Getenv(redistest.EnvAddr); addr != "" {
		c := redistest.Dial(b, addr)
		b.Cleanup(func() { redistest.DeleteNamespace(b, c, ns) })
		return c, ns
	}
	return redistest.New(b), ns
}

// BenchmarkConsumeChain measures the consume chain ConsumeKeys + Dedup + Progress (the
// Keys rule applied on the consume side, the lock and markers in Redis) against the bare
// handler, with 20 concurrent workers (the consumer's default ConsumeThreadMin) on
// GOMAXPROCS cores. Every message is new (the first delivery, the costly path) unless the
// sub-benchmark says "duplicate". It reports msgs/s and Redis round trips per message
// (counted by a go-redis hook). The handlers:
//
//   - noop: returns ConsumeSuccess at once (the baseline; the chain's cost is
//     then all Redis latency, so the ratio mostly shows Redis round-trip time);
//   - write: one Redis SET per message, a stand-in for a handler with one fast storage write;
//   - io1ms: waits 1 ms per message, a stand-in for a handler with a database call.
//
// Each runs on a plain go-redis client ("client") and on its autopipeliner
// ("autopipeline", client.AutoPipeline(), which batches concurrent workers' commands into
// shared pipelines; redis-rt/msg then counts pipelines, so it drops below one). Compare
// msgs/s of "bare" and "chain" with the same handler and client for the throughput ratio.
//
// Real Redis: SLUICE_REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench ConsumeChain ./middleware/
func BenchmarkConsumeChain(b *testing.B) {
	quiet := testkit.Quiet()
	handlers := []struct {
		name string
		make func(c redis.UniversalClient, ns string) middleware.ConsumeFunc
	}{
		{"noop", func(redis.UniversalClient, string) middleware.ConsumeFunc {
			return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				return message.ConsumeSuccess, nil
			}
		}},
		{"io1ms", func(redis.UniversalClient, string) middleware.ConsumeFunc {
			return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				time.Sleep(time.Millisecond) // a stand-in for a 1 ms database call
				return message.ConsumeSuccess, nil
			}
		}},
		{"write", func(c redis.UniversalClient, ns string) middleware.ConsumeFunc {
			return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				if err := c.Set(ctx, "bench:"+ns+":effect:"+string(msgs[0].Body), "1", 10*time.Minute).Err(); err != nil {
					return message.ReconsumeLater, err
				}
				return message.ConsumeSuccess, nil
			}
		}},
	}
	for _, client := range []string{"client", "autopipeline"} {
		for _, hd := range handlers {
			for _, mode := range []string{"bare", "chain", "chain-duplicate"} {
				b.Run(client+"/"+hd.name+"/"+mode, func(b *testing.B) {
					base, ns := benchRedis(b)
					rt := redistest.CountRoundTrips(base)
					c := base
					if client == "autopipeline" {
						ap, err := base.(*redis.Client).AutoPipeline()
						if err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { _ = ap.Close() })
						c = ap
					}
					h := hd.make(c, ns)
					if mode != "bare" {
						d, err := NewDeduper(DedupConfig{Client: c, Prefix: "sluice:dedup:" + ns, DoneTTL: 10 * time.Minute, Logger: quiet})
						if err != nil {
							b.Fatal(err)
						}
						p, err := NewProgressTracker(ProgressConfig{Client: c, Prefix: "sluice:dedup:" + ns, TTL: 10 * time.Minute, Logger: quiet})
						if err != nil {
							b.Fatal(err)
						}
						h = middleware.ChainConsume(h, middleware.ConsumeKeys(), d.Middleware(), p.Middleware())
						// Load the scripts so the NOSCRIPT fallback is not measured; in the
						// duplicate mode this also marks the one message done.
						warm := &message.MessageExt{Message: message.Message{Topic: "B", Body: []byte("dup")}}
						warm.SetTag("t")
						if res, err := h(context.Background(), []*message.MessageExt{warm}); res != message.ConsumeSuccess || err != nil {
							b.Fatal(res, err)
						}
					}
					rt.Reset()
					var seq, failed atomic.Int64
					b.SetParallelism(20 / max(1, runtimeProcs()))
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						ctx := context.Background()
						for pb.Next() {
							body := "dup"
							if mode != "chain-duplicate" {
								body = strconv.FormatInt(seq.Add(1), 10)
							}
							m := &message.MessageExt{Message: message.Message{Topic: "B", Body: []byte(body)}}
							m.SetTag("t")
							if res, err := h(ctx, []*message.MessageExt{m}); res != message.ConsumeSuccess || err != nil {
								failed.Add(1)
							}
						}
					})
					b.StopTimer()
					if failed.Load() > 0 {
						b.Fatalf("%d of %d messages not acknowledged", failed.Load(), b.N)
					}
					b.ReportMetric(float64(rt.N())/float64(b.N), "redis-rt/msg")
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
				})
			}
		}
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
