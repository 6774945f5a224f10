package kafka

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/peers/peertest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/transporttest"
)

// The transport conformance suite against a real Apache Kafka (one KRaft node, started
// from the peers' jars; skipped without Java or the jars).
func TestConformanceApacheKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an Apache Kafka JVM")
	}
	k := peertest.StartKafka(t, 1)
	tr := kafkaTransport(t, k.Brokers)
	tr.Timeout = 60 * time.Second
	transporttest.Run(t, tr)
}

// Against a three-node Apache Kafka whose second node is killed (SIGKILL) mid-run and
// started again: every message sent is consumed (sends that failed while leaders moved
// are sent again, as an application does), counted by body; duplicates are reported,
// not failed.
func TestApacheKafkaNodeKilledMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three Apache Kafka JVMs")
	}
	k := peertest.StartKafka(t, 3)
	const topic, n = "survive", 600
	ctx := ctxT(t, 5*time.Minute)
	if err := EnsureTopicsAt(ctx, k.Brokers, 3, topic); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, k.Brokers, func(c *ProducerConfig) { c.WriteTimeout = 5 * time.Second })
	seen := make([]atomic.Int32, n)
	var distinct atomic.Int64
	cfg := fastConfig(t, k.Brokers, "g-survive")
	cfg.SessionTimeout, cfg.RebalanceTimeout, cfg.Timeout = 6*time.Second, 20*time.Second, 5*time.Second
	cfg.Logger = testkit.Quiet()
	cons := startConsumer(t, cfg, func(c *Consumer) {
		_ = c.Subscribe(topic, "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			for _, m := range msgs {
				i, err := strconv.Atoi(string(m.Body))
				if err != nil || i < 0 || i >= n {
					return message.ReconsumeLater, errors.New("bad body")
				}
				if seen[i].Add(1) == 1 {
					distinct.Add(1)
				}
			}
			return message.ConsumeSuccess, nil
		})
	})
	defer shutdown(t, cons, 30*time.Second)

	var resends atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n && ctx.Err() == nil; i++ {
			for attempt := 0; ; attempt++ {
				_, err := p.Send(ctx, message.NewMessage(topic, []byte(strconv.Itoa(i))).SetKeys("k"+strconv.Itoa(i)))
				if err == nil {
					break
				}
				if attempt >= 60 || ctx.Err() != nil {
					t.Errorf("send %d: %v", i, err)
					return
				}
				resends.Add(1)
				time.Sleep(200 * time.Millisecond) // the test's own send retry while leaders move (an application's)
			}
		}
	}()
	testkit.WaitFor(t, 60*time.Second, func() bool { return distinct.Load() >= n/4 }, "a quarter consumed before the kill")
	if err := k.StopNode(1); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 120*time.Second, func() bool { return distinct.Load() >= n/2 }, "half consumed with a node down")
	if err := k.StartNode(ctx, 1, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	testkit.WaitFor(t, 120*time.Second, func() bool { return distinct.Load() == n }, "every message consumed")
	var dups int32
	for i := range seen {
		dups += seen[i].Load() - 1
	}
	t.Logf("%d messages consumed, %d redelivered, %d sends retried while node 2 was down", n, dups, resends.Load())
}
