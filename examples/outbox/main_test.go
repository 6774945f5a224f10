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

func TestUnknownEngine(t *testing.T) {
	err := run(context.Background(), options{engine: "nats"})
	if err == nil || err.Error() != `-engine "nats": want sluice, rocketmq or kafka` {
		t.Fatalf("got %v", err)
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
