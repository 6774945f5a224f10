package compat_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
)

// Messages per fan-out test: the acceptance number for the official client in
// both directions, and half of it for the mixed pairs (same checks, to keep the
// package's -race time down on small machines).
const (
	fanoutMessages      = 10000
	mixedFanoutMessages = 5000
)

// runFanout is the shared fan-out check: a 4-queue topic; two push consumers in one
// clustering group subscribed to "*" must receive every message exactly once between
// them, each intact (tag, keys, body, properties); a third consumer in another group
// subscribed to "TagA || TagC" must receive exactly the TagA and TagC messages.
// Producers and consumers come from the given factories.
func runFanout(t *testing.T, n int, newProducer producerFactory, newConsumer consumerFactory) {
	start := time.Now()
	e := newEnv(t)
	const topic = "CompatFanout"
	e.createTopic(topic, 4)

	all, ac := newCollector(topic), newCollector(topic)
	stops := []func(){
		newConsumer(t, e, "compat_all", "all-1", topic, "*", all),
		newConsumer(t, e, "compat_all", "all-2", topic, "*", all),
		newConsumer(t, e, "compat_ac", "ac-1", topic, "TagA || TagC", ac),
	}
	e.waitMembers("compat_all", 2)
	e.waitMembers("compat_ac", 1)
	send := newProducer(t, e, "fanout-producer")

	// Probes: eight messages (every queue twice with round-robin selection) that group
	// compat_all must see before the real run, so both members have rebalanced and are
	// pulling every queue. Tag "Probe" must never reach compat_ac.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 8 {
		if err := send(ctx, probeMsg(topic, i)); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return all.probes() == 8 }, func() string { return fmt.Sprintf("%d of 8 probes consumed by compat_all", all.probes()) })

	seqs := seqRange(0, n)
	sendStart := time.Now()
	sendAll(t, send, topic, seqs, 8)
	sent := time.Since(sendStart)
	wantAC := notTagB(0, n)
	testkit.WaitFor(t, 90*time.Second, func() bool { return all.distinct() >= len(seqs) && ac.distinct() >= len(wantAC) }, func() string {
		return fmt.Sprintf("compat_all: %s; compat_ac: %s", all.missing(seqs), ac.missing(wantAC))
	})
	received := time.Since(sendStart)
	for _, stop := range stops {
		stop()
	}

	perAll := all.checkExactly(t, "compat_all", seqs)
	for _, who := range []string{"all-1", "all-2"} {
		if perAll[who] == 0 {
			t.Errorf("consumer %s of compat_all received nothing (deliveries per consumer %v): the group did not share the queues", who, perAll)
		}
	}
	ac.checkExactly(t, "compat_ac", wantAC)
	if n := ac.probes(); n != 0 {
		t.Errorf("compat_ac (TagA || TagC) received %d Probe-tagged messages", n)
	}
	t.Logf("%d messages sent in %v, all received by both groups after %v (compat_all split %v); test took %v",
		len(seqs), sent.Round(time.Millisecond), received.Round(time.Millisecond), perAll, time.Since(start).Round(time.Millisecond))
}

// TestOfficialProducerToOfficialConsumers: the official Go producer sends 10,000
// tagged, keyed messages with user properties; official push consumers receive them.
func TestOfficialProducerToOfficialConsumers(t *testing.T) {
	t.Parallel()
	runFanout(t, fanoutMessages, officialProducer, officialConsumer)
}

// TestSluiceProducerToOfficialConsumers: Sluice's producer sends 5,000 messages;
// official push consumers receive them.
func TestSluiceProducerToOfficialConsumers(t *testing.T) {
	t.Parallel()
	runFanout(t, mixedFanoutMessages, sluiceProducer, officialConsumer)
}

// TestOfficialProducerToSluiceConsumers: the official Go producer sends 5,000
// messages; Sluice's PushConsumers receive them.
func TestOfficialProducerToSluiceConsumers(t *testing.T) {
	t.Parallel()
	runFanout(t, mixedFanoutMessages, officialProducer, sluiceConsumer)
}
