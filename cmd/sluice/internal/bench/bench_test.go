package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines, but for the metrics worker that
// go.opencensus.io/stats/view starts at init: the official RocketMQ 5 Go client
// (rocketmq5.go) links it.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Count() != 0 {
		t.Fatal("empty histogram must report zeros")
	}
	r := rand.New(rand.NewPCG(1, 2))
	var all []time.Duration
	for range 100_000 {
		d := time.Duration(r.Int64N(int64(50 * time.Millisecond)))
		all = append(all, d)
		h.Record(d)
	}
	h.Record(-5) // counted as 0
	all = append(all, 0)
	slices.Sort(all)
	if h.Count() != uint64(len(all)) {
		t.Fatalf("Count %d, want %d", h.Count(), len(all))
	}
	if h.Min() != 0 || h.Max() != all[len(all)-1] {
		t.Fatalf("Min/Max %v/%v, want 0/%v", h.Min(), h.Max(), all[len(all)-1])
	}
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
		exact := all[int(q*float64(len(all)))-1]
		got := h.Quantile(q)
		if diff := float64(got-exact) / float64(exact); diff > 0.035 || diff < -0.035 {
			t.Errorf("Quantile(%v) = %v, exact %v: off by %.1f%% (bucket precision is 3.2%%)", q, got, exact, diff*100)
		}
	}
	if h.Quantile(1) != h.Max() || h.Quantile(2) != h.Max() || h.Quantile(-1) != h.Min() {
		t.Errorf("Quantile(1)=%v Quantile(2)=%v Quantile(-1)=%v, want max %v, max, min %v", h.Quantile(1), h.Quantile(2), h.Quantile(-1), h.Max(), h.Min())
	}

	// Small exact values and merge.
	var a, b Histogram
	for i := range 10 {
		a.Record(time.Duration(i))
		b.Record(time.Duration(i + 10))
	}
	a.Merge(&b)
	a.Merge(&Histogram{})
	if a.Count() != 20 || a.Min() != 0 || a.Max() != 19 || a.Quantile(0.5) != 9 || a.Mean() != 9 {
		t.Errorf("merged: count %d min %v max %v p50 %v mean %v; want 20 0 19 9 9", a.Count(), a.Min(), a.Max(), a.Quantile(0.5), a.Mean())
	}
}

func TestHistogramBucketBounds(t *testing.T) {
	// Every bucket's reported value lies in the bucket it names, for values across the
	// whole int64 range.
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 1 << 20, 123456789, 1 << 40, 1<<63 - 1} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d outside 0..%d", v, i, histBuckets-1)
		}
		if got := histIndex(uint64(histValue(i))); got != i {
			t.Errorf("value %d: bucket %d reports %d, which falls in bucket %d", v, i, histValue(i), got)
		}
		if mid := float64(histValue(i)); v > 0 && (mid/float64(v) > 1.033 || mid/float64(v) < 0.967) {
			t.Errorf("value %d reported as %v: more than 3.2%% off", v, mid)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Size: 4}, "Size"},
		{Config{Size: MaxSize + 1}, "Size"},
		{Config{Producers: -1}, "Producers"},
		{Config{Producers: MaxProducers + 1}, "Producers"},
		{Config{Inflight: MaxInflight + 1}, "Inflight"},
		{Config{Queues: -2}, "Queues"},
		{Config{Messages: -1}, "Messages"},
		{Config{Duration: -time.Second}, "Duration"},
		{Config{ConsumeBatch: -1}, "ConsumeBatch"},
	} {
		err := tc.cfg.Validate()
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != tc.field || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
		if _, perr := Produce(context.Background(), tc.cfg); perr == nil || perr.Error() != err.Error() {
			t.Errorf("Produce(%+v) = %v, want the Validate error", tc.cfg, perr)
		}
	}
	if err := (&Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	if _, err := Produce(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "NamesrvAddrs") {
		t.Errorf("Produce without a name server: %v, want an error naming NamesrvAddrs", err)
	}
	if _, err := Consume(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "NamesrvAddrs") {
		t.Errorf("Consume without a name server: %v, want an error naming NamesrvAddrs", err)
	}
	if _, err := StartEmbedded(EmbeddedConfig{FlushDiskType: "SOMETIMES"}); err == nil || !strings.Contains(err.Error(), "SOMETIMES") {
		t.Errorf("StartEmbedded with a bad flush type: %v", err)
	}
}

