package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// The scale scenario (sluice bench scale): many producers and consumers over many
// topics at a steady rate, some of them restarting during the run, against the bench's
// broker process. It runs twice on the same topics: a baseline with few clients and no
// restarts, then the full run; it passes when the full run had no send error and lost
// no message, the broker's peak resident set stayed under a limit, and the full run's
// p99 latencies (send and end-to-end) stayed within a factor of the baseline's.

// Defaults and limits of ScaleConfig.
const (
	DefaultScaleClients    = 200
	DefaultScaleBaseline   = 20
	DefaultScaleTopics     = 1000
	DefaultScaleRestarts   = 50
	DefaultScaleRate       = 2000 // msg/s over all producers
	DefaultScaleDuration   = 30 * time.Second
	DefaultScaleRSSLimit   = 500 << 20
	DefaultScaleP99Factor  = 3.0
	MaxScaleClients        = 2000
	MaxScaleTopics         = 20000
	scaleBodyMin           = 24 // sequence, due time, run nonce
	scaleConsumeGoroutines = 4  // handler goroutines per consumer
)

// ScaleConfig configures the scale scenario.
type ScaleConfig struct {
	// NamesrvAddrs and BrokerPid: the bench's own broker process (required: its resident
	// set is one of the checks).
	NamesrvAddrs []string
	BrokerPid    int
	// Clients is the number of producers and, as many, of consumers in the full run
	// (default 200); Baseline the same for the baseline run (default 20). Each at most
	// Topics.
	Clients, Baseline int
	// Topics is the topic count (default 1000), each with Queues queues (default 8).
	Topics, Queues int
	// Restarts is how many clients restart during the full run (default 50), producers
	// and consumers alternately, spread evenly over Duration; at most 2 × Clients.
	Restarts int
	// Rate is the total send rate in msg/s (default 2000) and Duration how long each run
	// sends (default 30s); each run sends Rate × Duration messages.
	Rate     float64
	Duration time.Duration
	// Size is the body size (default 1024, at least 24).
	Size int
	// RSSLimit is the broker's highest allowed peak resident set in bytes (default
	// 500 MiB); P99Factor the most the full run's p99 may be of the baseline's (default 3).
	RSSLimit  int64
	P99Factor float64
}

