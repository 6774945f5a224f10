package broker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

// BenchmarkCreateTopics creates topics one after another over the wire
// (UPDATE_AND_CREATE_TOPIC, 17) while another client sends to an existing topic, and
// reports the sender's median and p99 latency during the creations. Run it with
// -benchtime=10000x for the "10,000 topics" figure:
//
//	go test -run XXX -bench CreateTopics -benchtime 10000x ./broker
func BenchmarkCreateTopics(b *testing.B) {
	dir := b.TempDir()
	cfg := Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: dir,
		MappedFileSizeCommitLog: 64 << 20, Logger: testkit.Quiet()}
	br, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := br.Start(); err != nil {
		b.Fatal(err)
	}
	defer br.Shutdown(context.Background())
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	call := func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := c.InvokeSync(ctx, br.Addr(), req)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	create := func(topic string) {
		r := call(remoting.NewRequest(remoting.UpdateAndCreateTopic, map[string]string{"topic": topic,
			"readQueueNums": "4", "writeQueueNums": "4", "perm": "6"}, nil))
		if r.ResponseCode() != remoting.Success {
			b.Fatalf("create %s: %d %s", topic, r.Code, r.Remark)
		}
	}
	create("Steady")
	stop := make(chan struct{})
	var (
		wg   sync.WaitGroup
		lats []time.Duration
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		pace := time.NewTicker(time.Millisecond) // a steady, light load: at most one send per tick
		defer pace.Stop()
		for {
			select {
			case <-stop:
				return
			case <-pace.C:
			}
			ext := map[string]string{"a": "pg", "b": "Steady", "c": "TBW102", "d": "4", "e": "0", "f": "0",
				"g": strconv.FormatInt(time.Now().UnixMilli(), 10), "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			r, err := c.InvokeSync(ctx, br.Addr(), remoting.NewRequest(remoting.SendMessageV2, ext, []byte("steady")))
			cancel()
			if err != nil || r.ResponseCode() != remoting.Success {
				return
			}
			lats = append(lats, time.Since(start))
		}
	}()
	b.ResetTimer()
	for i := range b.N {
		create(fmt.Sprintf("BenchTopic-%07d", i))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	if len(lats) > 0 {
		slices.Sort(lats)
		b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "send-p50-µs")
		b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "send-p99-µs")
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "topics/s")
}
