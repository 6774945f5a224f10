package inbox_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/producer"
)

// bareRate is the msgs/s of the last "bare" sub-benchmark of this run, the denominator of
// the others' x-bare metric.
var bareRate float64

// BenchmarkConsumerReliability measures a push consumer (20 handler goroutines, the
// default; an embedded broker; 8 queues; 1 KiB messages, each with a unique key; a no-op
// business handler) end to end: b.N messages are stored first, then the timer runs from
// consumer start until the handler has acknowledged all of them. Sub-benchmarks:
//
//   - bare: the handler alone (at least once);
//   - keys+dedup: ConsumeKeys + redismw.Dedup against the real Redis at SLUICE_REDIS_ADDR
//     (two Redis round trips per message);
//   - keys+dedup-autopipeline: the same on go-redis's autopipelining client
//     (client.AutoPipeline(): concurrent handlers' scripts share pipelines);
//   - inbox-batch1, inbox-batch32: the inbox on the real PostgreSQL at SLUICE_POSTGRES_DSN,
//     ConsumeMessageBatchMaxSize 1 and 32 (one transaction per batch).
//
// Each reports msgs/s and x-bare, its msgs/s divided by bare's in the same run (run bare
// first: the sub-benchmarks run in the order listed). Without the services the sub-benchmarks
// that need them are skipped.
//
//	go test -run '^$' -bench ConsumerReliability -benchtime 20000x ./inbox/
func BenchmarkConsumerReliability(b *testing.B) {
	for _, mode := range []string{"bare", "keys+dedup", "keys+dedup-autopipeline", "inbox-batch1", "inbox-batch32"} {
		b.Run(mode, func(b *testing.B) {
			benchConsume(b, mode)
		})
	}
}

var benchSeq atomic.Int64

func benchConsume(b *testing.B, mode string) {
	ctx := context.Background()
	seq := benchSeq.Add(1)
	topic, group := fmt.Sprintf("Bench%d", seq), fmt.Sprintf("bench_%d", seq)
	var mws []middleware.ConsumeMiddleware
	batch := 1
	var acked atomic.Int64
	done := make(chan struct{})
	ack := func(n int) {
		if acked.Add(int64(n)) == int64(b.N) {
			close(done)
		}
	}
	h := func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		ack(len(msgs))
		return message.ConsumeSuccess, nil
	}
	switch mode {
	case "keys+dedup", "keys+dedup-autopipeline":
		addr := os.Getenv(redistest.EnvAddr)
		if addr == "" {
			b.Skipf("%s not set: skipping the Dedup benchmark (it needs a real Redis)", redistest.EnvAddr)
		}
		base := redistest.Dial(b, addr)
		ns := redistest.NS(b)
		b.Cleanup(func() { redistest.DeleteNamespace(b, base, ns) })
		c := base
		if mode == "keys+dedup-autopipeline" {
			ap, err := base.(*redis.Client).AutoPipeline()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = ap.Close() })
			c = ap
		}
		d, err := redismw.Dedup(redismw.DedupConfig{Client: c, Prefix: "sluice:bench:" + ns, DoneTTL: 10 * time.Minute, Logger: testkit.Quiet()})
		if err != nil {
			b.Fatal(err)
		}
		mws = []middleware.ConsumeMiddleware{middleware.ConsumeKeys(), d}
	case "inbox-batch1", "inbox-batch32":
		if mode == "inbox-batch32" {
			batch = 32
		}
		tg := sqltest.Open(b, inbox.Postgres)
		tg.DB.SetMaxOpenConns(25)
		tg.DB.SetMaxIdleConns(25)
		ib, err := inbox.New(inbox.Config{DB: tg.DB, Dialect: inbox.Postgres, Group: group, Table: tg.Name("inbox"), Logger: testkit.Quiet()})
		if err != nil {
			b.Fatal(err)
		}
		if err := ib.CreateTable(ctx); err != nil {
			b.Fatal(err)
		}
		h = ib.Consume(func(_ context.Context, _ *sql.Tx, msgs []*message.MessageExt) error {
			ack(len(msgs))
			return nil
		})
	}

	ns := startBroker(b, topic, 8)
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns}, Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer shutdownT(b, "producer", p.Shutdown)
	body := make([]byte, 1024)
	msgs := make([]*message.Message, 0, 32)
	for i := 0; i < b.N; i++ {
		bd := append([]byte(nil), body...)
		binary.BigEndian.PutUint64(bd, uint64(i)) // unique content: unique content key
		m := message.NewMessage(topic, bd).SetTag("b")
		if mode != "keys+dedup" && mode != "keys+dedup-autopipeline" {
			m.SetKeys(fmt.Sprintf("k-%d-%d", seq, i))
		}
		msgs = append(msgs, m)
		if len(msgs) == cap(msgs) || i == b.N-1 {
			if _, err := p.SendBatch(ctx, msgs); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	// Wait until the broker's consume queues hold every message.
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns}, Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()

	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{ns}, Group: group, ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		ConsumeMessageBatchMaxSize: batch, Middlewares: mws, Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Subscribe(topic, "*", h); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1024)
	b.ResetTimer()
	if err := c.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d messages acknowledged within 5 min", acked.Load(), b.N)
	}
	b.StopTimer()
	shutdownT(b, "consumer", c.Shutdown)
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "msgs/s")
	if mode == "bare" {
		bareRate = rate
	} else if bareRate > 0 {
		b.ReportMetric(rate/bareRate, "x-bare")
	}
}
