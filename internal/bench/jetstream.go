package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// ProduceJetStream is Produce's comparison peer: the same workers (Config.Producers
// connections, Config.Inflight concurrent calls each, same bodies and warm-up) publish
// synchronously (jetstream.Publish, waiting for the stream's PubAck) to a file-storage
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
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	senders := make([]sendFunc, 0, cfg.Producers)
	var js0 jetstream.JetStream
	for i := range cfg.Producers {
		nc, err := nats.Connect(cfg.NatsURL, nats.Name(fmt.Sprintf("sluice-bench-%d", i)), nats.Timeout(5*time.Second), nats.NoReconnect())
		if err != nil {
			return nil, fmt.Errorf("bench: connect to NATS at %s: %w", cfg.NatsURL, err)
		}
		conns = append(conns, nc)
		js, err := jetstream.New(nc)
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
	res, err := drive(ctx, &cfg, senders, plan{messages: cfg.Messages, duration: cfg.Duration, inflight: cfg.Inflight, phase: "produce"})
	if err != nil {
		return nil, err
	}
	res.Target = TargetJetStream
	return res, nil
}
