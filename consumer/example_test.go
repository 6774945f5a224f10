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
	if err := c.Start(); err != nil {
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