// countingProgress records phases and counts messages per phase.
type countingProgress struct {
	mu     sync.Mutex
	phases []string
	totals []int64
	counts []*atomic.Int64
}

func (p *countingProgress) Phase(name string, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phases = append(p.phases, name)
	p.totals = append(p.totals, total)
	p.counts = append(p.counts, new(atomic.Int64))
}

func (p *countingProgress) Add(n int64) {
	p.mu.Lock()
	c := p.counts[len(p.counts)-1]
	p.mu.Unlock()
	c.Add(n)
}

func startEmbedded(t testing.TB, flush string) *Embedded {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{FlushDiskType: flush})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := e.Shutdown(ctx); err != nil {
			t.Errorf("embedded shutdown: %v", err)
		}
		if _, err := os.Stat(e.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("data directory %s still there after Shutdown: %v", e.Dir(), err)
		}
	})
	return e
}

func TestProduceAndConsumeEmbedded(t *testing.T) {
	e := startEmbedded(t, AsyncFlush)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	prog := &countingProgress{}
	res, err := Produce(ctx, Config{NamesrvAddrs: e.NamesrvAddrs(), Size: 256, Producers: 2, Inflight: 3, Messages: 600, Warmup: 5, Queues: 4, Progress: prog})
	if err != nil {
		t.Fatal(err)
	}
	if res.Target != TargetSluice || res.Kind != "produce" || res.Messages != 600 || res.Bytes != 600*256 || res.Latency.Count() != 600 {
		t.Fatalf("produce result %+v: want 600 sluice messages of 256 bytes with 600 latency samples", res)
	}
	if res.Elapsed <= 0 || res.MsgPerSec() <= 0 || res.MBPerSec() <= 0 || res.Latency.Quantile(0.99) < res.Latency.Quantile(0.5) {
		t.Errorf("produce rates: elapsed %v, %f msg/s, %f MB/s, p50 %v p99 %v", res.Elapsed, res.MsgPerSec(), res.MBPerSec(), res.Latency.Quantile(0.5), res.Latency.Quantile(0.99))
	}
	if !slices.Equal(prog.phases, []string{"warmup", "produce"}) || prog.totals[1] != 600 || prog.counts[0].Load() != 10 || prog.counts[1].Load() != 600 {
		t.Errorf("progress phases %v totals %v; counts %d/%d, want warmup 10 and produce 600", prog.phases, prog.totals, prog.counts[0].Load(), prog.counts[1].Load())
	}

	prog = &countingProgress{}
	cres, err := Consume(ctx, Config{NamesrvAddrs: e.NamesrvAddrs(), Size: 128, Messages: 2000, Queues: 4, ConsumeBatch: 8, Progress: prog})
	if err != nil {
		t.Fatal(err)
	}
	if cres.Kind != "consume" || cres.Messages != 2000 || cres.Bytes != 2000*128 || cres.Duplicates != 0 || cres.Elapsed <= 0 {
		t.Fatalf("consume result %+v: want 2000 distinct messages of 128 bytes, no duplicates", cres)
	}
	if !slices.Equal(prog.phases, []string{"prefill", "consume"}) || prog.counts[0].Load() != 2000 || prog.counts[1].Load() != 2000 {
		t.Errorf("progress phases %v, counts %d/%d", prog.phases, prog.counts[0].Load(), prog.counts[1].Load())
	}
}

