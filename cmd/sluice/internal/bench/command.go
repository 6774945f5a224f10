package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/sluicemq/sluice/cmd/sluice/internal/bench"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure produce and consume throughput (embedded broker by default)",
		Long: `Measure Sluice end to end over TCP. Without --namesrv the bench starts a broker
with an embedded name server as a process of its own ("sluice broker", --broker
process, the default), on free loopback ports with a temporary data directory
(removed afterwards), flushing as --flush says; so a comparison with another server
(--target both) compares like with like: every server in its own process, the
client in this one. --broker embedded runs the broker inside this process instead.
With --namesrv the run goes to that cluster (its own flush setting applies).

Every run reports CPU time per message: this process's (getrusage) and the
server's (/proc/<pid>/stat: the broker process, or the process listening on the
NATS port), a figure that holds on a noisy machine where msg/s does not.

  sluice bench produce --messages 200000                   # one producer, one send in flight
  sluice bench produce --inflight 16 --duration 20s
  sluice bench produce --async --inflight 64 --messages 500000
  sluice bench produce --target both --messages 100000     # Sluice, then NATS JetStream, and the ratio
  sluice bench produce --target rocketmq --messages 100000 # Apache RocketMQ, then Sluice (own process), ratios
  sluice bench consume --target rocketmq --messages 100000 # the same for draining a backlog
  sluice bench consume --messages 200000                   # prefill, then time a push consumer draining it
  sluice bench produce --target sluice,kafka --inflight 16 # Sluice, then Kafka (package kafka), and the ratio
  sluice bench consume --target sluice,kafka --kafka 127.0.0.1:9092

Kafka runs (--target kafka, or in a list such as sluice,kafka) go to the cluster at
--kafka, or without it to an embedded in-process Kafka-protocol cluster (kfake, whose
CPU is then part of this process's): producers of package kafka (kafka-go Writers, all
in-sync replicas acknowledging, 1 ms batch timeout) and a consumer group of package
kafka, on a fresh topic of --queues partitions deleted afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.Int("size", bench.DefaultSize, "message body size in bytes (8..4194304)")
	pf.Int("producers", 1, "number of producers, each with its own connections")
	pf.Int("inflight", 1, "concurrent synchronous sends per producer (one goroutine each)")
	pf.String("flush", bench.AsyncFlush, "flushDiskType of the embedded broker: ASYNC_FLUSH or SYNC_FLUSH")
	pf.Duration("duration", 0, "send for this long (produce; default 10s unless --messages is given)")
	pf.Int64("messages", 0, "number of messages to send (produce) or to prefill and drain (consume; default 100000)")
	pf.String("broker", bench.BrokerProcess, "where the bench's own Sluice broker runs: process (a child \"sluice broker\" process) or embedded (inside the bench process)")
	pf.String("namesrv", "", "name server address(es) ip:port;ip:port of an external broker (default: embedded broker)")
	pf.String("topic", bench.DefaultTopic, "topic to send to (consume uses a fresh <topic>_c<ns> topic and deletes it)")
	pf.Int("queues", bench.DefaultQueues, "queue count the topic is created with")
	pf.Bool("progress", true, "show a progress bar on stderr (when stderr is a terminal, or when the flag is given explicitly)")
	pf.Bool("verbose", false, "show broker and client logs on stderr (level from --log-level)")
	pf.String("cpuprofile", "", "write a CPU profile of the bench process (the clients; with --broker embedded also the broker) to this file, for go tool pprof")
	pf.String("kafka", "", "Kafka bootstrap address(es) host:port,host:port for Kafka runs (default: an embedded in-process kfake cluster)")

	produce := &cobra.Command{
		Use:   "produce",
		Short: "Send messages and report msg/s, MB/s and p50/p99 send latency",
		Args:  cobra.NoArgs,
		RunE:  runBenchProduce,
	}
	produce.Flags().String("target", bench.TargetSluice, "what to measure: sluice, jetstream (NATS JetStream), kafka (package kafka), both (sluice,jetstream), a comma-separated list of these (ratios against sluice), or rocketmq alone (Apache RocketMQ, then Sluice as its own process, with the ratios)")
	addRocketMQFlags(produce)
	produce.Flags().String("nats-url", bench.DefaultNatsURL, "NATS server for --target jetstream|both")
	produce.Flags().Bool("async", false, "send asynchronously: each producer keeps --inflight sends outstanding with SendAsync (JetStream: PublishAsync); the same as --mode async")
	produce.Flags().String("mode", "", "how to send: sync (SendSync; default), async (SendAsync window of --inflight), oneway (SendOneway; reports how many were stored) or batch (SendBatch of --batch-size)")
	produce.Flags().Int("batch-size", bench.DefaultBatchSize, "messages per SendBatch with --mode batch")

	consume := &cobra.Command{
		Use:   "consume",
		Short: "Prefill --messages messages, then report how fast a push consumer drains them",
		Args:  cobra.NoArgs,
		RunE:  runBenchConsume,
	}
	consume.Flags().Int("consume-goroutines", 20, "push consumer handler goroutines (ConsumeGoroutines; Kafka: divided among the partitions)")
	consume.Flags().Bool("orderly", false, "consume orderly (broker queue locks, one worker per queue) instead of concurrently")
	consume.Flags().Int("consume-batch", 1, "most messages per handler call (consumeMessageBatchMaxSize)")
	consume.Flags().Int("pull-batch", 32, "most messages per pull (pullBatchSize)")
	consume.Flags().String("target", bench.TargetSluice, "what to measure: sluice, jetstream (a durable pull consumer, explicit acks, same handler count), kafka (a consumer group of package kafka), both (sluice,jetstream), a comma-separated list of these (ratios against sluice), or rocketmq alone (Apache RocketMQ, then Sluice as its own process, with the ratio)")
	consume.Flags().String("nats-url", bench.DefaultNatsURL, "NATS server for --target jetstream|both")
	addRocketMQFlags(consume)
	cmd.AddCommand(produce, consume)
	return cmd
}

// benchSetup is what runBenchProduce and runBenchConsume share.
type benchSetup struct {
	cfg      bench.Config
	flush    string
	where    string // bench.BrokerProcess or bench.BrokerEmbedded
	embedded *bench.Embedded
	process  *bench.Process
	kfake    *bench.EmbeddedKafka
	bar      *barProgress
	profile  *os.File // --cpuprofile, stopped and closed by close
}

// benchBrokerCommand builds the child broker's command; nil runs this executable.
// Tests set it to run their own binary in its child mode.
var benchBrokerCommand func(args []string) *exec.Cmd

// benchConfig reads the shared flags into a bench.Config and validates them.
func benchConfig(cmd *cobra.Command) (*benchSetup, error) {
	f := cmd.Flags()
	s := &benchSetup{}
	c := &s.cfg
	c.Size, _ = f.GetInt("size")
	c.Producers, _ = f.GetInt("producers")
	c.Inflight, _ = f.GetInt("inflight")
	c.Duration, _ = f.GetDuration("duration")
	c.Messages, _ = f.GetInt64("messages")
	c.Topic, _ = f.GetString("topic")
	c.Queues, _ = f.GetInt("queues")
	s.flush, _ = f.GetString("flush")
	s.where, _ = f.GetString("broker")
	ns, _ := f.GetString("namesrv")
	c.NamesrvAddrs = splitAddrs(ns)
	switch {
	case c.Size < 8 || c.Size > bench.MaxSize:
		return nil, fmt.Errorf("--size %d: must be 8..%d bytes", c.Size, bench.MaxSize)
	case c.Producers < 1 || c.Producers > bench.MaxProducers:
		return nil, fmt.Errorf("--producers %d: must be 1..%d", c.Producers, bench.MaxProducers)
	case c.Inflight < 1 || c.Inflight > bench.MaxInflight:
		return nil, fmt.Errorf("--inflight %d: must be 1..%d", c.Inflight, bench.MaxInflight)
	case c.Queues < 1 || c.Queues > bench.MaxQueues:
		return nil, fmt.Errorf("--queues %d: must be 1..%d", c.Queues, bench.MaxQueues)
	case c.Messages < 0:
		return nil, fmt.Errorf("--messages %d: must not be negative", c.Messages)
	case c.Duration < 0:
		return nil, fmt.Errorf("--duration %v: must not be negative", c.Duration)
	case f.Changed("duration") && f.Changed("messages"):
		return nil, errors.New("--duration and --messages: give one of them, not both")
	case s.flush != bench.AsyncFlush && s.flush != bench.SyncFlush:
		return nil, fmt.Errorf("--flush %q: want %s or %s", s.flush, bench.AsyncFlush, bench.SyncFlush)
	case len(c.NamesrvAddrs) > 0 && f.Changed("flush"):
		return nil, errors.New("--flush applies to the bench's own broker only; an external broker flushes as its broker.conf says")
	case s.where != bench.BrokerProcess && s.where != bench.BrokerEmbedded:
		return nil, fmt.Errorf("--broker %q: want %s or %s", s.where, bench.BrokerProcess, bench.BrokerEmbedded)
	case len(c.NamesrvAddrs) > 0 && f.Changed("broker"):
		return nil, errors.New("--broker applies to the bench's own broker only; with --namesrv the broker is external")
	}
	c.Logger = discardLogger()
	if v, _ := f.GetBool("verbose"); v {
		l, err := newLogger(cmd)
		if err != nil {
			return nil, err
		}
		c.Logger = l
	}
	if p, _ := f.GetBool("progress"); p && (f.Changed("progress") || isTerminal(cmd.ErrOrStderr())) {
		s.bar = newBarProgress(cmd.ErrOrStderr())
		c.Progress = s.bar
	}
	if path, _ := f.GetString("cpuprofile"); path != "" {
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
	if s.where == bench.BrokerProcess {
		p, err := bench.StartProcess(bench.ProcessConfig{FlushDiskType: s.flush, Command: benchBrokerCommand})
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
	e, err := bench.StartEmbedded(bench.EmbeddedConfig{FlushDiskType: s.flush, Logger: s.cfg.Logger})
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
func (s *benchSetup) startKafka(cmd *cobra.Command, out io.Writer) error {
	addrs, _ := cmd.Flags().GetString("kafka")
	s.cfg.KafkaBrokers = strings.FieldsFunc(addrs, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
	s.cfg.ServerPid = 0
	if len(s.cfg.KafkaBrokers) > 0 {
		fmt.Fprintf(out, "kafka: external cluster at %s (its CPU is not measured)\n", strings.Join(s.cfg.KafkaBrokers, ","))
		return nil
	}
	k, err := bench.StartEmbeddedKafka()
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
	v = strings.ReplaceAll(v, "both", bench.TargetSluice+","+bench.TargetJetStream)
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
func printRatio(out io.Writer, base, r *bench.Result) {
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
			amount = fmt.Sprintf("for %v", bench.DefaultDuration)
		}
	}
	mode := "sync"
	switch {
	case c.Async:
		mode = "async"
	case c.Mode == bench.ModeOneway:
		mode = "oneway"
	case c.Mode == bench.ModeBatch:
		mode = fmt.Sprintf("batches of %d", max(c.BatchSize, 1))
	}
	return fmt.Sprintf("%s produce: %d producer(s) x %d in flight (%s), %d-byte bodies, %s", target, c.Producers, c.Inflight, mode, c.Size, amount)
}

func printProduce(out io.Writer, r *bench.Result) {
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
func printCPU(out io.Writer, r *bench.Result) {
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

func runBenchProduce(cmd *cobra.Command, _ []string) (err error) {
	s, err := benchConfig(cmd)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	target, _ := cmd.Flags().GetString("target")
	s.cfg.NatsURL, _ = cmd.Flags().GetString("nats-url")
	s.cfg.Async, _ = cmd.Flags().GetBool("async")
	s.cfg.Mode, _ = cmd.Flags().GetString("mode")
	s.cfg.BatchSize, _ = cmd.Flags().GetInt("batch-size")
	if s.cfg.Mode == bench.ModeAsync {
		s.cfg.Async = true
	}
	if s.cfg.Async && s.cfg.Mode != "" && s.cfg.Mode != bench.ModeAsync {
		return fmt.Errorf("--async and --mode %s: pick one", s.cfg.Mode)
	}
	if err := s.cfg.Validate(); err != nil {
		return err
	}
	if target == targetRocketMQ {
		return runVsRocketMQ(cmd, s, s.describe("same workload:"), bench.Produce, printProduce)
	}
	targets, err := benchTargets(target, bench.TargetSluice, bench.TargetJetStream, bench.TargetKafka)
	if err != nil {
		return err
	}
	if (s.cfg.Mode == bench.ModeOneway || s.cfg.Mode == bench.ModeBatch) && (len(targets) > 1 || targets[0] != bench.TargetSluice) {
		return fmt.Errorf("--mode %s: only with --target sluice or rocketmq", s.cfg.Mode)
	}
	out := cmd.OutOrStdout()
	ctx := cmd.Context()

	var sres *bench.Result
	var results []*bench.Result
	for _, tgt := range targets {
		var res *bench.Result
		switch tgt {
		case bench.TargetSluice:
			if err := s.startBroker(out); err != nil {
				return err
			}
			fmt.Fprintln(out, s.describe("sluice"))
			if res, err = bench.Produce(ctx, s.cfg); err != nil {
				return err
			}
			sres = res
		case bench.TargetJetStream:
			stream, _ := bench.JetStreamNames(s.cfg.Topic)
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
			if res, err = bench.ProduceJetStream(ctx, jcfg); err != nil {
				return err
			}
		case bench.TargetKafka:
			kcfg := s.cfg
			ks := *s
			ks.cfg = kcfg
			if err := ks.startKafka(cmd, out); err != nil {
				return err
			}
			s.kfake = ks.kfake
			fmt.Fprintf(out, "%s (package kafka, all in-sync replicas acknowledge, %v batch timeout)\n", ks.describe("kafka"), bench.KafkaBatchTimeout)
			if res, err = bench.ProduceKafka(ctx, ks.cfg); err != nil {
				return err
			}
		}
		s.bar.finish()
		printProduce(out, res)
		results = append(results, res)
	}
	for _, r := range results {
		printRatio(out, sres, r)
	}
	return nil
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
	return bench.PidListening(port)
}

func runBenchConsume(cmd *cobra.Command, _ []string) (err error) {
	s, err := benchConfig(cmd)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	f := cmd.Flags()
	if f.Changed("duration") {
		return errors.New("--duration: consume drains a fixed backlog; give --messages instead")
	}
	s.cfg.ConsumeGoroutines, _ = f.GetInt("consume-goroutines")
	s.cfg.Orderly, _ = f.GetBool("orderly")
	s.cfg.ConsumeBatch, _ = f.GetInt("consume-batch")
	s.cfg.PullBatch, _ = f.GetInt("pull-batch")
	switch {
	case s.cfg.ConsumeGoroutines < 1 || s.cfg.ConsumeGoroutines > 1000:
		return fmt.Errorf("--consume-goroutines %d: must be 1..1000", s.cfg.ConsumeGoroutines)
	case s.cfg.ConsumeBatch < 1 || s.cfg.ConsumeBatch > 1024:
		return fmt.Errorf("--consume-batch %d: must be 1..1024", s.cfg.ConsumeBatch)
	case s.cfg.PullBatch < 1 || s.cfg.PullBatch > 1024:
		return fmt.Errorf("--pull-batch %d: must be 1..1024", s.cfg.PullBatch)
	}
	if s.cfg.Messages == 0 {
		s.cfg.Messages = bench.DefaultMessages
	}
	target, _ := f.GetString("target")
	s.cfg.NatsURL, _ = f.GetString("nats-url")
	if target == targetRocketMQ {
		what := fmt.Sprintf("consume: prefill %d messages of %d bytes (%d producer(s)), then one push consumer: %d handler goroutines, pull batch %d, consume batch %d",
			s.cfg.Messages, s.cfg.Size, s.cfg.Producers, s.cfg.ConsumeGoroutines, s.cfg.PullBatch, s.cfg.ConsumeBatch)
		return runVsRocketMQ(cmd, s, what, bench.Consume, printConsume)
	}
	targets, err := benchTargets(target, bench.TargetSluice, bench.TargetJetStream, bench.TargetKafka)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	var sres *bench.Result
	var results []*bench.Result
	for _, tgt := range targets {
		var r *bench.Result
		switch tgt {
		case bench.TargetSluice:
			if err := s.startBroker(out); err != nil {
				return err
			}
			fmt.Fprintf(out, "sluice consume: prefill %d messages of %d bytes (%d producer(s)), then one push consumer: %d handler goroutines, pull batch %d, consume batch %d\n",
				s.cfg.Messages, s.cfg.Size, s.cfg.Producers, s.cfg.ConsumeGoroutines, s.cfg.PullBatch, s.cfg.ConsumeBatch)
			if r, err = bench.Consume(cmd.Context(), s.cfg); err != nil {
				return err
			}
			sres = r
		case bench.TargetJetStream:
			jcfg := s.cfg
			jcfg.ServerPid = 0
			where := "server not found on this machine: its CPU is not measured"
			if pid, perr := natsPid(s.cfg.NatsURL); perr == nil {
				jcfg.ServerPid = pid
				where = fmt.Sprintf("own process, pid %d", pid)
			}
			fmt.Fprintf(out, "jetstream consume: prefill %d messages of %d bytes into a file stream at %s (%s), then one durable pull consumer (explicit acks): %d handler goroutines\n",
				s.cfg.Messages, s.cfg.Size, s.cfg.NatsURL, where, s.cfg.ConsumeGoroutines)
			if r, err = bench.ConsumeJetStream(cmd.Context(), jcfg); err != nil {
				return err
			}
		case bench.TargetKafka:
			ks := *s
			if err := ks.startKafka(cmd, out); err != nil {
				return err
			}
			s.kfake = ks.kfake
			fmt.Fprintf(out, "kafka consume: prefill %d messages of %d bytes (%d producer(s)), then one consumer group of package kafka: %d partitions, %d handler call(s) at once per partition, consume batch %d\n",
				ks.cfg.Messages, ks.cfg.Size, ks.cfg.Producers, ks.cfg.Queues, max(1, ks.cfg.ConsumeGoroutines/ks.cfg.Queues), ks.cfg.ConsumeBatch)
			if r, err = bench.ConsumeKafka(cmd.Context(), ks.cfg); err != nil {
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
	return nil
}

func printConsume(out io.Writer, r *bench.Result) {
	fmt.Fprintf(out, "  consumed   %d messages (%d bytes) in %v, %d duplicate(s)\n", r.Messages, r.Bytes, r.Elapsed.Round(time.Millisecond), r.Duplicates)
	fmt.Fprintf(out, "  throughput %.0f msg/s, %.2f MB/s\n", r.MsgPerSec(), r.MBPerSec())
	printCPU(out, r)
}

// barProgress shows a bench.Progress on a progress bar: Add only bumps an atomic
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

// Phase implements bench.Progress: it closes the previous bar and starts a new one.
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

// Add implements bench.Progress.
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

// Ensure barProgress satisfies bench.Progress.
var _ bench.Progress = (*barProgress)(nil)
