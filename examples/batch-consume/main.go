// Command batch-consume shows batch consumption: with ConsumeMessageBatchMaxSize the
// handler gets up to that many consecutive messages of one queue per call (at most 32,
// one pull's worth), so it can write them to a database in one statement. The whole
// batch succeeds or fails together: a failed batch is handed back message by message
// and each comes again through the retry topic. The program prints the batch sizes it
// saw and checks that every message was stored exactly once.
//
//	go run ./examples/batch-consume                          # embedded broker
//	go run ./examples/batch-consume --namesrv 127.0.0.1:9876 # an existing name server
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
)

const (
	topic = "ExamplePoints"
	group = "ExamplePointsGroup"
)

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker)")
	n := flag.Int("messages", 500, "messages to send")
	batch := flag.Int("batch", 16, "ConsumeMessageBatchMaxSize (1..32)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *namesrv, *n, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "batch-consume:", err)
		os.Exit(1)
	}
}

// table is a stand-in for a database table written one batch per statement.
type table struct {
	mu      sync.Mutex
	rows    map[string]int // body → times inserted
	batches map[int]int    // batch size → count
}

func (t *table) insertBatch(msgs []*message.MessageExt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		t.rows[string(m.Body)]++
	}
	t.batches[len(msgs)]++
}

func (t *table) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.rows)
}

func run(ctx context.Context, namesrv string, n, batch int) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if namesrv == "" {
		b, stopBroker, err := broker.StartEphemeral(broker.Config{Logger: log})
		if err != nil {
			return err
		}
		defer shutdown("broker", stopBroker)
		namesrv = b.NamesrvAddr()
		fmt.Println("embedded broker at", b.Addr(), "name server", namesrv)
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
	p, c, err := connect(namesrv, batch, log)
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)
	// Send first, so that a backlog lets batches fill up.
	for i := 0; i < n; i++ {
		if _, err := p.Send(ctx, message.NewMessage(topic, []byte(fmt.Sprintf("points user-%04d +10", i))).SetTag("Earn")); err != nil {
			return err
		}
	}

	db := &table{rows: map[string]int{}, batches: map[int]int{}}
	if err := c.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		db.insertBatch(msgs) // one statement for the whole batch
		return message.ConsumeSuccess, nil
	}); err != nil {
		return err
	}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer shutdown("consumer", c.Shutdown)
	deadline := time.Now().Add(time.Minute)
	for db.len() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("stored %d of %d messages within a minute", db.len(), n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // poll the table
		}
	}
	elapsed := time.Since(start)
	db.mu.Lock()
	defer db.mu.Unlock()
	for body, k := range db.rows {
		if k != 1 {
			return fmt.Errorf("%q stored %d times", body, k)
		}
	}
	sizes := make([]int, 0, len(db.batches))
	for s := range db.batches {
		sizes = append(sizes, s)
	}
	sort.Ints(sizes)
	var parts []string
	calls := 0
	for _, s := range sizes {
		parts = append(parts, fmt.Sprintf("%d×%d", db.batches[s], s))
		calls += db.batches[s]
	}
	fmt.Printf("stored %d messages in %d handler calls (%s) in %v; batch limit %d\n", n, calls, strings.Join(parts, " "), elapsed.Round(time.Millisecond), batch)
	return nil
}

// connect builds (without starting) the producer and the consumer: the only code that
// picks the engine (kafka.Config has ConsumeMessageBatchMaxSize too); run sends and
// handles through the transport contract.
func connect(namesrv string, batch int, log *slog.Logger) (transport.Producer, transport.Consumer, error) {
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs: []string{namesrv}, Group: group, ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		ConsumeMessageBatchMaxSize: batch, // default 1
		Logger:                     log,
	})
	if err != nil {
		return nil, nil, err
	}
	return p, c, nil
}

// shutdown calls a Shutdown(ctx) method with a 10 s deadline and reports a failure.
func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "batch-consume: %s shutdown: %v\n", what, err)
	}
}
