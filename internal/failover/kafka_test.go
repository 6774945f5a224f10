package failover

import (
	"context"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/kafka"
)

// startKafka starts a three-node Apache Kafka with min.insync.replicas=2 (so acks=all
// means two copies), stopped at t.Cleanup; skips t without Java or the jars.
func startKafka(t *testing.T) *peers.Kafka {
	t.Helper()
	k, err := peers.LaunchKafka(context.Background(), peers.KafkaOptions{Nodes: 3,
		ServerConf: map[string]string{"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}})
	if err != nil {
		if err2 := peers.Available("kafka"); err2 != nil {
			t.Skipf("apache kafka: %v", err2)
		}
		t.Fatalf("apache kafka: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("apache kafka output:\n%s", k.Output())
		}
		if err := k.Stop(); err != nil {
			t.Errorf("stop apache kafka: %v", err)
		}
	})
	return k
}

// partitionLeader returns the index (node id - 1) of the leader of topic's partition,
// asking the running nodes in turn.
func partitionLeader(ctx context.Context, k *peers.Kafka, topic string, partition int, not int) (int, error) {
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	var last error = fmt.Errorf("no metadata")
	for i, addr := range k.Brokers {
		if i == not {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		md, err := (&kafkago.Client{Addr: kafkago.TCP(addr), Transport: tr}).Metadata(rctx, &kafkago.MetadataRequest{Topics: []string{topic}})
		cancel()
		if err != nil {
			last = err
			continue
		}
		for _, tp := range md.Topics {
			for _, p := range tp.Partitions {
				if p.ID == partition && p.Leader.ID >= 1 && p.Leader.ID-1 != not {
					return p.Leader.ID - 1, nil
				}
			}
		}
		last = fmt.Errorf("node %d lists no live leader of %s/%d", i+1, topic, partition)
	}
	return -1, last
}

// Three Kafka nodes, a topic of 3 partitions replicated 3 times, acks=all with
// min.insync.replicas=2: the leader of partition 0 is killed and restarted, again and
// again. No acknowledged record is lost, no effect doubled.
func TestFailoverKafkaLeader(t *testing.T) {
	kills := campaignKills(t)
	k := startKafka(t)
	ctx := context.Background()
	const topic, group = "failover", "failover-group"
	if err := kafka.EnsureTopicsAt(testkit.Context(t, 120*time.Second), k.Brokers, 3, topic); err != nil {
		t.Fatal(err)
	}
	l := newLedger(t, group)
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: k.Brokers, RequiredAcks: kafkago.RequireAll,
		WriteTimeout: 5 * time.Second, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, p.Shutdown)
	if err := p.Start(testkit.Context(t, 60*time.Second)); err != nil {
		t.Fatal(err)
	}
	cons, err := kafka.NewConsumer(kafka.Config{Brokers: k.Brokers, Group: group, StartOffset: kafkago.FirstOffset,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second, Timeout: 5 * time.Second,
		Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Subscribe(topic, "*", l.handler()); err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, cons.Shutdown)

	stopLoad := l.startLoad(topic, p.SendFunc())
	defer stopLoad()

	down := outage(t)
	var outs []outageRec
	for n := 0; n < kills; n++ {
		base := l.ackedCount()
		testkit.WaitFor(t, 120*time.Second, func() bool { return l.ackedCount() >= base+50 }, "50 sends acknowledged before kill ", n+1)
		i, err := partitionLeader(ctx, k, topic, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		o := outageRec{what: fmt.Sprintf("node %d (leader of %s/0)", i+1, topic), kill: time.Now()}
		if err := k.StopNode(i); err != nil {
			t.Fatal(err)
		}
		if !testkit.Eventually(60*time.Second, func() bool { _, err := partitionLeader(ctx, k, topic, 0, i); return err == nil }) {
			t.Fatalf("no new leader of %s/0 within 60 s of killing node %d", topic, i+1)
		}
		o.electedAfter = time.Since(o.kill)
		time.Sleep(time.Until(o.kill.Add(down))) // the outage's length
		if err := k.StartNode(ctx, i, 180*time.Second); err != nil {
			t.Fatal(err)
		}
		o.back = time.Now()
		outs = append(outs, o)
		t.Logf("kill %d/%d: %s down %v (new leader after %v)", n+1, kills, o.what,
			o.back.Sub(o.kill).Round(100*time.Millisecond), o.electedAfter.Round(100*time.Millisecond))
	}
	base := l.ackedCount()
	testkit.WaitFor(t, 120*time.Second, func() bool { return l.ackedCount() >= base+50 }, "50 sends acknowledged after the last restart")
	stopLoad()
	if !testkit.Eventually(180*time.Second, l.allApplied) {
		t.Errorf("not every acknowledged record was applied within 180 s after the load stopped")
	}
	r := l.summarize("Apache Kafka 4.1, 3 nodes, RF 3, min ISR 2, acks=all", "kill -9 leader of partition 0", outs)
	t.Logf("FIGURES %v (load average %s)", r, loadAverage())
	if r.lost != 0 {
		t.Errorf("%d acknowledged records lost", r.lost)
	}
	if r.doubled != 0 {
		t.Errorf("%d effects applied twice despite the inbox", r.doubled)
	}
}
