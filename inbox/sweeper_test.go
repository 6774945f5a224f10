package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// TestSweeper: rows older than the retention go, in DELETEs of at most BatchSize rows and
// at most MaxBatches per sweep; younger rows stay; a swept key runs again.
func TestSweeper(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ctx := context.Background()
		var now atomic.Int64
		base := time.Now()
		now.Store(base.Add(-2 * time.Hour).UnixMilli())
		clock := func() time.Time { return time.UnixMilli(now.Load()) }
		ib := newInbox(t, tg, "g", func(c *inbox.Config) { c.Now = clock })
		eff := tg.EffectsTable("eff")
		f := ib.Consume(recordEffect(tg, eff, nil, nil))
		deliver := func(key string) {
			t.Helper()
			if res, err := f(ctx, []*message.MessageExt{testkit.NewExt("T", "x", key, "1")}); res != message.ConsumeSuccess || err != nil {
				t.Fatal(res, err)
			}
		}
		for i := 0; i < 7; i++ { // 7 old rows (2 h ago)
			deliver(fmt.Sprintf("old-%d", i))
		}
		now.Store(base.UnixMilli())
		for i := 0; i < 3; i++ { // 3 fresh rows
			deliver(fmt.Sprintf("new-%d", i))
		}
		s, err := inbox.NewSweeper(inbox.SweeperConfig{DB: tg.DB, Dialect: tg.Dialect, Table: ib.Table(), Retention: time.Hour,
			BatchSize: 2, MaxBatches: 2, Now: clock, Logger: testkit.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := s.SweepOnce(ctx); n != 4 || err != nil { // 2 batches of 2
			t.Fatalf("first sweep: %d %v", n, err)
		}
		if n, err := s.SweepOnce(ctx); n != 3 || err != nil { // 2 + 1 (< BatchSize: stop)
			t.Fatalf("second sweep: %d %v", n, err)
		}
		if n, err := s.SweepOnce(ctx); n != 0 || err != nil {
			t.Fatalf("third sweep: %d %v", n, err)
		}
		for i := 0; i < 3; i++ {
			if ok, _, err := ib.Processed(ctx, fmt.Sprintf("new-%d", i)); !ok || err != nil {
				t.Fatalf("fresh row new-%d swept: %v %v", i, ok, err)
			}
		}
		deliver("old-0") // its row is gone: it runs again (the retention is the dedup horizon)
		if c := tg.Counts(eff); c["old-0"] != 2 || c["old-1"] != 1 {
			t.Fatalf("effects %v", c)
		}

		// Background sweeps: Start, rows go, Shutdown stops the goroutine (goleak in TestMain).
		now.Store(base.Add(3 * time.Hour).UnixMilli())
		bg, err := inbox.NewSweeper(inbox.SweeperConfig{DB: tg.DB, Dialect: tg.Dialect, Table: ib.Table(), Retention: time.Hour,
			Interval: 10 * time.Millisecond, BatchSize: 1, MaxBatches: 1, Now: clock, Logger: testkit.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := bg.Start(); err != nil {
			t.Fatal(err)
		}
		if err := bg.Start(); err != nil {
			t.Fatalf("second Start: %v", err)
		}
		testkit.WaitFor(t, 10*time.Second, func() bool {
			ok, _, err := ib.Processed(ctx, "new-2")
			return err == nil && !ok
		}, "background sweeps to delete every row")
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := bg.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		if err := bg.Shutdown(sctx); err != nil {
			t.Fatalf("second Shutdown: %v", err)
		}
		if err := bg.Start(); !errors.Is(err, inbox.ErrSweeperClosed) {
			t.Fatalf("Start after Shutdown: %v", err)
		}
	})
}

func TestSweeperConfigValidate(t *testing.T) {
	tg := sqltest.Open(t, inbox.SQLite)
	cases := []struct {
		mod   func(*inbox.SweeperConfig)
		field string
	}{
		{func(c *inbox.SweeperConfig) { c.DB = nil }, "DB"},
		{func(c *inbox.SweeperConfig) { c.Dialect = 0 }, "Dialect"},
		{func(c *inbox.SweeperConfig) { c.Retention = -time.Second }, "Retention"},
		{func(c *inbox.SweeperConfig) { c.Interval = time.Microsecond }, "Interval"},
		{func(c *inbox.SweeperConfig) { c.BatchSize = inbox.MaxSweepBatch + 1 }, "BatchSize"},
		{func(c *inbox.SweeperConfig) { c.MaxBatches = -1 }, "MaxBatches"},
		{func(c *inbox.SweeperConfig) { c.Table = "a-b" }, "Table"},
	}
	for _, c := range cases {
		cfg := inbox.SweeperConfig{DB: tg.DB, Dialect: inbox.SQLite}
		c.mod(&cfg)
		_, err := inbox.NewSweeper(cfg)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("want a ConfigError for %s, got %v", c.field, err)
		}
	}
}