func (c *ScaleConfig) setDefaults() {
	if c.Clients == 0 {
		c.Clients = DefaultScaleClients
	}
	if c.Baseline == 0 {
		c.Baseline = DefaultScaleBaseline
	}
	if c.Topics == 0 {
		c.Topics = DefaultScaleTopics
	}
	if c.Queues == 0 {
		c.Queues = DefaultQueues
	}
	if c.Rate == 0 {
		c.Rate = DefaultScaleRate
	}
	if c.Duration == 0 {
		c.Duration = DefaultScaleDuration
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.RSSLimit == 0 {
		c.RSSLimit = DefaultScaleRSSLimit
	}
	if c.P99Factor == 0 {
		c.P99Factor = DefaultScaleP99Factor
	}
}

// Validate reports the first setting outside its limits, naming its flag.
func (c *ScaleConfig) Validate() error {
	switch {
	case c.Topics < 1 || c.Topics > MaxScaleTopics:
		return fmt.Errorf("--topics %d: must be 1..%d", c.Topics, MaxScaleTopics)
	case c.Clients < 1 || c.Clients > MaxScaleClients || c.Clients > c.Topics:
		return fmt.Errorf("--clients %d: must be 1..%d and at most --topics (%d): each consumer owns topics of its own", c.Clients, MaxScaleClients, c.Topics)
	case c.Baseline < 1 || c.Baseline > c.Clients:
		return fmt.Errorf("--baseline-clients %d: must be 1..--clients (%d)", c.Baseline, c.Clients)
	case c.Restarts < 0 || c.Restarts > 2*c.Clients:
		return fmt.Errorf("--restarts %d: must be 0..%d (twice --clients)", c.Restarts, 2*c.Clients)
	case c.Queues < 1 || c.Queues > MaxQueues:
		return fmt.Errorf("--queues %d: must be 1..%d", c.Queues, MaxQueues)
	case !(c.Rate > 0 && c.Rate <= MaxRate):
		return fmt.Errorf("--rate %v: must be in (0, %d] msg/s", c.Rate, MaxRate)
	case c.Duration < time.Second:
		return fmt.Errorf("--duration %v: at least 1s", c.Duration)
	case c.Size < scaleBodyMin || c.Size > MaxSize:
		return fmt.Errorf("--size %d: must be %d..%d bytes", c.Size, scaleBodyMin, MaxSize)
	case c.P99Factor < 1:
		return fmt.Errorf("p99 factor %v: at least 1", c.P99Factor)
	}
	return nil
}

// scaleTopic names topic t of the scenario.
func scaleTopic(t int) string { return fmt.Sprintf("SluiceScale_%04d", t) }

// topicOf returns the topic index of message seq (1-based): round robin over topics.
func topicOf(seq int64, topics int) int { return int((seq - 1) % int64(topics)) }

// producerSeqs: producer p of n sends messages p+1, p+1+n, p+1+2n, ... (its k-th is
// seqOf(p, k, n)).
func seqOf(p int, k int64, n int) int64 { return k*int64(n) + int64(p) + 1 }

// consumerTopics returns the topics consumer i of n owns: every t with t mod n == i, so
// each topic has exactly one consumer.
func consumerTopics(i, n, topics int) []int {
	var ts []int
	for t := i; t < topics; t += n {
		ts = append(ts, t)
	}
	return ts
}

// restart is one client restart of a run: at After from the run's start, the producer
// or consumer Index stops and starts again.
type restart struct {
	After    time.Duration
	Consumer bool
	Index    int
}

// restartPlan spreads n restarts evenly over d (the k-th at (k+½)·d/n), alternately a
// producer and a consumer, each index chosen so that the restarted clients of a kind
// are spread over all clients (distinct ones while n/2 ≤ clients).
func restartPlan(n int, d time.Duration, clients int) []restart {
	out := make([]restart, 0, n)
	for k := range n {
		j := k / 2 // the j-th restart of this kind
		idx := (j * max(1, clients/max(1, (n+1)/2))) % clients
		out = append(out, restart{
			After:    time.Duration((float64(k) + 0.5) * float64(d) / float64(n)),
			Consumer: k%2 == 1,
			Index:    idx,
		})
	}
	return out
}

// ScaleRun is what one run of the scenario measured.
type ScaleRun struct {
	Clients, Restarts int
	// Sent is the messages acknowledged, Expected the run's total; Errors the failed
	// sends and client restarts, FirstErrors the first few of them.
	Sent, Expected int64
	Errors         int64
	FirstErrors    []string
	// Lost is the messages never handled by the end of the drain wait; Duplicates those
	// handled again (a restarted consumer may redeliver what it had not committed).
	Lost, Duplicates int64
	// Send is each message's send latency and EndToEnd its latency to the handler, both
	// from its due time.
	Send, EndToEnd Histogram
	// RSS and PeakRSS are the broker's resident set at the end of the run and its peak
	// over its life, in bytes.
	RSS, PeakRSS int64
	Elapsed      time.Duration
}

// ScaleVerdict compares the full run with the baseline: the failed checks, each a
// sentence; none means the scenario passed.
func ScaleVerdict(c *ScaleConfig, base, full *ScaleRun) []string {
	var fails []string
	for _, r := range []*ScaleRun{base, full} {
		if r.Errors > 0 {
			fails = append(fails, fmt.Sprintf("%d clients: %d error(s), first: %v", r.Clients, r.Errors, r.FirstErrors))
		}
		if r.Lost > 0 {
			fails = append(fails, fmt.Sprintf("%d clients: %d of %d messages never reached a handler", r.Clients, r.Lost, r.Expected))
		}
	}
	if full.PeakRSS >= c.RSSLimit {
		fails = append(fails, fmt.Sprintf("broker peak RSS %d MiB, limit %d MiB", full.PeakRSS>>20, c.RSSLimit>>20))
	}
	for _, q := range []struct {
		name string
		b, f time.Duration
	}{
		{"send p99", base.Send.Quantile(0.99), full.Send.Quantile(0.99)},
		{"end-to-end p99", base.EndToEnd.Quantile(0.99), full.EndToEnd.Quantile(0.99)},
	} {
		if float64(q.f) > c.P99Factor*float64(max(q.b, 1)) {
			fails = append(fails, fmt.Sprintf("%s %v with %d clients is %.1fx the %d-client run's %v (limit %.1fx)",
				q.name, roundLat(q.f), full.Clients, float64(q.f)/float64(max(q.b, 1)), base.Clients, roundLat(q.b), c.P99Factor))
		}
	}
	return fails
}

// scaleSink is the consumer side of one run: it counts bodies of this run (nonce)
// into an e2eSink and marks the topics that have seen a warm-up message.
type scaleSink struct {
	nonce     uint64
	e2e       *e2eSink
	topicSeen []atomic.Bool
	seenCount atomic.Int64
	allSeen   chan struct{}
	seenOnce  sync.Once
	foreign   atomic.Int64
}

func newScaleSink(nonce uint64, n int64, topics int) *scaleSink {
	return &scaleSink{nonce: nonce, e2e: newE2ESink(n, 0), topicSeen: make([]atomic.Bool, topics), allSeen: make(chan struct{})}
}

// handle records one body handled by the consumer of topic t.
func (s *scaleSink) handle(t int, body []byte) {
	if len(body) < scaleBodyMin || binary.BigEndian.Uint64(body[16:]) != s.nonce {
		s.foreign.Add(1) // an earlier run's message on the same topic
		return
	}
	if seq, _, _ := readStamp(body); seq < 0 {
		if t >= 0 && t < len(s.topicSeen) && s.topicSeen[t].CompareAndSwap(false, true) &&
			s.seenCount.Add(1) == int64(len(s.topicSeen)) {
			s.seenOnce.Do(func() { close(s.allSeen) })
		}
		return
	}
	s.e2e.handle(body)
}

// scaleClients holds a run's producers and consumers; a restart replaces one under mu.
type scaleClients struct {
	cfg       *ScaleConfig
	group     string
	sink      *scaleSink
	n         int
	mu        sync.Mutex
	producers []*producer.Producer
	consumers []*consumer.PushConsumer
}

func (sc *scaleClients) newProducer() (*producer.Producer, error) {
	p, err := producer.New(producer.Config{NamesrvAddrs: sc.cfg.NamesrvAddrs, Group: producerGroup, Logger: discard})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := p.Start(context.Background()); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return p, nil
}

func (sc *scaleClients) newConsumer(ctx context.Context, i int) (*consumer.PushConsumer, error) {
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs: sc.cfg.NamesrvAddrs, Group: fmt.Sprintf("%s_%d", sc.group, i),
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, ConsumeGoroutines: scaleConsumeGoroutines, Logger: discard,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: consumer %d: %w", i, err)
	}
	for _, t := range consumerTopics(i, sc.n, sc.cfg.Topics) {
		err = c.Subscribe(scaleTopic(t), message.SubscribeAll, func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			for _, m := range msgs {
				sc.sink.handle(t, m.Body)
			}
			return message.ConsumeSuccess, nil
		})
		if err != nil {
			return nil, fmt.Errorf("bench: consumer %d: subscribe: %w", i, err)
		}
	}
	if err := c.Start(ctx); err != nil {
		_ = shutdownAll([]func(context.Context) error{c.Shutdown})
		return nil, fmt.Errorf("bench: consumer %d: start: %w", i, err)
	}
	return c, nil
}

