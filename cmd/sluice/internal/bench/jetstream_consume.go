package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConsumeJetStream is Consume's comparison peer: it creates a fresh file-storage stream
// (one replica) on Config.NatsURL, prefills it with Config.Messages messages (default
// 100000) of Config.Size bytes through Config.Producers connections with at least 16
// synchronous publishes in flight each (untimed), then times a durable pull consumer
// (explicit acks, deliver all) draining it: Consumer.Consume fetches in the background
// (nats.go's default buffer of 500 messages) and hands each message to
// Config.ConsumeGoroutines handler goroutines, which count it once and Ack it (the ack a
// durable consumer needs so the server does not redeliver; Sluice's push consumer commits
// offsets instead). The timed window runs from Consume until every message has been handled
// once. Stream and consumer are deleted afterwards. Errors: an invalid Config, no NATS
// server or no JetStream on it, prefill or consumer failures, ctx ending before the drain
// completes.
func ConsumeJetStream(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Messages == 0 {
		cfg.Messages = DefaultMessages
	}
	cfg.setDefaults()
	stamp := time.Now().UnixNano()
	stream, subject := JetStreamNames(fmt.Sprintf("%s_c%d", cfg.Topic, stamp))

	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	senders := make([]sendFunc, 0, cfg.Producers)
	var js0 jetstream.JetStream
	for i := range cfg.Producers + 1 { // the last connection is the consumer's
		nc, err := nats.Connect(cfg.NatsURL, nats.Name(fmt.Sprintf("sluice-bench-consume-%d", i)), nats.Timeout(5*time.Second), nats.NoReconnect())
		if err != nil {
			return nil, fmt.Errorf("bench: connect to NATS at %s: %w", cfg.NatsURL, err)
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			return nil, fmt.Errorf("bench: jetstream: %w", err)
		}
		if i == cfg.Producers {
			js0 = js
			break
		}
		senders = append(senders, func(ctx context.Context, body []byte) error {
			_, err := js.Publish(ctx, subject, body)
			return err
		})
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js0.CreateStream(sctx, jetstream.StreamConfig{
		Name:     stream,
		Subjects: []string{subject},
		Storage:  jetstream.FileStorage,
		Replicas: 1,
	}); err != nil {
		return nil, fmt.Errorf("bench: create stream %s: %w", stream, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js0.DeleteStream(dctx, stream); err != nil {
			cfg.Logger.Warn("bench: could not delete the JetStream stream", "stream", stream, "err", err)
		}
	}()
	if _, err := drive(ctx, &cfg, senders, plan{messages: cfg.Messages, inflight: max(cfg.Inflight, prefillInflight), phase: "prefill"}); err != nil {
		return nil, fmt.Errorf("bench: prefill: %w", err)
	}
	cons, err := js0.CreateOrUpdateConsumer(sctx, stream, jetstream.ConsumerConfig{
		Durable:       fmt.Sprintf("SluiceBenchConsumer_%d", stamp),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: create durable consumer on %s: %w", stream, err)
	}
	return drainJetStream(ctx, &cfg, cons)
}

// drainJetStream times cons delivering cfg.Messages messages to cfg.ConsumeGoroutines
// handler goroutines.
func drainJetStream(ctx context.Context, cfg *Config, cons jetstream.Consumer) (*Result, error) {
	n := cfg.Messages
	seen := make([]atomic.Bool, n)
	var (
		distinct, dups, bytes atomic.Int64
		doneOnce              sync.Once
		done                  = make(chan struct{})
		errOnce               sync.Once
		firstErr              error
		failed                = make(chan struct{})
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; close(failed) })
	}
	work := make(chan jetstream.Msg, cfg.ConsumeGoroutines)
	quit := make(chan struct{}) // closed once the consumer is stopped: the workers return
	var workers sync.WaitGroup
	for range cfg.ConsumeGoroutines {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for {
				var m jetstream.Msg
				select {
				case m = <-work:
				case <-quit:
					return
				}
				seq := bodySeq(m.Data())
				if seq < 1 || seq > n || !seen[seq-1].CompareAndSwap(false, true) {
					dups.Add(1)
				} else {
					bytes.Add(int64(len(m.Data())))
					cfg.Progress.Add(1)
					if distinct.Add(1) == n {
						doneOnce.Do(func() { close(done) })
					}
				}
				if err := m.Ack(); err != nil {
					fail(fmt.Errorf("ack: %w", err))
				}
			}
		}()
	}
	cfg.Progress.Phase("consume", n)
	var meter cpuMeter
	meter.start(cfg.ServerPid)
	start := time.Now()
	handoff := func(m jetstream.Msg) {
		select {
		case work <- m:
		case <-quit:
		}
	}
	cc, err := cons.Consume(handoff,
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				cfg.Logger.Warn("bench: jetstream consume", "err", err)
			}
		}))
	if err != nil {
		close(quit)
		workers.Wait()
		return nil, fmt.Errorf("bench: jetstream consume: %w", err)
	}
	res := &Result{Target: TargetJetStream, Kind: "consume"}
	var elapsed time.Duration
	select {
	case <-done:
		elapsed = time.Since(start)
		meter.stop(res)
	case <-failed:
	case <-ctx.Done():
	}
	cc.Stop()
	close(quit) // a callback still running returns without handing over
	workers.Wait()
	switch {
	case firstErr != nil:
		return nil, fmt.Errorf("bench: jetstream drain: %w", firstErr)
	case elapsed == 0:
		return nil, fmt.Errorf("bench: jetstream drain stopped after %d of %d messages: %w", distinct.Load(), n, ctx.Err())
	}
	res.Messages, res.Bytes, res.Elapsed, res.Duplicates = distinct.Load(), bytes.Load(), elapsed, dups.Load()
	return res, nil
}

