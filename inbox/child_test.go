package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

// Environment of the consumer child process the SIGKILL campaign starts (the test binary
// itself; TestMain sends it to runChild).
const (
	envChild    = "SLUICE_INBOX_CHILD" // "consumer"
	envNamesrv  = "SLUICE_INBOX_CHILD_NAMESRV"
	envTopic    = "SLUICE_INBOX_CHILD_TOPIC"
	envGroup    = "SLUICE_INBOX_CHILD_GROUP"
	envDialect  = "SLUICE_INBOX_CHILD_DIALECT"
	envDSN      = "SLUICE_INBOX_CHILD_DSN"
	envTable    = "SLUICE_INBOX_CHILD_TABLE"
	envEffects  = "SLUICE_INBOX_CHILD_EFFECTS"
	envAttempts = "SLUICE_INBOX_CHILD_ATTEMPTS" // file: one line per handler start (key)
	envReady    = "SLUICE_INBOX_CHILD_READY"    // file created when the first handler runs
	envBatch    = "SLUICE_INBOX_CHILD_BATCH"
	envMode     = "SLUICE_INBOX_CHILD_MODE"   // "inbox" or "dedup"
	envRedis    = "SLUICE_INBOX_CHILD_REDIS"  // Redis address (dedup)
	envPrefix   = "SLUICE_INBOX_CHILD_PREFIX" // Dedup key prefix
)

// runChild runs a child process role when the environment asks for one.
func runChild() (int, bool) {
	if os.Getenv(envChild) != "consumer" {
		return 0, false
	}
	if err := runConsumerChild(); err != nil {
		fmt.Fprintln(os.Stderr, "inbox child:", err)
		return 2, true
	}
	return 3, true
}

// runConsumerChild consumes the topic through the inbox until it is killed (or 60 s
// pass). Its handler records each start in the attempts file, writes one effect row per
// message in the inbox transaction, and lingers 0-2 ms inside the transaction, so a
// SIGKILL often lands with a transaction open.
func runConsumerChild() error {
	d, err := inbox.ParseDialect(os.Getenv(envDialect))
	if err != nil {
		return err
	}
	driver := map[inbox.Dialect]string{inbox.Postgres: "pgx", inbox.MySQL: "mysql", inbox.SQLite: "sqlite"}[d]
	db, err := sql.Open(driver, os.Getenv(envDSN))
	if err != nil {
		return err
	}
	defer db.Close()
	// Warnings go to stderr, which the parent shows when a cycle fails.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: d, Group: os.Getenv(envGroup), Table: os.Getenv(envTable), Logger: log})
	if err != nil {
		return err
	}
	attempts, err := os.OpenFile(os.Getenv(envAttempts), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	batch, _ := strconv.Atoi(os.Getenv(envBatch))
	insert := "INSERT INTO " + os.Getenv(envEffects) + " (k) VALUES (" + sqltest.Placeholder(d, 1) + ")"
	var readyOnce sync.Once
	started := func(msgs []*message.MessageExt) error {
		var line []byte
		for _, m := range msgs {
			line = append(line, middleware.StableKey(m)+"\n"...)
		}
		if _, err := attempts.Write(line); err != nil { // one O_APPEND write: whole lines
			return err
		}
		readyOnce.Do(func() { _ = os.WriteFile(os.Getenv(envReady), nil, 0o600) })
		return nil
	}
	var mws []middleware.ConsumeMiddleware
	var h middleware.ConsumeFunc
	if os.Getenv(envMode) == "dedup" {
		// The effect is written on its own; Dedup sets its done marker after the handler.
		rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis), MaxRetries: -1})
		defer rdb.Close()
		d, err := redismw.Dedup(redismw.DedupConfig{Client: rdb, Prefix: os.Getenv(envPrefix), LockExpiry: time.Second, Logger: log})
		if err != nil {
			return err
		}
		mws = []middleware.ConsumeMiddleware{d}
		h = func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if err := started(msgs); err != nil {
				return message.ReconsumeLater, err
			}
			for _, m := range msgs {
				if _, err := db.ExecContext(ctx, insert, middleware.StableKey(m)); err != nil {
					return message.ReconsumeLater, err
				}
			}
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // work after the effect
			return message.ConsumeSuccess, nil
		}
	} else {
		h = ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
			if err := started(msgs); err != nil {
				return err
			}
			for _, m := range msgs {
				if _, err := tx.ExecContext(ctx, insert, middleware.StableKey(m)); err != nil {
					return err
				}
			}
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // work inside the transaction
			return nil
		})
	}
	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{os.Getenv(envNamesrv)}, Group: os.Getenv(envGroup),
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, ConsumeMessageBatchMaxSize: batch,
		PersistOffsetInterval: 100 * time.Millisecond, Middlewares: mws, Logger: log})
	if err != nil {
		return err
	}
	if err := c.Subscribe(os.Getenv(envTopic), "*", h); err != nil {
		return err
	}
	if err := c.Start(context.Background()); err != nil {
		return err
	}
	time.Sleep(60 * time.Second) // the parent kills us long before; bounded if it does not
	return fmt.Errorf("not killed within 60 s")
}
