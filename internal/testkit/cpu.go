package testkit

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the user+system CPU time this process has used (getrusage RUSAGE_SELF),
// or 0 where the call fails.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU starts measuring the CPU time (user+system, every goroutine and thread of the
// process, from getrusage) of benchmark b; the function it returns reports it as
// "cpu-ns/op", divided by b.N. Use it as
//
//	defer testkit.ReportCPU(b)()
//
// after the setup, next to b.ResetTimer. On a machine shared with other work, wall-clock
// ns/op swings with the load while CPU time per operation stays close; compare it with
// benchstat. Work the benchmark leaves to background goroutines after it returns is not
// counted.
func ReportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
