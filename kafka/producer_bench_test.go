package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Producer benchmarks against an in-process Kafka (kfake, one broker, 8 partitions),
// 1 KiB records: SendAsync with at most 64 records in flight, and 16 goroutines each
// waiting for its Send. They report msgs/s and the process's CPU per record (kfake
// included); compare sub-benchmarks of one run with benchstat:
//
//	go test -run '^$' -bench 'Producer(Async64|Sync16)' -benchtime 20000x -count 5 ./kafka
func benchProducer(b *testing.B, batchTimeout time.Duration, batchSize int) (*Producer, func()) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "Bench"))
	if err != nil {
		b.Fatal(err)
	}
	p, err := NewProducer(ProducerConfig{Brokers: c.ListenAddrs(), BatchTimeout: batchTimeout, BatchSize: batchSize, Logger: testkit.Quiet()})
	if err != nil {
		c.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, message.NewMessage("Bench", []byte("warm-up"))); err != nil {
		b.Fatal(err)
	}
	return p, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			b.Error(err)
		}
		c.Close()
	}
}

// benchBatchTimeouts are the writer settings compared: the defaults, the 1 ms batch
// timeout sluice bench uses, and 1 ms with batches of 8 records (64 in flight over 8
// partitions), which the writer sends as soon as they are full.
var benchBatchTimeouts = []struct {
	name      string
	d         time.Duration
	batchSize int
}{{"defaults", 0, 0}, {"BatchTimeout=1ms", time.Millisecond, 0}, {"BatchTimeout=1ms,BatchSize=8", time.Millisecond, 8}}

func BenchmarkProducerAsync64(b *testing.B) {
	for _, bt := range benchBatchTimeouts {
		b.Run(bt.name, func(b *testing.B) {
			p, stop := benchProducer(b, bt.d, bt.batchSize)
			defer stop()
			body := make([]byte, 1024)
			window := make(chan struct{}, 64)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var firstErr error
			b.ResetTimer()
			stopCPU := testkit.ReportCPU(b)
			start := time.Now()
			for range b.N {
				window <- struct{}{}
				wg.Add(1)
				err := p.SendAsync(context.Background(), message.NewMessage("Bench", body), func(_ *message.SendResult, err error) {
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
					<-window
					wg.Done()
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
			b.StopTimer()
			stopCPU()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			if firstErr != nil {
				b.Fatal(firstErr)
			}
		})
	}
}

func BenchmarkProducerSync16(b *testing.B) {
	for _, bt := range benchBatchTimeouts {
		b.Run(bt.name, func(b *testing.B) {
			p, stop := benchProducer(b, bt.d, bt.batchSize)
			defer stop()
			body := make([]byte, 1024)
			var wg sync.WaitGroup
			work := make(chan struct{}, b.N)
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			b.ResetTimer()
			stopCPU := testkit.ReportCPU(b)
			start := time.Now()
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range work {
						if _, err := p.Send(context.Background(), message.NewMessage("Bench", body)); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			stopCPU()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
		})
	}
}
