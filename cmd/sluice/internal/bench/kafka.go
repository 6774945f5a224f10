package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/message"
)

// TargetKafka names a run against Kafka through package kafka.
const TargetKafka = "kafka"

// EmbeddedKafka is an in-process Kafka-protocol cluster (kfake) for Kafka runs without
// an external cluster. Its CPU is part of the bench process's.
type EmbeddedKafka struct{ c *kfake.Cluster }

// StartEmbeddedKafka starts a one-broker kfake cluster on a free loopback port.
func StartEmbeddedKafka() (*EmbeddedKafka, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		return nil, fmt.Errorf("bench: embedded Kafka: %w", err)
	}
	return &EmbeddedKafka{c: c}, nil
}

// Brokers returns the bootstrap addresses.
func (e *EmbeddedKafka) Brokers() []string { return e.c.ListenAddrs() }

// Shutdown stops the cluster.
func (e *EmbeddedKafka) Shutdown(context.Context) error {
	e.c.Close()
	return nil
}

// kafkaTopic returns a fresh Kafka topic name for this run: cfg.Topic ('%' and '|'
// replaced) with suffix and a time stamp.
func kafkaTopic(cfg *Config, suffix string) string {
	clean := strings.NewReplacer("%", "_", "|", "_").Replace(cfg.Topic)
	return fmt.Sprintf("%s-%s%d", clean, suffix, time.Now().UnixNano())
}

// withKafkaTopic creates topic with cfg.Queues partitions, runs f and deletes the topic
// (and extra topics, e.g. a consumer group's retry topics) afterwards.
func withKafkaTopic(ctx context.Context, cfg *Config, topic string, extra []string, f func() error) error {
	del, err := createKafkaTopic(ctx, cfg, topic)
	if err != nil {
		return err
	}
	defer del(extra...)
	return f()
}

// createKafkaTopic creates topic with cfg.Queues partitions and returns the function
// that deletes it and the extra topics it is given (a failure is logged, not returned).
func createKafkaTopic(ctx context.Context, cfg *Config, topic string) (del func(extra ...string), err error) {
	tr := &kafkago.Transport{DialTimeout: 5 * time.Second}
	cl := &kafkago.Client{Addr: kafkago.TCP(cfg.KafkaBrokers...), Timeout: 10 * time.Second, Transport: tr}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = kafka.EnsureTopics(cctx, cl, cfg.Queues, -1, topic)
	cancel()
	if err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("bench: %w", err)
	}
	return func(extra ...string) {
		defer tr.CloseIdleConnections()
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cl.DeleteTopics(dctx, &kafkago.DeleteTopicsRequest{Topics: append([]string{topic}, extra...)}); err != nil {
			cfg.Logger.Warn("bench: could not delete the Kafka topics", "topic", topic, "err", err)
		}
	}, nil
}

// startKafkaProducers starts n package-kafka producers (each its own connections).
func startKafkaProducers(cfg *Config, n int, topic string) ([]sendFunc, []asyncSendFunc, func(ctx context.Context) error, error) {
	var ps []*kafka.Producer
	stop := func(ctx context.Context) error {
		var errs []error
		for _, p := range ps {
			errs = append(errs, p.Shutdown(ctx))
		}
		return errors.Join(errs...)
	}
	var senders []sendFunc
	var asyncs []asyncSendFunc
	for range n {
		p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: cfg.KafkaBrokers, ClientID: "sluice-bench", Logger: cfg.Logger})
		if err != nil {
			return nil, nil, nil, errors.Join(fmt.Errorf("bench: kafka producer: %w", err), shutdownAll([]func(context.Context) error{stop}))
		}
		ps = append(ps, p)
		if err := p.Start(context.Background()); err != nil { // bounded by the producer's DialTimeout
			return nil, nil, nil, errors.Join(fmt.Errorf("bench: kafka producer: %w", err), shutdownAll([]func(context.Context) error{stop}))
		}
		senders = append(senders, func(ctx context.Context, body []byte) error {
			_, err := p.Send(ctx, message.NewMessage(topic, body))
			return err
		})
		asyncs = append(asyncs, func(ctx context.Context, body []byte, done func(error)) error {
			return p.SendAsync(ctx, message.NewMessage(topic, body), func(_ *message.SendResult, err error) { done(err) })
		})
	}
	return senders, asyncs, stop, nil
}

