// Package outboxdemo is the quickstart's order service: it places orders in a SQL
// database, each order row and its "OrderPlaced" message written in one transaction
// through the transactional outbox (package outbox), declines some (rolled back), and
// crashes in the middle of one transaction. A relay sends the committed messages to the
// broker (a Sluice/RocketMQ name server or Kafka); a shipping service consumes them
// through the transactional inbox and books one shipment per order. [Run] tallies: every
// committed order announced and shipped exactly once, nothing for the others.
package outboxdemo

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/outbox"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
)

// Topic and Group are the demo's topic and the shipping service's consumer group.
const (
	Topic = "OrderPlaced"
	Group = "shipping_service"
)

// Options configures [Run]. DB, Dialect and one of NamesrvAddr and KafkaBrokers are
// required.
type Options struct {
	// NamesrvAddr is the name server of a Sluice (or Apache RocketMQ) broker; the topic is
	// created with 4 queues when missing.
	NamesrvAddr string
	// KafkaBrokers are Kafka bootstrap addresses (instead of NamesrvAddr); the topic is
	// created with 4 partitions when missing.
	KafkaBrokers []string
	// DB is the order service's database (the shipping service uses it too, with its own
	// tables). The demo's tables get names unique to the run and are dropped at the end.
	DB      *sql.DB
	Dialect outbox.Dialect
	// Orders is how many orders the service places. Default 40.
	Orders int
	// CrashAt is the order whose transaction the service crashes in (1-based). Default
	// Orders/2.
	CrashAt int
	// Timeout bounds the wait for the shipping service. Default 60 s.
	Timeout time.Duration
	// Out receives one line per step. Default: discarded.
	Out io.Writer
	// Logger receives the clients' logs. Default: discarded.
	Logger *slog.Logger
}

// Tally is what Run counted, per order.
type Tally struct {
	Placed    int // transactions begun
	Committed int // order rows committed
	Declined  int // rolled back on purpose (card declined)
	Crashed   int // the transaction the crash cut off (never committed)
	Shipped   int // committed orders with exactly one shipment
	Lost      int // committed orders without a shipment
	Phantom   int // shipments for orders that were not committed
	Doubled   int // orders shipped more than once
	Resent    int // messages the broker received again (re-sends after the crash; absorbed by the inbox)
}

// OK reports whether every committed order was shipped exactly once and nothing else was.
func (t Tally) OK() bool {
	return t.Committed > 0 && t.Shipped == t.Committed && t.Lost == 0 && t.Phantom == 0 && t.Doubled == 0
}

