package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// producerGroup is the producer group of every bench producer.
const producerGroup = "SluiceBenchProducer"

// startProducers starts n Sluice producers and returns a send function for each and a
// stop function shutting them all down. With async set the send functions are also
// returned as asynchronous ones (SendAsync).
func startProducers(cfg *Config, n int, topic string) ([]sendFunc, func(ctx context.Context) error, error) {
	s, _, stop, err := startProducersAsync(cfg, n, topic)
	return s, stop, err
}

func startProducersAsync(cfg *Config, n int, topic string) ([]sendFunc, []asyncSendFunc, func(ctx context.Context) error, error) {
	var ps []*producer.Producer
	stop := func(ctx context.Context) error {
		var errs []error
		for _, p := range ps {
			errs = append(errs, p.Shutdown(ctx))
		}
		return errors.Join(errs...)
	}
	senders := make([]sendFunc, 0, n)
	asyncs := make([]asyncSendFunc, 0, n)
	for range n {
		p, err := producer.New(producer.Config{NamesrvAddrs: cfg.NamesrvAddrs, Group: producerGroup, Logger: cfg.Logger,
			AutoBatch: cfg.AutoBatch, AutoBatchLinger: cfg.AutoBatchLinger})
		if err == nil {
			err = p.Start(context.Background())
		}
		if err != nil {
			if p != nil {
				ps = append(ps, p)
			}
			return nil, nil, nil, errors.Join(fmt.Errorf("bench: %w", err), shutdownAll([]func(context.Context) error{stop}))
		}
		ps = append(ps, p)
		switch cfg.Mode {
		case ModeOneway:
			senders = append(senders, func(ctx context.Context, body []byte) error {
				return p.SendOneway(ctx, message.NewMessage(topic, body))
			})
		case ModeBatch:
			senders = append(senders, func(ctx context.Context, body []byte) error {
				msgs := make([]*message.Message, cfg.BatchSize)
				for i := range msgs {
					msgs[i] = message.NewMessage(topic, body)
				}
				_, err := p.SendBatch(ctx, msgs)
				return err
			})
		default:
			senders = append(senders, func(ctx context.Context, body []byte) error {
				_, err := p.SendSync(ctx, message.NewMessage(topic, body))
				return err
			})
		}
		asyncs = append(asyncs, func(ctx context.Context, body []byte, done func(error)) error {
			return p.SendAsync(ctx, message.NewMessage(topic, body), func(_ *message.SendResult, err error) { done(err) })
		})
	}
	return senders, asyncs, stop, nil
}

// Produce sends Config.Messages messages (or for Config.Duration) to Config.Topic
// through Config.Producers Sluice producers with Config.Inflight concurrent SendSync
// calls each (with Config.Async: a window of Config.Inflight SendAsync calls each),
// after an untimed warm-up, and reports throughput and send latency. The
// topic is created first (UPDATE_AND_CREATE_TOPIC with Config.Queues queues on every
// master). Errors: an invalid Config, no NamesrvAddrs, topic creation, and the first
// failed send (which stops the run).
func Produce(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if len(cfg.NamesrvAddrs) == 0 {
		return nil, errors.New("bench: NamesrvAddrs is empty: a Sluice run needs a name server")
	}
	if err := EnsureTopic(ctx, cfg.NamesrvAddrs, cfg.Topic, cfg.Queues); err != nil {
		return nil, err
	}
	senders, asyncs, stop, err := startProducersAsync(&cfg, cfg.Producers, cfg.Topic)
	if err != nil {
		return nil, err
	}
	var storedBefore int64
	var meter cpuMeter
	res, err := func() (*Result, error) {
		if err := warmup(ctx, &cfg, senders); err != nil {
			return nil, err
		}
		meter.start(cfg.ServerPid)
		pl := plan{messages: cfg.Messages, duration: cfg.Duration, inflight: cfg.Inflight, phase: "produce"}
		switch cfg.Mode {
		case ModeAsync:
			return driveAsync(ctx, &cfg, asyncs, pl)
		case ModeBatch:
			pl.messages = (cfg.Messages + int64(cfg.BatchSize) - 1) / int64(cfg.BatchSize) // calls
			res, err := drive(ctx, &cfg, senders, pl)
			if err == nil {
				res.Messages *= int64(cfg.BatchSize)
				res.Bytes *= int64(cfg.BatchSize)
				res.Kind = "produce (batches of " + strconv.Itoa(cfg.BatchSize) + ", latency per batch)"
			}
			return res, err
		case ModeOneway:
			if storedBefore, err = StoredMessages(ctx, cfg.NamesrvAddrs, cfg.Topic); err != nil {
				return nil, err
			}
		}
		return drive(ctx, &cfg, senders, pl)
	}()
	if err == nil && cfg.Mode == ModeOneway {
		// One-way sends get no answer: count what the broker stored, once it settles.
		var after int64
		for i := 0; i < 50; i++ {
			if after, err = StoredMessages(ctx, cfg.NamesrvAddrs, cfg.Topic); err != nil || after-storedBefore >= res.Messages {
				break
			}
			time.Sleep(20 * time.Millisecond) // bounded wait for in-flight one-way sends to land
		}
		if res != nil {
			res.Stored = after - storedBefore
			res.Kind = "produce (oneway)"
		}
	}
	meter.stop(res)
	if serr := shutdownAll([]func(context.Context) error{stop}); serr != nil && err == nil {
		err = fmt.Errorf("bench: producer shutdown: %w", serr)
	}
	if err != nil {
		return nil, err
	}
	res.Target = TargetSluice
	return res, nil
}

