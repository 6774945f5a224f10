// Command delay shows delayed messages: each message carries a delay level
// (message.SetDelayLevel); the broker parks it in SCHEDULE_TOPIC_XXXX and delivers it to
// its topic when the level's delay has passed. With the default messageDelayLevel table
// (1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h) level 1 is 1 s and level 2
// is 5 s; level 0 or less means no delay, and a level above the table's last is clamped
// to it by the broker. A push consumer prints how long each message took.
//
//	go run ./examples/delay                          # embedded broker, levels 0, 1, 2
//	go run ./examples/delay --levels 0,1,2,3         # level 3 = 10 s
//	go run ./examples/delay --namesrv 127.0.0.1:9876 # an existing name server
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

const topic = "ExampleDelayed"

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker)")
	levels := flag.String("levels", "0,1,2", "comma-separated delay levels, one message each")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *namesrv, *levels); err != nil {
		fmt.Fprintln(os.Stderr, "delay:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namesrv, levelList string) error {
	var levels []int
	for _, f := range strings.Split(levelList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("--levels: %q is not a number", f)
		}
		levels = append(levels, n)
	}
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

	// A first plain message creates the topic, so the consumer finds its route.
	if _, err := p.Send(ctx, message.NewMessage(topic, []byte("hello")).SetProperty("level", "none")); err != nil {
		return err
	}
	var (
		mu     sync.Mutex
		sentAt = map[string]time.Time{}
		left   = len(levels)
		done   = make(chan struct{})
	)
	err = c.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			id := m.Property("id")
			at, ok := sentAt[id]
			if !ok {
				continue // the topic-creating message, or one from an earlier run
			}
			delete(sentAt, id)
			fmt.Printf("received %s after %v\n", m.Body, time.Since(at).Round(10*time.Millisecond))
			if left--; left == 0 {
				close(done)
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

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i, lvl := range levels {
		id := run + "-" + strconv.Itoa(i)
		msg := message.NewMessage(topic, []byte(fmt.Sprintf("message %d (delay level %d)", i, lvl))).SetProperty("id", id).SetDelayLevel(lvl)
		mu.Lock()
		sentAt[id] = time.Now()
		mu.Unlock()
		if _, err := p.Send(ctx, msg); err != nil {
			return fmt.Errorf("send level %d: %w", lvl, err)
		}
		fmt.Printf("sent     message %d with delay level %d\n", i, lvl)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// connect builds (without starting) the producer and the consumer: the only code that
// picks the engine; run sends and handles through the transport contract. (On Kafka,
// delay levels need a kafka.DelayForwarder running as well.)
func connect(namesrv string, log *slog.Logger) (transport.Producer, transport.Consumer, error) {
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{namesrv}, Group: "ExampleDelayGroup",
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: log})
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
		fmt.Fprintf(os.Stderr, "delay: %s shutdown: %v\n", what, err)
	}
}
