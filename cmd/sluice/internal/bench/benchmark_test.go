package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// End-to-end benchmarks over loopback: an embedded broker (ASYNC_FLUSH, temporary data
// directory) in this process, Sluice producers and consumers talking to it over TCP.
// Run with:
//
//	go test -run '^$' -bench . -benchtime 50000x ./cmd/sluice/internal/bench/
//
// ns/op is per message; msg/s, MB/s (SetBytes) and the p50/p99 send latencies are
// reported as extra metrics.

func reportProduce(b *testing.B, res *Result) {
	b.ReportMetric(res.MsgPerSec(), "msg/s")
	b.ReportMetric(float64(res.Latency.Quantile(0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(res.Latency.Quantile(0.99).Microseconds()), "p99-µs")
}

// benchProduce times b.N sends of 1 KiB bodies by one producer with inflight
// concurrent SendSync calls.
func benchProduce(b *testing.B, flush string, inflight int) {
	e := startEmbedded(b, flush)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := Config{NamesrvAddrs: e.NamesrvAddrs(), Inflight: inflight}
	cfg.setDefaults()
	if err := EnsureTopic(ctx, cfg.NamesrvAddrs, cfg.Topic, cfg.Queues); err != nil {
		b.Fatal(err)
	}
	senders, stop, err := startProducers(&cfg, 1, cfg.Topic)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := shutdownAll([]func(context.Context) error{stop}); err != nil {
			b.Error(err)
		}
	}()
	if err := warmup(ctx, &cfg, senders); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(cfg.Size))
	b.ResetTimer()
	res, err := drive(ctx, &cfg, senders, plan{messages: int64(b.N), inflight: inflight, phase: "produce"})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportProduce(b, res)
}

func BenchmarkProduce(b *testing.B) {
	for _, inflight := range []int{1, 16} {
		b.Run(fmt.Sprintf("async/inflight=%d", inflight), func(b *testing.B) { benchProduce(b, AsyncFlush, inflight) })
	}
	b.Run("sync/inflight=16", func(b *testing.B) { benchProduce(b, SyncFlush, 16) })
}

// BenchmarkConsume prefills b.N 1 KiB messages (untimed), then times a push consumer
// (default settings: 20 handler goroutines, pulls of 32, one message per handler call)
// from Start until it has handled all of them.
func BenchmarkConsume(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			e := startEmbedded(b, AsyncFlush)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cfg := Config{NamesrvAddrs: e.NamesrvAddrs(), Messages: int64(b.N), ConsumeBatch: batch}
			cfg.setDefaults()
			topic := fmt.Sprintf("BenchConsume%d", b.N)
			if err := EnsureTopic(ctx, cfg.NamesrvAddrs, topic, cfg.Queues); err != nil {
				b.Fatal(err)
			}
			senders, stop, err := startProducers(&cfg, 1, topic)
			if err != nil {
				b.Fatal(err)
			}
			_, err = drive(ctx, &cfg, senders, plan{messages: cfg.Messages, inflight: prefillInflight, phase: "prefill"})
			if serr := shutdownAll([]func(context.Context) error{stop}); err == nil {
				err = serr
			}
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(cfg.Size))
			b.ResetTimer()
			res, err := drain(ctx, &cfg, topic, "BenchConsumer")
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.MsgPerSec(), "msg/s")
			if res.Duplicates > 0 {
				b.ReportMetric(float64(res.Duplicates), "duplicates")
			}
		})
	}
}

// BenchmarkProduceJetStream is the comparison peer of BenchmarkProduce/async: the same
// workers publishing synchronously to a JetStream file stream (skipped without a NATS
// server; $SLUICE_NATS_URL or nats://127.0.0.1:4222).
func BenchmarkProduceJetStream(b *testing.B) {
	url := natsURL(b)
	for _, inflight := range []int{1, 16} {
		b.Run(fmt.Sprintf("inflight=%d", inflight), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			res, err := ProduceJetStream(ctx, Config{NatsURL: url, Topic: "GoBench", Messages: int64(b.N), Inflight: inflight})
			if err != nil {
				b.Fatal(err)
			}
			// ProduceJetStream includes stream setup; the timed window is res.Elapsed.
			b.ReportMetric(float64(res.Elapsed.Nanoseconds())/float64(b.N), "ns/msg")
			b.ReportMetric(res.MBPerSec(), "MB/s")
			reportProduce(b, res)
		})
	}
}
