package producer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
)

// BenchmarkFirstSends10kTopics sends one message to each of b.N new topics from 50
// goroutines (every send is a topic's first: the route comes from TBW102 and the broker
// auto-creates the topic, then re-registers with the name server), then fetches every
// topic's route from the name server from 50 goroutines. It reports the whole run's
// seconds, the first sends' p50/p99, the route fetches' p50/p99 and CPU per topic
// (client, broker and name server in this process). With 10,000 topics it shows what
// the broker's re-registrations cost while topics are created:
//
//	go test -run '^$' -bench FirstSends10kTopics -benchtime 10000x ./producer
func BenchmarkFirstSends10kTopics(b *testing.B) {
	const goroutines = 50
	br, _ := testbroker.Start(b, broker.Config{})
	p := newProducer(b, Config{NamesrvAddrs: testbroker.Namesrv(br), SendTimeout: 30 * time.Second})
	prefix := fmt.Sprintf("First%d-", time.Now().UnixNano()%100000)
	topic := func(i int) string { return fmt.Sprintf("%s%06d", prefix, i) }
	run := func(f func(i int) error) []time.Duration {
		lats := make([]time.Duration, b.N)
		var (
			next     atomic.Int64
			wg       sync.WaitGroup
			errOnce  sync.Once
			firstErr error
		)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= b.N {
						return
					}
					start := time.Now()
					if err := f(i); err != nil {
						errOnce.Do(func() { firstErr = err })
						return
					}
					lats[i] = time.Since(start)
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		slices.Sort(lats)
		return lats
	}
	body := make([]byte, 128)
	b.ResetTimer()
	stopCPU := testkit.ReportCPU(b)
	start := time.Now()
	sends := run(func(i int) error {
		_, err := p.SendSync(context.Background(), message.NewMessage(topic(i), body))
		return err
	})
	sendSecs := time.Since(start).Seconds()
	// Every topic is registered now (or soon): wait, outside the figures, for the last.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	testkit.WaitFor(b, time.Minute, func() bool {
		_, err := p.cl.FetchRoute(ctx, topic(b.N-1))
		return err == nil
	}, "route of the last topic")
	routes := run(func(i int) error {
		_, err := p.cl.FetchRoute(ctx, topic(i))
		return err
	})
	b.StopTimer()
	stopCPU()
	b.ReportMetric(sendSecs, "send-s")
	b.ReportMetric(float64(sends[len(sends)/2].Microseconds()), "send-p50-µs")
	b.ReportMetric(float64(sends[len(sends)*99/100].Microseconds()), "send-p99-µs")
	b.ReportMetric(float64(routes[len(routes)/2].Microseconds()), "route-p50-µs")
	b.ReportMetric(float64(routes[len(routes)*99/100].Microseconds()), "route-p99-µs")
}
