package bench

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// Every message goes to one topic, every topic has exactly one consumer, and the
// producers' sequence numbers cover 1..n once.
func TestScaleAssignments(t *testing.T) {
	for _, tc := range []struct{ clients, topics int }{{200, 1000}, {20, 1000}, {7, 30}, {1, 1}} {
		owner := make([]int, tc.topics)
		for i := range owner {
			owner[i] = -1
		}
		for i := range tc.clients {
			for _, tp := range consumerTopics(i, tc.clients, tc.topics) {
				if owner[tp] != -1 {
					t.Fatalf("%+v: topic %d owned by %d and %d", tc, tp, owner[tp], i)
				}
				owner[tp] = i
			}
		}
		for tp, o := range owner {
			if o == -1 {
				t.Fatalf("%+v: topic %d has no consumer", tc, tp)
			}
		}
		const n = 5003
		seen := make([]bool, n+1)
		perTopic := make([]int, tc.topics)
		for p := range tc.clients {
			for k := int64(0); ; k++ {
				seq := seqOf(p, k, tc.clients)
				if seq > n {
					break
				}
				if seen[seq] {
					t.Fatalf("%+v: seq %d sent twice", tc, seq)
				}
				seen[seq] = true
				perTopic[topicOf(seq, tc.topics)]++
			}
		}
		for seq := 1; seq <= n; seq++ {
			if !seen[seq] {
				t.Fatalf("%+v: seq %d never sent", tc, seq)
			}
		}
		lo, hi := n, 0
		for _, c := range perTopic {
			lo, hi = min(lo, c), max(hi, c)
		}
		if hi-lo > 1 {
			t.Errorf("%+v: topics get %d..%d messages, want even", tc, lo, hi)
		}
	}
}

func TestRestartPlan(t *testing.T) {
	d := 30 * time.Second
	p := restartPlan(50, d, 200)
	if len(p) != 50 {
		t.Fatalf("%d restarts", len(p))
	}
	prods, cons := map[int]bool{}, map[int]bool{}
	for k, r := range p {
		if want := time.Duration((float64(k) + 0.5) * float64(d) / 50); r.After != want {
			t.Errorf("restart %d at %v, want %v", k, r.After, want)
		}
		if r.After <= 0 || r.After >= d || r.Index < 0 || r.Index >= 200 {
			t.Errorf("restart %d: %+v out of range", k, r)
		}
		if r.Consumer != (k%2 == 1) {
			t.Errorf("restart %d: consumer %v, want alternating", k, r.Consumer)
		}
		set := prods
		if r.Consumer {
			set = cons
		}
		if set[r.Index] {
			t.Errorf("restart %d: client %d of its kind restarted twice", k, r.Index)
		}
		set[r.Index] = true
	}
	if len(prods) != 25 || len(cons) != 25 {
		t.Errorf("%d producers and %d consumers restarted, want 25 each", len(prods), len(cons))
	}
	if len(restartPlan(0, d, 20)) != 0 {
		t.Error("restarts with n=0")
	}
	for _, r := range restartPlan(7, d, 3) { // more restarts than clients: indices stay in range
		if r.Index < 0 || r.Index >= 3 {
			t.Errorf("index %d of 3 clients", r.Index)
		}
	}
}

func TestScaleVerdict(t *testing.T) {
	c := ScaleConfig{}
	c.setDefaults()
	run := func(clients int, p99 time.Duration) *ScaleRun {
		r := &ScaleRun{Clients: clients, Expected: 100, Sent: 100}
		for range 99 {
			r.Send.Record(time.Millisecond)
			r.EndToEnd.Record(time.Millisecond)
		}
		r.Send.Record(p99)
		r.EndToEnd.Record(p99)
		for range 100 { // p99 is then the slow value
			r.Send.Record(p99)
			r.EndToEnd.Record(p99)
		}
		r.PeakRSS = 100 << 20
		return r
	}
	base, full := run(20, 10*time.Millisecond), run(200, 29*time.Millisecond)
	if f := ScaleVerdict(&c, base, full); len(f) != 0 {
		t.Fatalf("a passing pair failed: %v", f)
	}
	full = run(200, 31*time.Millisecond)
	full.Errors, full.FirstErrors = 2, []string{"send 7: boom"}
	full.Lost = 3
	full.PeakRSS = 500 << 20
	f := ScaleVerdict(&c, base, full)
	want := []string{"200 clients: 2 error(s), first: [send 7: boom]", "200 clients: 3 of 100 messages never reached a handler",
		"broker peak RSS 500 MiB, limit 500 MiB", "send p99 31ms with 200 clients is 3.1x the 20-client run's 10ms",
		"end-to-end p99 31ms with 200 clients is 3.1x"}
	if len(f) != len(want) {
		t.Fatalf("failures %q, want %d", f, len(want))
	}
	for i := range want {
		if !strings.Contains(f[i], want[i]) {
			t.Errorf("failure %d: %q, want %q", i, f[i], want[i])
		}
	}
}

func TestScaleConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*ScaleConfig)
		want string
	}{
		{func(c *ScaleConfig) {}, ""},
		{func(c *ScaleConfig) { c.Clients = 1001 }, "--clients 1001"},
		{func(c *ScaleConfig) { c.Baseline = 201 }, "--baseline-clients 201"},
		{func(c *ScaleConfig) { c.Restarts = 401 }, "--restarts 401: must be 0..400"},
		{func(c *ScaleConfig) { c.Topics = -1 }, "--topics -1"},
		{func(c *ScaleConfig) { c.Rate = -1 }, "--rate -1"},
		{func(c *ScaleConfig) { c.Duration = time.Millisecond }, "--duration 1ms"},
		{func(c *ScaleConfig) { c.Size = 16 }, "--size 16: must be 24.."},
		{func(c *ScaleConfig) { c.Queues = 5000 }, "--queues 5000"},
	} {
		c := ScaleConfig{}
		c.setDefaults()
		tc.mod(&c)
		err := c.Validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want %q", err, tc.want)
		}
	}
}

// The scale sink counts only its own run's bodies and signals once every topic had a
// warm-up message.
func TestScaleSink(t *testing.T) {
	s := newScaleSink(77, 2, 3)
	body := func(seq int64, nonce uint64) []byte {
		b := makeBody(scaleBodyMin)
		putStamp(b, seq, time.Now())
		binary.BigEndian.PutUint64(b[16:], nonce)
		return b
	}
	s.handle(0, body(-1, 76)) // an earlier run's
	s.handle(0, body(-1, 77))
	s.handle(0, body(-4, 77)) // topic 0 again
	s.handle(1, body(-2, 77))
	select {
	case <-s.allSeen:
		t.Fatal("all topics seen after 2 of 3")
	default:
	}
	s.handle(2, body(-3, 77))
	<-s.allSeen
	s.handle(0, body(1, 77))
	s.handle(1, body(2, 76)) // foreign: not counted
	if s.e2e.distinct.Load() != 1 || s.foreign.Load() != 2 {
		t.Errorf("distinct %d foreign %d, want 1 and 2", s.e2e.distinct.Load(), s.foreign.Load())
	}
}
