package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/sluicemq/sluice/internal/peers"
)

// The RocketMQ 5 workloads: the official RocketMQ 5 Go client
// (github.com/apache/rocketmq-clients/golang/v5 v5.1.4) against a gRPC endpoint — the
// Sluice broker's front end (sluice broker --grpc-listen) or Apache RocketMQ 5.3's proxy.

// TargetRocketMQ5 runs the RocketMQ 5 workloads against Apache RocketMQ 5.3 (proxy and
// broker in LOCAL mode, from the peers' jars) and against Sluice's gRPC front end, each
// server in its own process and alone while it is measured.
const TargetRocketMQ5 = "rocketmq5"

// v5 receive settings of ConsumeV5.
const (
	v5ReceiveBatch     = 32               // messages per receive (the front ends' most)
	v5InvisibleTime    = 30 * time.Second // a message not acknowledged by then comes back (a duplicate)
	v5AwaitDuration    = 5 * time.Second  // long polling of a receive
	v5ApacheTopicQueue = "NORMAL"         // message.type of the Apache topics
	v5Warmup           = 10_000           // untimed sends (produce) or sends, receives and acks (consume) first
)

var v5ClientOnce sync.Once

// SetupV5Client points the official client's process-wide settings at a bench: plain
// gRPC (the bench's servers serve no TLS) and its logs in a temporary directory instead
// of $HOME/logs/rocketmq, without console output. Once per process: the client reads
// these globals without a lock, so they are set before its first client starts and never
// again (a second ResetLogger raced with a client left running by an earlier test).
func SetupV5Client() {
	v5ClientOnce.Do(func() {
		os.Setenv("rocketmq.client.logRoot", filepath.Join(os.TempDir(), "sluice-bench-rmq5-client-logs"))
		os.Setenv("mq.consoleAppender.enabled", "false")
		rmq.ResetLogger()
		rmq.EnableSsl = false
	})
}

// ProduceV5 sends Config.Messages messages (or for Config.Duration) of Config.Size bytes
// to Config.Topic at the gRPC endpoint through Config.Producers official v5 producers,
// each with Config.Inflight concurrent synchronous Send calls, after an untimed warm-up
// at that concurrency (10000 sends, Config.Messages when fewer; none with a negative
// Config.Warmup), and reports throughput, send latency and CPU per message (the server's: ServerPid).
// The topic must exist. Errors: an invalid Config, a producer that does not start, the
// first failed send.
func ProduceV5(ctx context.Context, cfg Config, endpoint string) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	SetupV5Client()
	var senders []sendFunc
	var stops []func(context.Context) error
	defer func() { _ = shutdownAll(stops) }()
	for range cfg.Producers {
		var p rmq.Producer
		err := startV5(ctx, func() (err error) {
			p, err = rmq.NewProducer(&rmq.Config{Endpoint: endpoint, Credentials: &credentials.SessionCredentials{}}, rmq.WithTopics(cfg.Topic),
				rmq.WithClientFunc(v5Client))
			if err == nil {
				err = p.Start()
			}
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("bench: v5 producer start: %w", err)
		}
		stops = append(stops, func(context.Context) error { return p.GracefulStop() })
		senders = append(senders, func(ctx context.Context, body []byte) error {
			_, err := p.Send(ctx, &rmq.Message{Topic: cfg.Topic, Body: body})
			return err
		})
	}
	if cfg.Warmup > 0 {
		// Untimed, at the timed run's concurrency: a JVM server compiles its hot paths
		// meanwhile.
		warm := max(int64(cfg.Warmup*len(senders)), v5Warmup)
		if cfg.Messages > 0 {
			warm = min(warm, cfg.Messages) // a short run gets a short warm-up
		}
		if _, err := drive(ctx, &cfg, senders, plan{messages: warm, inflight: cfg.Inflight, phase: "warmup"}); err != nil {
			return nil, fmt.Errorf("bench: warm-up: %w", err)
		}
	}
	var meter cpuMeter
	meter.start(cfg.ServerPid)
	res, err := drive(ctx, &cfg, senders, plan{messages: cfg.Messages, duration: cfg.Duration, inflight: cfg.Inflight, phase: "produce"})
	meter.stop(res)
	if err != nil {
		return nil, err
	}
	res.Kind = "produce"
	return res, nil
}

