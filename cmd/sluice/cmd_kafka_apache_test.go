package main

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/peers/peertest"
)

// quickstart --kafka=ADDR against a real Apache Kafka (skipped without Java or the peer
// jars): the run's topic and groups carry a suffix, and its topics are deleted at the end.
func TestQuickstartApacheKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an Apache Kafka JVM")
	}
	k := peertest.StartKafka(t, 1)
	out, _, err := execRoot(t, 120*time.Second, "quickstart", "--kafka="+k.Brokers[0], "--timeout", "90s")
	if err != nil {
		t.Fatalf("quickstart --kafka=%s: %v\n%s", k.Brokers[0], err, out)
	}
	for _, want := range []string{"using the Kafka cluster at " + k.Brokers[0], "came back through points_service-", "Dedup skipped 1 duplicate(s); points added 1 time(s)",
		"dead letter in points_service-", "this run deletes its topics at the end", "quickstart on Kafka OK in"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
