package producer

// Benchmarks against an embedded Sluice broker (ASYNC_FLUSH, default config) on
// 127.0.0.1. Run for example:
//
//	go test -run '^$' -bench . -benchtime 200000x ./producer
//
// Each reports msgs/s (and MB/s through b.SetBytes where the payload is the point).
// Batch benchmarks send b.N batches: use a smaller -benchtime for them.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

const benchBody = 1024

func benchSetup(b *testing.B, topic string, queues int) (*broker.Broker, *Producer) {
	b.Helper()
	br, _ := testbroker.Start(b, broker.Config{})
	createTopic(b, testbroker.Namesrv(br), topic, queues)
	p := newProducer(b, Config{NamesrvAddrs: testbroker.Namesrv(br), SendTimeout: 30 * time.Second})
	// Warm up: route, connection, topic files.
	if _, err := p.SendSync(context.Background(), message.NewMessage(topic, make([]byte, benchBody))); err != nil {
		b.Fatal(err)
	}
	return br, p
}

func reportRate(b *testing.B, n int, start time.Time) {
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkSendSync: 64 goroutines each waiting for its send (1 KiB bodies).
func BenchmarkSendSync(b *testing.B) {
	_, p := benchSetup(b, "BenchSync", 8)
	body := make([]byte, benchBody)
	b.SetBytes(benchBody)
	b.SetParallelism(32) // × GOMAXPROCS goroutines
	b.ResetTimer()
	defer testkit.ReportCPU(b)()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := p.SendSync(context.Background(), message.NewMessage("BenchSync", body)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportRate(b, b.N, start)
}

// BenchmarkSendAsync: one goroutine issues b.N SendAsync calls (1 KiB bodies) with up to
// MaxAsyncInflight (default 1000) in flight, and waits for every callback. "callback" is
// the plain producer (sends driven by remoting callbacks); "middleware" adds a
// pass-through middleware, which runs each send in its own goroutine; "autobatch" is the
// plain producer with Config.AutoBatch.
func BenchmarkSendAsync(b *testing.B) {
	passThrough := func(next middleware.SendFunc) middleware.SendFunc { return next }
	for _, tc := range []struct {
		name      string
		mws       []middleware.SendMiddleware
		autoBatch bool
	}{{"callback", nil, false}, {"middleware", []middleware.SendMiddleware{passThrough}, false}, {"autobatch", nil, true}} {
		b.Run(tc.name, func(b *testing.B) {
			br, _ := testbroker.Start(b, broker.Config{})
			createTopic(b, testbroker.Namesrv(br), "BenchAsync", 8)
			p := newProducer(b, Config{NamesrvAddrs: testbroker.Namesrv(br), SendTimeout: 30 * time.Second, Middlewares: tc.mws, AutoBatch: tc.autoBatch})
			if _, err := p.SendSync(context.Background(), message.NewMessage("BenchAsync", make([]byte, benchBody))); err != nil {
				b.Fatal(err)
			}
			body := make([]byte, benchBody)
			var wg sync.WaitGroup
			var failed atomic.Int64
			var firstErr atomic.Value
			cb := func(_ *message.SendResult, err error) {
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				wg.Done()
			}
			b.SetBytes(benchBody)
			b.ResetTimer()
			defer testkit.ReportCPU(b)()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				wg.Add(1)
				if err := p.SendAsync(context.Background(), message.NewMessage("BenchAsync", body), cb); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			reportRate(b, b.N, start)
			if failed.Load() > 0 {
				b.Fatalf("%d async sends failed, first: %v", failed.Load(), firstErr.Load())
			}
		})
	}
}

// BenchmarkSendOneway: b.N one-way sends (1 KiB bodies) from 8 goroutines, timed until
// the broker has stored all of them or stopped storing more for 500 ms; "stored-%"
// reports how many it stored (a broker under load drops one-way requests).
func BenchmarkSendOneway(b *testing.B) {
	br, p := benchSetup(b, "BenchOneway", 8)
	stored := func() int64 { return sum(maxOffsets(b, br.Addr(), "BenchOneway", 8)) }
	before := stored()
	body := make([]byte, benchBody)
	b.SetBytes(benchBody)
	b.ResetTimer()
	defer testkit.ReportCPU(b)()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := p.SendOneway(context.Background(), message.NewMessage("BenchOneway", body)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	sent := time.Since(start)
	// The broker's offsets until all are stored or none more for 500 ms (bounded: a
	// minute at most).
	last, _ := testkit.Settle(time.Minute, 500*time.Millisecond, func() int { return int(stored()) },
		func(n int) bool { return int64(n) >= before+int64(b.N) })
	b.ReportMetric(float64(b.N)/sent.Seconds(), "sent/s")
	b.ReportMetric(100*float64(int64(last)-before)/float64(b.N), "stored-%")
}

// BenchmarkSendBatch: batches of 1 KiB messages (64, 256 and 1024 per batch), sent by
// 4 goroutines per GOMAXPROCS with SendBatch; MB/s counts message bodies.
func BenchmarkSendBatch(b *testing.B) {
	for _, per := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("%dx1KiB", per), func(b *testing.B) {
			topic := fmt.Sprintf("BenchBatch%d", per)
			_, p := benchSetup(b, topic, 8)
			body := make([]byte, benchBody)
			b.SetBytes(int64(per * benchBody))
			b.SetParallelism(4)
			b.ResetTimer()
			defer testkit.ReportCPU(b)()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				msgs := make([]*message.Message, per)
				for pb.Next() {
					for i := range msgs {
						msgs[i] = message.NewMessage(topic, body)
					}
					if _, err := p.SendBatch(context.Background(), msgs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportRate(b, b.N*per, start)
		})
	}
}
