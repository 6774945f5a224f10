package broker

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkHotPathCounters measures what the stats add to one send and one pull: a
// per-topic counter lookup, two atomic adds and a histogram observation each.
func BenchmarkHotPathCounters(b *testing.B) {
	s := newBrokerStats()
	topics := make([]string, 64)
	for i := range topics {
		topics[i] = "topic-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			t := topics[i%len(topics)]
			c := pairFor(&s.puts, t)
			c.a.Add(1)
			c.b.Add(1024)
			s.sendLatency.observe(time.Duration(i%5000) * time.Microsecond)
			g := pairFor(&s.gets, groupTopic{"g", t})
			g.a.Add(1)
			s.pullLatency.observe(time.Millisecond)
			i++
		}
	})
}

func TestLatencyHistogramBuckets(t *testing.T) {
	h := newLatencyHistogram()
	for _, d := range []time.Duration{0, 100 * time.Microsecond, 101 * time.Microsecond, time.Second, time.Minute} {
		h.observe(d)
	}
	s := h.snapshot()
	// <=100µs: 2; <=250µs: 3; <=1s: 4; the minute is above every bound.
	if s.Count != 5 || s.Cumulative[0] != 2 || s.Cumulative[1] != 3 || s.Cumulative[12] != 4 || s.Cumulative[len(s.Cumulative)-1] != 4 ||
		s.Sum != 100*time.Microsecond+101*time.Microsecond+time.Second+time.Minute {
		t.Fatalf("snapshot %+v", s)
	}
	if countRecords([]byte{0, 0, 0, 8, 1, 2, 3, 4, 0, 0, 0, 4, 0, 0, 0, 99}) != 2 {
		t.Fatal("countRecords")
	}
}
