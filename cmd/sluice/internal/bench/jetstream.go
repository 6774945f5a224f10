package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamNames returns the stream name and subject ProduceJetStream uses for topic:
// SLUICE_BENCH_<topic> and sluice.bench.<topic> ('%' and '|' become '_').
func JetStreamNames(topic string) (stream, subject string) {
	clean := strings.NewReplacer("%", "_", "|", "_").Replace(topic)
	return "SLUICE_BENCH_" + clean, "sluice.bench." + clean
}

// jsAck is one PublishAsync waiting for its PubAck.
type jsAck struct {
	f    jetstream.PubAckFuture
	done func(error)
}

// ProduceJetStream is Produce's comparison peer: the same workers (Config.Producers
// connections, Config.Inflight concurrent calls each, same bodies and warm-up) publish
// synchronously (jetstream.Publish, waiting for the stream's PubAck; with Config.Async,
// PublishAsync with a window of Config.Inflight per connection) to a file-storage
// stream with one replica on Config.NatsURL. The stream is created fresh (an old one of
// the same name is deleted) and deleted afterwards. JetStream file storage fsyncs on
// its own interval (sync_interval, 2 min by default), so it compares with Sluice's
// ASYNC_FLUSH. Errors: an invalid Config, no NATS server or no JetStream on it, and the
// first failed publish.
func ProduceJetStream(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	stream, subject := JetStreamNames(cfg.Topic)

	var conns []*nats.Conn
	var ackers sync.WaitGroup
	ackChans := make([]chan jsAck, 0, cfg.Producers)
	defer func() {
		for _, ch := range ackChans { // the ack goroutines end once their queue is drained
			close(ch)
		}
		ackers.Wait()
		for _, nc := range conns {
			nc.Close()
		}
	}()
	senders := make([]sendFunc, 0, cfg.Producers)
	asyncs := make([]asyncSendFunc, 0, cfg.Producers)
	var js0 jetstream.JetStream
	for i := range cfg.Producers {
		nc, err := nats.Connect(cfg.NatsURL, nats.Name(fmt.Sprintf("sluice-bench-%d", i)), nats.Timeout(5*time.Second), nats.NoReconnect())
		if err != nil {
			return nil, fmt.Errorf("bench: connect to NATS at %s: %w", cfg.NatsURL, err)
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(cfg.Inflight, 1)), jetstream.WithPublishAsyncTimeout(10*time.Second))
		if err != nil {
			return nil, fmt.Errorf("bench: jetstream: %w", err)
		}
		if i == 0 {
			js0 = js
		}
		senders = append(senders, func(ctx context.Context, body []byte) error {
			_, err := js.Publish(ctx, subject, body)
			return err
		})
		// Async: PublishAsync, and one goroutine per connection that waits for the acks in
		// publish order (a stream acks in order) and completes each send.
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
		asyncs = append(asyncs, func(ctx context.Context, body []byte, done func(error)) error {
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
	if err := js0.DeleteStream(sctx, stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("bench: delete old stream %s: %w", stream, err)
	}
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

	if err := warmup(ctx, &cfg, senders); err != nil {
		return nil, err
	}
	pl := plan{messages: cfg.Messages, duration: cfg.Duration, inflight: cfg.Inflight, phase: "produce"}
	var res *Result
	var err error
	var meter cpuMeter
	meter.start(cfg.ServerPid)
	if cfg.Async {
		res, err = driveAsync(ctx, &cfg, asyncs, pl)
	} else {
		res, err = drive(ctx, &cfg, senders, pl)
	}
	if err != nil {
		return nil, err
	}
	meter.stop(res)
	res.Target = TargetJetStream
	return res, nil
}