// shutdown stops every client: producers first, then consumers.
func (sc *scaleClients) shutdown() error {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var stops []func(context.Context) error
	for _, p := range sc.producers {
		if p != nil {
			stops = append(stops, p.Shutdown)
		}
	}
	for _, c := range sc.consumers {
		if c != nil {
			stops = append(stops, c.Shutdown)
		}
	}
	return shutdownAll(stops)
}

// RunScale is sluice bench scale's measurement: the baseline run, then the full run, on
// Topics topics it creates first; then the verdict. The runs' figures are printed to
// out; the error lists the failed checks (or says what could not run).
func RunScale(ctx context.Context, c ScaleConfig, out io.Writer) (base, full *ScaleRun, err error) {
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return nil, nil, err
	}
	if len(c.NamesrvAddrs) == 0 || c.BrokerPid <= 0 {
		return nil, nil, errors.New("bench: the scale scenario needs the bench's own broker process (its resident set is checked)")
	}
	fmt.Fprintf(out, "creating %d topics of %d queues\n", c.Topics, c.Queues)
	t0 := time.Now()
	if err := createScaleTopics(ctx, &c); err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(out, "  created in %v\n", time.Since(t0).Round(time.Millisecond))
	base, err = scaleRun(ctx, &c, c.Baseline, 0, out)
	if err != nil {
		return nil, nil, err
	}
	full, err = scaleRun(ctx, &c, c.Clients, c.Restarts, out)
	if err != nil {
		return base, nil, err
	}
	return base, full, nil
}

