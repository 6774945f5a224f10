package producer_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// Send one tagged message with keys and shut down. (Needs a name server and broker at
// 127.0.0.1:9876, e.g. `sluice broker`; not run by go test.)
func Example() {
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{"127.0.0.1:9876"}, Group: "orders-producer"})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	}()

	msg := message.NewMessage("Orders", []byte(`{"id":42}`)).SetTag("Created").SetKeys("order-42")
	res, err := p.SendSync(context.Background(), msg)
	if err != nil {
		log.Fatal(err) // a *message.ValidationError or a *producer.SendError
	}
	fmt.Println(res.Status, res.MsgID, res.Queue, res.QueueOffset)
}
