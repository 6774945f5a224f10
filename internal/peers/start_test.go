package peers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/peers/peertest"
	"github.com/sluicemq/sluice/internal/testkit"
)

// The Apache RocketMQ peer starts, and the Java client sends to it and consumes back.
func TestApacheRocketMQStartsAndServesJavaClient(t *testing.T) {
	r := apacheRocketMQ(t)
	d := peertest.JavaDriver(t)
	topic := "PeerSmoke"
	prod := d.Start(t, "produce", "--namesrv", r.NamesrvAddr)
	for i := 0; i < 3; i++ {
		prod.Send(peertest.Msg{Topic: topic, Keys: fmt.Sprintf("k%d", i), Body: fmt.Sprintf("b%d", i)})
	}
	evs := prod.Close()
	sent := 0
	for _, e := range evs {
		if e.Event == "sent" {
			if !e.OK || e.Status != "SEND_OK" {
				t.Fatalf("send: %+v", e)
			}
			sent++
		}
	}
	if sent != 3 {
		t.Fatalf("sent %d of 3: %v", sent, evs)
	}
	cons := d.Start(t, "consume", "--namesrv", r.NamesrvAddr, "--group", "peer-smoke", "--topic", topic)
	cons.WaitFor(60*time.Second, "3 deliveries", func(evs []peertest.Event) bool {
		n := 0
		for _, e := range evs {
			if e.Event == "msg" {
				n++
			}
		}
		return n >= 3
	})
	cons.Close()
}

// kafkaRoundTrip produces three records to topic (created by the first write) through
// kafka-go and reads them back from partition 0, where they start at offset from.
func kafkaRoundTrip(t *testing.T, k *peers.Kafka, topic string, from int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr := &kafkago.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafkago.Writer{Addr: kafkago.TCP(k.Brokers...), Topic: topic, AllowAutoTopicCreation: true,
		RequiredAcks: kafkago.RequireAll, BatchTimeout: 10 * time.Millisecond, Transport: tr}
	defer func() { _ = w.Close() }()
	msgs := []kafkago.Message{{Value: []byte("one")}, {Value: []byte("two")}, {Value: []byte("three")}}
	var err error
	// The topic is created by the first write; leadership follows shortly.
	testkit.EventuallyEvery(30*time.Second, 200*time.Millisecond, func() bool {
		err = w.WriteMessages(ctx, msgs...)
		return err == nil
	})
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	rd := kafkago.NewReader(kafkago.ReaderConfig{Brokers: k.Brokers, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer func() { _ = rd.Close() }()
	if err := rd.SetOffset(from); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"one", "two", "three"} {
		m, err := rd.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("fetch %d: %v", i, err)
		}
		if string(m.Value) != want || m.Offset != from+int64(i) {
			t.Fatalf("record %d: offset %d value %q, want offset %d %q", i, m.Offset, m.Value, from+int64(i), want)
		}
	}
}

// Apache Kafka starts in KRaft mode (one combined node) and serves kafka-go.
func TestApacheKafkaOneNode(t *testing.T) {
	k := peertest.StartKafka(t, 1)
	kafkaRoundTrip(t, k, "peer-smoke-1", 0)
}

// Three combined nodes form a quorum; a node killed and restarted rejoins, and the
// cluster serves produce/fetch throughout.
func TestApacheKafkaThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("three Kafka JVMs: skipped with -short")
	}
	k := peertest.StartKafka(t, 3)
	kafkaRoundTrip(t, k, "peer-smoke-3", 0)
	if err := k.StopNode(2); err != nil {
		t.Fatal(err)
	}
	kafkaRoundTrip(t, k, "peer-smoke-3", 3)
	if err := k.StartNode(context.Background(), 2, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	kafkaRoundTrip(t, k, "peer-smoke-3", 6)
}