func TestProduceAsync(t *testing.T) {
	e := startEmbedded(t, AsyncFlush)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Produce(ctx, Config{NamesrvAddrs: e.NamesrvAddrs(), Size: 512, Producers: 2, Inflight: 8, Async: true, Messages: 800, Warmup: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages != 800 || res.Bytes != 800*512 || res.Latency.Count() != 800 {
		t.Fatalf("async produce result %+v: want 800 messages of 512 bytes", res)
	}
	// Every message is stored once: a consumer-free check through the consume queues is
	// Consume's job; here the async window must not lose or duplicate sends.
	res, err = Produce(ctx, Config{NamesrvAddrs: e.NamesrvAddrs(), Inflight: 4, Async: true, Duration: 200 * time.Millisecond, Warmup: -1})
	if err != nil || res.Messages == 0 {
		t.Fatalf("async duration run: %+v, %v", res, err)
	}
}

func TestDriveAsyncStopsOnFirstError(t *testing.T) {
	boom := errors.New("boom")
	var calls atomic.Int64
	var wg sync.WaitGroup
	send := func(ctx context.Context, body []byte, done func(error)) error {
		calls.Add(1)
		seq := bodySeq(body)
		if seq == 70 {
			return boom // refused at once
		}
		wg.Add(1)
		go func() { defer wg.Done(); done(nil) }()
		return nil
	}
	cfg := Config{}
	cfg.setDefaults()
	_, err := driveAsync(context.Background(), &cfg, []asyncSendFunc{send}, plan{messages: 1_000_000, inflight: 4, phase: "produce"})
	wg.Wait()
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "send 70") {
		t.Fatalf("driveAsync = %v, want boom at send 70", err)
	}
	if n := calls.Load(); n != 70 {
		t.Fatalf("%d sends were started; one sender must stop right at the refused send 70", n)
	}
	// A failure reported through done stops the run too.
	send = func(ctx context.Context, body []byte, done func(error)) error {
		var err error
		if bodySeq(body) == 30 {
			err = boom
		}
		wg.Add(1)
		go func() { defer wg.Done(); done(err) }()
		return nil
	}
	res, err := driveAsync(context.Background(), &cfg, []asyncSendFunc{send, send}, plan{messages: 1_000_000, inflight: 3, phase: "produce"})
	wg.Wait()
	if !errors.Is(err, boom) || res != nil {
		t.Fatalf("driveAsync with a failed completion = %+v, %v; want boom", res, err)
	}
}

func TestProduceForDurationSyncFlush(t *testing.T) {
	e := startEmbedded(t, SyncFlush)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Produce(ctx, Config{NamesrvAddrs: e.NamesrvAddrs(), Duration: 300 * time.Millisecond, Inflight: 2, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages == 0 || res.Bytes != res.Messages*DefaultSize || res.Elapsed < 300*time.Millisecond {
		t.Fatalf("duration run: %d messages, %d bytes in %v; want some 1 KiB messages over at least 300ms", res.Messages, res.Bytes, res.Elapsed)
	}
}

func TestProduceRejectsBadTopicAndCancel(t *testing.T) {
	e := startEmbedded(t, AsyncFlush)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Produce(ctx, Config{NamesrvAddrs: e.NamesrvAddrs(), Topic: "bad topic", Messages: 10})
	if err == nil || !strings.Contains(err.Error(), "bad topic") {
		t.Fatalf("Produce to an invalid topic: %v, want an error naming it", err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := Produce(cctx, Config{NamesrvAddrs: e.NamesrvAddrs(), Messages: 10}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Produce with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestDriveStopsOnFirstError(t *testing.T) {
	boom := errors.New("boom")
	var after atomic.Int64 // sends started after drive took in the failure (its ctx is cancelled then)
	send := func(ctx context.Context, body []byte) error {
		if ctx.Err() != nil {
			after.Add(1)
		}
		if bodySeq(body) == 50 {
			return boom
		}
		return ctx.Err()
	}
	cfg := Config{}
	cfg.setDefaults()
	_, err := drive(context.Background(), &cfg, []sendFunc{send, send}, plan{messages: 1_000_000, inflight: 4, phase: "produce"})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "send 50") {
		t.Fatalf("drive = %v, want boom at send 50", err)
	}
	// Once drive has taken in the failure, each of the 8 workers starts at most one more
	// send (it checks the stop flag before each one).
	if n := after.Load(); n > 8 {
		t.Fatalf("%d sends started after the failure was taken in; the run should stop right after it", n)
	}

	// A duration run ends by itself and counts every acknowledged send.
	var ok atomic.Int64
	res, err := drive(context.Background(), &cfg, []sendFunc{func(context.Context, []byte) error { ok.Add(1); return nil }},
		plan{duration: 20 * time.Millisecond, inflight: 3, phase: "produce"})
	if err != nil || res.Messages != ok.Load() || res.Messages == 0 || res.Bytes != res.Messages*DefaultSize {
		t.Fatalf("duration drive: %+v, %v; %d sends acknowledged", res, err, ok.Load())
	}
}

// natsURL returns the NATS server for JetStream tests ($SLUICE_NATS_URL or the local
// default), or skips when none answers.
func natsURL(t testing.TB) string {
	url := os.Getenv("SLUICE_NATS_URL")
	if url == "" {
		url = DefaultNatsURL
	}
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), time.Second)
	if err != nil {
		t.Skipf("no NATS server at %s (set SLUICE_NATS_URL): %v", url, err)
	}
	c.Close()
	return url
}

func TestProduceJetStream(t *testing.T) {
	url := natsURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := ProduceJetStream(ctx, Config{NatsURL: url, Topic: "SluiceBenchTest", Messages: 300, Inflight: 2, Size: 512, Warmup: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Target != TargetJetStream || res.Messages != 300 || res.Bytes != 300*512 || res.Latency.Count() != 300 {
		t.Fatalf("jetstream result %+v: want 300 messages of 512 bytes", res)
	}
	res, err = ProduceJetStream(ctx, Config{NatsURL: url, Topic: "SluiceBenchTestAsync", Messages: 500, Inflight: 16, Async: true, Warmup: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages != 500 || res.Latency.Count() != 500 {
		t.Fatalf("jetstream async result %+v: want 500 messages", res)
	}
	if _, err := ProduceJetStream(ctx, Config{NatsURL: "nats://127.0.0.1:1", Messages: 1}); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("ProduceJetStream to a closed port: %v, want a connect error naming the address", err)
	}
}

func TestJetStreamNames(t *testing.T) {
	s, subj := JetStreamNames("A%B|c")
	if s != "SLUICE_BENCH_A_B_c" || subj != "sluice.bench.A_B_c" {
		t.Fatalf("JetStreamNames = %q, %q", s, subj)
	}
}

// TestConsumeJetStream drains a prefilled stream with a durable pull consumer and 4
// handlers: every message is counted exactly once, and a closed port names the address.
func TestConsumeJetStream(t *testing.T) {
	url := natsURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := ConsumeJetStream(ctx, Config{NatsURL: url, Topic: "SluiceBenchConsumeTest", Messages: 700, Size: 256, ConsumeGoroutines: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Target != TargetJetStream || res.Kind != "consume" || res.Messages != 700 || res.Bytes != 700*256 || res.Duplicates != 0 || res.Elapsed <= 0 {
		t.Fatalf("jetstream consume result %+v: want 700 distinct messages of 256 bytes", res)
	}
	if _, err := ConsumeJetStream(ctx, Config{NatsURL: "nats://127.0.0.1:1", Messages: 1}); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("ConsumeJetStream to a closed port: %v, want a connect error naming the address", err)
	}
}

func TestMedianSpread(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{5}, 5, 5, 5},
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		in := slices.Clone(tc.in)
		med, lo, hi := medianSpread(in)
		if med != tc.med || lo != tc.lo || hi != tc.hi {
			t.Errorf("medianSpread(%v) = %v, %v, %v; want %v, %v, %v", tc.in, med, lo, hi, tc.med, tc.lo, tc.hi)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("medianSpread changed its input: %v", in)
		}
	}
}
