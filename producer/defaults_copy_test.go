package producer

import "testing"

// DefaultLatencyFaultRules hands out a fresh table: changing one changes no producer's.
func TestDefaultLatencyFaultRulesIsACopy(t *testing.T) {
	a := DefaultLatencyFaultRules()
	if len(a) != 5 || a[0].Latency <= 0 {
		t.Fatalf("DefaultLatencyFaultRules() = %v, want RocketMQ's 5 rules", a)
	}
	a[0].Latency = 0
	if DefaultLatencyFaultRules()[0].Latency == 0 {
		t.Fatal("changing a returned table changed the next call's")
	}
}
