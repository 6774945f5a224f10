package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Options is what sluice bench produce|consume was given: each field is the flag of
// the same name (the flags' help in cmd/sluice says what they mean).
type Options struct {
	Size, Producers, Inflight int
	Flush                     string // --flush: AsyncFlush or SyncFlush
	Duration                  time.Duration
	Messages                  int64
	Broker                    string // --broker: BrokerProcess or BrokerEmbedded
	Namesrv                   string // an external broker's name server(s) ip:port;ip:port
	Topic                     string
	Queues                    int
	Progress                  bool
	CPUProfile                string
	Kafka                     string // Kafka bootstrap address(es) host:port,host:port
	Target                    string
	NatsURL                   string
	RocketMQNamesrv           string // --rocketmq-namesrv
	RocketMQHeap              string // --rocketmq-heap

	// produce only
	Async     bool
	Mode      string
	BatchSize int
	// AutoBatch and Linger: --auto-batch and --linger (the Sluice producer's automatic
	// batching of async sends).
	AutoBatch bool
	Linger    time.Duration
	// Repeat runs the targets this many rounds, alternating them (0 or 1: once), and
	// prints each target's median and spread.
	Repeat int
	// Rate is --rate: steady rates (msg/s or percentages of saturation, ParseRates); ""
	// sends as fast as the window allows.
	Rate string

	// consume only
	ConsumeGoroutines int
	Orderly           bool
	ConsumeBatch      int
	PullBatch         int

	// Logger receives the broker's and the clients' logs (--verbose); nil = none.
	Logger *slog.Logger
	// Out receives the report, Err the progress bar.
	Out, Err io.Writer
	// Changed reports whether the flag of that name was given (some flags may not be
	// combined, and a given --progress draws the bar on a stderr that is no terminal);
	// nil = none was.
	Changed func(flag string) bool
	// BrokerCommand builds the command of the bench's broker process from its
	// arguments ("broker", flags); nil runs this executable.
	BrokerCommand func(args []string) *exec.Cmd
}

// changed is o.Changed(flag), false without Changed.
func (o Options) changed(flag string) bool { return o.Changed != nil && o.Changed(flag) }

// benchSetup is what runBenchProduce and runBenchConsume share.
type benchSetup struct {
	cfg      Config
	flush    string
	where    string // BrokerProcess or BrokerEmbedded
	embedded *Embedded
	process  *Process
	kfake    *EmbeddedKafka
	bar      *barProgress
	profile  *os.File                      // --cpuprofile, stopped and closed by close
	command  func(args []string) *exec.Cmd // Options.BrokerCommand
}

