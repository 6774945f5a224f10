// Command outbox shows the transactional outbox (package outbox) with either engine: an
// order service writes each order row and its "OrderPlaced" message in one SQL
// transaction (outbox.Add), one order in four is rolled back, and a relay sends what
// committed — to an embedded Sluice broker or an embedded Kafka-protocol cluster. A
// shipping consumer applies each message through the transactional inbox. The exit status
// is 0 only if every committed order was shipped exactly once and no rolled-back order was.
//
//	go run ./examples/outbox                      # Sluice broker + SQLite file
//	go run ./examples/outbox --engine kafka       # Kafka (in-process) + SQLite file
//	go run ./examples/outbox --postgres 'postgres://u:p@127.0.0.1:5432/db?sslmode=disable'
//
// With --postgres the relay is also woken by LISTEN/NOTIFY (package outbox/outboxpg)
// instead of waiting for its next poll.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/outbox"
	"github.com/sluicemq/sluice/outbox/outboxpg"
	"github.com/sluicemq/sluice/producer"
	"github.com/twmb/franz-go/pkg/kfake"
	_ "modernc.org/sqlite" // driver "sqlite"
)

const (
	topic  = "OrderPlaced"
	group  = "shipping"
	orders = 20
)

func main() {
	engine := flag.String("engine", "sluice", "sluice (embedded broker) or kafka (embedded Kafka-protocol cluster)")
	pg := flag.String("postgres", "", "PostgreSQL DSN (default: an SQLite file in a temporary directory)")
	flag.Parse()
	if err := run(*engine, *pg); err != nil {
		fmt.Fprintln(os.Stderr, "outbox example:", err)
		os.Exit(1)
	}
}

