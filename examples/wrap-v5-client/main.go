// Command wrap-v5-client shows Sluice's reliability middleware around the official
// RocketMQ 5 Go client (github.com/apache/rocketmq-clients/golang/v5, gRPC), through
// package adapters/rocketmqv5:
//
//   - sends go through middleware.Keys (MD5 content key) around the v5 producer;
//
//   - a SimpleRunner receives with the v5 SimpleConsumer and runs a handler inside the
//     transactional inbox (package inbox, SQLite): each points credit is written in the
//     transaction that records the message's key, so a message delivered twice has one
//     effect. Every credit is sent twice, and the first attempt at one fails (it is
//     delivered again when its invisibility ends);
//
//   - everything stops through package lifecycle.
//
//     go run ./examples/wrap-v5-client                           # embedded broker with its gRPC front end
//     go run ./examples/wrap-v5-client --endpoint 127.0.0.1:8081 # sluice broker --grpc-listen, or an Apache RocketMQ 5 proxy
//
// The exit status is 0 only if every user's points came out exactly right.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/sluicemq/sluice/adapters/rocketmqv5"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/grpcfront"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/lifecycle"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

const (
	topic = "V5DemoPoints"
	group = "v5_demo_points"
)

func main() {
	endpoint := flag.String("endpoint", "", "gRPC endpoint host:port of a RocketMQ 5 server (default: an embedded Sluice broker)")
	n := flag.Int("n", 5, "users to credit")
	flag.Parse()
	if err := run(*endpoint, *n); err != nil {
		fmt.Fprintln(os.Stderr, "wrap-v5-client:", err)
		os.Exit(1)
	}
}

func run(endpoint string, n int) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := os.MkdirTemp("", "sluice-v5-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The official client writes its log under $HOME/logs/rocketmq unless told otherwise,
	// and speaks TLS unless told otherwise (the embedded front end serves plain gRPC).
	os.Setenv("rocketmq.client.logRoot", filepath.Join(dir, "client-logs"))
	os.Setenv("mq.consoleAppender.enabled", "false")
	rmq.ResetLogger()
	rmq.EnableSsl = false

	if endpoint == "" {
		b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: filepath.Join(dir, "store"), Logger: log})
		if err != nil {
			return err
		}
		if err := b.Start(); err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = b.Shutdown(ctx)
		}()
		front, err := grpcfront.New(grpcfront.Config{Broker: b, Listen: "127.0.0.1:0", Logger: log})
		if err != nil {
			return err
		}
		if err := front.Start(); err != nil {
			return err
		}
		defer func() { // after the clients, before the broker
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = front.Shutdown(ctx)
		}()
		endpoint = front.Addr()
	}

	db, err := sql.Open("sqlite", inbox.SQLiteDSN(filepath.Join(dir, "points.db")))
	if err != nil {
		return err
	}
	defer db.Close()
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: inbox.SQLite, Group: group, Logger: log})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := ib.CreateTable(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE points (user_id TEXT PRIMARY KEY, points INTEGER NOT NULL)`); err != nil {
		return err
	}

	cfg := &rmq.Config{Endpoint: endpoint, ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
	p, err := rmq.NewProducer(cfg, rmq.WithTopics(topic))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	send := middleware.ChainSend(rocketmqv5.SendFunc(p), middleware.Keys())

	c, err := rmq.NewSimpleConsumer(cfg, rmq.WithSimpleAwaitDuration(5*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.NewFilterExpression("Credit")}))
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	var deliveries, failedOnce atomic.Int32
	handler := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		for _, m := range msgs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO points (user_id, points) VALUES (?, 10)
				ON CONFLICT (user_id) DO UPDATE SET points = points + 10`, m.Property("user")); err != nil {
				return err
			}
			if m.Property("user") == "u0" && failedOnce.CompareAndSwap(0, 1) {
				return errors.New("the points service timed out (first attempt)") // rolled back with the credit
			}
		}
		return nil
	})
	counting := func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			deliveries.Add(int32(len(msgs)))
			return next(ctx, msgs)
		}
	}
	runner, err := rocketmqv5.NewSimpleRunner(rocketmqv5.SimpleConfig{Consumer: c, Logger: log, InvisibleDuration: 10 * time.Second,
		Handler: middleware.ChainConsume(handler, middleware.Logging(log), counting)})
	if err != nil {
		return err
	}
	if err := runner.Start(); err != nil {
		return err
	}

	// Stop order: the runner (stop receiving, finish handlers), then the consumer (one
	// component: a stage's components stop concurrently), then the producer.
	g, err := lifecycle.New(lifecycle.Config{Logger: log, Timeout: 15 * time.Second})
	if err != nil {
		return err
	}
	_ = g.AddConsumer("v5-simple-consumer", lifecycle.ShutdownFunc(func(ctx context.Context) error {
		return errors.Join(runner.Shutdown(ctx), rocketmqv5.Component(c).Shutdown(ctx))
	}))
	_ = g.AddProducer("v5-producer", rocketmqv5.Component(p))

	runCtx, cancel := context.WithCancel(ctx)
	demoErr := make(chan error, 1)
	go func() {
		defer cancel()
		demoErr <- demo(runCtx, db, send, n, &deliveries)
	}()
	shutdownErr := g.Run(runCtx)
	return errors.Join(<-demoErr, shutdownErr)
}

// demo sends each credit twice (a caller retrying after an answer it lost: same content,
// same content key), waits until every copy was delivered (the failed one twice), and
// checks that each user has exactly 10 points.
func demo(ctx context.Context, db *sql.DB, send middleware.SendFunc, n int, deliveries *atomic.Int32) error {
	for i := range n {
		for range 2 {
			m := message.NewMessage(topic, []byte(`{"user":"u`+strconv.Itoa(i)+`","points":10}`)).SetTag("Credit")
			m.SetProperty("user", "u"+strconv.Itoa(i))
			sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := send(sctx, m)
			scancel()
			if err != nil {
				return fmt.Errorf("send %d: %w", i, err)
			}
			fmt.Printf("sent %s key=%s msgId=%s\n", m.Body, middleware.ContentKey(m), res.MsgID)
		}
	}
	want := int32(2*n + 1)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(90 * time.Second)
	for deliveries.Load() < want {
		select {
		case <-tick.C:
		case <-deadline:
			return fmt.Errorf("%d of %d deliveries", deliveries.Load(), want)
		}
	}
	rows, err := db.QueryContext(ctx, `SELECT user_id, points FROM points ORDER BY user_id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	users := 0
	for rows.Next() {
		var user string
		var points int
		if err := rows.Scan(&user, &points); err != nil {
			return err
		}
		fmt.Printf("user %s: %d points\n", user, points)
		if points != 10 {
			return fmt.Errorf("user %s has %d points, want 10", user, points)
		}
		users++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if users != n {
		return fmt.Errorf("%d users credited, want %d", users, n)
	}
	fmt.Printf("tally: %d deliveries of %d messages, every user credited once\n", deliveries.Load(), 2*n)
	return nil
}
