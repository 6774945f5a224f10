package consumer_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
)

// Consume tags Created and Paid of topic Orders until SIGINT, then shut down gracefully.
// (Needs a name server and broker at 127.0.0.1:9876; not run by go test.)
func Example() {
	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{"127.0.0.1:9876"}, Group: "orders-consumer"})
	if err != nil {
		log.Fatal(err)
	}
	err = c.Subscribe("Orders", "Created || Paid", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			log.Printf("%s %s reconsumed=%d: %s", m.MsgID, m.Tag(), m.ReconsumeTimes, m.Body)
		}
		return message.ConsumeSuccess, nil // ReconsumeLater or an error: redelivered later
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Shutdown(sctx); err != nil {
		log.Print(err)
	}
}

// An orderly consumer: each queue's messages in offset order, a failed message retried
// locally after SuspendCurrentQueueTime (later ones wait), the DLQ after 5 retries.
// (Needs a name server and broker at 127.0.0.1:9876; not run by go test.)
func ExampleConfig_orderly() {
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs: []string{"127.0.0.1:9876"}, Group: "order-steps",
		Orderly: true, MaxReconsumeTimes: consumer.Retries(5),
	})
	if err != nil {
		log.Fatal(err)
	}
	err = c.Subscribe("OrderSteps", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if err := apply(ctx, msgs[0]); err != nil {
			return consumer.SuspendCurrentQueueAMoment, err
		}
		return message.ConsumeSuccess, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer c.Shutdown(context.Background())
}

func apply(context.Context, *message.MessageExt) error { return nil }

// Read one queue from the group's committed offset and commit after the batch.
// (Needs a name server and broker at 127.0.0.1:9876; not run by go test.)
func ExamplePullConsumer() {
	ctx := context.Background()
	pc, err := consumer.NewPullConsumer(consumer.PullConfig{NamesrvAddrs: []string{"127.0.0.1:9876"}, Group: "exporter"})
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Shutdown(ctx)
	mqs, err := pc.MessageQueues(ctx, "Invoices")
	if err != nil {
		log.Fatal(err)
	}
	off, err := pc.CommittedOffset(ctx, mqs[0])
	if err != nil {
		log.Fatal(err)
	}
	r, err := pc.Pull(ctx, consumer.PullRequest{Queue: mqs[0], Expression: "Paid", Offset: max(off, 0), MaxNums: 32})
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range r.Messages {
		log.Printf("%d: %s", m.QueueOffset, m.Body)
	}
	if err := pc.CommitOffset(ctx, mqs[0], r.NextBeginOffset); err != nil {
		log.Fatal(err)
	}
}