// createScaleTopics creates the scenario's topics, 8 at a time, and waits for their
// routes.
func createScaleTopics(ctx context.Context, c *ScaleConfig) error {
	a, err := admin.New(admin.Config{NamesrvAddrs: c.NamesrvAddrs, Logger: discard})
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer a.Close()
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range work {
				if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: scaleTopic(t), Queues: c.Queues}); err != nil {
					errs <- fmt.Errorf("bench: create topic %s: %w", scaleTopic(t), err)
					return
				}
			}
		}()
	}
	var ferr error
feed:
	for t := range c.Topics {
		select {
		case work <- t:
		case ferr = <-errs:
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if ferr != nil {
		return ferr
	}
	if err := <-errs; err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for t := range c.Topics {
		if _, err := a.WaitTopicRoute(wctx, scaleTopic(t)); err != nil {
			return fmt.Errorf("bench: route of %s: %w", scaleTopic(t), err)
		}
	}
	return nil
}

// scaleRun runs clients producers and consumers for one run with restarts restarts.
func scaleRun(ctx context.Context, c *ScaleConfig, clients, restarts int, out io.Writer) (*ScaleRun, error) {
	n := max(int64(1), int64(c.Rate*c.Duration.Seconds()))
	nonce := uint64(time.Now().UnixNano())
	sc := &scaleClients{cfg: c, group: fmt.Sprintf("SluiceScale_%d", nonce), sink: newScaleSink(nonce, n, c.Topics), n: clients}
	run := &ScaleRun{Clients: clients, Restarts: restarts, Expected: n}
	var errMu sync.Mutex
	noteErr := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		run.Errors++
		if len(run.FirstErrors) < 5 {
			run.FirstErrors = append(run.FirstErrors, err.Error())
		}
	}
	fmt.Fprintf(out, "run with %d producers + %d consumers, %d restarts: starting clients\n", clients, clients, restarts)
	t0 := time.Now()
	sc.producers = make([]*producer.Producer, clients)
	sc.consumers = make([]*consumer.PushConsumer, clients)
	defer func() {
		if err := sc.shutdown(); err != nil { // one line per queue whose offset could not be stored: the first and a count
			lines := strings.Split(err.Error(), "\n")
			fmt.Fprintf(out, "  client shutdown: %d error(s), first: %s\n", len(lines), lines[0])
		}
	}()
	if err := startEach(clients, func(i int) (err error) {
		if sc.consumers[i], err = sc.newConsumer(ctx, i); err != nil {
			return err
		}
		sc.producers[i], err = sc.newProducer()
		return err
	}); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  started in %v; warm-up until every topic's consumer has a message\n", time.Since(t0).Round(time.Millisecond))

	body := func(seq int64, due time.Time) []byte {
		b := makeBody(c.Size)
		putStamp(b, seq, due)
		binary.BigEndian.PutUint64(b[16:], nonce)
		return b
	}
	// Warm-up: Queues messages per topic first (so that every queue has had its first
	// write, which creates its consume-queue file, before the clock starts), then one per
	// topic whose consumer has not handled one yet (sequence -1 - topic), round after
	// round, until every topic's consumer has.
	t0 = time.Now()
	warmDeadline := time.NewTimer(10 * time.Minute)
	var warmErrs atomic.Int64
	defer warmDeadline.Stop()
warm:
	for round := 0; ; round++ {
		if err := startEach(clients, func(p int) error {
			for t := p; t < c.Topics; t += clients {
				if round > 0 && sc.sink.topicSeen[t].Load() {
					continue
				}
				for range max(1, c.Queues*btoi(round == 0)) {
					if _, err := sc.producers[p].SendSync(ctx, message.NewMessage(scaleTopic(t), body(-1-int64(t), time.Now()))); err != nil {
						// Not measured: the next round sends to this topic again. A broker that
						// never answers ends the warm-up at its deadline.
						if warmErrs.Add(1) == 1 {
							fmt.Fprintf(out, "  warm-up: a send failed (later rounds retry; not counted as a run error): %v\n", err)
						}
						if ctx.Err() != nil {
							return ctx.Err()
						}
					}
				}
			}
			return nil
		}); err != nil {
			return nil, err
		}
		wait := time.NewTimer(2 * time.Second)
		select {
		case <-sc.sink.allSeen:
			wait.Stop()
			break warm
		case <-ctx.Done():
			wait.Stop()
			return nil, ctx.Err()
		case <-warmDeadline.C:
			wait.Stop()
			return nil, fmt.Errorf("bench: warm-up: consumers of %d of %d topics have had a message after 10m", sc.sink.seenCount.Load(), c.Topics)
		case <-wait.C:
		}
	}
	fmt.Fprintf(out, "  warm in %v (%d warm-up send(s) failed); sending %d messages at %.0f msg/s\n", time.Since(t0).Round(time.Millisecond), warmErrs.Load(), n, c.Rate)

	var meterRSS cpuMeter
	meterRSS.start(c.BrokerPid)
	start := time.Now()
	restartProducer := make([]atomic.Bool, clients)
	var sent atomic.Int64
	var senders sync.WaitGroup
	var histMu sync.Mutex
	for p := range clients {
		senders.Add(1)
		go func() {
			defer senders.Done()
			var h Histogram
			defer func() { histMu.Lock(); run.Send.Merge(&h); histMu.Unlock() }()
			pace := time.NewTimer(time.Hour)
			defer pace.Stop()
			for k := int64(0); ; k++ {
				seq := seqOf(p, k, clients)
				if seq > n {
					return
				}
				due := dueAt(start, seq, c.Rate)
				if d := time.Until(due); d > 0 {
					pace.Reset(d)
					select {
					case <-pace.C:
					case <-ctx.Done():
						return
					}
				}
				if restartProducer[p].CompareAndSwap(true, false) {
					sc.mu.Lock()
					old := sc.producers[p]
					sc.producers[p] = nil
					sc.mu.Unlock()
					if err := shutdownAll([]func(context.Context) error{old.Shutdown}); err != nil {
						noteErr(fmt.Errorf("producer %d restart: shutdown: %w", p, err))
					}
					np, err := sc.newProducer()
					if err != nil {
						noteErr(fmt.Errorf("producer %d restart: %w", p, err))
						return
					}
					sc.mu.Lock()
					sc.producers[p] = np
					sc.mu.Unlock()
				}
				sc.mu.Lock()
				pr := sc.producers[p]
				sc.mu.Unlock()
				if _, err := pr.SendSync(ctx, message.NewMessage(scaleTopic(topicOf(seq, c.Topics)), body(seq, due))); err != nil {
					noteErr(fmt.Errorf("send %d: %w", seq, err))
					continue
				}
				h.Record(time.Since(due))
				sent.Add(1)
			}
		}()
	}
	// Restarts: producers are restarted by their own sender before its next send,
	// consumers here.
	plan := restartPlan(restarts, c.Duration, clients)
	restartsDone := make(chan struct{})
	go func() {
		defer close(restartsDone)
		for _, r := range plan {
			if d := time.Until(start.Add(r.After)); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			if !r.Consumer {
				restartProducer[r.Index].Store(true)
				continue
			}
			sc.mu.Lock()
			old := sc.consumers[r.Index]
			sc.consumers[r.Index] = nil
			sc.mu.Unlock()
			if old != nil { // nil: an earlier restart of it failed
				if err := shutdownAll([]func(context.Context) error{old.Shutdown}); err != nil {
					noteErr(fmt.Errorf("consumer %d restart: shutdown: %w", r.Index, err))
				}
			}
			nc, err := sc.newConsumer(ctx, r.Index)
			if err != nil {
				noteErr(fmt.Errorf("consumer %d restart: %w", r.Index, err))
				continue
			}
			sc.mu.Lock()
			sc.consumers[r.Index] = nc
			sc.mu.Unlock()
		}
	}()
	senders.Wait()
	<-restartsDone
	drainWait := max(time.Minute, c.Duration)
	if err := waitFor(ctx, sc.sink.e2e.all, drainWait); err != nil && !errors.Is(err, errDeadline) {
		return nil, err
	}
	run.Elapsed = time.Since(start)
	run.Sent = sent.Load()
	run.Lost = n - sc.sink.e2e.distinct.Load()
	run.Duplicates = sc.sink.e2e.dups.Load()
	run.EndToEnd = sc.sink.e2e.histogram()
	var r Result
	meterRSS.stop(&r)
	run.RSS, run.PeakRSS = r.ServerRSS, r.ServerPeakRSS
	printScaleRun(out, run)
	return run, nil
}

