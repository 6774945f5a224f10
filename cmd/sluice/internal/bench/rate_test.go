package bench

import (
	"strings"
	"testing"
	"time"
)

func TestParseRates(t *testing.T) {
	got, err := ParseRates("50%,80%, 20000,1.5k,100%")
	if err != nil {
		t.Fatal(err)
	}
	want := []RateSpec{{Fraction: 0.5}, {Fraction: 0.8}, {PerSec: 20000}, {PerSec: 1500}, {Fraction: 1}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("spec %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := got[0].String() + " " + got[2].String(); s != "50% 20000" {
		t.Errorf("String: %q", s)
	}
	if r := got[1].resolve(10000); r != 8000 {
		t.Errorf("80%% of 10000 = %v", r)
	}
	if r := got[2].resolve(10000); r != 20000 {
		t.Errorf("a fixed rate resolved to %v", r)
	}
	if needsSaturation(got[2:4]) || !needsSaturation(got) {
		t.Error("needsSaturation wrong")
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"0", `"0" is not a rate in (0, 10000000]`},
		{"-5", "is not a rate"},
		{"20000000", "is not a rate"},
		{"fast", "is not a rate"},
		{"0%", "is not a percentage in (0, 100]"},
		{"150%", "is not a percentage"},
		{"50%,,80%", `"" is not a rate`},
		{strings.Repeat("1,", 16) + "1", "17 rates, at most 16"},
	} {
		if _, err := ParseRates(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRates(%q) = %v, want an error with %q", tc.in, err, tc.want)
		}
	}
}

func TestRateSchedule(t *testing.T) {
	if n := rateMessages(2000, 0, 10*time.Second); n != 20000 {
		t.Errorf("2000 msg/s for 10s: %d messages", n)
	}
	if n := rateMessages(2000, 500, 10*time.Second); n != 500 {
		t.Errorf("--messages 500 ignored: %d", n)
	}
	if n := rateMessages(0.1, 0, time.Second); n != 1 {
		t.Errorf("tiny rate: %d messages, want at least 1", n)
	}
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		seq    int64
		perSec float64
		want   time.Duration
	}{{1, 1000, 0}, {2, 1000, time.Millisecond}, {1001, 1000, time.Second}, {3, 3, 666666666}} {
		if got := dueAt(start, tc.seq, tc.perSec).Sub(start); got != tc.want {
			t.Errorf("dueAt(seq %d, %v/s) = start+%v, want +%v", tc.seq, tc.perSec, got, tc.want)
		}
	}
	b := makeBody(32)
	due := time.Unix(1700000000, 123456789)
	putStamp(b, -42, due)
	seq, d, ok := readStamp(b)
	if !ok || seq != -42 || !d.Equal(due) || b[16] != 'a'+16%26 {
		t.Errorf("stamp round trip: %d %v %v, filler %q", seq, d, ok, b[16])
	}
	if _, _, ok := readStamp(b[:15]); ok {
		t.Error("a 15-byte body read as stamped")
	}
}

// e2eSink's bookkeeping: latency from the due time, each timed message once,
// duplicates and foreign bodies apart, warm-ups counted to their own signal.
func TestE2ESinkBookkeeping(t *testing.T) {
	s := newE2ESink(3, 2)
	base := time.Unix(2000, 0)
	now := base
	s.now = func() time.Time { return now }
	body := func(seq int64, due time.Time) []byte { b := makeBody(16); putStamp(b, seq, due); return b }

	s.handle(body(-1, base))
	select {
	case <-s.warmDone:
		t.Fatal("warm-up done after 1 of 2")
	default:
	}
	s.handle(body(-2, base))
	<-s.warmDone

	now = base.Add(5 * time.Millisecond)
	s.handle(body(1, base)) // 5 ms
	s.handle(body(1, base)) // duplicate
	s.handle(body(4, base)) // outside 1..3
	s.handle(body(0, base)) // not a timed sequence
	s.handle([]byte("short"))
	now = base.Add(20 * time.Millisecond)
	s.handle(body(2, base.Add(10*time.Millisecond))) // 10 ms
	select {
	case <-s.all:
		t.Fatal("all handled after 2 of 3")
	default:
	}
	s.handle(body(3, base.Add(19*time.Millisecond))) // 1 ms
	<-s.all
	h := s.histogram()
	if h.Count() != 3 || h.Min() != time.Millisecond || h.Max() != 10*time.Millisecond ||
		h.Quantile(0.5) < 4840*time.Microsecond || h.Quantile(0.5) > 5160*time.Microsecond { // bucket precision 3.2 %
		t.Errorf("histogram: n %d min %v max %v p50 %v", h.Count(), h.Min(), h.Max(), h.Quantile(0.5))
	}
	if s.dups.Load() != 4 || s.distinct.Load() != 3 || s.warm.Load() != 2 {
		t.Errorf("dups %d distinct %d warm %d, want 4 3 2", s.dups.Load(), s.distinct.Load(), s.warm.Load())
	}
	if s0 := newE2ESink(1, 0); func() bool {
		select {
		case <-s0.warmDone:
			return false
		default:
			return true
		}
	}() {
		t.Error("no warm-up wanted, but warmDone is open")
	}
}