func (o *Options) setDefaults() error {
	if o.DB == nil || !o.Dialect.Valid() {
		return errors.New("outboxdemo: Options.DB and Options.Dialect are required")
	}
	if (o.NamesrvAddr == "") == (len(o.KafkaBrokers) == 0) {
		return errors.New("outboxdemo: set one of Options.NamesrvAddr and Options.KafkaBrokers")
	}
	if o.Orders <= 0 {
		o.Orders = 40
	}
	if o.CrashAt <= 0 || o.CrashAt > o.Orders {
		o.CrashAt = max(o.Orders/2, 1)
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

type demo struct {
	o                         Options
	orders, shipments, suffix string
	ob                        *outbox.Outbox
	ib                        *inbox.Inbox
	mu                        sync.Mutex
	copies                    map[string]int
	stops                     []func(context.Context) error
	dropTables                []string
}

// Run places the orders, crashes, restarts, waits until the shipping service has caught
// up (or Timeout passes) and returns the tally; the error reports a step that failed or a
// tally that is not OK.
func Run(ctx context.Context, o Options) (Tally, error) {
	var t Tally
	if err := o.setDefaults(); err != nil {
		return t, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	d := &demo{o: o, suffix: hex.EncodeToString(b), copies: map[string]int{}}
	d.orders, d.shipments = "demo_orders_"+d.suffix, "demo_shipments_"+d.suffix
	defer d.cleanup()
	if err := d.setup(ctx); err != nil {
		return t, err
	}
	send, err := d.sender(ctx)
	if err != nil {
		return t, err
	}
	if err := d.startShipping(ctx); err != nil {
		return t, err
	}
	relay, err := d.startRelay(ctx, send)
	if err != nil {
		return t, err
	}
	fmt.Fprintf(o.Out, "order service: placing %d orders (every 5th card is declined); it crashes inside order %d's transaction\n", o.Orders, o.CrashAt)
	for i := 1; i <= o.Orders; i++ {
		t.Placed++
		switch {
		case i == o.CrashAt:
			if err := d.crash(ctx, i, relay); err != nil {
				return t, err
			}
			t.Crashed++
			if relay, err = d.startRelay(ctx, send); err != nil {
				return t, err
			}
			fmt.Fprintf(o.Out, "order service and relay restarted\n")
		case i%5 == 0:
			if err := d.place(ctx, i, false); err != nil {
				return t, err
			}
			t.Declined++
		default:
			if err := d.place(ctx, i, true); err != nil {
				return t, err
			}
		}
	}
	if err := d.wait(ctx); err != nil {
		return d.tally(ctx, t), err
	}
	t = d.tally(ctx, t)
	fmt.Fprintf(o.Out, "tally: %d orders placed, %d committed, %d declined, %d cut off by the crash; %d shipped once, lost %d, phantom %d, doubled %d; re-sent copies absorbed by the inbox %d\n",
		t.Placed, t.Committed, t.Declined, t.Crashed, t.Shipped, t.Lost, t.Phantom, t.Doubled, t.Resent)
	if !t.OK() {
		return t, fmt.Errorf("outboxdemo: tally not exact: %+v", t)
	}
	return t, nil
}

func (d *demo) exec(ctx context.Context, q string) error {
	_, err := d.o.DB.ExecContext(ctx, q)
	return err
}

func (d *demo) setup(ctx context.Context) error {
	typ := "VARCHAR(64)"
	if d.o.Dialect == outbox.MySQL {
		typ = "VARBINARY(64)"
	}
	if err := d.exec(ctx, "CREATE TABLE "+d.orders+" (id "+typ+" PRIMARY KEY, customer "+typ+" NOT NULL)"); err != nil {
		return fmt.Errorf("outboxdemo: create %s: %w", d.orders, err)
	}
	d.dropTables = append(d.dropTables, d.orders)
	if err := d.exec(ctx, "CREATE TABLE "+d.shipments+" (order_id "+typ+" NOT NULL)"); err != nil {
		return fmt.Errorf("outboxdemo: create %s: %w", d.shipments, err)
	}
	d.dropTables = append(d.dropTables, d.shipments)
	ob, err := outbox.New(outbox.Config{DB: d.o.DB, Dialect: d.o.Dialect, Table: "demo_outbox_" + d.suffix, ValidateTopic: kafka.ValidateTopic})
	if err != nil {
		return err
	}
	d.dropTables = append(d.dropTables, ob.Table(), ob.Table()+"_keys")
	if err := ob.CreateTable(ctx); err != nil {
		return err
	}
	d.ob = ob
	ib, err := inbox.New(inbox.Config{DB: d.o.DB, Dialect: d.o.Dialect, Group: Group, Table: "demo_inbox_" + d.suffix, Logger: d.o.Logger})
	if err != nil {
		return err
	}
	d.dropTables = append(d.dropTables, ib.Table())
	if err := ib.CreateTable(ctx); err != nil {
		return err
	}
	d.ib = ib
	return nil
}

// sender returns the relay's send function to the broker, creating the topic.
func (d *demo) sender(ctx context.Context) (middleware.SendFunc, error) {
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if d.o.NamesrvAddr != "" {
		a, err := admin.New(admin.Config{NamesrvAddrs: []string{d.o.NamesrvAddr}, Logger: d.o.Logger})
		if err != nil {
			return nil, err
		}
		defer a.Close()
		if _, err := a.CreateTopic(tctx, admin.TopicSpec{Topic: Topic, Queues: 4}); err != nil {
			return nil, fmt.Errorf("outboxdemo: create topic %s: %w", Topic, err)
		}
		if _, err := a.WaitTopicRoute(tctx, Topic); err != nil {
			return nil, fmt.Errorf("outboxdemo: route of %s: %w", Topic, err)
		}
		// One customer's orders go to one queue (hash of the sharding key), in order.
		p, err := producer.New(producer.Config{NamesrvAddrs: []string{d.o.NamesrvAddr}, Selector: producer.HashSelector(), Logger: d.o.Logger})
		if err != nil {
			return nil, err
		}
		if err := p.Start(ctx); err != nil {
			return nil, err
		}
		d.stops = append(d.stops, p.Shutdown)
		return p.SendFunc(), nil
	}
	if err := kafka.EnsureTopicsAt(tctx, d.o.KafkaBrokers, 4, Topic); err != nil {
		return nil, fmt.Errorf("outboxdemo: create topic %s: %w", Topic, err)
	}
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: d.o.KafkaBrokers, Logger: d.o.Logger})
	if err != nil {
		return nil, err
	}
	d.stops = append(d.stops, p.Shutdown)
	if err := p.Start(ctx); err != nil {
		return nil, err
	}
	return p.SendFunc(), nil
}

// startShipping starts the shipping service: one shipment row per new order message, in
// the inbox transaction.
func (d *demo) startShipping(ctx context.Context) error {
	insert := "INSERT INTO " + d.shipments + " (order_id) VALUES (" + d.o.Dialect.Placeholder(1) + ")"
	h := d.ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		for _, m := range msgs {
			if _, err := tx.ExecContext(ctx, insert, middleware.StableKey(m)); err != nil {
				return err
			}
		}
		return nil
	})
	count := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		d.mu.Lock()
		for _, m := range msgs {
			d.copies[fmt.Sprintf("%s/%d/%d", middleware.StableKey(m), m.QueueID, m.QueueOffset)]++
		}
		d.mu.Unlock()
		return h(ctx, msgs)
	}
	// Only the constructor depends on the engine; the rest is the transport contract.
	var c transport.Consumer
	var err error
	if d.o.NamesrvAddr != "" {
		c, err = consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{d.o.NamesrvAddr}, Group: Group,
			ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: d.o.Logger})
	} else {
		c, err = kafka.NewConsumer(kafka.Config{Brokers: d.o.KafkaBrokers, Group: Group, Logger: d.o.Logger,
			HeartbeatInterval: 200 * time.Millisecond, JoinGroupBackoff: 200 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond,
			CommitInterval: 100 * time.Millisecond})
	}
	if err != nil {
		return err
	}
	if err := c.Subscribe(Topic, "*", count); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	d.stops = append(d.stops, c.Shutdown)
	return nil
}