// ConsumeV5 first warms the server up, untimed: 10000 messages (Config.Messages when
// fewer) sent to warmTopic and
// drained by a SimpleConsumer of their own group ("" skips it). Then it prefills topic
// at the gRPC endpoint with Config.Messages messages (official v5 producers, untimed)
// and times one official v5 SimpleConsumer of a fresh group (from its start) draining them:
// Config.ConsumeGoroutines goroutines each receive up to 32 messages (30 s invisible,
// 5 s long polling) and acknowledge each before the next receive. The topics must exist
// and be empty. Duplicates (a message delivered again) are counted apart. Errors: an
// invalid Config, client failures, ctx ending before the drain.
func ConsumeV5(ctx context.Context, cfg Config, endpoint, topic, warmTopic string) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Messages == 0 {
		cfg.Messages = DefaultMessages
	}
	if cfg.ConsumeGoroutines == 0 {
		cfg.ConsumeGoroutines = 20
	}
	cfg.setDefaults()
	if warmTopic != "" {
		wcfg := cfg
		wcfg.Messages, wcfg.ServerPid = min(v5Warmup, cfg.Messages), 0
		if _, err := prefillAndDrainV5(ctx, wcfg, endpoint, warmTopic); err != nil {
			return nil, fmt.Errorf("bench: warm-up: %w", err)
		}
	}
	return prefillAndDrainV5(ctx, cfg, endpoint, topic)
}

// prefillAndDrainV5 sends cfg.Messages messages to topic and times a fresh
// SimpleConsumer group draining them.
func prefillAndDrainV5(ctx context.Context, cfg Config, endpoint, topic string) (*Result, error) {
	pcfg := cfg
	pcfg.Topic, pcfg.Warmup, pcfg.Inflight, pcfg.Duration, pcfg.ServerPid = topic, -1, max(cfg.Inflight, prefillInflight), 0, 0
	if _, err := ProduceV5(ctx, pcfg, endpoint); err != nil {
		return nil, fmt.Errorf("bench: prefill: %w", err)
	}
	group := fmt.Sprintf("SluiceBenchV5_%d", time.Now().UnixNano())
	var c rmq.SimpleConsumer
	err := startV5(ctx, func() (err error) {
		c, err = rmq.NewSimpleConsumer(&rmq.Config{Endpoint: endpoint, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}},
			rmq.WithSimpleAwaitDuration(v5AwaitDuration), rmq.WithClientFuncForSimpleConsumer(v5Client),
			rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
		if err == nil {
			err = c.Start()
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bench: v5 simple consumer start: %w", err)
	}
	n := cfg.Messages
	seen := make([]atomic.Bool, n)
	var distinct, dups, bytes atomic.Int64
	done := make(chan struct{})
	var doneOnce sync.Once
	cfg.Progress.Phase("consume", n)
	var meter cpuMeter
	meter.start(cfg.ServerPid)
	start := time.Now()
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	for range cfg.ConsumeGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				mvs, err := c.Receive(rctx, v5ReceiveBatch, v5InvisibleTime)
				if err != nil {
					if rs, ok := rmq.AsErrRpcStatus(err); ok && rs.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
						continue
					}
					if rctx.Err() == nil {
						fail(fmt.Errorf("receive: %w", err))
					}
					return
				}
				for _, mv := range mvs {
					if err := c.Ack(rctx, mv); err != nil {
						if rctx.Err() == nil {
							fail(fmt.Errorf("ack: %w", err))
						}
						return
					}
					seq := bodySeq(mv.GetBody())
					if seq < 1 || seq > n || !seen[seq-1].CompareAndSwap(false, true) {
						dups.Add(1)
						continue
					}
					bytes.Add(int64(len(mv.GetBody())))
					cfg.Progress.Add(1)
					if distinct.Add(1) == n {
						doneOnce.Do(func() { close(done) })
					}
				}
			}
		}()
	}
	res := &Result{Kind: "consume"}
	var elapsed time.Duration
	select {
	case <-done:
		elapsed = time.Since(start)
		meter.stop(res)
	case <-rctx.Done():
	}
	cancel()
	wg.Wait()
	serr := c.GracefulStop()
	switch {
	case firstErr != nil:
		return nil, fmt.Errorf("bench: drain: %w", firstErr)
	case elapsed == 0:
		return nil, fmt.Errorf("bench: drain stopped after %d of %d messages: %w", distinct.Load(), n, ctx.Err())
	case serr != nil:
		return nil, fmt.Errorf("bench: v5 simple consumer shutdown: %w", serr)
	}
	res.Messages, res.Bytes, res.Elapsed, res.Duplicates = distinct.Load(), bytes.Load(), elapsed, dups.Load()
	return res, nil
}

