// Command outbox shows the transactional outbox (package outbox), and one program running
// unchanged on three engines: an order service writes each order row and its
// "OrderPlaced" message in one SQL transaction (outbox.Add), one order in four is rolled
// back, and a relay sends what committed. A shipping consumer applies each message
// through the transactional inbox. The exit status is 0 only if every committed order was
// shipped exactly once and no rolled-back order was.
//
//	go run ./examples/outbox                                           # embedded Sluice broker + SQLite file
//	go run ./examples/outbox -engine kafka                             # embedded Kafka-protocol cluster
//	go run ./examples/outbox -engine kafka -brokers 127.0.0.1:9092     # an Apache Kafka cluster
//	go run ./examples/outbox -engine rocketmq -namesrv 127.0.0.1:9876  # an Apache RocketMQ cluster
//	go run ./examples/outbox -postgres 'postgres://u:p@127.0.0.1:5432/db?sslmode=disable'
//
// Only connect knows the engine: it builds a transport.Producer and a transport.Consumer.
// Everything else — the handler, its middleware, the relay, the checks — is the same code
// on all three. With -postgres the relay is also woken by LISTEN/NOTIFY (package
// outbox/outboxpg) instead of waiting for its next poll.
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
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"github.com/twmb/franz-go/pkg/kfake"
	_ "modernc.org/sqlite" // driver "sqlite"

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
	"github.com/sluicemq/sluice/transport"
)

const orders = 20

// options say which engine to use and where it is.
type options struct {
	engine   string // sluice, rocketmq or kafka
	namesrv  string // rocketmq: the name server
	brokers  string // kafka: bootstrap servers; "" starts an embedded cluster
	postgres string // PostgreSQL DSN; "" uses an SQLite file
}

func main() {
	var o options
	flag.StringVar(&o.engine, "engine", "sluice", "sluice (embedded broker), rocketmq (an Apache RocketMQ cluster, see -namesrv) or kafka (see -brokers)")
	flag.StringVar(&o.namesrv, "namesrv", "", "rocketmq: the name server, host:port")
	flag.StringVar(&o.brokers, "brokers", "", "kafka: bootstrap servers host:port[,host:port] (default: an embedded Kafka-protocol cluster)")
	flag.StringVar(&o.postgres, "postgres", "", "PostgreSQL DSN (default: an SQLite file in a temporary directory)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "outbox example:", err)
		os.Exit(1)
	}
}

// connect is the only engine-specific code: it starts the embedded broker or cluster
// when there is none to use, creates topic, and builds (without starting) a producer and
// a consumer of group whose handlers are wrapped with mws. stop ends what it started.
func connect(ctx context.Context, o options, topic, group string, mws []middleware.ConsumeMiddleware, log *slog.Logger) (
	p transport.Producer, c transport.Consumer, stop func(), err error) {
	stop = func() {}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	switch o.engine {
	case "sluice", "rocketmq":
		namesrv := o.namesrv
		if o.engine == "sluice" {
			br, stopBroker, err := broker.StartEphemeral(broker.Config{Logger: log})
			if err != nil {
				return nil, nil, stop, err
			}
			stop = func() { shutdown(stopBroker) }
			namesrv = br.NamesrvAddr()
		} else if namesrv == "" {
			return nil, nil, stop, errors.New("-engine rocketmq needs -namesrv host:port")
		}
		a, err := admin.New(admin.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
		if err != nil {
			return nil, nil, stop, err
		}
		defer a.Close()
		if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 4}); err != nil {
			return nil, nil, stop, err
		}
		if _, err := a.WaitTopicRoute(ctx, topic); err != nil {
			return nil, nil, stop, err
		}
		if p, err = producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Logger: log}); err != nil {
			return nil, nil, stop, err
		}
		c, err = consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{namesrv}, Group: group,
			ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Middlewares: mws, Logger: log})
		return p, c, stop, err
	case "kafka":
		brokers := strings.Split(o.brokers, ",")
		if o.brokers == "" {
			cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
			if err != nil {
				return nil, nil, stop, err
			}
			stop = cl.Close
			brokers = cl.ListenAddrs()
		}
		if err := kafka.EnsureTopicsAt(ctx, brokers, 4, topic); err != nil {
			return nil, nil, stop, err
		}
		if p, err = kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers, Logger: log}); err != nil {
			return nil, nil, stop, err
		}
		c, err = kafka.NewConsumer(kafka.Config{Brokers: brokers, Group: group, Middlewares: mws, Logger: log,
			HeartbeatInterval: 200 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond, CommitInterval: 100 * time.Millisecond})
		return p, c, stop, err
	default:
		return nil, nil, stop, fmt.Errorf("-engine %q: want sluice, rocketmq or kafka", o.engine)
	}
}

// run sets up the database, connects to the engine and runs the shop on it.
func run(ctx context.Context, o options) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The database: the service's orders, the outbox, and the shipping service's tables.
	d, dsn := outbox.SQLite, ""
	if o.postgres != "" {
		d, dsn = outbox.Postgres, o.postgres
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
	sfx := hex.EncodeToString(b) // names unique to the run: tables, topic and group
	topic, group := "OrderPlaced-"+sfx, "shipping-"+sfx
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

	// The engine, and the same consumer middleware on each: Recover turns a handler panic
	// into a failed delivery (delivered again later).
	p, c, stop, err := connect(ctx, o, topic, group, []middleware.ConsumeMiddleware{middleware.Recover()}, quiet)
	if err != nil {
		return err
	}
	defer stop()

	// The shipping service: each message applied once, through the inbox.
	ph := d.Placeholder
	ship := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		for _, m := range msgs {
			fmt.Printf("shipping order %s (key %s)\n", m.Body, middleware.StableKey(m))
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+shipT+" (order_id) VALUES ("+ph(1)+")", string(m.Body)); err != nil {
				return err
			}
		}
		return nil
	})
	if err := c.Subscribe(topic, "*", ship); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer shutdown(c.Shutdown)
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown(p.Shutdown)

	// The relay: polls every second, or at once when PostgreSQL notifies a commit.
	rcfg := outbox.RelayConfig{Send: p.SendFunc(), PollInterval: time.Second, Logger: quiet}
	if d == outbox.Postgres {
		l, err := outboxpg.Listen(ctx, outboxpg.Config{ConnString: o.postgres, Channel: notify, Logger: quiet})
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
	defer shutdown(relay.Shutdown)

	// The order service: each order and its message in one transaction.
	committed := 0
	for i := 1; i <= orders; i++ {
		id := fmt.Sprintf("order-%s-%02d", sfx, i)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+ordersT+" (id) VALUES ("+ph(1)+")", id); err != nil {
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
	fmt.Printf("%s: %d orders committed, %d shipped (%d shipment rows), %d shipments for rolled-back orders\n", o.engine, committed, distinct, shipped, phantom)
	if shipped != committed || phantom != 0 {
		return errors.New("the tally is not exact")
	}
	return nil
}

// shutdown runs a Shutdown bounded by 15 s.
func shutdown(f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "outbox example: shutdown:", err)
	}
}