func (d *demo) startRelay(ctx context.Context, send middleware.SendFunc) (*outbox.Relay, error) {
	r, err := outbox.NewRelay(d.ob, outbox.RelayConfig{Send: send, PollInterval: 50 * time.Millisecond, Lease: 5 * time.Second,
		BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, Logger: d.o.Logger})
	if err != nil {
		return nil, err
	}
	if err := r.Start(ctx); err != nil {
		return nil, err
	}
	d.stops = append(d.stops, r.Shutdown)
	return r, nil
}

func (d *demo) orderID(i int) string { return fmt.Sprintf("order-%s-%03d", d.suffix, i) }

// begin starts order i's transaction: the order row and its outbox row.
func (d *demo) begin(ctx context.Context, i int) (*sql.Tx, error) {
	id, customer := d.orderID(i), fmt.Sprintf("customer-%d", i%4)
	tx, err := d.o.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	p := d.o.Dialect.Placeholder
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+d.orders+" (id, customer) VALUES ("+p(1)+", "+p(2)+")", id, customer); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	msg := message.NewMessage(Topic, []byte(`{"order":"`+id+`","customer":"`+customer+`"}`)).SetKeys(id).SetShardingKey(customer).SetTag("placed")
	if err := d.ob.Add(ctx, tx, msg); err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return tx, nil
}