// Consume measures a push consumer draining a backlog: it creates a fresh topic
// (Config.Topic + "_c<unix ns>", Config.Queues queues), prefills it with
// Config.Messages messages (default 100000) through Config.Producers producers with at
// least 16 concurrent sends each (untimed), then starts a PushConsumer of a fresh
// consumer group from the first offset and times Start until every message has been
// handled once. The topic is deleted afterwards. The handler only counts; duplicates
// are counted apart. Errors: an invalid Config, no NamesrvAddrs, topic, prefill or
// consumer failures, and ctx ending before the drain completes.
func Consume(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Messages == 0 {
		cfg.Messages = DefaultMessages
	}
	cfg.setDefaults()
	if len(cfg.NamesrvAddrs) == 0 {
		return nil, errors.New("bench: NamesrvAddrs is empty: a Sluice run needs a name server")
	}
	stamp := time.Now().UnixNano()
	topic := fmt.Sprintf("%s_c%d", cfg.Topic, stamp)
	group := fmt.Sprintf("SluiceBenchConsumer_%d", stamp)
	if err := EnsureTopic(ctx, cfg.NamesrvAddrs, topic, cfg.Queues); err != nil {
		return nil, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeleteTopic(dctx, cfg.NamesrvAddrs, topic); err != nil {
			cfg.Logger.Warn("bench: could not delete the consume topic", "topic", topic, "err", err)
		}
	}()

	senders, stop, err := startProducers(&cfg, cfg.Producers, topic)
	if err != nil {
		return nil, err
	}
	_, err = drive(ctx, &cfg, senders, plan{messages: cfg.Messages, inflight: max(cfg.Inflight, prefillInflight), phase: "prefill"})
	if serr := shutdownAll([]func(context.Context) error{stop}); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return nil, fmt.Errorf("bench: prefill: %w", err)
	}
	return drain(ctx, &cfg, topic, group)
}

