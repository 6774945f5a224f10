// Command pull shows the pull consumer: the application chooses the message queue, the
// offset and the batch size itself, filters by tag on the broker (the tag expression
// travels with each pull), and commits offsets only when it has processed a batch — for
// example a nightly export job that must never skip or repeat a record. It reads every
// queue of a topic from the group's committed offset (or from the start), commits, and
// on a second pass finds nothing new.
//
//	go run ./examples/pull                          # embedded broker
//	go run ./examples/pull --namesrv 127.0.0.1:9876 # an existing name server
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
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
	topic = "ExamplePull"
	group = "ExamplePullGroup"
)

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker)")
	batch := flag.Int("batch", 8, "messages per pull (1..32)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *namesrv, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "pull:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namesrv string, batch int) error {
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
	for i := 0; i < 30; i++ {
		tag := "Invoice"
		if i%3 == 0 {
			tag = "Refund"
		}
		if _, err := p.Send(ctx, message.NewMessage(topic, []byte(fmt.Sprintf("record-%02d", i))).SetTag(tag)); err != nil {
			return err
		}
	}

	// The pull consumer is the RocketMQ SDK's own (no transport interface): it stays concrete.
	pc, err := consumer.NewPullConsumer(consumer.PullConfig{NamesrvAddrs: []string{namesrv}, Group: group, Logger: log})
	if err != nil {
		return err
	}
	if err := pc.Start(ctx); err != nil {
		return err
	}
	defer shutdown("pull consumer", pc.Shutdown)
	mqs, err := pc.MessageQueues(ctx, topic)
	if err != nil {
		return err
	}
	for pass := 1; pass <= 2; pass++ {
		exported := 0
		for _, mq := range mqs {
			n, err := exportQueue(ctx, pc, mq, batch)
			if err != nil {
				return err
			}
			exported += n
		}
		fmt.Printf("pass %d: exported %d Invoice records\n", pass, exported)
		if pass == 1 && exported != 20 {
			return fmt.Errorf("exported %d invoices, want 20", exported)
		}
		if pass == 2 && exported != 0 {
			return fmt.Errorf("the second pass exported %d records again", exported)
		}
	}
	return nil
}

// exportQueue reads mq from the group's committed offset (0 when none) to its end,
// batch messages per pull, handling tag "Invoice" only, and commits after each batch.
func exportQueue(ctx context.Context, pc *consumer.PullConsumer, mq message.MessageQueue, batch int) (int, error) {
	off, err := pc.CommittedOffset(ctx, mq)
	if err != nil {
		return 0, err
	}
	if off < 0 {
		off = 0
	}
	n := 0
	for {
		r, err := pc.Pull(ctx, consumer.PullRequest{Queue: mq, Expression: "Invoice", Offset: off, MaxNums: batch})
		if err != nil {
			return n, err
		}
		switch r.Status {
		case consumer.PullNoNewMsg:
			return n, nil // at the end of the queue
		case consumer.PullOffsetIllegal:
			fmt.Printf("  %s: offset %d out of range, going on at %d\n", mq, off, r.NextBeginOffset)
		}
		for _, m := range r.Messages {
			fmt.Printf("  %s offset %2d: %s (%s)\n", mq, m.QueueOffset, m.Body, m.Tag())
			n++
		}
		off = r.NextBeginOffset
		if err := pc.CommitOffset(ctx, mq, off); err != nil { // the batch is done: remember it
			return n, err
		}
	}
}

// newProducer is the only producer code that picks the engine; run sends through the
// transport contract.
func newProducer(namesrv string, log *slog.Logger) (transport.Producer, error) {
	return producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
}

// shutdown calls a Shutdown(ctx) method with a 10 s deadline and reports a failure.
func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "pull: %s shutdown: %v\n", what, err)
	}
}
