// Command batch shows batch sends: many small messages of one topic go to the broker in
// few SEND_BATCH_MESSAGE requests. producer.SplitBatch cuts the slice into batches whose
// encoded size stays within the 4 MiB limit (counted in bytes: the bodies here are
// multi-byte UTF-8), and each batch lands in one message queue at consecutive offsets. A
// push consumer then counts every message once.
//
//	go run ./examples/batch                          # embedded broker, 20000 messages
//	go run ./examples/batch --n 100000 --size 300
//	go run ./examples/batch --namesrv 127.0.0.1:9876 # an existing name server
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
)

const topic = "ExampleBatch"

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker)")
	n := flag.Int("n", 20000, "number of messages")
	size := flag.Int("size", 500, "body size in characters (\"ü\", 2 bytes each)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *namesrv, *n, *size); err != nil {
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namesrv string, n, size int) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if namesrv == "" {
		b, stopBroker, err := broker.StartEphemeral(broker.Config{Logger: log})
		if err != nil {
			return err
		}
		defer shutdown("broker", stopBroker)
		namesrv = b.NamesrvAddr()
		fmt.Println("embedded broker at", b.Addr(), "name server", namesrv)
	}
	// SendBatch is the RocketMQ producer's own (not in transport.Producer): p stays concrete.
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	body := strings.Repeat("ü", size)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(topic, []byte(body)).SetProperty("run", run).SetKeys("item-" + strconv.Itoa(i))
	}
	batches, err := producer.SplitBatch(msgs, producer.DefaultMaxMessageSize)
	if err != nil {
		return err
	}
	start := time.Now()
	for i, b := range batches {
		r, err := p.SendBatch(ctx, b)
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		fmt.Printf("batch %d: %d messages -> %s offsets %d..%d\n", i, len(b), r.Queue, r.QueueOffset, r.QueueOffset+int64(len(b))-1)
	}
	took := time.Since(start)
	fmt.Printf("sent %d messages (%d body bytes) in %d batches in %v\n", n, n*len(body), len(batches), took.Round(time.Millisecond))

	var (
		mu   sync.Mutex
		seen = map[string]int{}
		done = make(chan struct{})
	)
	c, err := newConsumer(namesrv, log)
	if err != nil {
		return err
	}
	err = c.Subscribe(topic, "*", func(_ context.Context, ms []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			if m.Property("run") != run {
				continue // from an earlier run against the same broker
			}
			if seen[m.Property(message.PropertyKeys)]++; len(seen) == n {
				select {
				case <-done:
				default:
					close(done)
				}
			}
		}
		return message.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer shutdown("consumer", c.Shutdown)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("timed out waiting for the consumer")
	case <-ctx.Done():
		return ctx.Err()
	}
	fmt.Printf("consumer received all %d messages\n", n)
	return nil
}

// newConsumer is the only consumer code that picks the engine; run consumes through the
// transport contract.
func newConsumer(namesrv string, log *slog.Logger) (transport.Consumer, error) {
	return consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{namesrv}, Group: "ExampleBatchGroup",
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, ConsumeMessageBatchMaxSize: 32, Logger: log})
}

// shutdown calls a Shutdown(ctx) method with a 10 s deadline and reports a failure.
func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "batch: %s shutdown: %v\n", what, err)
	}
}
