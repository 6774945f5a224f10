package producer_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/broker"
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
	if err := p.Start(context.Background()); err != nil {
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

// exampleBroker starts an embedded broker with its name server on free ports; the
// returned stop shuts it down and removes its store.
func exampleBroker() (nsAddr string, stop func()) {
	dir, err := os.MkdirTemp("", "sluice-producer-example-")
	if err != nil {
		log.Fatal(err)
	}
	b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: dir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		log.Fatal(err)
	}
	if err := b.Start(); err != nil {
		log.Fatal(err)
	}
	return b.NamesrvAddr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
		os.RemoveAll(dir)
	}
}

func exampleProducer(nsAddr string, cfg producer.Config) (*producer.Producer, func()) {
	cfg.NamesrvAddrs = []string{nsAddr}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := producer.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	return p, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			log.Print(err)
		}
	}
}

// Send asynchronously: the callback runs once per send; Shutdown waits for the sends
// still in flight.
func ExampleProducer_SendAsync() {
	nsAddr, stopBroker := exampleBroker()
	defer stopBroker()
	p, shutdown := exampleProducer(nsAddr, producer.Config{})

	var wg sync.WaitGroup
	var stored atomic.Int32
	for i := 0; i < 100; i++ {
		wg.Add(1)
		err := p.SendAsync(context.Background(), message.NewMessage("Events", []byte("event "+strconv.Itoa(i))),
			func(r *message.SendResult, err error) {
				defer wg.Done()
				if err == nil && r.Status == message.SendOK {
					stored.Add(1)
				}
			})
		if err != nil {
			wg.Done()
			log.Print(err)
		}
	}
	shutdown() // waits for the callbacks
	wg.Wait()
	fmt.Println("stored:", stored.Load())

	// Output:
	// stored: 100
}

// Ordered messages: the hash selector sends every message of one sharding key to the
// same message queue (FNV-32a of the key mod the queue count).
func ExampleHashSelector() {
	nsAddr, stopBroker := exampleBroker()
	defer stopBroker()
	p, shutdown := exampleProducer(nsAddr, producer.Config{Selector: producer.HashSelector()})
	defer shutdown()

	queues := map[string]map[int]bool{}
	for step := 0; step < 3; step++ {
		for _, order := range []string{"order-1", "order-2", "order-3"} {
			msg := message.NewMessage("Orders", []byte(order+" step "+strconv.Itoa(step))).SetShardingKey(order)
			r, err := p.SendSync(context.Background(), msg)
			if err != nil {
				log.Fatal(err)
			}
			if queues[order] == nil {
				queues[order] = map[int]bool{}
			}
			queues[order][r.Queue.QueueID] = true
		}
	}
	for _, order := range []string{"order-1", "order-2", "order-3"} {
		fmt.Println(order, "used", len(queues[order]), "queue")
	}

	// Output:
	// order-1 used 1 queue
	// order-2 used 1 queue
	// order-3 used 1 queue
}

// Batch: SplitBatch cuts a large slice into batches under the 4 MiB limit (encoded
// bytes), SendBatch stores each batch in one queue at consecutive offsets.
func ExampleSplitBatch() {
	nsAddr, stopBroker := exampleBroker()
	defer stopBroker()
	p, shutdown := exampleProducer(nsAddr, producer.Config{})
	defer shutdown()

	msgs := make([]*message.Message, 10000)
	for i := range msgs {
		msgs[i] = message.NewMessage("Metrics", make([]byte, 1000))
	}
	batches, err := producer.SplitBatch(msgs, producer.DefaultMaxMessageSize)
	if err != nil {
		log.Fatal(err)
	}
	sent := 0
	for _, b := range batches {
		if _, err := p.SendBatch(context.Background(), b); err != nil {
			log.Fatal(err)
		}
		sent += len(b)
	}
	fmt.Println(len(batches), "batches,", sent, "messages")

	// Output:
	// 3 batches, 10000 messages
}

// Delayed message: delay level 3 is 10 s with the broker's default messageDelayLevel
// table; 0 or less means none. (Needs a broker at 127.0.0.1:9876; not run by go test.)
func ExampleProducer_SendSync_delay() {
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{"127.0.0.1:9876"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	msg := message.NewMessage("Reminders", []byte("pay order 42")).SetDelayLevel(3)
	if _, err := p.SendSync(context.Background(), msg); err != nil {
		log.Fatal(err)
	}
}