// drain times a fresh push consumer group reading cfg.Messages messages of topic.
func drain(ctx context.Context, cfg *Config, topic, group string) (*Result, error) {
	n := cfg.Messages
	seen := make([]atomic.Bool, n)
	var (
		distinct, dups, bytes atomic.Int64
		doneOnce              sync.Once
		done                  = make(chan struct{})
	)
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs:               cfg.NamesrvAddrs,
		Group:                      group,
		ConsumeFromWhere:           consumer.ConsumeFromFirstOffset,
		ConsumeGoroutines:          cfg.ConsumeGoroutines,
		Orderly:                    cfg.Orderly,
		ConsumeMessageBatchMaxSize: cfg.ConsumeBatch,
		PullBatchSize:              cfg.PullBatch,
		Logger:                     cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: consumer: %w", err)
	}
	err = c.Subscribe(topic, message.SubscribeAll, func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			seq := bodySeq(m.Body)
			if seq < 1 || seq > n || !seen[seq-1].CompareAndSwap(false, true) {
				dups.Add(1)
				continue
			}
			bytes.Add(int64(len(m.Body)))
			cfg.Progress.Add(1)
			if distinct.Add(1) == n {
				doneOnce.Do(func() { close(done) })
			}
		}
		return message.ConsumeSuccess, nil
	})
	if err != nil {
		_ = shutdownAll([]func(context.Context) error{c.Shutdown})
		return nil, fmt.Errorf("bench: subscribe: %w", err)
	}
	cfg.Progress.Phase("consume", n)
	var meter cpuMeter
	meter.start(cfg.ServerPid)
	start := time.Now()
	if err := c.Start(context.Background()); err != nil {
		_ = shutdownAll([]func(context.Context) error{c.Shutdown})
		return nil, fmt.Errorf("bench: consumer start: %w", err)
	}
	var elapsed time.Duration
	res := &Result{Target: TargetSluice, Kind: "consume"}
	select {
	case <-done:
		elapsed = time.Since(start)
		meter.stop(res)
	case <-ctx.Done():
	}
	serr := shutdownAll([]func(context.Context) error{c.Shutdown})
	if elapsed == 0 {
		return nil, fmt.Errorf("bench: drain stopped after %d of %d messages: %w", distinct.Load(), n, ctx.Err())
	}
	if serr != nil {
		return nil, fmt.Errorf("bench: consumer shutdown: %w", serr)
	}
	res.Messages, res.Bytes, res.Elapsed, res.Duplicates = distinct.Load(), bytes.Load(), elapsed, dups.Load()
	return res, nil
}

// StoredMessages sums the max offsets of topic's queues (GET_MAX_OFFSET, RocketMQ request
// code 30): how many messages the brokers have stored in it.
func StoredMessages(ctx context.Context, namesrvAddrs []string, topic string) (int64, error) {
	a, err := admin.New(admin.Config{NamesrvAddrs: namesrvAddrs, Logger: discard})
	if err != nil {
		return 0, err
	}
	defer a.Close()
	qs, err := a.ConsumerOffsets(ctx, producerGroup+"_Counter", topic)
	if err != nil {
		return 0, fmt.Errorf("bench: count stored messages: %w", err)
	}
	var n int64
	for _, q := range qs {
		n += q.Max
	}
	return n, nil
}

// sluiceRig sets a Sluice target up for a rate run: a fresh topic (Config.Topic +
// "_r<unix ns>", Config.Queues queues), Config.Producers producers sending
// asynchronously to it and a push consumer of a fresh group reading it from the first
// offset (Config.ConsumeGoroutines handlers) that hands every body to onBody. close
// stops both and deletes the topic.
func sluiceRig(ctx context.Context, cfg *Config, onBody func([]byte)) (*rateRig, error) {
	if len(cfg.NamesrvAddrs) == 0 {
		return nil, errors.New("bench: NamesrvAddrs is empty: a Sluice run needs a name server")
	}
	stamp := time.Now().UnixNano()
	topic := fmt.Sprintf("%s_r%d", cfg.Topic, stamp)
	if err := EnsureTopic(ctx, cfg.NamesrvAddrs, topic, cfg.Queues); err != nil {
		return nil, err
	}
	deleteTopic := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeleteTopic(dctx, cfg.NamesrvAddrs, topic); err != nil {
			cfg.Logger.Warn("bench: could not delete the rate topic", "topic", topic, "err", err)
		}
	}
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs:      cfg.NamesrvAddrs,
		Group:             fmt.Sprintf("SluiceBenchRate_%d", stamp),
		ConsumeFromWhere:  consumer.ConsumeFromFirstOffset,
		ConsumeGoroutines: cfg.ConsumeGoroutines,
		Logger:            cfg.Logger,
	})
	if err == nil {
		err = c.Subscribe(topic, message.SubscribeAll, func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			for _, m := range msgs {
				onBody(m.Body)
			}
			return message.ConsumeSuccess, nil
		})
	}
	if err == nil {
		if err = c.Start(ctx); err != nil {
			_ = shutdownAll([]func(context.Context) error{c.Shutdown})
		}
	}
	if err != nil {
		deleteTopic()
		return nil, fmt.Errorf("bench: rate consumer: %w", err)
	}
	_, asyncs, stop, err := startProducersAsync(cfg, cfg.Producers, topic)
	if err != nil {
		_ = shutdownAll([]func(context.Context) error{c.Shutdown})
		deleteTopic()
		return nil, err
	}
	return &rateRig{asyncs: asyncs, close: func() error {
		err := shutdownAll([]func(context.Context) error{stop, c.Shutdown})
		deleteTopic()
		return err
	}}, nil
}
