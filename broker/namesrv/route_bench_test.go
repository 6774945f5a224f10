package namesrv_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

// BenchmarkRouteLookup10kTopics registers one broker holding 10,000 topics, then looks
// routes up (GET_ROUTEINFO_BY_TOPIC, 105) from 50 goroutines sharing one client, as a
// producer's first sends to many topics do. It reports the lookups' p50 and p99 latency
// and the process's CPU per lookup (client and name server together): the name server's
// own share of a route lookup at scale, with no registrations running. The whole path
// (a broker creating topics and re-registering, the producer caching 10,000 routes) is
// BenchmarkFirstSends10kTopics in package producer.
//
//	go test -run XXX -bench RouteLookup10kTopics -benchtime 20000x ./broker/namesrv
func BenchmarkRouteLookup10kTopics(b *testing.B) {
	const nTopics, goroutines = 10000, 50
	ns, err := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	if err := ns.Start(); err != nil {
		b.Fatal(err)
	}
	defer ns.Shutdown(context.Background())
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	table := map[string]any{}
	for i := range nTopics {
		name := fmt.Sprintf("RouteTopic-%05d", i)
		table[name] = map[string]any{"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
			"topicFilterType": "SINGLE_TAG"}
	}
	body, err := json.Marshal(map[string]any{"topicConfigSerializeWrapper": map[string]any{
		"topicConfigTable": table, "dataVersion": map[string]any{"timestamp": 1700000000000, "counter": 1}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := remoting.NewRequest(remoting.RegisterBroker, map[string]string{"brokerName": "broker-a",
		"brokerAddr": "127.0.0.1:10911", "clusterName": "DefaultCluster", "haServerAddr": "127.0.0.1:10912",
		"brokerId": "0", "compressed": "false"}, body)
	if r, err := c.InvokeSync(ctx, ns.Addr(), reg); err != nil || r.ResponseCode() != remoting.Success {
		b.Fatalf("register: %v %+v", err, r)
	}
	lookup := func(i int) (time.Duration, error) {
		topic := fmt.Sprintf("RouteTopic-%05d", i%nTopics)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := c.InvokeSync(ctx, ns.Addr(), remoting.NewRequest(remoting.GetRouteInfoByTopic,
			map[string]string{"topic": topic}, nil))
		if err != nil {
			return 0, err
		}
		if r.ResponseCode() != remoting.Success || len(r.Body) == 0 {
			return 0, fmt.Errorf("route of %s: code %d %s", topic, r.Code, r.Remark)
		}
		return time.Since(start), nil
	}
	if _, err := lookup(0); err != nil {
		b.Fatal(err)
	}
	lats := make([]time.Duration, b.N)
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	b.ResetTimer()
	stopCPU := testkit.ReportCPU(b)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				d, err := lookup(i * 7919)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				lats[i] = d
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	stopCPU()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
}
