// Package bench measures Sluice end to end over loopback: producer throughput and send
// latency (Produce), push-consumer drain throughput (Consume), and, as comparison
// peers, synchronous publishes to a NATS JetStream stream (ProduceJetStream) and the
// same producer and consumer workloads over Kafka through package kafka
// (ProduceKafka, ConsumeKafka) and through franz-go (ProduceKafkaFranz,
// ConsumeKafkaFranz). RunProduce also runs steady-rate sends with a consumer attached
// (--rate: send and end-to-end latency percentiles), RunScaleBench the many-clients
// scenario. RunProduce, RunConsume and RunScaleBench are the `sluice bench` command
// (cmd/sluice reads its flags into Options); this package's go test benchmarks use the
// workloads directly.
//
// Numbers are only measured here, never asserted: a run reports what it saw.
package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
)

// Defaults and limits of Config.
const (
	DefaultTopic     = "SluiceBench"
	DefaultQueues    = 8
	DefaultSize      = 1024 // bytes
	DefaultDuration  = 10 * time.Second
	DefaultMessages  = 100_000 // Consume's prefill when Config.Messages is 0
	DefaultNatsURL   = "nats://127.0.0.1:4222"
	MaxSize          = message.DefaultMaxMessageSize // 4 MiB
	MaxProducers     = 1024
	MaxInflight      = 1024
	MaxQueues        = 1024
	DefaultBatchSize = 32   // messages per SendBatch in ModeBatch
	MaxBatchSize     = 4096 // messages per SendBatch
	prefillInflight  = 16   // Consume's prefill concurrency per producer, at least
	consumerShutdown = 10 * time.Second
)

