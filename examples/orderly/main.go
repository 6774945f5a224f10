// Command orderly shows orderly consumption with local retries: an orderly push
// consumer locks each message queue on the broker and hands its messages to the
// handler one call at a time, in queue-offset order. When the handler fails (here: the
// "charge" step of order-001 fails twice, as if a payment gateway timed out), the
// consumer suspends that queue for SuspendCurrentQueueTime and runs the same message
// again, while the later steps of that queue wait. A message that keeps failing
// ("poison") goes to the group's dead-letter queue after MaxReconsumeTimes local retries
// and the queue moves on. The program checks the order and exits non-zero if it is
// broken.
//
//	go run ./examples/orderly                          # embedded broker
//	go run ./examples/orderly --namesrv 127.0.0.1:9876 # an existing name server
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
	topic = "ExampleOrderly"
	group = "ExampleOrderlyGroup"
)

var steps = []string{"create", "charge", "ship"}

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *namesrv); err != nil {
		fmt.Fprintln(os.Stderr, "orderly:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namesrv string) error {
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
	if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 2}); err != nil {
		return err
	}
	if _, err := a.WaitTopicRoute(ctx, topic); err != nil {
		return err
	}

	p, err := newProducer(namesrv, log)
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)
	// Two orders plus a poison message; each order's steps share its sharding key, so
	// they go to one queue in sending order.
	var sent int
	for o := 0; o < 2; o++ {
		id := fmt.Sprintf("order-%03d", o)
		for _, step := range steps {
			if _, err := p.Send(ctx, message.NewMessage(topic, []byte(id+" "+step)).SetShardingKey(id).SetKeys(id)); err != nil {
				return err
			}
			sent++
		}
	}
	if _, err := p.Send(ctx, message.NewMessage(topic, []byte("poison")).SetShardingKey("order-001").SetKeys("poison")); err != nil {
		return err
	}
	sent++

	var (
		mu       sync.Mutex
		done     = map[string][]string{} // order → steps handled, in order
		finished = make(chan struct{})
		closed   bool
		count    int
	)
	// SuspendCurrentQueueAMoment and its suspend time are the RocketMQ orderly consumer's
	// own, so the consumer stays concrete.
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs: []string{namesrv}, Group: group, Orderly: true, ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		SuspendCurrentQueueTime: 300 * time.Millisecond, // default 1 s
		MaxReconsumeTimes:       consumer.Retries(3),    // default for orderly: unlimited
		Logger:                  log,
	})
	if err != nil {
		return err
	}
	err = c.Subscribe(topic, "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		m := msgs[0]
		body := string(m.Body)
		fmt.Printf("queue %d offset %d: %-18s (attempt %d)\n", m.QueueID, m.QueueOffset, body, m.ReconsumeTimes+1)
		if body == "poison" || (body == "order-001 charge" && m.ReconsumeTimes < 2) {
			return consumer.SuspendCurrentQueueAMoment, nil
		}
		mu.Lock()
		defer mu.Unlock()
		order, step, _ := strings.Cut(body, " ")
		done[order] = append(done[order], step)
		if count++; count == sent-1 && !closed {
			closed = true
			close(finished)
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
	case <-finished:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("not every step was handled within a minute")
	case <-ctx.Done():
		return ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	for order, got := range done {
		if strings.Join(got, ",") != strings.Join(steps, ",") {
			return fmt.Errorf("%s handled as %v, want %v", order, got, steps)
		}
		fmt.Printf("%s: %s, in order\n", order, strings.Join(got, " → "))
	}
	// The poison message went to %DLQ%<group> after 3 local retries.
	deadline := time.Now().Add(10 * time.Second)
	for {
		dl, err := a.ListDLQ(ctx, group, admin.DLQListOptions{})
		if err != nil {
			return err
		}
		if len(dl) > 0 {
			fmt.Printf("dead letter: %q from %s (keys %v) — re-drive it with: sluice admin dlq resend --group %s\n",
				dl[0].Message.Body, dl[0].OriginTopic, dl[0].Message.Keys(), group)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the poison message is not in the DLQ")
		}
		time.Sleep(100 * time.Millisecond) // poll the DLQ until the deadline
	}
}

// newProducer is the only producer code that picks the engine (HashSelector: one queue
// per sharding key); run sends through the transport contract.
func newProducer(namesrv string, log *slog.Logger) (transport.Producer, error) {
	return producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Selector: producer.HashSelector(), Logger: log})
}

// shutdown calls a Shutdown(ctx) method with a 10 s deadline and reports a failure.
func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "orderly: %s shutdown: %v\n", what, err)
	}
}