func run(engine, pgDSN string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The database: the service's orders, the outbox, and the shipping service's tables.
	d, dsn := outbox.SQLite, ""
	if pgDSN != "" {
		d, dsn = outbox.Postgres, pgDSN
	} else {
		dir, err := os.MkdirTemp("", "sluice-outbox-example-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dsn = outbox.SQLiteDSN(filepath.Join(dir, "shop.db"))
	}
	db, err := sql.Open(d.Driver(), dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	sfx := hex.EncodeToString(b)
	ordersT, shipT := "example_orders_"+sfx, "example_shipments_"+sfx
	notify := ""
	if d == outbox.Postgres {
		notify = "example_outbox_" + sfx
	}
	ob, err := outbox.New(outbox.Config{DB: db, Dialect: d, Table: "example_outbox_" + sfx, NotifyChannel: notify, ValidateTopic: kafka.ValidateTopic})
	if err != nil {
		return err
	}
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: d, Group: group, Table: "example_inbox_" + sfx, Logger: quiet})
	if err != nil {
		return err
	}
	defer func() {
		for _, t := range []string{ordersT, shipT, ob.Table(), ob.Table() + "_keys", ib.Table()} {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + t)
		}
	}()
	for _, s := range []string{"CREATE TABLE " + ordersT + " (id VARCHAR(64) PRIMARY KEY)", "CREATE TABLE " + shipT + " (order_id VARCHAR(64) NOT NULL)"} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	if err := ob.CreateTable(ctx); err != nil {
		return err
	}
	if err := ib.CreateTable(ctx); err != nil {
		return err
	}

	// The engine: a send function for the relay, and a consumer for the shipping service.
	p := d.Placeholder
	ship := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		for _, m := range msgs {
			fmt.Printf("shipping order %s (key %s)\n", m.Body, middleware.StableKey(m))
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+shipT+" (order_id) VALUES ("+p(1)+")", string(m.Body)); err != nil {
				return err
			}
		}
		return nil
	})
	var send middleware.SendFunc
	var stops []func(context.Context) error
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer scancel()
		for i := len(stops) - 1; i >= 0; i-- {
			_ = stops[i](sctx)
		}
	}()
	switch engine {
	case "sluice":
		br, stop, err := broker.StartEphemeral(broker.Config{Logger: quiet})
		if err != nil {
			return err
		}
		stops = append(stops, stop)
		a, err := admin.New(admin.Config{NamesrvAddrs: []string{br.NamesrvAddr()}, Logger: quiet})
		if err != nil {
			return err
		}
		defer a.Close()
		if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 4}); err != nil {
			return err
		}
		if _, err := a.WaitTopicRoute(ctx, topic); err != nil {
			return err
		}
		pr, err := producer.New(producer.Config{NamesrvAddrs: []string{br.NamesrvAddr()}, Logger: quiet})
		if err != nil {
			return err
		}
		if err := pr.Start(ctx); err != nil {
			return err
		}
		stops = append(stops, pr.Shutdown)
		if err := pr.Start(ctx); err != nil {
			return err
		}
		send = pr.SendFunc()
		c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{br.NamesrvAddr()}, Group: group,
			ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: quiet})
		if err != nil {
			return err
		}
		if err := c.Subscribe(topic, "*", ship); err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		stops = append(stops, c.Shutdown)
	case "kafka":
		cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			return err
		}
		defer cl.Close()
		pr, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: cl.ListenAddrs(), Logger: quiet})
		if err != nil {
			return err
		}
		stops = append(stops, pr.Shutdown)
		send = pr.SendFunc()
		c, err := kafka.NewConsumer(kafka.Config{Brokers: cl.ListenAddrs(), Group: group, Logger: quiet,
			HeartbeatInterval: 200 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, CommitInterval: 100 * time.Millisecond})
		if err != nil {
			return err
		}
		if err := c.Subscribe(topic, "*", ship); err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		stops = append(stops, c.Shutdown)
	default:
		return fmt.Errorf("--engine %q: want sluice or kafka", engine)
	}

	// The relay: polls every second, or at once when PostgreSQL notifies a commit.
	rcfg := outbox.RelayConfig{Send: send, PollInterval: time.Second, Logger: quiet}
	if d == outbox.Postgres {
		l, err := outboxpg.Listen(ctx, outboxpg.Config{ConnString: pgDSN, Channel: notify, Logger: quiet})
		if err != nil {
			return err
		}
		defer l.Close()
		rcfg.Wake = l.C()
	}
	relay, err := outbox.NewRelay(ob, rcfg)
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		return err
	}
	stops = append(stops, relay.Shutdown)

	// The order service: each order and its message in one transaction.
	committed := 0
	for i := 1; i <= orders; i++ {
		id := fmt.Sprintf("order-%s-%02d", sfx, i)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+ordersT+" (id) VALUES ("+p(1)+")", id); err != nil {
			_ = tx.Rollback()
			return err
		}
		customer := fmt.Sprintf("customer-%d", i%3)
		if err := ob.Add(ctx, tx, message.NewMessage(topic, []byte(id)).SetKeys(id).SetShardingKey(customer)); err != nil {
			_ = tx.Rollback()
			return err
		}
		if i%4 == 0 {
			fmt.Printf("order %s rolled back (its message goes with it)\n", id)
			if err := tx.Rollback(); err != nil {
				return err
			}
			continue
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		committed++
	}

	// Wait for the shipping service, then check: every committed order shipped once.
	var shipped, distinct int
	for {
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(DISTINCT order_id) FROM "+shipT).Scan(&shipped, &distinct); err != nil {
			return err
		}
		if distinct >= committed {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("only %d of %d committed orders shipped: %w", distinct, committed, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	var phantom int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+shipT+" s WHERE NOT EXISTS (SELECT 1 FROM "+ordersT+" o WHERE o.id = s.order_id)").Scan(&phantom); err != nil {
		return err
	}
	fmt.Printf("%s: %d orders committed, %d shipped (%d shipment rows), %d shipments for rolled-back orders\n", engine, committed, distinct, shipped, phantom)
	if shipped != committed || phantom != 0 {
		return errors.New("the tally is not exact")
	}
	return nil
}