// benchConfig reads the shared options into a Config and validates them.
func benchConfig(o Options) (*benchSetup, error) {
	s := &benchSetup{command: o.BrokerCommand}
	c := &s.cfg
	c.Size = o.Size
	c.Producers = o.Producers
	c.Inflight = o.Inflight
	c.Duration = o.Duration
	c.Messages = o.Messages
	c.Topic = o.Topic
	c.Queues = o.Queues
	s.flush = o.Flush
	s.where = o.Broker
	c.NamesrvAddrs = splitAddrs(o.Namesrv)
	switch {
	case c.Size < 8 || c.Size > MaxSize:
		return nil, fmt.Errorf("--size %d: must be 8..%d bytes", c.Size, MaxSize)
	case c.Producers < 1 || c.Producers > MaxProducers:
		return nil, fmt.Errorf("--producers %d: must be 1..%d", c.Producers, MaxProducers)
	case c.Inflight < 1 || c.Inflight > MaxInflight:
		return nil, fmt.Errorf("--inflight %d: must be 1..%d", c.Inflight, MaxInflight)
	case c.Queues < 1 || c.Queues > MaxQueues:
		return nil, fmt.Errorf("--queues %d: must be 1..%d", c.Queues, MaxQueues)
	case c.Messages < 0:
		return nil, fmt.Errorf("--messages %d: must not be negative", c.Messages)
	case c.Duration < 0:
		return nil, fmt.Errorf("--duration %v: must not be negative", c.Duration)
	case o.changed("duration") && o.changed("messages"):
		return nil, errors.New("--duration and --messages: give one of them, not both")
	case s.flush != AsyncFlush && s.flush != SyncFlush:
		return nil, fmt.Errorf("--flush %q: want %s or %s", s.flush, AsyncFlush, SyncFlush)
	case len(c.NamesrvAddrs) > 0 && o.changed("flush"):
		return nil, errors.New("--flush applies to the bench's own broker only; an external broker flushes as its broker.conf says")
	case s.where != BrokerProcess && s.where != BrokerEmbedded:
		return nil, fmt.Errorf("--broker %q: want %s or %s", s.where, BrokerProcess, BrokerEmbedded)
	case len(c.NamesrvAddrs) > 0 && o.changed("broker"):
		return nil, errors.New("--broker applies to the bench's own broker only; with --namesrv the broker is external")
	}
	c.Logger = discard
	if o.Logger != nil {
		c.Logger = o.Logger
	}
	if o.Progress && (o.changed("progress") || isTerminal(o.Err)) {
		s.bar = newBarProgress(o.Err)
		c.Progress = s.bar
	}
	if path := o.CPUProfile; path != "" {
		pf, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return nil, fmt.Errorf("--cpuprofile: %w", err)
		}
		s.profile = pf
	}
	return s, nil
}

// startBroker starts the bench's own broker (a child process, or embedded) unless
// --namesrv was given, and says where it runs.
func (s *benchSetup) startBroker(out io.Writer) error {
	if len(s.cfg.NamesrvAddrs) > 0 {
		fmt.Fprintf(out, "broker: external, name server %v (its CPU is not measured)\n", s.cfg.NamesrvAddrs)
		return nil
	}
	if s.where == BrokerProcess {
		p, err := StartProcess(ProcessConfig{FlushDiskType: s.flush, Command: s.command})
		if err != nil {
			return err
		}
		s.process = p
		s.cfg.NamesrvAddrs = p.NamesrvAddrs()
		s.cfg.ServerPid = p.Pid()
		fmt.Fprintf(out, "broker: own process (pid %d) at %s (%s), name server %s, data in %s\n",
			p.Pid(), p.Addr(), s.flush, strings.Join(p.NamesrvAddrs(), ";"), p.Dir())
		return nil
	}
	e, err := StartEmbedded(EmbeddedConfig{FlushDiskType: s.flush, Logger: s.cfg.Logger})
	if err != nil {
		return err
	}
	s.embedded = e
	s.cfg.NamesrvAddrs = e.NamesrvAddrs()
	fmt.Fprintf(out, "broker: embedded in the bench process, %s at %s (%s), name server %s, data in %s\n",
		e.Broker.Name(), e.Broker.Addr(), s.flush, e.Broker.NamesrvAddr(), e.Dir())
	return nil
}

