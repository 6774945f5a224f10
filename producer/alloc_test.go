package producer

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// limiterWaiting returns how many acquire calls wait on l.
func limiterWaiting(l *asyncLimiter) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiting)
}

// TestAsyncLimiterWaitAllocatesNothing pins the wait of a full limiter: an acquire that
// waits for room and is woken by a release allocates nothing (its wake-up channel comes
// from wakePool) — a SendAsync at MaxAsyncInflight waits so once per send.
func TestAsyncLimiterWaitAllocatesNothing(t *testing.T) {
	l := newAsyncLimiter(1, 1<<20)
	ctx := context.Background()
	if err := l.acquire(ctx, 1, nil); err != nil {
		t.Fatal(err)
	}
	const runs = 100
	acquired := make(chan error)
	go func() {
		for range runs + 1 { // AllocsPerRun calls f once more to warm up
			acquired <- l.acquire(ctx, 1, nil)
		}
	}()
	allocs := testing.AllocsPerRun(runs, func() {
		deadline := time.Now().Add(10 * time.Second)
		for limiterWaiting(l) != 1 { // the acquire of the goroutine waits
			if time.Now().After(deadline) {
				panic("the acquire did not start waiting within 10s")
			}
			runtime.Gosched()
		}
		l.release(1)
		if err := <-acquired; err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per wait and wake-up, want 0", allocs)
	}
}

// TestAsyncLimiterWaitsEnd: every waiting acquire is woken by a release (the one that
// finds room takes it, the others wait again); one whose ctx ends or whose producer
// closes returns that error and leaves the waiting list, and later releases go on.
func TestAsyncLimiterWaitsEnd(t *testing.T) {
	l := newAsyncLimiter(1, 1<<20)
	bg := context.Background()
	if err := l.acquire(bg, 1, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	closing := make(chan struct{})
	errs := make(chan error, 4)
	go func() { errs <- l.acquire(ctx, 1, nil) }()
	go func() { errs <- l.acquire(bg, 1, closing) }()
	go func() { errs <- l.acquire(bg, 1, nil) }()
	testkit.WaitFor(t, 5*time.Second, func() bool { return limiterWaiting(l) == 3 }, "three acquires waiting")
	cancel()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled acquire: %v", err)
	}
	close(closing)
	if err := <-errs; !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire of a closing producer: %v", err)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return limiterWaiting(l) == 1 }, "the ended acquires off the list")
	l.release(1)
	if err := <-errs; err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if n := limiterWaiting(l); n != 0 {
		t.Fatalf("%d still waiting", n)
	}
	l.release(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count != 0 || l.bytes != 0 {
		t.Fatalf("count %d bytes %d after all releases", l.count, l.bytes)
	}
}

// TestPrepareSingleProperties: prepareSingle's encoded properties are
// message.MarshalProperties of the message's properties after it added UNIQ_KEY — for a
// message without properties (whose properties and UNIQ_KEY come from one allocation),
// with properties, and with a UNIQ_KEY of its own (kept) — and the UNIQ_KEY's time is the
// born timestamp's (one clock reading).
func TestPrepareSingleProperties(t *testing.T) {
	p, err := New(Config{NamesrvAddrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	bare := message.NewMessage("T", []byte("b"))
	tagged := message.NewMessage("T", []byte("b")).SetTag("TagA").SetKeys("k1", "k2")
	own := message.NewMessage("T", []byte("b")).SetProperty(message.PropertyUniqClientMessageIDKeyIdx, "MY-ID")
	emptyMap := &message.Message{Topic: "T", Body: []byte("b"), Properties: map[string]string{}}
	for _, msg := range []*message.Message{bare, tagged, own, emptyMap} {
		pr, err := p.prepareSingle(msg)
		if err != nil {
			t.Fatal(err)
		}
		key := msg.UniqKey()
		if want := message.MarshalProperties(msg.Properties); pr.header.Properties != want || pr.msgID != key {
			t.Fatalf("properties %q msgID %q, want %q and %q", pr.header.Properties, pr.msgID, want, key)
		}
		if msg == own {
			if key != "MY-ID" {
				t.Fatalf("own UNIQ_KEY replaced by %q", key)
			}
			pr.release()
			continue
		}
		if len(key) != message.UniqIDLen || strings.Trim(key, "0123456789ABCDEF") != "" {
			t.Fatalf("UNIQ_KEY %q", key)
		}
		ms := key[20:28] // ms since the start of the month, hex
		born := time.UnixMilli(pr.header.BornTimestamp)
		start := time.Date(born.Year(), born.Month(), 1, 0, 0, 0, 0, born.Location())
		if got, want := ms, hex8(uint32(born.Sub(start).Milliseconds())); got != want {
			t.Fatalf("UNIQ_KEY time %s, born timestamp %v gives %s", got, born, want)
		}
		pr.release()
	}
}

// hex8 formats v as 8 uppercase hex digits.
func hex8(v uint32) string {
	const digits = "0123456789ABCDEF"
	var b [8]byte
	for i := range b {
		b[7-i] = digits[v>>(4*i)&0xf]
	}
	return string(b[:])
}

// TestPrepareSingleAllocs pins what preparing a message without properties allocates:
// the Properties map that UNIQ_KEY goes into (which the caller sees) and one string for
// the encoded properties and the UNIQ_KEY; the prepared send comes from its pool.
func TestPrepareSingleAllocs(t *testing.T) {
	p, err := New(Config{NamesrvAddrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage("T", make([]byte, 1024))
	mapAllocs := testing.AllocsPerRun(100, func() {
		msg.Properties = nil
		msg.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, "x")
	})
	allocs := testing.AllocsPerRun(100, func() {
		msg.Properties = nil
		pr, err := p.prepareSingle(msg)
		if err != nil {
			panic(err)
		}
		pr.release()
	})
	if allocs != mapAllocs+1 {
		t.Fatalf("%v allocations per prepareSingle, want %v (the map's %v and one string)", allocs, mapAllocs+1, mapAllocs)
	}
}