// jetStreamRig sets JetStream up for a rate run: a fresh file-storage stream (one
// replica), Config.Producers connections publishing asynchronously (PublishAsync, a
// goroutine per connection completing each send on its PubAck), and a durable pull
// consumer (explicit acks) on its own connection whose callback hands every body to
// onBody and acks it. close stops the consumer and deletes the stream.
func jetStreamRig(ctx context.Context, cfg *Config, onBody func([]byte)) (*rateRig, error) {
	stamp := time.Now().UnixNano()
	stream, subject := JetStreamNames(fmt.Sprintf("%s_r%d", cfg.Topic, stamp))
	var (
		conns    []*nats.Conn
		ackChans []chan jsAck
		ackers   sync.WaitGroup
		cc       jetstream.ConsumeContext
		js0      jetstream.JetStream
	)
	closeAll := func() error {
		if cc != nil {
			cc.Stop()
		}
		for _, ch := range ackChans {
			close(ch)
		}
		ackers.Wait()
		var err error
		if js0 != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if derr := js0.DeleteStream(dctx, stream); derr != nil && !errors.Is(derr, jetstream.ErrStreamNotFound) {
				err = fmt.Errorf("bench: delete stream %s: %w", stream, derr)
			}
			cancel()
		}
		for _, nc := range conns {
			nc.Close()
		}
		return err
	}
	fail := func(err error) (*rateRig, error) { return nil, errors.Join(err, closeAll()) }
	var asyncs []asyncSendFunc
	for i := range cfg.Producers + 1 { // the last connection is the consumer's
		nc, err := nats.Connect(cfg.NatsURL, nats.Name(fmt.Sprintf("sluice-bench-rate-%d", i)), nats.Timeout(5*time.Second), nats.NoReconnect())
		if err != nil {
			return fail(fmt.Errorf("bench: connect to NATS at %s: %w", cfg.NatsURL, err))
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(cfg.Inflight, 1)), jetstream.WithPublishAsyncTimeout(10*time.Second))
		if err != nil {
			return fail(fmt.Errorf("bench: jetstream: %w", err))
		}
		if i == cfg.Producers {
			js0 = js
			break
		}
		acks := make(chan jsAck, max(cfg.Inflight, 1))
		ackChans = append(ackChans, acks)
		ackers.Add(1)
		go func() {
			defer ackers.Done()
			for a := range acks {
				select {
				case <-a.f.Ok():
					a.done(nil)
				case err := <-a.f.Err():
					a.done(err)
				}
			}
		}()
		asyncs = append(asyncs, func(_ context.Context, body []byte, done func(error)) error {
			f, err := js.PublishAsync(subject, body)
			if err != nil {
				return err
			}
			acks <- jsAck{f: f, done: done}
			return nil
		})
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js0.CreateStream(sctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Replicas: 1}); err != nil {
		return fail(fmt.Errorf("bench: create stream %s: %w", stream, err))
	}
	cons, err := js0.CreateOrUpdateConsumer(sctx, stream, jetstream.ConsumerConfig{
		Durable: fmt.Sprintf("SluiceBenchRate_%d", stamp), AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fail(fmt.Errorf("bench: create durable consumer on %s: %w", stream, err))
	}
	cc, err = cons.Consume(func(m jetstream.Msg) {
		onBody(m.Data())
		_ = m.Ack() // a lost ack only means a redelivery, counted as a duplicate
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !errors.Is(err, jetstream.ErrNoHeartbeat) {
			cfg.Logger.Warn("bench: jetstream consume", "err", err)
		}
	}))
	if err != nil {
		return fail(fmt.Errorf("bench: jetstream consume: %w", err))
	}
	return &rateRig{asyncs: asyncs, close: closeAll}, nil
}
