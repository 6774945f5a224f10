package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// Producer benchmarks against an in-process Kafka (kfake, one broker, 8 partitions),
// 1 KiB records: SendAsync with at most 64 records in flight, and 16 goroutines each
// waiting for its Send. They report msgs/s and the process's CPU per record (kfake
// included). Sub-benchmark "franz-go" drives a bare franz-go client the same way (its
// defaults, linger 0, as sluice bench's kafka-franz target), the reference the package
// is measured against; compare sub-benchmarks of one run with benchstat:
//
//	go test -run '^$' -bench 'Producer(Async64|Sync16)' -benchtime 5000x -count 5 ./kafka
func benchCluster(b *testing.B) *kfake.Cluster {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, "Bench"))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// benchSender is one way to send under test: send blocks until the record is
// acknowledged; async queues it and calls done once.
type benchSender struct {
	send  func(ctx context.Context, body []byte) error
	async func(ctx context.Context, body []byte, done func(error)) error
	stop  func()
}

func benchProducer(b *testing.B, batchTimeout time.Duration) benchSender {
	c := benchCluster(b)
	p, err := NewProducer(ProducerConfig{Brokers: c.ListenAddrs(), BatchTimeout: batchTimeout, Logger: testkit.Quiet()})
	if err != nil {
		c.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := p.Send(ctx, message.NewMessage("Bench", []byte("warm-up"))); err != nil {
		b.Fatal(err)
	}
	return benchSender{
		send: func(ctx context.Context, body []byte) error {
			_, err := p.Send(ctx, message.NewMessage("Bench", body))
			return err
		},
		async: func(ctx context.Context, body []byte, done func(error)) error {
			return p.SendAsync(ctx, message.NewMessage("Bench", body), func(_ *message.SendResult, err error) { done(err) })
		},
		stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				b.Error(err)
			}
			c.Close()
		},
	}
}

// benchFranz drives a bare franz-go client; with uniqKey each record carries a fresh
// UNIQ_KEY header, as every record of the package does (its message id).
func benchFranz(b *testing.B, uniqKey bool) benchSender {
	c := benchCluster(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		c.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "Bench", Value: []byte("warm-up")}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	record := func(body []byte) *kgo.Record {
		r := &kgo.Record{Topic: "Bench", Value: body}
		if uniqKey {
			r.Headers = []kgo.RecordHeader{{Key: message.PropertyUniqClientMessageIDKeyIdx, Value: []byte(message.NewUniqID())}}
		}
		return r
	}
	return benchSender{
		send: func(ctx context.Context, body []byte) error {
			return cl.ProduceSync(ctx, record(body)).FirstErr()
		},
		async: func(ctx context.Context, body []byte, done func(error)) error {
			cl.Produce(ctx, record(body), func(_ *kgo.Record, err error) { done(err) })
			return nil
		},
		stop: func() {
			cl.Close()
			c.Close()
		},
	}
}

// benchSenders are the ways compared: the package's defaults (no linger), with a 1 ms
// linger (BatchTimeout), bare franz-go, and bare franz-go writing the package's
// record (a 32-byte UNIQ_KEY header, which also compresses worse than the bench's
// repeated body).
var benchSenders = []struct {
	name string
	make func(b *testing.B) benchSender
}{
	{"defaults", func(b *testing.B) benchSender { return benchProducer(b, 0) }},
	{"BatchTimeout=1ms", func(b *testing.B) benchSender { return benchProducer(b, time.Millisecond) }},
	{"franz-go", func(b *testing.B) benchSender { return benchFranz(b, false) }},
	{"franz-go+UNIQ_KEY", func(b *testing.B) benchSender { return benchFranz(b, true) }},
}

func BenchmarkProducerAsync64(b *testing.B) {
	for _, bs := range benchSenders {
		b.Run(bs.name, func(b *testing.B) {
			s := bs.make(b)
			defer s.stop()
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
				err := s.async(context.Background(), body, func(err error) {
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
	for _, bs := range benchSenders {
		b.Run(bs.name, func(b *testing.B) {
			s := bs.make(b)
			defer s.stop()
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
						if err := s.send(context.Background(), body); err != nil {
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