// close stops the progress bar and the bench's own broker (if any).
func (s *benchSetup) close() error {
	if s.bar != nil {
		s.bar.stop()
	}
	var profErr error
	if s.profile != nil {
		pprof.StopCPUProfile()
		profErr = s.profile.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if s.process != nil {
		if err := s.process.Shutdown(ctx); err != nil {
			return fmt.Errorf("broker process shutdown: %w", err)
		}
	}
	if s.embedded != nil {
		if err := s.embedded.Shutdown(ctx); err != nil {
			return fmt.Errorf("embedded broker shutdown: %w", err)
		}
	}
	if s.kfake != nil {
		_ = s.kfake.Shutdown(ctx)
	}
	if profErr != nil {
		return fmt.Errorf("--cpuprofile: %w", profErr)
	}
	return nil
}

// startKafka points Kafka runs at --kafka, or starts an embedded kfake cluster, and
// says which.
func (s *benchSetup) startKafka(o Options, out io.Writer) error {
	addrs := o.Kafka
	s.cfg.KafkaBrokers = strings.FieldsFunc(addrs, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
	s.cfg.ServerPid = 0
	if len(s.cfg.KafkaBrokers) > 0 {
		fmt.Fprintf(out, "kafka: external cluster at %s (its CPU is not measured)\n", strings.Join(s.cfg.KafkaBrokers, ","))
		return nil
	}
	k, err := StartEmbeddedKafka()
	if err != nil {
		return err
	}
	s.kfake = k
	s.cfg.KafkaBrokers = k.Brokers()
	fmt.Fprintf(out, "kafka: embedded in-process Kafka-protocol cluster (kfake) at %s; its CPU is part of this process's\n", strings.Join(k.Brokers(), ","))
	return nil
}

// benchTargets parses --target: a comma-separated list of the allowed names ("both" is
// sluice,jetstream), in the order given, each once.
func benchTargets(v string, allowed ...string) ([]string, error) {
	v = strings.ReplaceAll(v, "both", TargetSluice+","+TargetJetStream)
	var out []string
	seen := map[string]bool{}
	for _, t := range strings.Split(v, ",") {
		t = strings.TrimSpace(t)
		ok := false
		for _, a := range allowed {
			ok = ok || t == a
		}
		if !ok || seen[t] {
			return nil, fmt.Errorf("--target %q: want a comma-separated list of %s (each once), both, or rocketmq alone", v, strings.Join(allowed, ", "))
		}
		seen[t] = true
		out = append(out, t)
	}
	return out, nil
}

// printRatio prints r against the Sluice result base (nil: nothing to compare).
func printRatio(out io.Writer, base, r *Result) {
	if base == nil || r == nil || r == base || r.MsgPerSec() <= 0 {
		return
	}
	if r.Kind == "produce" {
		fmt.Fprintf(out, "ratio sluice/%s: %.2fx msg/s, p50 latency %.2fx, p99 latency %.2fx\n", r.Target,
			base.MsgPerSec()/r.MsgPerSec(),
			float64(base.Latency.Quantile(0.5))/float64(max(r.Latency.Quantile(0.5), 1)),
			float64(base.Latency.Quantile(0.99))/float64(max(r.Latency.Quantile(0.99), 1)))
	} else {
		fmt.Fprintf(out, "ratio sluice/%s: %.2fx msg/s\n", r.Target, base.MsgPerSec()/r.MsgPerSec())
	}
	bc, bs := base.CPUPerMessage()
	rc, rs := r.CPUPerMessage()
	if base.ServerPid > 0 && r.ServerPid > 0 && rc+rs > 0 {
		fmt.Fprintf(out, "ratio sluice/%s CPU per message: %.2fx total (client %.2fx, server %.2fx)\n", r.Target,
			float64(bc+bs)/float64(rc+rs), float64(bc)/float64(max(rc, 1)), float64(bs)/float64(max(rs, 1)))
	}
}

func (s *benchSetup) describe(target string) string {
	c := s.cfg
	amount := fmt.Sprintf("%d messages", c.Messages)
	if c.Messages == 0 {
		amount = fmt.Sprintf("for %v", c.Duration)
		if c.Duration == 0 {
			amount = fmt.Sprintf("for %v", DefaultDuration)
		}
	}
	mode := "sync"
	switch {
	case c.Async:
		mode = "async"
	case c.Mode == ModeOneway:
		mode = "oneway"
	case c.Mode == ModeBatch:
		mode = fmt.Sprintf("batches of %d", max(c.BatchSize, 1))
	}
	return fmt.Sprintf("%s produce: %d producer(s) x %d in flight (%s), %d-byte bodies, %s", target, c.Producers, c.Inflight, mode, c.Size, amount)
}

func printProduce(out io.Writer, r *Result) {
	h := &r.Latency
	fmt.Fprintf(out, "  sent       %d messages (%d bytes) in %v\n", r.Messages, r.Bytes, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(out, "  throughput %.0f msg/s, %.2f MB/s\n", r.MsgPerSec(), r.MBPerSec())
	fmt.Fprintf(out, "  latency    p50 %v, p99 %v, mean %v, max %v\n", roundLat(h.Quantile(0.5)), roundLat(h.Quantile(0.99)), roundLat(h.Mean()), roundLat(h.Max()))
	if r.Stored > 0 || strings.Contains(r.Kind, "oneway") {
		fmt.Fprintf(out, "  stored     %d of %d one-way sends\n", r.Stored, r.Messages)
	}
	printCPU(out, r)
}

// printCPU prints the CPU time per message of the client and the server process.
func printCPU(out io.Writer, r *Result) {
	c, sv := r.CPUPerMessage()
	if r.ServerPid > 0 {
		fmt.Fprintf(out, "  cpu/msg    client %v, server %v (pid %d), total %v\n", roundLat(c), roundLat(sv), r.ServerPid, roundLat(c+sv))
		if r.ServerRSS > 0 {
			fmt.Fprintf(out, "  server rss %d MiB at the end, peak %d MiB\n", r.ServerRSS>>20, r.ServerPeakRSS>>20)
		}
		return
	}
	fmt.Fprintf(out, "  cpu/msg    this process %v (server not measured)\n", roundLat(c))
}

// roundLat keeps three significant digits or so for latencies.
func roundLat(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// RunProduce is sluice bench produce: it sends messages to each --target and reports
// msg/s, MB/s, p50/p99 send latency and CPU per message to o.Out, with the ratios
// against Sluice.
func RunProduce(ctx context.Context, o Options) (err error) {
	s, err := benchConfig(o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	target := o.Target
	s.cfg.NatsURL = o.NatsURL
	s.cfg.Async = o.Async
	s.cfg.Mode = o.Mode
	s.cfg.BatchSize = o.BatchSize
	s.cfg.AutoBatch, s.cfg.AutoBatchLinger = o.AutoBatch, o.Linger
	if o.changed("linger") && !o.AutoBatch {
		return errors.New("--linger applies with --auto-batch only")
	}
	if s.cfg.Mode == ModeAsync {
		s.cfg.Async = true
	}
	if s.cfg.Async && s.cfg.Mode != "" && s.cfg.Mode != ModeAsync {
		return fmt.Errorf("--async and --mode %s: pick one", s.cfg.Mode)
	}
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	if o.Repeat < 0 || o.Repeat > 1 && target == targetRocketMQ {
		return fmt.Errorf("--repeat %d: want 1 or more, and 1 with --target rocketmq", o.Repeat)
	}
	if target == targetRocketMQ {
		if o.Rate != "" {
			return errors.New("--rate: not with --target rocketmq")
		}
		return runVsRocketMQ(ctx, o, s, s.describe("same workload:"), Produce, printProduce)
	}
	if target == TargetRocketMQ5 {
		if o.Rate != "" {
			return errors.New("--rate: not with --target rocketmq5")
		}
		if s.cfg.Mode != "" && s.cfg.Mode != ModeSync || s.cfg.Async {
			return errors.New("--target rocketmq5: sync sends only (--inflight of them in flight per producer)")
		}
		return runVsRocketMQ5(ctx, o, s, s.describe(fmt.Sprintf("same workload, official RocketMQ 5 Go client v5.1.4 (Send), after %d untimed sends:", v5Warmup)), []string{s.cfg.Topic}, ProduceV5, printProduce)
	}
	targets, err := benchTargets(target, TargetSluice, TargetJetStream, TargetKafka, TargetKafkaFranz)
	if err != nil {
		return err
	}
	if o.Rate != "" || o.changed("rate") {
		return runRates(ctx, o, s, targets)
	}
	if (s.cfg.Mode == ModeOneway || s.cfg.Mode == ModeBatch) && (len(targets) > 1 || targets[0] != TargetSluice) {
		return fmt.Errorf("--mode %s: only with --target sluice or rocketmq", s.cfg.Mode)
	}
	out := o.Out
	rounds := max(o.Repeat, 1)
	// --repeat: the targets in turn, rounds times; each server is started once.
	schedule := make([]string, 0, rounds*len(targets))
	for range rounds {
		schedule = append(schedule, targets...)
	}
	brokerStarted, kafkaStarted := false, false
	var rs []roundResults

	var sres *Result
	var results []*Result
	for i, tgt := range schedule {
		if rounds > 1 && i%len(targets) == 0 {
			fmt.Fprintf(out, "round %d of %d\n", i/len(targets)+1, rounds)
		}
		var res *Result
		switch tgt {
		case TargetSluice:
			if !brokerStarted {
				if err := s.startBroker(out); err != nil {
					return err
				}
				brokerStarted = true
			}
			fmt.Fprintln(out, s.describe("sluice"))
			if res, err = Produce(ctx, s.cfg); err != nil {
				return err
			}
			sres = res
		case TargetJetStream:
			stream, _ := JetStreamNames(s.cfg.Topic)
			mode := "sync"
			if s.cfg.Async {
				mode = "async"
			}
			jcfg := s.cfg
			jcfg.ServerPid = 0
			where := "server not found on this machine: its CPU is not measured"
			if pid, perr := natsPid(s.cfg.NatsURL); perr == nil {
				jcfg.ServerPid = pid
				where = fmt.Sprintf("own process, pid %d", pid)
			}
			fmt.Fprintf(out, "%s (stream %s at %s (%s), file storage, %s publish)\n", s.describe("jetstream"), stream, s.cfg.NatsURL, where, mode)
			if res, err = ProduceJetStream(ctx, jcfg); err != nil {
				return err
			}
		case TargetKafka, TargetKafkaFranz:
			kcfg := s.cfg
			ks := *s
			ks.cfg = kcfg
			if !kafkaStarted {
				if err := ks.startKafka(o, out); err != nil {
					return err
				}
				s.kfake = ks.kfake
				s.cfg.KafkaBrokers, kafkaStarted = ks.cfg.KafkaBrokers, true
			} else {
				ks.cfg.KafkaBrokers, ks.cfg.ServerPid = s.cfg.KafkaBrokers, 0
			}
			if tgt == TargetKafkaFranz {
				fmt.Fprintf(out, "%s (franz-go: all in-sync replicas acknowledge, idempotent, linger 0 instead of its default 10 ms)\n", ks.describe(TargetKafkaFranz))
				if res, err = ProduceKafkaFranz(ctx, ks.cfg); err != nil {
					return err
				}
				break
			}
			fmt.Fprintf(out, "%s (package kafka on franz-go: all in-sync replicas acknowledge, idempotent, linger 0)\n", ks.describe("kafka"))
			if res, err = ProduceKafka(ctx, ks.cfg); err != nil {
				return err
			}
		}
		s.bar.finish()
		printProduce(out, res)
		results = append(results, res)
		if len(results) < len(targets) {
			continue
		}
		for _, r := range results {
			printRatio(out, sres, r)
		}
		rs = append(rs, roundResults{base: sres, results: results})
		sres, results = nil, nil
	}
	if rounds > 1 {
		printRepeatSummary(out, targets, rs)
	}
	return nil
}

// roundResults is one round of a --repeat run: the targets' results, in order, and
// Sluice's (nil when not a target).
type roundResults struct {
	base    *Result
	results []*Result
}

// printRepeatSummary prints, for each target of a --repeat run, the median and the
// spread (lowest to highest) over the rounds of msg/s and CPU per message (client plus
// server), then the medians of the rounds' ratios against Sluice.
func printRepeatSummary(out io.Writer, targets []string, rs []roundResults) {
	fmt.Fprintf(out, "summary over %d rounds (median, lowest-highest):\n", len(rs))
	for i, tgt := range targets {
		var rate, cpu []float64
		for _, rr := range rs {
			r := rr.results[i]
			rate = append(rate, r.MsgPerSec())
			c, sv := r.CPUPerMessage()
			cpu = append(cpu, float64(c+sv)/float64(time.Microsecond))
		}
		m, lo, hi := medianSpread(rate)
		cm, clo, chi := medianSpread(cpu)
		fmt.Fprintf(out, "  %-10s %.0f msg/s (%.0f-%.0f), CPU %.1f µs/msg (%.1f-%.1f)\n", tgt, m, lo, hi, cm, clo, chi)
	}
	for i, tgt := range targets {
		if tgt == TargetSluice {
			continue
		}
		var rate, cpu []float64
		for _, rr := range rs {
			r := rr.results[i]
			if rr.base == nil || r.MsgPerSec() <= 0 {
				continue
			}
			rate = append(rate, rr.base.MsgPerSec()/r.MsgPerSec())
			bc, bs := rr.base.CPUPerMessage()
			if c, sv := r.CPUPerMessage(); c+sv > 0 {
				cpu = append(cpu, float64(bc+bs)/float64(c+sv))
			}
		}
		if len(rate) == 0 {
			continue
		}
		m, lo, hi := medianSpread(rate)
		fmt.Fprintf(out, "  ratio sluice/%s: %.2fx msg/s (%.2f-%.2f)", tgt, m, lo, hi)
		if len(cpu) > 0 {
			cm, clo, chi := medianSpread(cpu)
			fmt.Fprintf(out, ", CPU per message %.2fx (%.2f-%.2f)", cm, clo, chi)
		}
		fmt.Fprintln(out)
	}
}

// medianSpread returns the median (the mean of the middle two for an even count), the
// lowest and the highest of v; zeros for none.
func medianSpread(v []float64) (median, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	n := len(v)
	median = v[n/2]
	if n%2 == 0 {
		median = (v[n/2-1] + v[n/2]) / 2
	}
	return median, v[0], v[n-1]
}

// natsPid finds the process listening on the NATS URL's port on this machine.
func natsPid(natsURL string) (int, error) {
	u, err := url.Parse(natsURL)
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0, fmt.Errorf("nats url %q: no port", natsURL)
	}
	return PidListening(port)
}

// RunConsume is sluice bench consume: it prefills each --target with o.Messages
// messages and reports how fast one push consumer (JetStream: a durable pull consumer;
// Kafka: a consumer group) drains them to o.Out, with the ratios against Sluice.
func RunConsume(ctx context.Context, o Options) (err error) {
	s, err := benchConfig(o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if o.changed("duration") {
		return errors.New("--duration: consume drains a fixed backlog; give --messages instead")
	}
	s.cfg.ConsumeGoroutines = o.ConsumeGoroutines
	s.cfg.Orderly = o.Orderly
	s.cfg.ConsumeBatch = o.ConsumeBatch
	s.cfg.PullBatch = o.PullBatch
	switch {
	case s.cfg.ConsumeGoroutines < 1 || s.cfg.ConsumeGoroutines > 1000:
		return fmt.Errorf("--consume-goroutines %d: must be 1..1000", s.cfg.ConsumeGoroutines)
	case s.cfg.ConsumeBatch < 1 || s.cfg.ConsumeBatch > 1024:
		return fmt.Errorf("--consume-batch %d: must be 1..1024", s.cfg.ConsumeBatch)
	case s.cfg.PullBatch < 1 || s.cfg.PullBatch > 1024:
		return fmt.Errorf("--pull-batch %d: must be 1..1024", s.cfg.PullBatch)
	}
	if s.cfg.Messages == 0 {
		s.cfg.Messages = DefaultMessages
	}
	target := o.Target
	s.cfg.NatsURL = o.NatsURL
	if o.Repeat < 0 || o.Repeat > 1 && target != TargetRocketMQ5 {
		return fmt.Errorf("--repeat %d: consume repeats with --target rocketmq5 only", o.Repeat)
	}
	if target == targetRocketMQ {
		what := fmt.Sprintf("consume: prefill %d messages of %d bytes (%d producer(s)), then one push consumer: %d handler goroutines, pull batch %d, consume batch %d",
			s.cfg.Messages, s.cfg.Size, s.cfg.Producers, s.cfg.ConsumeGoroutines, s.cfg.PullBatch, s.cfg.ConsumeBatch)
		return runVsRocketMQ(ctx, o, s, what, Consume, printConsume)
	}
	if target == TargetRocketMQ5 {
		topic, warm := s.cfg.Topic+"_c5", s.cfg.Topic+"_w5"
		what := fmt.Sprintf("consume (official RocketMQ 5 Go client v5.1.4): warm-up of %d messages, prefill %d messages of %d bytes, then one SimpleConsumer: %d goroutines, each receiving up to %d and acknowledging each",
			v5Warmup, s.cfg.Messages, s.cfg.Size, s.cfg.ConsumeGoroutines, v5ReceiveBatch)
		return runVsRocketMQ5(ctx, o, s, what, []string{topic, warm}, func(ctx context.Context, cfg Config, endpoint string) (*Result, error) {
			return ConsumeV5(ctx, cfg, endpoint, topic, warm)
		}, printConsume)
	}
	targets, err := benchTargets(target, TargetSluice, TargetJetStream, TargetKafka, TargetKafkaFranz)
	if err != nil {
		return err
	}
	out := o.Out
	kafkaStarted := false
	var sres *Result
	var results []*Result
	for _, tgt := range targets {
		var r *Result
		switch tgt {
		case TargetSluice:
			if err := s.startBroker(out); err != nil {
				return err
			}
			fmt.Fprintf(out, "sluice consume: prefill %d messages of %d bytes (%d producer(s)), then one push consumer: %d handler goroutines, pull batch %d, consume batch %d\n",
				s.cfg.Messages, s.cfg.Size, s.cfg.Producers, s.cfg.ConsumeGoroutines, s.cfg.PullBatch, s.cfg.ConsumeBatch)
			if r, err = Consume(ctx, s.cfg); err != nil {
				return err
			}
			sres = r
		case TargetJetStream:
			jcfg := s.cfg
			jcfg.ServerPid = 0
			where := "server not found on this machine: its CPU is not measured"
			if pid, perr := natsPid(s.cfg.NatsURL); perr == nil {
				jcfg.ServerPid = pid
				where = fmt.Sprintf("own process, pid %d", pid)
			}
			fmt.Fprintf(out, "jetstream consume: prefill %d messages of %d bytes into a file stream at %s (%s), then one durable pull consumer (explicit acks): %d handler goroutines\n",
				s.cfg.Messages, s.cfg.Size, s.cfg.NatsURL, where, s.cfg.ConsumeGoroutines)
			if r, err = ConsumeJetStream(ctx, jcfg); err != nil {
				return err
			}
		case TargetKafka, TargetKafkaFranz:
			ks := *s
			if !kafkaStarted {
				if err := ks.startKafka(o, out); err != nil {
					return err
				}
				s.kfake, s.cfg.KafkaBrokers, kafkaStarted = ks.kfake, ks.cfg.KafkaBrokers, true
			}
			ks.cfg.KafkaBrokers, ks.cfg.ServerPid = s.cfg.KafkaBrokers, 0
			if tgt == TargetKafkaFranz {
				fmt.Fprintf(out, "kafka-franz consume: prefill %d messages of %d bytes (%d producer(s)), then one franz-go consumer group client: %d partitions, one poll loop, autocommit\n",
					ks.cfg.Messages, ks.cfg.Size, ks.cfg.Producers, ks.cfg.Queues)
				if r, err = ConsumeKafkaFranz(ctx, ks.cfg); err != nil {
					return err
				}
				break
			}
			fmt.Fprintf(out, "kafka consume: prefill %d messages of %d bytes (%d producer(s)), then one consumer group of package kafka: %d partitions, %d handler call(s) at once per partition, consume batch %d\n",
				ks.cfg.Messages, ks.cfg.Size, ks.cfg.Producers, ks.cfg.Queues, max(1, ks.cfg.ConsumeGoroutines/ks.cfg.Queues), ks.cfg.ConsumeBatch)
			if r, err = ConsumeKafka(ctx, ks.cfg); err != nil {
				return err
			}
		}
		s.bar.finish()
		printConsume(out, r)
		results = append(results, r)
	}
	for _, r := range results {
		printRatio(out, sres, r)
	}
	printKafkaPair(out, results)
	return nil
}

// printKafkaPair prints package kafka's result against franz-go's when both ran: msg/s
// and CPU per message (this process: clients and an embedded kfake alike).
func printKafkaPair(out io.Writer, results []*Result) {
	var k, f *Result
	for _, r := range results {
		switch r.Target {
		case TargetKafka:
			k = r
		case TargetKafkaFranz:
			f = r
		}
	}
	if k == nil || f == nil || f.MsgPerSec() <= 0 {
		return
	}
	kc, ks := k.CPUPerMessage()
	fc, fs := f.CPUPerMessage()
	fmt.Fprintf(out, "ratio kafka/kafka-franz: %.2fx msg/s, CPU per message %.2fx (%v against %v)\n",
		k.MsgPerSec()/f.MsgPerSec(), float64(kc+ks)/float64(max(fc+fs, 1)), roundLat(kc+ks), roundLat(fc+fs))
}

func printConsume(out io.Writer, r *Result) {
	fmt.Fprintf(out, "  consumed   %d messages (%d bytes) in %v, %d duplicate(s)\n", r.Messages, r.Bytes, r.Elapsed.Round(time.Millisecond), r.Duplicates)
	fmt.Fprintf(out, "  throughput %.0f msg/s, %.2f MB/s\n", r.MsgPerSec(), r.MBPerSec())
	printCPU(out, r)
}

// barProgress shows a Progress on a progress bar: Add only bumps an atomic
// counter; one goroutine copies it to the bar every 100 ms (so senders never wait on
// the bar's lock). Its methods are safe on a nil *barProgress (no bar).
type barProgress struct {
	w     io.Writer
	count atomic.Int64

	mu      sync.Mutex
	bar     *progressbar.ProgressBar
	stopped bool
	quit    chan struct{}
	done    chan struct{}
}

func newBarProgress(w io.Writer) *barProgress {
	b := &barProgress{w: w, quit: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b
}

func (b *barProgress) loop() {
	defer close(b.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-t.C:
			b.mu.Lock()
			if b.bar != nil {
				_ = b.bar.Set64(b.count.Load())
			}
			b.mu.Unlock()
		}
	}
}

// Phase implements Progress: it closes the previous bar and starts a new one.
func (b *barProgress) Phase(name string, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.closeBarLocked()
	b.count.Store(0)
	b.bar = progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(b.w),
		progressbar.OptionSetDescription(fmt.Sprintf("%-8s", name)),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("msg"),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetSpinnerChangeInterval(0), // no goroutine of its own
		progressbar.OptionClearOnFinish(),
	)
}

// Add implements Progress.
func (b *barProgress) Add(n int64) { b.count.Add(n) }

func (b *barProgress) closeBarLocked() {
	if b.bar != nil {
		_ = b.bar.Set64(b.count.Load())
		_ = b.bar.Finish()
		_ = b.bar.Exit()
		fmt.Fprint(b.w, "\r\033[K") // clear the bar's line before results are printed
		b.bar = nil
	}
}

// finish closes the current bar so that results print on a clean line.
func (b *barProgress) finish() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closeBarLocked()
}

// stop closes the bar and stops the refresh goroutine. Idempotent.
func (b *barProgress) stop() {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	b.stopped = true
	b.closeBarLocked()
	b.mu.Unlock()
	close(b.quit)
	<-b.done
}

// isTerminal reports whether w is a terminal (a progress bar would only litter a file
// or pipe with carriage returns).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Ensure barProgress satisfies Progress.
var _ Progress = (*barProgress)(nil)

// splitAddrs splits "ip:port;ip:port" (RocketMQ's namesrvAddr form; commas accepted too).
func splitAddrs(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
}