// v5RequestTimeout replaces the official client's 3 s request timeout (its route
// queries and sends): on a loaded machine a JVM server missed it, which ended the run.
const v5RequestTimeout = 10 * time.Second

// v5Client is the official client's own constructor with v5RequestTimeout.
func v5Client(c *rmq.Config, opts ...rmq.ClientOption) (rmq.Client, error) {
	return rmq.NewClient(c, append(opts, rmq.WithQueryRouteTimeout(v5RequestTimeout))...)
}

// v5StartAttempts bounds the tries to start a v5 client: on a loaded machine a server
// just started (a JVM compiling its code) may not answer the client's first route query
// within the client's 3 s.
const v5StartAttempts = 5

// startV5 runs start (which makes and starts a client) until it succeeds, at most
// v5StartAttempts times, 2 s apart.
func startV5(ctx context.Context, start func() error) error {
	for attempt := 1; ; attempt++ {
		err := start()
		if err == nil || attempt == v5StartAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// apache5Topics is the store configuration of the Apache RocketMQ 5 runs: the topics
// with message.type NORMAL (its proxy creates no topics and routes a topic's type).
func apache5Topics(queues int, topics ...string) (map[string]string, error) {
	table := map[string]any{}
	for _, t := range topics {
		table[t] = map[string]any{"topicName": t, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
			"topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": false, "attributes": map[string]string{"message.type": v5ApacheTopicQueue}}
	}
	b, err := json.Marshal(map[string]any{"topicConfigTable": table, "dataVersion": map[string]any{"timestamp": 1, "counter": 1}})
	if err != nil {
		return nil, err
	}
	return map[string]string{"topics.json": string(b)}, nil
}

// v5Server is one server of a rocketmq5 run, started for one measurement.
type v5Server struct {
	name     string // TargetRocketMQ5 (Apache) or TargetSluice
	endpoint string
	pid      int
	stop     func() error
}

// startApache5 starts Apache RocketMQ 5.3 (name server, proxy+broker in LOCAL mode) with
// topics, and says so.
func startApache5(ctx context.Context, o Options, s *benchSetup, topics []string) (*v5Server, error) {
	files, err := apache5Topics(s.cfg.Queues, topics...)
	if err != nil {
		return nil, err
	}
	heap := o.RocketMQHeap
	r, err := peers.LaunchRocketMQ5(ctx, peers.RocketMQ5Options{
		// the JVM's defaults otherwise (G1, the full JIT): as a deployment runs it
		ProxyJVMFlags:    []string{"-Xms" + heap, "-Xmx" + heap},
		BrokerConf:       map[string]string{"flushDiskType": s.flush, "mappedFileSizeCommitLog": "1073741824"},
		StoreConfigFiles: files,
		StartTimeout:     5 * time.Minute, // a JVM starting on a loaded machine
	})
	if err != nil {
		return nil, fmt.Errorf("start apache rocketmq 5: %w", err)
	}
	fmt.Fprintf(o.Out, "rocketmq5: Apache RocketMQ %s proxy+broker (LOCAL mode, one JVM, pid %d, heap %s, %s) at %s, name server %s (its CPU not counted)\n",
		peers.RocketMQ5Version, r.ProxyPid(), heap, s.flush, r.GRPCAddr, r.NamesrvAddr)
	return &v5Server{name: TargetRocketMQ5, endpoint: r.GRPCAddr, pid: r.ProxyPid(), stop: r.Stop}, nil
}

// startSluice5 starts the Sluice broker with its gRPC front end as its own process,
// creates topics there, and says so.
func startSluice5(ctx context.Context, o Options, s *benchSetup, topics []string) (*v5Server, error) {
	p, err := StartProcess(ProcessConfig{FlushDiskType: s.flush, Command: s.command, GRPC: true})
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		if err := EnsureTopic(ctx, p.NamesrvAddrs(), t, s.cfg.Queues); err != nil {
			_ = shutdownProcess(p)
			return nil, err
		}
	}
	fmt.Fprintf(o.Out, "sluice: broker process %d, gRPC front end at %s (%s)\n", p.Pid(), p.GRPCAddr(), s.flush)
	return &v5Server{name: TargetSluice, endpoint: p.GRPCAddr(), pid: p.Pid(), stop: func() error { return shutdownProcess(p) }}, nil
}

// runVsRocketMQ5 runs one workload (run, given the server's endpoint) against Apache
// RocketMQ 5.3 and then Sluice, --repeat rounds, each server started for its
// measurement and stopped after it (alone on the machine while measured), and prints
// each result, the ratios of each round and, over several rounds, medians and spreads.
func runVsRocketMQ5(ctx context.Context, o Options, s *benchSetup, what string, topics []string,
	run func(ctx context.Context, cfg Config, endpoint string) (*Result, error), print func(io.Writer, *Result)) error {
	if len(s.cfg.NamesrvAddrs) > 0 || o.RocketMQNamesrv != "" {
		return errors.New("--target rocketmq5 starts both servers itself: --namesrv and --rocketmq-namesrv do not apply")
	}
	out := o.Out
	rounds := max(o.Repeat, 1)
	targets := []string{TargetRocketMQ5, TargetSluice}
	var rs []roundResults
	for round := range rounds {
		if rounds > 1 {
			fmt.Fprintf(out, "round %d of %d\n", round+1, rounds)
		}
		rr := roundResults{}
		for _, tgt := range targets {
			var srv *v5Server
			var err error
			if tgt == TargetRocketMQ5 {
				srv, err = startApache5(ctx, o, s, topics)
			} else {
				srv, err = startSluice5(ctx, o, s, topics)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(out, what)
			cfg := s.cfg
			cfg.ServerPid = srv.pid
			res, err := run(ctx, cfg, srv.endpoint)
			stopErr := srv.stop()
			if err != nil {
				return fmt.Errorf("%s: %w", tgt, err)
			}
			if stopErr != nil {
				return fmt.Errorf("%s: stop: %w", tgt, stopErr)
			}
			res.Target = tgt
			s.bar.finish()
			print(out, res)
			if la, err := os.ReadFile("/proc/loadavg"); err == nil {
				fmt.Fprintf(out, "  load avg   %s", la) // the machine's load: other work skews msg/s
			}
			rr.results = append(rr.results, res)
			if tgt == TargetSluice {
				rr.base = res
			}
		}
		printRatio(out, rr.base, rr.results[0])
		rs = append(rs, rr)
	}
	if rounds > 1 {
		printRepeatSummary(out, targets, rs)
	}
	return nil
}
