package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/peers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The same program runs to the end on each engine: run returns an error unless every
// committed order was shipped exactly once and no rolled-back order was.

func TestSluice(t *testing.T) { runOn(t, options{engine: "sluice"}) }

func TestKafka(t *testing.T) { runOn(t, options{engine: "kafka"}) } // embedded kfake

// TestApacheRocketMQ runs it on an Apache RocketMQ 4.9.7 name server and broker (JVMs
// started by internal/peers); it skips without Java or the jars.
func TestApacheRocketMQ(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two JVMs")
	}
	if err := peers.Available("rocketmq"); err != nil {
		t.Skipf("needs Java and the Apache RocketMQ 4.9.7 jars (internal/peers): %v", err)
	}
	r, err := peers.LaunchRocketMQ(context.Background(), peers.RocketMQOptions{})
	if err != nil {
		t.Fatalf("apache rocketmq: %v", err)
	}
	defer func() {
		if err := r.Stop(); err != nil {
			t.Errorf("stop apache rocketmq: %v", err)
		}
	}()
	runOn(t, options{engine: "rocketmq", namesrv: r.NamesrvAddr})
}

// TestApacheKafka runs it with -brokers on an Apache Kafka 4 node (a JVM started by
// internal/peers); it skips without Java or the jars.
func TestApacheKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	if err := peers.Available("kafka"); err != nil {
		t.Skipf("needs Java and the Apache Kafka jars (internal/peers): %v", err)
	}
	k, err := peers.LaunchKafka(context.Background(), peers.KafkaOptions{})
	if err != nil {
		t.Fatalf("apache kafka: %v", err)
	}
	defer func() {
		if err := k.Stop(); err != nil {
			t.Errorf("stop apache kafka: %v", err)
		}
	}()
	runOn(t, options{engine: "kafka", brokers: k.Brokers[0]})
}

func TestOptionErrors(t *testing.T) {
	for o, want := range map[options]string{
		{engine: "nats"}:     `-engine "nats": want sluice, rocketmq or kafka`,
		{engine: "rocketmq"}: "-engine rocketmq needs -namesrv host:port",
	} {
		if err := run(context.Background(), o); err == nil || err.Error() != want {
			t.Errorf("%+v: got %v, want %q", o, err, want)
		}
	}
}

func runOn(t *testing.T, o options) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, o); err != nil {
		t.Fatal(err)
	}
}