// ProduceKafka is Produce against Kafka: the same workers (Config.Producers producers of
// package kafka with its defaults, each with its own franz-go clients and connections;
// Config.Inflight concurrent Send calls each, or with Config.Async a window of
// SendAsync) send to a fresh topic of Config.Queues partitions on Config.KafkaBrokers,
// acknowledged by all in-sync replicas, no linger; the topic is deleted afterwards.
// ModeOneway and ModeBatch are Sluice-only. Errors: an invalid Config, no KafkaBrokers,
// topic creation and the first failed send.
func ProduceKafka(ctx context.Context, cfg Config) (*Result, error) {
	return produceKafka(ctx, cfg, TargetKafka, startKafkaProducers)
}

// TargetKafkaFranz names a produce run against Kafka through franz-go (kgo), the client
// Go teams pick, with its defaults, beside package kafka's.
const TargetKafkaFranz = "kafka-franz"

// ProduceKafkaFranz is ProduceKafka through franz-go clients with their defaults (all
// in-sync replicas acknowledge, idempotent writes) but no linger (franz-go's default
// is 10 ms, which a window of records in flight would wait out on every batch): a
// partition's records go as soon as its connection takes another request.
// Config.Inflight concurrent ProduceSync calls per client, or with Config.Async a window
// of Produce calls.
func ProduceKafkaFranz(ctx context.Context, cfg Config) (*Result, error) {
	return produceKafka(ctx, cfg, TargetKafkaFranz, startFranzProducers)
}

// startFranzProducers starts n franz-go clients producing to topic.
func startFranzProducers(cfg *Config, n int, topic string) ([]sendFunc, []asyncSendFunc, func(ctx context.Context) error, error) {
	var cls []*kgo.Client
	stop := func(ctx context.Context) error {
		var errs []error
		for _, cl := range cls {
			errs = append(errs, cl.Flush(ctx))
			cl.Close()
		}
		return errors.Join(errs...)
	}
	var senders []sendFunc
	var asyncs []asyncSendFunc
	for range n {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.KafkaBrokers...), kgo.ClientID("sluice-bench-franz"), kgo.ProducerLinger(0))
		if err != nil {
			return nil, nil, nil, errors.Join(fmt.Errorf("bench: franz-go client: %w", err), stop(context.Background()))
		}
		cls = append(cls, cl)
		senders = append(senders, func(ctx context.Context, body []byte) error {
			return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: body}).FirstErr()
		})
		asyncs = append(asyncs, func(ctx context.Context, body []byte, done func(error)) error {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: body}, func(_ *kgo.Record, err error) { done(err) })
			return nil
		})
	}
	return senders, asyncs, stop, nil
}

// produceKafka runs ProduceKafka's workload with the producers start makes.
func produceKafka(ctx context.Context, cfg Config, target string,
	start func(cfg *Config, n int, topic string) ([]sendFunc, []asyncSendFunc, func(ctx context.Context) error, error)) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if len(cfg.KafkaBrokers) == 0 {
		return nil, errors.New("bench: KafkaBrokers is empty: a Kafka run needs a cluster")
	}
	if cfg.Mode == ModeOneway || cfg.Mode == ModeBatch {
		return nil, fmt.Errorf("bench: Mode %s is Sluice-only", cfg.Mode)
	}
	topic := kafkaTopic(&cfg, "p")
	var res *Result
	err := withKafkaTopic(ctx, &cfg, topic, nil, func() error {
		senders, asyncs, stop, err := start(&cfg, cfg.Producers, topic)
		if err != nil {
			return err
		}
		defer func() { _ = shutdownAll([]func(context.Context) error{stop}) }()
		if err := warmup(ctx, &cfg, senders); err != nil {
			return err
		}
		pl := plan{messages: cfg.Messages, duration: cfg.Duration, inflight: cfg.Inflight, phase: "produce"}
		var meter cpuMeter
		meter.start(cfg.ServerPid)
		if cfg.Async {
			res, err = driveAsync(ctx, &cfg, asyncs, pl)
		} else {
			res, err = drive(ctx, &cfg, senders, pl)
		}
		if err != nil {
			return err
		}
		meter.stop(res)
		res.Target = target
		return nil
	})
	return res, err
}