func (d *demo) place(ctx context.Context, i int, commit bool) error {
	tx, err := d.begin(ctx, i)
	if err != nil {
		return fmt.Errorf("outboxdemo: order %d: %w", i, err)
	}
	if !commit {
		return tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("outboxdemo: order %d: commit: %w", i, err)
	}
	return nil
}

// crash cuts order i's transaction off before its commit (its context is cancelled:
// database/sql rolls it back, as the database does when a crashed process's connection
// drops), and stops the relay abruptly (its in-flight claims are released or left to
// expire).
func (d *demo) crash(ctx context.Context, i int, relay *outbox.Relay) error {
	cctx, cancel := context.WithCancel(ctx)
	if _, err := d.begin(cctx, i); err != nil {
		cancel()
		return fmt.Errorf("outboxdemo: order %d: %w", i, err)
	}
	cancel()
	sctx, scancel := context.WithTimeout(ctx, time.Millisecond)
	defer scancel()
	_ = relay.Shutdown(sctx)
	fmt.Fprintf(d.o.Out, "order service crashed inside order %d's transaction (order row and outbox row written, not committed)\n", i)
	return nil
}

func (d *demo) count(ctx context.Context, q string) (int, error) {
	var n int
	err := d.o.DB.QueryRowContext(ctx, q).Scan(&n)
	return n, err
}

// wait waits until every committed order has a shipment and the outbox is empty.
func (d *demo) wait(ctx context.Context) error {
	deadline := time.Now().Add(d.o.Timeout)
	for {
		committed, err1 := d.count(ctx, "SELECT COUNT(*) FROM "+d.orders)
		shipped, err2 := d.count(ctx, "SELECT COUNT(DISTINCT order_id) FROM "+d.shipments)
		st, err3 := d.ob.Stats(ctx)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		if shipped >= committed && st.Pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outboxdemo: after %v, %d of %d committed orders shipped, %d messages unsent", d.o.Timeout, shipped, committed, st.Pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *demo) tally(ctx context.Context, t Tally) Tally {
	committed := map[string]bool{}
	if rows, err := d.o.DB.QueryContext(ctx, "SELECT id FROM "+d.orders); err == nil {
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				committed[id] = true
			}
		}
		rows.Close()
	}
	shipped := map[string]int{}
	if rows, err := d.o.DB.QueryContext(ctx, "SELECT order_id FROM "+d.shipments); err == nil {
		for rows.Next() {
			var id string
			if rows.Scan(&id) == nil {
				shipped[id]++
			}
		}
		rows.Close()
	}
	t.Committed = len(committed)
	for id, n := range shipped {
		switch {
		case !committed[id]:
			t.Phantom++
		case n > 1:
			t.Doubled++
		default:
			t.Shipped++
		}
	}
	for id := range committed {
		if shipped[id] == 0 {
			t.Lost++
		}
	}
	d.mu.Lock()
	perKey := map[string]int{}
	for k := range d.copies {
		perKey[k[:strings.IndexByte(k, '/')]]++
	}
	d.mu.Unlock()
	for _, n := range perKey {
		t.Resent += n - 1
	}
	return t
}

func (d *demo) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for i := len(d.stops) - 1; i >= 0; i-- {
		_ = d.stops[i](ctx)
	}
	for _, t := range d.dropTables {
		_ = d.exec(ctx, "DROP TABLE IF EXISTS "+t)
	}
}