// Target names a system under test.
const (
	ModeSync        = "sync"
	ModeAsync       = "async"
	ModeOneway      = "oneway"
	ModeBatch       = "batch"
	TargetSluice    = "sluice"
	TargetJetStream = "jetstream"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// Progress receives a run's progress. Nil in Config means none.
type Progress interface {
	// Phase starts a phase ("warmup", "produce", "prefill", "consume") of total
	// messages; total is -1 when the phase runs for a duration instead.
	Phase(name string, total int64)
	// Add reports n more messages done in the current phase. It is called from many
	// goroutines at once and must be cheap (an atomic add).
	Add(n int64)
}

// Config configures a run. The zero value is usable for an embedded broker apart from
// NamesrvAddrs (Sluice targets) — a run against JetStream needs only NatsURL.
type Config struct {
	// NamesrvAddrs are the Sluice name servers ("host:port"). Required for Sluice runs.
	NamesrvAddrs []string
	// NatsURL is the NATS server for ProduceJetStream. Default: nats://127.0.0.1:4222.
	NatsURL string
	// KafkaBrokers are the Kafka bootstrap addresses ("host:port") for ProduceKafka and
	// ConsumeKafka. Required for Kafka runs.
	KafkaBrokers []string
	// ServerPid is the server process whose CPU time a run reports (Result.ServerCPU):
	// the Sluice broker process for Produce/Consume, the NATS server for
	// ProduceJetStream. 0: the server's CPU is not measured (an embedded broker's CPU is
	// part of ClientCPU then).
	ServerPid int
	// Topic is the topic to produce to; Consume uses a fresh topic named after it
	// (Topic + "_c<unix ns>") and deletes it afterwards. JetStream uses a stream named
	// SLUICE_BENCH_<Topic> on subject sluice.bench.<Topic>, deleted afterwards.
	// Default: "SluiceBench".
	Topic string
	// Queues is the queue count the topic is created with. Default: 8; at most 1024.
	Queues int
	// Size is the body size in bytes; the first 8 bytes carry a sequence number.
	// Default: 1024; 8..4194304.
	Size int
	// Producers is the number of producers (each its own connections). Default: 1;
	// at most 1024.
	Producers int
	// Inflight is the number of sends in flight per producer: concurrent synchronous
	// sends (one goroutine each), or with Async the window of asynchronous sends.
	// Default: 1; at most 1024.
	Inflight int
	// Async makes Produce and ProduceJetStream send asynchronously — one goroutine per
	// producer keeps up to Inflight sends outstanding with producer.SendAsync
	// (JetStream: PublishAsync) — instead of Inflight goroutines calling SendSync.
	// Latency is then measured from the async call to its completion.
	Async bool
	// Messages is how many messages to send (Produce) or to prefill and drain
	// (Consume). Zero: Produce runs for Duration; Consume uses 100000.
	Messages int64
	// Duration is how long Produce sends when Messages is 0. Default: 10s.
	Duration time.Duration
	// Warmup is how many untimed sends each producer makes before Produce starts the
	// clock (route lookup, connections). Default: 0 = 100; negative = none.
	Warmup int
	// ConsumeGoroutines is the push consumer's handler goroutine count. Default: 20.
	ConsumeGoroutines int
	// ConsumeBatch is the most messages one handler call gets
	// (consumeMessageBatchMaxSize). Default: 1.
	ConsumeBatch int
	// PullBatch is the most messages one pull asks for (pullBatchSize). Default: 32.
	PullBatch int
	// Mode is how Produce sends: ModeSync (default; Inflight concurrent SendSync per
	// producer), ModeAsync (a window of Inflight SendAsync; the same as Async),
	// ModeOneway (SendOneway: no answer, so the stored count is read back from the
	// broker's max offsets) or ModeBatch (SendBatch of BatchSize messages per call).
	Mode string
	// BatchSize is the number of messages per SendBatch call in ModeBatch. Default 32.
	BatchSize int
	// AutoBatch turns on the Sluice producer's automatic batching of async sends
	// (producer.Config.AutoBatch) with AutoBatchLinger; other targets ignore it.
	AutoBatch       bool
	AutoBatchLinger time.Duration
	// Orderly makes Consume's push consumer orderly (queue locks, one worker per queue)
	// instead of concurrent.
	Orderly bool
	// Progress, if set, is told the phases and every message done.
	Progress Progress
	// Logger receives the SDK logs. Default: discard.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.NatsURL == "" {
		c.NatsURL = DefaultNatsURL
	}
	if c.Topic == "" {
		c.Topic = DefaultTopic
	}
	if c.Queues == 0 {
		c.Queues = DefaultQueues
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Producers == 0 {
		c.Producers = 1
	}
	if c.Inflight == 0 {
		c.Inflight = 1
	}
	if c.Messages == 0 && c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.Warmup == 0 {
		c.Warmup = 100
	}
	if c.Mode == "" {
		c.Mode = ModeSync
		if c.Async {
			c.Mode = ModeAsync
		}
	}
	if c.Mode == ModeAsync {
		c.Async = true
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Logger == nil {
		c.Logger = discard
	}
	if c.Progress == nil {
		c.Progress = noProgress{}
	}
}

// Validate reports the first field outside its limits, naming it.
func (c *Config) Validate() error {
	bad := func(field string, value any, reason string) error {
		return &config.Error{Package: "bench", Field: field, Value: value, Reason: reason}
	}
	switch {
	case c.Size != 0 && (c.Size < 8 || c.Size > MaxSize):
		return bad("Size", c.Size, fmt.Sprintf("bytes outside 8..%d", MaxSize))
	case c.Producers < 0 || c.Producers > MaxProducers:
		return bad("Producers", c.Producers, fmt.Sprintf("outside 1..%d", MaxProducers))
	case c.Inflight < 0 || c.Inflight > MaxInflight:
		return bad("Inflight", c.Inflight, fmt.Sprintf("outside 1..%d", MaxInflight))
	case c.Queues < 0 || c.Queues > MaxQueues:
		return bad("Queues", c.Queues, fmt.Sprintf("outside 1..%d", MaxQueues))
	case c.Messages < 0:
		return bad("Messages", c.Messages, "must not be negative")
	case c.Mode != "" && c.Mode != ModeSync && c.Mode != ModeAsync && c.Mode != ModeOneway && c.Mode != ModeBatch:
		return bad("Mode", c.Mode, fmt.Sprintf("want %s, %s, %s or %s", ModeSync, ModeAsync, ModeOneway, ModeBatch))
	case c.BatchSize < 0 || c.BatchSize > MaxBatchSize:
		return bad("BatchSize", c.BatchSize, fmt.Sprintf("outside 1..%d", MaxBatchSize))
	case c.Duration < 0:
		return bad("Duration", c.Duration, "must not be negative")
	case c.ConsumeGoroutines < 0:
		return bad("ConsumeGoroutines", c.ConsumeGoroutines, "must not be negative")
	case c.ConsumeBatch < 0:
		return bad("ConsumeBatch", c.ConsumeBatch, "must not be negative")
	case c.PullBatch < 0:
		return bad("PullBatch", c.PullBatch, "must not be negative")
	}
	return nil
}

type noProgress struct{}

func (noProgress) Phase(string, int64) {}
func (noProgress) Add(int64)           {}

// Result is what one run measured.
type Result struct {
	// Target is TargetSluice, TargetJetStream, TargetKafka or TargetKafkaFranz.
	Target string
	// Kind is "produce" or "consume".
	Kind string
	// Messages is the number of messages acknowledged (produce) or consumed once
	// (consume) inside the timed window.
	Messages int64
	// Bytes is the body bytes of those messages.
	Bytes int64
	// Elapsed is the timed window: first send to last acknowledgement (produce), or
	// consumer Start to the last message handled (consume).
	Elapsed time.Duration
	// Latency holds one sample per acknowledged send, from the call to its return
	// (produce only; empty for consume).
	Latency Histogram
	// Duplicates counts messages handled more than once (consume only).
	Duplicates int64
	// Stored counts the messages the broker stored during a ModeOneway run (one-way sends
	// get no answer, and a busy broker may drop them).
	Stored int64
	// ClientCPU is the CPU time (user + system) the benchmark's own process used in the
	// timed window: producers or the consumer, and an embedded broker when there is one.
	ClientCPU time.Duration
	// ServerCPU is the CPU time the server process (Config.ServerPid) used in the timed
	// window; zero when no server process was measured.
	ServerCPU time.Duration
	// ServerPid is the process whose CPU ServerCPU counts (0: none).
	ServerPid int
	// ServerRSS and ServerPeakRSS are the server process's resident set size in bytes at
	// the end of the timed window and its peak over the process's life (ProcessMemory);
	// zero when no server process was measured.
	ServerRSS, ServerPeakRSS int64
}

// CPUPerMessage returns ClientCPU and ServerCPU divided by Messages (zero when no
// message was counted).
func (r *Result) CPUPerMessage() (client, server time.Duration) {
	if r.Messages <= 0 {
		return 0, 0
	}
	return r.ClientCPU / time.Duration(r.Messages), r.ServerCPU / time.Duration(r.Messages)
}

// MsgPerSec returns Messages per second of Elapsed.
func (r *Result) MsgPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

// MBPerSec returns body megabytes (10^6 bytes) per second of Elapsed.
func (r *Result) MBPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds()
}

// sendFunc sends one body synchronously and returns when it was acknowledged.
type sendFunc func(ctx context.Context, body []byte) error

// asyncSendFunc starts sending one body and returns at once; done is called exactly once
// (from any goroutine) with the outcome unless asyncSendFunc itself returns an error.
// body must not change until done runs.
type asyncSendFunc func(ctx context.Context, body []byte, done func(error)) error

// plan is what drive sends: either a fixed count or for a duration.
type plan struct {
	messages int64         // > 0: exactly this many
	duration time.Duration // else: until this much time has passed
	inflight int           // goroutines per sender
	phase    string
	rate     float64 // driveRate: messages per second over all senders
	seqSign  int64   // driveRate: 1, or -1 for warm-up messages
}

// run is the state drive and driveAsync share: the sequence counter, the stop flag (set
// by the first failure, by the duration timer or by a sequence past plan.messages), the
// first error, and the result the workers merge their histograms into under mu.
type run struct {
	next     atomic.Int64
	stop     atomic.Bool
	errOnce  sync.Once
	firstErr error
	mu       sync.Mutex
	res      *Result
	wg       sync.WaitGroup
	start    time.Time
	timer    *time.Timer
	cancel   context.CancelFunc
}

// startRun announces the phase to cfg.Progress, starts the clock (and the duration
// timer when plan.messages is 0) and returns the run with a context its first failure
// cancels.
func startRun(ctx context.Context, cfg *Config, p plan) (*run, context.Context) {
	total := p.messages
	if total == 0 {
		total = -1
	}
	cfg.Progress.Phase(p.phase, total)
	r := &run{res: &Result{Kind: "produce"}}
	ctx, r.cancel = context.WithCancel(ctx)
	r.start = time.Now()
	if p.messages == 0 {
		r.timer = time.AfterFunc(p.duration, func() { r.stop.Store(true) })
	}
	return r, ctx
}

// fail records the first error, stops every worker and cancels the run's context.
func (r *run) fail(err error) {
	r.errOnce.Do(func() { r.firstErr = err; r.stop.Store(true); r.cancel() })
}

// finish waits for the workers, stops the timer and returns the result, or the first
// error, or ctx's error when the caller's context ended the run.
func (r *run) finish(ctx context.Context) (*Result, error) {
	r.wg.Wait()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.res.Elapsed = time.Since(r.start)
	r.res.Messages = int64(r.res.Latency.Count())
	if r.firstErr != nil {
		return nil, r.firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r.res, nil
}

// drive runs the workers: plan.inflight goroutines per sender, each with its own body
// buffer and latency histogram. Sequence numbers 1..n go into the first 8 body bytes.
// The first failure stops every worker and is returned.
func drive(ctx context.Context, cfg *Config, senders []sendFunc, p plan) (*Result, error) {
	r, ctx := startRun(ctx, cfg, p)
	defer r.cancel()
	for _, send := range senders {
		for range p.inflight {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				body := makeBody(cfg.Size)
				var h Histogram
				var bytes int64
				defer func() {
					r.mu.Lock()
					r.res.Latency.Merge(&h)
					r.res.Bytes += bytes
					r.mu.Unlock()
				}()
				for !r.stop.Load() {
					seq := r.next.Add(1)
					if p.messages > 0 && seq > p.messages {
						return
					}
					binary.BigEndian.PutUint64(body, uint64(seq))
					t0 := time.Now()
					if err := send(ctx, body); err != nil {
						r.fail(fmt.Errorf("send %d: %w", seq, err))
						return
					}
					h.Record(time.Since(t0))
					bytes += int64(len(body))
					cfg.Progress.Add(1)
				}
			}()
		}
	}
	return r.finish(ctx)
}

// driveAsync is drive for asynchronous senders: one goroutine per sender keeps up to
// plan.inflight sends outstanding, each with its own body buffer (a slot), and waits for
// all of them to complete before returning. The first failure stops every sender.
func driveAsync(ctx context.Context, cfg *Config, senders []asyncSendFunc, p plan) (*Result, error) {
	r, ctx := startRun(ctx, cfg, p)
	defer r.cancel()
	type slot struct {
		body []byte
		seq  int64
		t0   time.Time
	}
	for _, send := range senders {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			slots := make(chan *slot, p.inflight)
			for range p.inflight {
				slots <- &slot{body: makeBody(cfg.Size)}
			}
			var (
				hmu   sync.Mutex // callbacks of one sender run concurrently
				h     Histogram
				bytes int64
			)
			defer func() {
				for range p.inflight { // every outstanding send has completed
					<-slots
				}
				r.mu.Lock()
				r.res.Latency.Merge(&h)
				r.res.Bytes += bytes
				r.mu.Unlock()
			}()
			for !r.stop.Load() {
				var sl *slot
				select {
				case sl = <-slots:
				case <-ctx.Done():
					return
				}
				sl.seq = r.next.Add(1)
				if p.messages > 0 && sl.seq > p.messages {
					slots <- sl
					return
				}
				binary.BigEndian.PutUint64(sl.body, uint64(sl.seq))
				sl.t0 = time.Now()
				err := send(ctx, sl.body, func(err error) {
					if err != nil {
						r.fail(fmt.Errorf("send %d: %w", sl.seq, err))
					} else {
						d := time.Since(sl.t0)
						hmu.Lock()
						h.Record(d)
						bytes += int64(len(sl.body))
						hmu.Unlock()
						cfg.Progress.Add(1)
					}
					slots <- sl
				})
				if err != nil {
					r.fail(fmt.Errorf("send %d: %w", sl.seq, err))
					slots <- sl
					return
				}
			}
		}()
	}
	return r.finish(ctx)
}

// makeBody returns a body of size bytes: an 8-byte sequence slot, then filler.
func makeBody(size int) []byte {
	b := make([]byte, size)
	for i := 8; i < size; i++ {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

// bodySeq returns the sequence number in a body made by makeBody (0 if too short).
func bodySeq(b []byte) int64 {
	if len(b) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b))
}

// warmup sends n untimed messages through each sender.
func warmup(ctx context.Context, cfg *Config, senders []sendFunc) error {
	if cfg.Warmup <= 0 {
		return nil
	}
	_, err := drive(ctx, cfg, senders, plan{messages: int64(cfg.Warmup * len(senders)), inflight: 1, phase: "warmup"})
	if err != nil {
		return fmt.Errorf("bench: warm-up: %w", err)
	}
	return nil
}

// shutdownAll runs every stop function with a shared 10 s budget and joins the errors.
func shutdownAll(stops []func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), consumerShutdown)
	defer cancel()
	var errs []error
	for _, s := range stops {
		errs = append(errs, s(ctx))
	}
	return errors.Join(errs...)
}
