// Command inbox-consumer shows the transactional inbox (package inbox): a push consumer
// credits payments to account balances in a SQL database, and records each payment's key
// in the inbox table in the same transaction. Every payment is sent twice (as a producer
// retry after a lost answer would), and the first attempt at one payment fails after
// writing its credit (rolled back, delivered again). The balances come out right: each
// payment credited once.
//
//	go run ./examples/inbox-consumer                                   # embedded broker + SQLite file
//	go run ./examples/inbox-consumer --postgres 'postgres://u:p@127.0.0.1:5432/db?sslmode=disable'
//	go run ./examples/inbox-consumer --namesrv 127.0.0.1:9876           # an existing broker
//
// The handler receives the inbox transaction (*sql.Tx) and does all its writes through it;
// the inbox commits them together with the inbox row, so a crash, a failure or a panic
// leaves neither, and a copy of an already committed payment is acknowledged without
// running the handler. Tables get names unique to the run; with --postgres they are
// dropped at the end. The exit status is 0 only if every balance is exactly right.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
)

const (
	topic = "InboxDemoPayments"
	group = "inbox_demo_accounts"
)

type payment struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

func main() {
	pg := flag.String("postgres", "", "PostgreSQL DSN (default: an SQLite file in a temporary directory)")
	namesrv := flag.String("namesrv", "", "name server host:port (default: an embedded broker with 1 s delay levels)")
	timeout := flag.Duration("timeout", time.Minute, "how long to wait for every payment to be credited")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *pg, *namesrv, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "inbox-consumer:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, pg, namesrv string, timeout time.Duration) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var b [4]byte
	_, _ = rand.Read(b[:])
	run := hex.EncodeToString(b[:])

	// The database: SQLite (modernc.org/sqlite, pure Go) or PostgreSQL (pgx).
	dialect, driver, dsn := inbox.SQLite, "sqlite", ""
	if pg != "" {
		dialect, driver, dsn = inbox.Postgres, "pgx", pg
	} else {
		dir, err := os.MkdirTemp("", "inbox-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dsn = inbox.SQLiteDSN(filepath.Join(dir, "accounts.db"))
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	inboxTable, accounts := "demo_inbox_"+run, "demo_accounts_"+run
	if dialect == inbox.Postgres {
		defer func() {
			for _, t := range []string{inboxTable, accounts} {
				_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+t)
			}
		}()
	}
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: dialect, Group: group, Table: inboxTable, Logger: log})
	if err != nil {
		return err
	}
	if err := ib.CreateTable(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+accounts+" (id VARCHAR(64) PRIMARY KEY, balance_cents BIGINT NOT NULL)"); err != nil {
		return err
	}
	for _, acct := range []string{"alice", "bob"} {
		if _, err := db.ExecContext(ctx, "INSERT INTO "+accounts+" (id, balance_cents) VALUES ('"+acct+"', 0)"); err != nil {
			return err
		}
	}
	fmt.Printf("database: %s, inbox table %s, accounts table %s\n", dialect, inboxTable, accounts)

	if namesrv == "" {
		br, stopBroker, err := broker.StartEphemeral(broker.Config{Logger: log, MessageDelayLevel: strings.TrimSpace(strings.Repeat("1s ", 18))})
		if err != nil {
			return err
		}
		defer shutdown("broker", stopBroker)
		namesrv = br.NamesrvAddr()
		fmt.Println("embedded broker, name server", namesrv)
	}
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
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

	// The handler: credit the account, through tx only. The first attempt at pay-3 fails
	// after its UPDATE: the inbox rolls the credit back with the inbox row.
	update := "UPDATE " + accounts + " SET balance_cents = balance_cents + ? WHERE id = ?"
	if dialect == inbox.Postgres {
		update = "UPDATE " + accounts + " SET balance_cents = balance_cents + $1 WHERE id = $2"
	}
	var failedOnce, credits atomic.Int64
	credit := func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		for _, m := range msgs {
			if m.Property("DEMO_RUN") != run {
				continue // an earlier run's payment on a reused broker
			}
			var p payment
			if err := json.Unmarshal(m.Body, &p); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, update, p.Cents, p.Account); err != nil {
				return err
			}
			if p.ID == "pay-3" && failedOnce.CompareAndSwap(0, 1) {
				fmt.Printf("handler: credited %s then FAILED (rolled back, comes again)\n", p.ID)
				return errors.New("simulated failure after the write")
			}
			credits.Add(1)
			fmt.Printf("handler: credited %d cents to %s for %s (key %s)\n", p.Cents, p.Account, p.ID, middleware.StableKey(m))
		}
		return nil
	}
	p, c, err := connect(namesrv, log)
	if err != nil {
		return err
	}
	if err := c.Subscribe(topic, "*", ib.Consume(credit)); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer shutdown("consumer", c.Shutdown)
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)
	want := map[string]int64{}
	pays := []payment{{"pay-1", "alice", 1000}, {"pay-2", "bob", 250}, {"pay-3", "alice", 599}, {"pay-4", "bob", 4100}}
	for _, pay := range pays {
		body, _ := json.Marshal(pay)
		for copyNo := 1; copyNo <= 2; copyNo++ { // each payment twice, the same key
			msg := message.NewMessage(topic, body).SetKeys(pay.ID).SetProperty("DEMO_RUN", run)
			if _, err := p.Send(ctx, msg); err != nil {
				return err
			}
		}
		want[pay.Account] += pay.Cents
		fmt.Printf("sent %s (%d cents to %s) twice\n", pay.ID, pay.Cents, pay.Account)
	}

	// Wait until every payment has an inbox row.
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for done := 0; done < len(pays); {
		done = 0
		for _, pay := range pays {
			if ok, _, err := ib.Processed(wctx, pay.ID); err == nil && ok {
				done++
			}
		}
		if done == len(pays) {
			break
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("only %d of %d payments credited within %v", done, len(pays), timeout)
		case <-tick.C:
		}
	}
	var problems []string
	for acct, cents := range want {
		var got int64
		if err := db.QueryRowContext(ctx, "SELECT balance_cents FROM "+accounts+" WHERE id = '"+acct+"'").Scan(&got); err != nil {
			return err
		}
		fmt.Printf("balance of %s: %d cents (want %d)\n", acct, got, cents)
		if got != cents {
			problems = append(problems, fmt.Sprintf("%s has %d cents, want %d", acct, got, cents))
		}
	}
	if n := credits.Load(); n != int64(len(pays)) {
		problems = append(problems, fmt.Sprintf("%d committed credits, want %d", n, len(pays)))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Printf("OK: %d payments sent twice each, one failed attempt rolled back; every payment credited exactly once\n", len(pays))
	return nil
}

// connect builds (without starting) the producer and the consumer: the only lines that
// pick the engine. run sends and handles through the transport contract, so that code
// runs unchanged with kafka.NewProducer and kafka.NewConsumer here (examples/outbox runs
// on all three engines).
func connect(namesrv string, log *slog.Logger) (transport.Producer, transport.Consumer, error) {
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{namesrv}, Group: group,
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Middlewares: []middleware.ConsumeMiddleware{middleware.Recover()}, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return p, c, nil
}

func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "inbox-consumer: %s shutdown: %v\n", what, err)
	}
}
