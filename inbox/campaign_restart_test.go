package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/producer"
)

// TestCampaignRestarts restarts Redis, then PostgreSQL, while a push consumer (20
// handlers, chain Dedup → inbox) consumes a steady stream of payments from an ephemeral
// broker. Both servers are the test's own (a redis-server without persistence, so the
// restart also loses every Dedup marker; a PostgreSQL cluster stopped in immediate mode, as
// a crash). The effects table must end with one row per payment: 0 lost, 0 doubled. It
// reports how often the handler ran more than once for a key (runs the database or Redis
// outage rolled back, or that Dedup let through after losing its markers).
//
//	go test -race -run TestCampaignRestarts -v ./inbox/
func TestCampaignRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("campaign: skipped with -short")
	}
	rs := sqltest.StartRedis(t)
	pg := sqltest.StartPostgres(t)
	const topic, group, total = "RestartCampaign", "restart_campaign", 400
	ns := startBroker(t, topic, 4)
	ctx := context.Background()

	db := pg.Open(t)
	db.SetMaxOpenConns(30)
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: inbox.Postgres, Group: group, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (k VARCHAR(255) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
	defer rdb.Close()
	dedup, err := redismw.Dedup(redismw.DedupConfig{Client: rdb, Prefix: "sluice:restart", LockExpiry: 3 * time.Second, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	h := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		k := middleware.IdempotencyKey(ctx)
		mu.Lock()
		runs[k]++
		mu.Unlock()
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (k) VALUES ($1)", k)
		return err
	})
	// failed counts deliveries that came back ReconsumeLater, per phase (0 running, 1 Redis
	// down, 2 PostgreSQL down).
	var phase atomic.Int32
	var failed [3]atomic.Int64
	countFailed := func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			res, err := next(ctx, msgs)
			if res != message.ConsumeSuccess || err != nil {
				failed[phase.Load()].Add(1)
			}
			return res, err
		}
	}
	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{ns}, Group: group, ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		Middlewares: []middleware.ConsumeMiddleware{countFailed, dedup, middleware.Recover()}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, "*", h); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer shutdownT(t, "consumer", c.Shutdown)
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer shutdownT(t, "producer", p.Shutdown)

	count := func() map[string]int {
		rows, err := db.QueryContext(ctx, "SELECT k, COUNT(*) FROM effects GROUP BY k")
		if err != nil {
			return nil // the database is restarting
		}
		defer rows.Close()
		m := map[string]int{}
		for rows.Next() {
			var k string
			var n int
			if rows.Scan(&k, &n) == nil {
				m[k] = n
			}
		}
		return m
	}
	sent := 0
	sendSome := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("pay-%04d", sent)
			if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte(k)).SetKeys(k)); err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	began := time.Now()
	// Phase 1: traffic, then Redis dies (markers and locks lost) while more is sent.
	sendSome(total / 4)
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(count()) >= total/8 }, "consumption to be under way")
	phase.Store(1)
	rs.Kill()
	sendSome(total / 4)
	testkit.WaitFor(t, 20*time.Second, func() bool { return failed[1].Load() > 0 }, "a delivery refused while Redis is down")
	phase.Store(0)
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	// Phase 2: PostgreSQL crashes while more is sent.
	testkit.WaitFor(t, 30*time.Second, func() bool { return len(count()) >= total*3/8 }, "consumption to resume after the Redis restart")
	phase.Store(2)
	if err := pg.Crash(); err != nil {
		t.Fatal(err)
	}
	sendSome(total / 4)
	testkit.WaitFor(t, 20*time.Second, func() bool { return failed[2].Load() > 0 }, "a delivery failing while PostgreSQL is down")
	phase.Store(0)
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	sendSome(total - sent)
	if !testkit.Eventually(90*time.Second, func() bool { return len(count()) == total }) {
		t.Fatalf("after the restarts only %d of %d payments have an effect", len(count()), total)
	}
	cnt := count()
	doubled, reran := 0, 0
	for _, n := range cnt {
		if n > 1 {
			doubled++
		}
	}
	mu.Lock()
	for _, n := range runs {
		if n > 1 {
			reran++
		}
	}
	mu.Unlock()
	t.Logf("restart campaign: %d payments, Redis killed (markers lost) and PostgreSQL crashed mid-run, done in %v; deliveries refused while Redis was down %d, failed while PostgreSQL was down %d; handler ran more than once for %d keys; effects doubled %d, lost %d",
		total, time.Since(began).Round(time.Millisecond), failed[1].Load(), failed[2].Load(), reran, doubled, total-len(cnt))
	if doubled != 0 || len(cnt) != total {
		t.Fatalf("doubled %d, lost %d", doubled, total-len(cnt))
	}
}
