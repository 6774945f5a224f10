// Command ordered shows per-key ordered messages: every step of one order (created,
// paid, shipped, done) carries the order id as its sharding key, the producer's hash
// selector (FNV-32a of the key mod the queue count, as the official Go client computes
// it) sends all of them to one message queue, and an orderly push consumer handles each
// queue in queue-offset order, so every order's steps arrive in the order they were
// sent. The program checks that and exits non-zero if not.
//
//	go run ./examples/ordered                          # embedded broker
//	go run ./examples/ordered --namesrv 127.0.0.1:9876 # an existing name server
//
// A topic with a single queue would give one global order instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
)

const topic = "ExampleOrders"

var steps = []string{"created", "paid", "shipped", "done"}

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker)")
	orders := flag.Int("orders", 8, "number of orders")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *namesrv, *orders); err != nil {
		fmt.Fprintln(os.Stderr, "ordered:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namesrv string, orders int) error {
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

	p, c, err := connect(namesrv, log)
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)

	// Steps are sent round by round (all "created", then all "paid", ...), so orders
	// interleave on the wire; each SendSync returns before the next step of that order.
	for _, step := range steps {
		for o := 0; o < orders; o++ {
			id := fmt.Sprintf("order-%03d", o)
			msg := message.NewMessage(topic, []byte(id+" "+step)).SetShardingKey(id).SetKeys(id).SetTag(step)
			r, err := p.Send(ctx, msg)
			if err != nil {
				return fmt.Errorf("send %s %s: %w", id, step, err)
			}
			fmt.Printf("sent     %s %-8s -> %s offset %d\n", id, step, r.Queue, r.QueueOffset)
		}
	}

	// Consume: one handler call at a time per queue, in queue-offset order.
	var (
		mu      sync.Mutex
		next    = map[string]int{} // order id → index of the step expected next
		bad     []string
		allDone = make(chan struct{})
		left    = orders * len(steps)
	)
	err = c.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			id, step, _ := strings.Cut(string(m.Body), " ")
			want := steps[next[id]%len(steps)]
			if step != want {
				bad = append(bad, fmt.Sprintf("%s: got %s, expected %s", id, step, want))
			}
			next[id]++
			fmt.Printf("received %s %-8s from queue %d offset %d\n", id, step, m.QueueID, m.QueueOffset)
			if left--; left == 0 {
				close(allDone)
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
	case <-allDone:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("timed out: %d messages not received", left)
	case <-ctx.Done():
		return ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		return fmt.Errorf("out of order: %s", strings.Join(bad, "; "))
	}
	fmt.Printf("all %d orders arrived step by step, in order\n", orders)
	return nil
}

// connect builds (without starting) the producer and the consumer: the only code that
// picks the engine (Kafka: one partition per sharding key, and kafka.Config Orderly);
// run sends and handles through the transport contract.
func connect(namesrv string, log *slog.Logger) (transport.Producer, transport.Consumer, error) {
	// Every send picks its queue by the message's sharding key.
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Selector: producer.HashSelector(), Logger: log})
	if err != nil {
		return nil, nil, err
	}
	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{namesrv}, Group: "ExampleOrderedGroup",
		Orderly: true, ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: log})
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
		fmt.Fprintf(os.Stderr, "ordered: %s shutdown: %v\n", what, err)
	}
}
