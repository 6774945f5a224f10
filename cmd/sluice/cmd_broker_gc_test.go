package main

import (
	"runtime/debug"
	"testing"
)

// TestSetBrokerGC: without GOGC in the environment the broker collects with GOGC=400;
// a GOGC given in the environment is left alone.
func TestSetBrokerGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	if got := setBrokerGC(func(string) string { return "" }); got != "400" {
		t.Fatalf("setBrokerGC without GOGC = %q, want 400", got)
	}
	if pct := debug.SetGCPercent(100); pct != 400 {
		t.Fatalf("GC percent after setBrokerGC without GOGC = %d, want 400", pct)
	}
	env := func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	}
	if got := setBrokerGC(env); got != "150" {
		t.Fatalf("setBrokerGC with GOGC=150 = %q, want 150", got)
	}
	if pct := debug.SetGCPercent(100); pct != 100 {
		t.Fatalf("GC percent after setBrokerGC with GOGC set = %d, want it untouched (100)", pct)
	}
}