// ConsumeKafka is Consume against Kafka: it prefills a fresh topic of Config.Queues
// partitions with Config.Messages messages, then times a fresh consumer group of
// package kafka (one goroutine per partition, ConsumeGoroutines/Queues handler calls
// at once per partition, at least 1; Config.ConsumeBatch records per call; Orderly if
// set) draining them, committing as it goes. The topic and the group's retry and
// dead-letter topics are deleted afterwards.
func ConsumeKafka(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Messages == 0 {
		cfg.Messages = DefaultMessages
	}
	cfg.setDefaults()
	if len(cfg.KafkaBrokers) == 0 {
		return nil, errors.New("bench: KafkaBrokers is empty: a Kafka run needs a cluster")
	}
	topic := kafkaTopic(&cfg, "c")
	group := "sluice-bench-" + strings.TrimPrefix(topic, strings.NewReplacer("%", "_", "|", "_").Replace(cfg.Topic)+"-")
	extra := []string{kafka.RetryTopic(group, 1), kafka.DLQTopic(group)}
	var res *Result
	err := withKafkaTopic(ctx, &cfg, topic, extra, func() error {
		senders, _, stop, err := startKafkaProducers(&cfg, cfg.Producers, topic)
		if err != nil {
			return err
		}
		_, err = drive(ctx, &cfg, senders, plan{messages: cfg.Messages, inflight: max(cfg.Inflight, prefillInflight), phase: "prefill"})
		if serr := shutdownAll([]func(context.Context) error{stop}); serr != nil && err == nil {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("bench: prefill: %w", err)
		}
		res, err = drainKafka(ctx, &cfg, topic, group)
		return err
	})
	return res, err
}

// newKafkaConsumer makes (without starting) a consumer group member of package kafka
// on topic: ConsumeGoroutines/Queues handler calls at once per partition (at least 1),
// ConsumeBatch records per call, Orderly if set, one retry level of 1 s; the handler
// hands every body to onBody.
func newKafkaConsumer(cfg *Config, topic, group string, onBody func([]byte)) (*kafka.Consumer, error) {
	c, err := kafka.NewConsumer(kafka.Config{
		Brokers: cfg.KafkaBrokers, Group: group, ClientID: "sluice-bench", Orderly: cfg.Orderly,
		ConsumeWorkers:             max(1, cfg.ConsumeGoroutines/max(cfg.Queues, 1)),
		ConsumeMessageBatchMaxSize: max(cfg.ConsumeBatch, 1),
		MaxInFlight:                max(kafka.DefaultMaxInFlight, cfg.ConsumeBatch),
		RetrySchedule:              []time.Duration{time.Second},
		HeartbeatInterval:          time.Second, SessionTimeout: 10 * time.Second, JoinGroupBackoff: 200 * time.Millisecond,
		FetchMaxWait: 100 * time.Millisecond, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: kafka consumer: %w", err)
	}
	err = c.Subscribe(topic, message.SubscribeAll, func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			onBody(m.Body)
		}
		return message.ConsumeSuccess, nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: subscribe: %w", err)
	}
	return c, nil
}

// startKafkaConsumer starts newKafkaConsumer's consumer and returns its Shutdown.
func startKafkaConsumer(ctx context.Context, cfg *Config, topic, group string, onBody func([]byte)) (func(context.Context) error, error) {
	c, err := newKafkaConsumer(cfg, topic, group, onBody)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: kafka consumer start: %w", err)
	}
	return c.Shutdown, nil
}

// drainKafka times a fresh consumer group reading cfg.Messages messages of topic.
func drainKafka(ctx context.Context, cfg *Config, topic, group string) (*Result, error) {
	n := cfg.Messages
	seen := make([]atomic.Bool, n)
	var (
		distinct, dups, bytes atomic.Int64
		doneOnce              sync.Once
		done                  = make(chan struct{})
	)
	c, err := newKafkaConsumer(cfg, topic, group, func(b []byte) {
		seq := bodySeq(b)
		if seq < 1 || seq > n || !seen[seq-1].CompareAndSwap(false, true) {
			dups.Add(1)
			return
		}
		bytes.Add(int64(len(b)))
		cfg.Progress.Add(1)
		if distinct.Add(1) == n {
			doneOnce.Do(func() { close(done) })
		}
	})
	if err != nil {
		return nil, err
	}
	cfg.Progress.Phase("consume", n)
	var meter cpuMeter
	meter.start(cfg.ServerPid)
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: kafka consumer start: %w", err)
	}
	var elapsed time.Duration
	res := &Result{Target: TargetKafka, Kind: "consume"}
	select {
	case <-done:
		elapsed = time.Since(start)
		meter.stop(res)
	case <-ctx.Done():
	}
	serr := shutdownAll([]func(context.Context) error{c.Shutdown})
	if elapsed == 0 {
		return nil, fmt.Errorf("bench: kafka drain stopped after %d of %d messages: %w", distinct.Load(), n, ctx.Err())
	}
	if serr != nil {
		return nil, fmt.Errorf("bench: kafka consumer shutdown: %w", serr)
	}
	res.Messages, res.Bytes, res.Elapsed, res.Duplicates = distinct.Load(), bytes.Load(), elapsed, dups.Load()
	return res, nil
}
