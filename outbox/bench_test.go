package outbox_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
)

// Benchmarks (real PostgreSQL and MariaDB when their DSNs are set, SQLite always):
//
//	go test -run '^$' -bench . -benchtime 2000x ./outbox/
//	SLUICE_OUTBOX_BACKLOG=1000000 go test -run '^$' -bench BenchmarkDrainBacklog -benchtime 1x -timeout 60m ./outbox/
//	SLUICE_OUTBOX_BACKLOG=200000 SLUICE_OUTBOX_KEEP_SENT=1 go test -run '^$' -bench 'BenchmarkDrainBacklog/postgres' -benchtime 1x -timeout 60m ./outbox/

func benchTargets(b *testing.B, fn func(b *testing.B, tg *sqltest.Target)) {
	for _, d := range []outbox.Dialect{outbox.SQLite, outbox.Postgres, outbox.MySQL} {
		b.Run(d.String(), func(b *testing.B) { fn(b, sqltest.Open(b, d)) })
	}
}

// BenchmarkAdd: one business transaction per iteration (an order row and one outbox row
// with a sharding key); the time of the Add call alone is sampled, and its median (p50) and
// 99th percentile reported, besides the whole transaction's ns/op.
func BenchmarkAdd(b *testing.B) {
	benchTargets(b, func(b *testing.B, tg *sqltest.Target) {
		ob := newOutbox(b, tg)
		orders := tg.Name("orders")
		if _, err := tg.DB.Exec("CREATE TABLE " + orders + " (id BIGINT PRIMARY KEY)"); err != nil {
			b.Fatal(err)
		}
		insert := "INSERT INTO " + orders + " (id) VALUES (" + tg.P(1) + ")"
		ctx := context.Background()
		body := make([]byte, 512)
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			tx, err := tg.DB.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, insert, i); err != nil {
				b.Fatal(err)
			}
			m := message.NewMessage("Orders", body).SetKeys("order-" + strconv.Itoa(i)).SetShardingKey("acct-" + strconv.Itoa(i%100))
			t0 := time.Now()
			if err := ob.Add(ctx, tx, m); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "add-p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "add-p99-µs")
	})
}

// fill adds n rows of 256-byte bodies to topic in transactions of 500 (outside the
// timer), over keys order keys ("" for none).
func fill(b *testing.B, tg *sqltest.Target, ob *outbox.Outbox, n, keys int, topic string) {
	b.Helper()
	ctx := context.Background()
	body := make([]byte, 256)
	for start := 0; start < n; start += 500 {
		msgs := make([]*message.Message, 0, 500)
		for i := start; i < min(start+500, n); i++ {
			m := message.NewMessage(topic, body).SetKeys("order-" + strconv.Itoa(i))
			if keys > 0 {
				m.SetShardingKey("acct-" + strconv.Itoa(i%keys))
			}
			msgs = append(msgs, m)
		}
		tx, err := tg.DB.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := ob.Add(ctx, tx, msgs...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRelaySluice: one relay drains b.N rows (1,000 order keys) to an embedded Sluice
// broker through the producer (SendSync per message, 64 at once, claims of 500 rows);
// reports msg/s.
func BenchmarkRelaySluice(b *testing.B) {
	benchTargets(b, func(b *testing.B, tg *sqltest.Target) {
		e := startSluice(b)
		send := e.sendFunc(b)
		ob := newOutbox(b, tg)
		fill(b, tg, ob, b.N, 1000, "Orders")
		r := newRelay(b, ob, send, func(c *outbox.RelayConfig) { c.BatchSize = 500; c.Concurrency = 64 })
		ctx := context.Background()
		b.ResetTimer()
		t0 := time.Now()
		sent := 0
		for sent < b.N {
			n, err := r.RunOnce(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 && r.Counters().Sent < uint64(b.N) {
				time.Sleep(time.Millisecond) // rows backing off after a failed send; bounded by b.N sends
			}
			sent = int(r.Counters().Sent)
		}
		el := time.Since(t0)
		b.StopTimer()
		b.ReportMetric(float64(b.N)/el.Seconds(), "msg/s")
		b.ReportMetric(float64(r.Counters().Failed), "failed-sends")
	})
}

// BenchmarkDrainBacklog: a backlog of SLUICE_OUTBOX_BACKLOG rows (default 100,000; 1,000
// order keys) drained by one relay whose send does nothing, with the Go heap sampled every
// 10 ms: reports rows/s (all, first tenth, last tenth of the backlog), the peak heap in use
// during the drain and the heap before it (a flat relay keeps the peak near the start,
// whatever the backlog).
func BenchmarkDrainBacklog(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_OUTBOX_BACKLOG")); err == nil && v > 0 {
		n = v
	}
	// SLUICE_OUTBOX_KEEP_SENT=1: the relay keeps sent rows (Retention 1 h, the rows stay
	// as StateSent) instead of deleting them, so the claims run beside every row relayed so far.
	var keep time.Duration
	if os.Getenv("SLUICE_OUTBOX_KEEP_SENT") == "1" {
		keep = time.Hour
	}
	benchTargets(b, func(b *testing.B, tg *sqltest.Target) {
		for i := 0; i < b.N; i++ {
			ob := newOutbox(b, tg)
			t0 := time.Now()
			fill(b, tg, ob, n, 1000, "Orders")
			b.Logf("%s: %d rows filled in %v", tg.Dialect, n, time.Since(t0).Round(time.Millisecond))
			var sent atomic.Int64
			r := newRelay(b, ob, func(context.Context, *message.Message) (*message.SendResult, error) {
				sent.Add(1)
				return &message.SendResult{Status: message.SendOK}, nil
			}, func(c *outbox.RelayConfig) {
				c.BatchSize = 1000
				c.Concurrency = 16
				c.Logger = testkit.Quiet()
				c.Retention = keep
				c.CleanInterval = time.Hour // the drain keeps every sent row it relays
			})
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			base := ms.HeapInuse
			var peak atomic.Uint64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					if m.HeapInuse > peak.Load() {
						peak.Store(m.HeapInuse)
					}
				}
			}()
			b.ResetTimer()
			t1 := time.Now()
			ctx := context.Background()
			// The rate of the first and of the last tenth of the backlog: a claim whose cost
			// grows with the rows already drained shows as a last tenth slower than the first.
			tenth := int64(max(n/10, 1))
			var firstDone, lastFrom time.Time
			for sent.Load() < int64(n) {
				if _, err := r.RunOnce(ctx); err != nil {
					b.Fatal(err)
				}
				s := sent.Load()
				if firstDone.IsZero() && s >= tenth {
					firstDone = time.Now()
				}
				if lastFrom.IsZero() && s >= int64(n)-tenth {
					lastFrom = time.Now()
				}
			}
			end := time.Now()
			el := end.Sub(t1)
			b.StopTimer()
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(n)/el.Seconds(), "rows/s")
			b.ReportMetric(float64(tenth)/firstDone.Sub(t1).Seconds(), "first-tenth-rows/s")
			b.ReportMetric(float64(tenth)/end.Sub(lastFrom).Seconds(), "last-tenth-rows/s")
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(base)/(1<<20), "start-heap-MiB")
			b.Logf("%s: drained %d rows in %v; heap in use %s at the start, peak %s", tg.Dialect, n, el.Round(time.Millisecond),
				fmt.Sprintf("%.1f MiB", float64(base)/(1<<20)), fmt.Sprintf("%.1f MiB", float64(peak.Load())/(1<<20)))
		}
	})
}
