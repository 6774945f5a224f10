package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/kafka"
)

// franzConsumer is a franz-go consumer group member (kgo with ConsumerGroup, reading
// from the start of partitions the group has no offset for, committing what it polled
// on its own schedule: franz-go's default autocommit) whose poll loop hands every
// record's value to onBody. Stop ends the loop, commits and leaves the group.
type franzConsumer struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	errMu  sync.Mutex
	err    error
}

// startFranzConsumer joins group on topic and starts the poll loop. The loop is the
// consumer's only goroutine of ours; franz-go's own stop with Close.
func startFranzConsumer(cfg *Config, group, topic string, onBody func([]byte)) (*franzConsumer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.KafkaBrokers...), kgo.ClientID("sluice-bench-franz"),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.SessionTimeout(10*time.Second), kgo.HeartbeatInterval(time.Second))
	if err != nil {
		return nil, fmt.Errorf("bench: franz-go consumer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fc := &franzConsumer{cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fc.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachError(func(t string, p int32, err error) {
				if !errors.Is(err, context.Canceled) {
					fc.errMu.Lock()
					fc.err = errors.Join(fc.err, fmt.Errorf("fetch %s/%d: %w", t, p, err))
					fc.errMu.Unlock()
				}
			})
			fs.EachRecord(func(r *kgo.Record) { onBody(r.Value) })
		}
	}()
	return fc, nil
}

// Stop ends the poll loop, commits the offsets polled (bounded by ctx), leaves the
// group and returns the fetch errors seen, if any.
func (fc *franzConsumer) Stop(ctx context.Context) error {
	fc.cancel()
	<-fc.done
	cerr := fc.cl.CommitUncommittedOffsets(ctx)
	if errors.Is(cerr, context.Canceled) {
		cerr = nil
	}
	fc.cl.Close()
	fc.errMu.Lock()
	defer fc.errMu.Unlock()
	return errors.Join(fc.err, cerr)
}

// ConsumeKafkaFranz is ConsumeKafka with a franz-go consumer group instead of package
// kafka's consumer: the same prefill (package kafka's producers) into a fresh topic of
// Config.Queues partitions, then a fresh group of one franz-go client (its poll loop
// handles every record, autocommit) timed from its start until every message was
// handled once. Config.ConsumeGoroutines, ConsumeBatch and Orderly do not apply: a
// franz-go poll loop hands records over in the order of each partition. The topic is
// deleted afterwards.
func ConsumeKafkaFranz(ctx context.Context, cfg Config) (*Result, error) {
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
	topic := kafkaTopic(&cfg, "f")
	group := "sluice-bench-franz-" + strings.TrimPrefix(topic, strings.NewReplacer("%", "_", "|", "_").Replace(cfg.Topic)+"-")
	var res *Result
	err := withKafkaTopic(ctx, &cfg, topic, nil, func() error {
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
		res, err = drainFranz(ctx, &cfg, topic, group)
		return err
	})
	return res, err
}

// drainFranz times a fresh franz-go consumer group reading cfg.Messages messages of
// topic.
func drainFranz(ctx context.Context, cfg *Config, topic, group string) (*Result, error) {
	n := cfg.Messages
	seen := make([]atomic.Bool, n)
	var (
		distinct, dups, bytes int64 // the poll loop is the only writer
		done                  = make(chan struct{})
	)
	onBody := func(b []byte) {
		seq := bodySeq(b)
		if seq < 1 || seq > n || !seen[seq-1].CompareAndSwap(false, true) {
			dups++
			return
		}
		bytes += int64(len(b))
		cfg.Progress.Add(1)
		distinct++
		if distinct == n {
			close(done)
		}
	}
	cfg.Progress.Phase("consume", n)
	var meter cpuMeter
	meter.start(cfg.ServerPid)
	start := time.Now()
	fc, err := startFranzConsumer(cfg, group, topic, onBody)
	if err != nil {
		return nil, err
	}
	res := &Result{Target: TargetKafkaFranz, Kind: "consume"}
	var elapsed time.Duration
	select {
	case <-done:
		elapsed = time.Since(start)
		meter.stop(res)
	case <-ctx.Done():
	}
	serr := shutdownAll([]func(context.Context) error{fc.Stop}) // after Stop the loop no longer writes the counters
	if elapsed == 0 {
		return nil, fmt.Errorf("bench: franz-go drain stopped after %d of %d messages: %w", distinct, n, ctx.Err())
	}
	if serr != nil {
		return nil, fmt.Errorf("bench: franz-go consumer: %w", serr)
	}
	res.Messages, res.Bytes, res.Elapsed, res.Duplicates = distinct, bytes, elapsed, dups
	return res, nil
}

// kafkaRig sets package kafka up for a rate run: a fresh topic of Config.Queues
// partitions, Config.Producers producers of package kafka and one consumer group of
// package kafka (as ConsumeKafka's) handing every body to onBody.
func kafkaRig(ctx context.Context, cfg *Config, onBody func([]byte)) (*rateRig, error) {
	return kafkaRigWith(ctx, cfg, onBody, false)
}

// franzRig is kafkaRig with franz-go producers (linger 0) and a franz-go consumer group.
func franzRig(ctx context.Context, cfg *Config, onBody func([]byte)) (*rateRig, error) {
	return kafkaRigWith(ctx, cfg, onBody, true)
}

func kafkaRigWith(ctx context.Context, cfg *Config, onBody func([]byte), franz bool) (*rateRig, error) {
	if len(cfg.KafkaBrokers) == 0 {
		return nil, errors.New("bench: KafkaBrokers is empty: a Kafka run needs a cluster")
	}
	topic := kafkaTopic(cfg, "r")
	group := "sluice-bench-rate-" + strings.TrimPrefix(topic, strings.NewReplacer("%", "_", "|", "_").Replace(cfg.Topic)+"-")
	var extra []string
	if !franz {
		extra = []string{kafka.RetryTopic(group, 1), kafka.DLQTopic(group)}
	}
	del, err := createKafkaTopic(ctx, cfg, topic)
	if err != nil {
		return nil, err
	}
	var stops []func(context.Context) error
	closeAll := func() error {
		err := shutdownAll(stops)
		del(extra...)
		return err
	}
	var stopConsumer func(context.Context) error
	if franz {
		var fc *franzConsumer
		if fc, err = startFranzConsumer(cfg, group, topic, onBody); err == nil {
			stopConsumer = fc.Stop
		}
	} else {
		stopConsumer, err = startKafkaConsumer(ctx, cfg, topic, group, onBody)
	}
	if err != nil {
		return nil, errors.Join(err, closeAll())
	}
	var asyncs []asyncSendFunc
	var stopProducers func(context.Context) error
	if franz {
		_, asyncs, stopProducers, err = startFranzProducers(cfg, cfg.Producers, topic)
	} else {
		_, asyncs, stopProducers, err = startKafkaProducers(cfg, cfg.Producers, topic)
	}
	if err != nil {
		stops = []func(context.Context) error{stopConsumer}
		return nil, errors.Join(err, closeAll())
	}
	stops = []func(context.Context) error{stopProducers, stopConsumer} // senders before receivers
	return &rateRig{asyncs: asyncs, close: closeAll}, nil
}
