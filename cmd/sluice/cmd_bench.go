package main

import (
	"context"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/cmd/sluice/internal/bench"
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
  sluice bench produce --target rocketmq5 --inflight 16 --messages 100000 --repeat 3
  sluice bench consume --target rocketmq5 --messages 100000 --repeat 3
  sluice bench consume --messages 200000                   # prefill, then time a push consumer draining it
  sluice bench produce --target sluice,kafka --inflight 16 # Sluice, then Kafka (package kafka), and the ratio
  sluice bench consume --target sluice,kafka --kafka 127.0.0.1:9092
  sluice bench consume --target kafka,kafka-franz          # package kafka's consumer beside franz-go's group
  sluice bench produce --target sluice,kafka,kafka-franz --rate 50%,80%  # latency at steady rates

Kafka runs (--target kafka, or in a list such as sluice,kafka) go to the cluster at
--kafka, or without it to an embedded in-process Kafka-protocol cluster (kfake, whose
CPU is then part of this process's): producers of package kafka (franz-go, all in-sync
replicas acknowledging, no linger) and a consumer group of package kafka, on a fresh topic of --queues partitions deleted afterwards.

--target rocketmq5 runs the official RocketMQ 5 Go client (v5.1.4, gRPC) against Apache
RocketMQ 5.3 (name server and proxy+broker in LOCAL mode from the peers' jars, heap
--rocketmq-heap) and then against "sluice broker --grpc-listen" as its own process, each
started for its measurement and alone while measured, --repeat rounds: produce sends
with --inflight synchronous Sends per producer, consume prefills --messages and times one
SimpleConsumer whose --consume-goroutines goroutines receive 32 at a time and acknowledge
each. Each result is followed by the machine's load average.`,
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
		RunE:  func(cmd *cobra.Command, _ []string) error { return runBench(cmd, bench.RunProduce) },
	}
	produce.Flags().String("target", bench.TargetSluice, "what to measure: sluice, jetstream (NATS JetStream), kafka (package kafka), kafka-franz (franz-go, linger 0), both (sluice,jetstream), a comma-separated list of these (ratios against sluice), or rocketmq alone (Apache RocketMQ, then Sluice as its own process, with the ratios), or rocketmq5 alone (the official RocketMQ 5 Go client against Apache RocketMQ 5.3, then Sluice's gRPC front end)")
	addRocketMQFlags(produce)
	produce.Flags().Int("repeat", 1, "run the targets this many rounds, alternating them, and print each one's median and spread (lowest-highest) of msg/s and CPU per message, and the median ratios")
	produce.Flags().String("rate", "", "send at steady rates instead of as fast as possible, each target in turn on a fresh topic with a consumer reading it: msg/s (20000, 20k) or percentages of each target's saturation, measured first (50%,80%), comma-separated; reports p50/p99/p99.9 of send and end-to-end latency from each message's due time (window: --inflight, default 64)")
	produce.Flags().String("nats-url", bench.DefaultNatsURL, "NATS server for --target jetstream|both")
	produce.Flags().Bool("async", false, "send asynchronously: each producer keeps --inflight sends outstanding with SendAsync (JetStream: PublishAsync); the same as --mode async")
	produce.Flags().String("mode", "", "how to send: sync (SendSync; default), async (SendAsync window of --inflight), oneway (SendOneway; reports how many were stored) or batch (SendBatch of --batch-size)")
	produce.Flags().Int("batch-size", bench.DefaultBatchSize, "messages per SendBatch with --mode batch")
	produce.Flags().Bool("auto-batch", false, "Sluice target: turn on the producer's automatic batching of async sends (producer.Config.AutoBatch)")
	produce.Flags().Duration("linger", 0, "with --auto-batch: producer.Config.AutoBatchLinger (0: coalesce only while a request of the queue is in flight; at most 1s)")

	consume := &cobra.Command{
		Use:   "consume",
		Short: "Prefill --messages messages, then report how fast a push consumer drains them",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runBench(cmd, bench.RunConsume) },
	}
	consume.Flags().Int("consume-goroutines", 20, "push consumer handler goroutines (ConsumeGoroutines; Kafka: divided among the partitions)")
	consume.Flags().Bool("orderly", false, "consume orderly (broker queue locks, one worker per queue) instead of concurrently")
	consume.Flags().Int("consume-batch", 1, "most messages per handler call (consumeMessageBatchMaxSize)")
	consume.Flags().Int("pull-batch", 32, "most messages per pull (pullBatchSize)")
	consume.Flags().String("target", bench.TargetSluice, "what to measure: sluice, jetstream (a durable pull consumer, explicit acks, same handler count), kafka (a consumer group of package kafka), kafka-franz (a franz-go consumer group), both (sluice,jetstream), a comma-separated list of these (ratios against sluice), or rocketmq alone (Apache RocketMQ, then Sluice as its own process, with the ratio), or rocketmq5 alone (a SimpleConsumer of the official RocketMQ 5 Go client receiving and acknowledging, Apache RocketMQ 5.3 then Sluice's gRPC front end)")
	consume.Flags().Int("repeat", 1, "with --target rocketmq5: run both servers this many rounds, alternating them, and print medians and spreads")
	consume.Flags().String("nats-url", bench.DefaultNatsURL, "NATS server for --target jetstream|both")
	addRocketMQFlags(consume)
	scale := &cobra.Command{
		Use:   "scale",
		Short: "Many producers and consumers over many topics, some restarting: errors, broker RSS and p99 against a small run",
		Long: `Run --baseline-clients producers and as many consumers, then --clients of each, over
--topics topics of --queues queues at a steady total --rate, each run for --duration (default 30s);
during the second run --restarts clients (producers and consumers alternately) stop and start
again. The broker runs as its own process. The scenario fails (exit status 1) on any send or
restart error, a message that never reaches a handler, a broker peak RSS of 500 MiB or more,
or a send or end-to-end p99 more than 3x the baseline's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var c bench.ScaleConfig
			f := cmd.Flags()
			c.Clients, _ = f.GetInt("clients")
			c.Baseline, _ = f.GetInt("baseline-clients")
			c.Topics, _ = f.GetInt("topics")
			c.Restarts, _ = f.GetInt("restarts")
			c.Rate, _ = f.GetFloat64("rate")
			return runBench(cmd, func(ctx context.Context, o bench.Options) error { return bench.RunScaleBench(ctx, o, c) })
		},
	}
	scale.Flags().Int("clients", bench.DefaultScaleClients, "producers, and as many consumers, of the full run (each consumer its own group over its share of the topics)")
	scale.Flags().Int("baseline-clients", bench.DefaultScaleBaseline, "producers and consumers of the baseline run (no restarts) the full run's p99 is compared with")
	scale.Flags().Int("topics", bench.DefaultScaleTopics, "topic count (created first)")
	scale.Flags().Int("restarts", bench.DefaultScaleRestarts, "clients restarted during the full run, producers and consumers alternately, spread over --duration")
	scale.Flags().Float64("rate", bench.DefaultScaleRate, "total send rate of each run in msg/s")
	cmd.AddCommand(produce, consume, scale)
	return cmd
}

// addRocketMQFlags adds the flags of --target rocketmq to a bench subcommand.
func addRocketMQFlags(cmd *cobra.Command) {
	cmd.Flags().String("rocketmq-namesrv", "", "with --target rocketmq: name server of a running Apache RocketMQ (default: start one from the peers' jars, see bash .ci/peers)")
	cmd.Flags().String("rocketmq-heap", "1g", "with --target rocketmq or rocketmq5: heap (-Xms and -Xmx) of the Apache RocketMQ JVMs it starts (rocketmq5: of the proxy+broker JVM)")
}

// benchBrokerCommand builds the child broker's command; nil runs this executable.
// Tests set it to run their own binary in its child mode.
var benchBrokerCommand func(args []string) *exec.Cmd

// runBench reads the flags of bench produce|consume into bench.Options and runs run.
func runBench(cmd *cobra.Command, run func(context.Context, bench.Options) error) error {
	f := cmd.Flags()
	o := bench.Options{Out: cmd.OutOrStdout(), Err: cmd.ErrOrStderr(), Changed: f.Changed, BrokerCommand: benchBrokerCommand}
	o.Size, _ = f.GetInt("size")
	o.Producers, _ = f.GetInt("producers")
	o.Inflight, _ = f.GetInt("inflight")
	o.Flush, _ = f.GetString("flush")
	o.Duration, _ = f.GetDuration("duration")
	o.Messages, _ = f.GetInt64("messages")
	o.Broker, _ = f.GetString("broker")
	o.Namesrv, _ = f.GetString("namesrv")
	o.Topic, _ = f.GetString("topic")
	o.Queues, _ = f.GetInt("queues")
	o.Progress, _ = f.GetBool("progress")
	o.CPUProfile, _ = f.GetString("cpuprofile")
	o.Kafka, _ = f.GetString("kafka")
	o.Target, _ = f.GetString("target")
	o.NatsURL, _ = f.GetString("nats-url")
	o.RocketMQNamesrv, _ = f.GetString("rocketmq-namesrv")
	o.RocketMQHeap, _ = f.GetString("rocketmq-heap")
	o.Async, _ = f.GetBool("async")
	o.Mode, _ = f.GetString("mode")
	o.BatchSize, _ = f.GetInt("batch-size")
	o.AutoBatch, _ = f.GetBool("auto-batch")
	o.Linger, _ = f.GetDuration("linger")
	o.Repeat, _ = f.GetInt("repeat")
	o.Rate, _ = f.GetString("rate")
	o.ConsumeGoroutines, _ = f.GetInt("consume-goroutines")
	o.Orderly, _ = f.GetBool("orderly")
	o.ConsumeBatch, _ = f.GetInt("consume-batch")
	o.PullBatch, _ = f.GetInt("pull-batch")
	if v, _ := f.GetBool("verbose"); v {
		l, err := newLogger(cmd)
		if err != nil {
			return err
		}
		o.Logger = l
	}
	return run(cmd.Context(), o)
}