// startEach runs f(0..n-1), 16 at a time, and returns the first error.
func startEach(n int, f func(i int) error) error {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}

func printScaleRun(out io.Writer, r *ScaleRun) {
	fmt.Fprintf(out, "  %d producers + %d consumers, %d restarts: sent %d of %d in %v, %d error(s), %d lost, %d duplicate(s)\n",
		r.Clients, r.Clients, r.Restarts, r.Sent, r.Expected, r.Elapsed.Round(time.Millisecond), r.Errors, r.Lost, r.Duplicates)
	for _, e := range r.FirstErrors {
		fmt.Fprintf(out, "    error: %s\n", e)
	}
	fmt.Fprintf(out, "  send       %s\n", quantiles(&r.Send))
	fmt.Fprintf(out, "  end-to-end %s\n", quantiles(&r.EndToEnd))
	fmt.Fprintf(out, "  broker rss %d MiB at the end, peak %d MiB\n", r.RSS>>20, r.PeakRSS>>20)
}

// RunScaleBench is sluice bench scale: it starts the bench's broker as its own process
// (the scenario checks its resident set), runs RunScale and prints the verdict; the
// error says which checks failed.
func RunScaleBench(ctx context.Context, o Options, c ScaleConfig) (err error) {
	switch {
	case o.Namesrv != "":
		return errors.New("--namesrv: the scale scenario runs against the bench's own broker process (its resident set is checked)")
	case o.Broker != BrokerProcess:
		return fmt.Errorf("--broker %s: the scale scenario needs the broker in its own process", o.Broker)
	}
	s, err := benchConfig(o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	c.Size, c.Queues = o.Size, o.Queues
	if o.changed("duration") {
		c.Duration = o.Duration
	}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	if err := s.startBroker(o.Out); err != nil {
		return err
	}
	c.NamesrvAddrs, c.BrokerPid = s.cfg.NamesrvAddrs, s.cfg.ServerPid
	base, full, err := RunScale(ctx, c, o.Out)
	if err != nil {
		return err
	}
	fails := ScaleVerdict(&c, base, full)
	if len(fails) == 0 {
		fmt.Fprintf(o.Out, "scale: passed (no error, nothing lost, broker peak RSS %d MiB < %d MiB, p99 within %.1fx of the %d-client run)\n",
			full.PeakRSS>>20, c.RSSLimit>>20, c.P99Factor, base.Clients)
		return nil
	}
	for _, f := range fails {
		fmt.Fprintf(o.Out, "scale: FAILED: %s\n", f)
	}
	return fmt.Errorf("bench scale: %d check(s) failed", len(fails))
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
