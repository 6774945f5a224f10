// Command broadcast shows broadcasting consumption: three consumers of one group, each
// with its own instance name, every one of them receives every message (think: each
// service instance refreshing its local cache). Broadcasting consumers keep their
// offsets in a local file — <offset-dir>/<group>/<instance>/offsets.json — instead of
// on the broker, and do not retry failed messages. The program then stops one consumer,
// sends more, starts it again, and shows that it resumes from its file: it gets only
// the new messages. It exits non-zero if a consumer missed or repeated a message.
//
//	go run ./examples/broadcast                          # embedded broker
//	go run ./examples/broadcast --namesrv 127.0.0.1:9876 # an existing name server
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
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
	topic = "ExampleBroadcast"
	group = "ExampleBroadcastGroup"
)

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker)")
	offsetDir := flag.String("offset-dir", "", "where the consumers keep their offsets (default: a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *namesrv, *offsetDir); err != nil {
		fmt.Fprintln(os.Stderr, "broadcast:", err)
		os.Exit(1)
	}
}

// instance is one broadcasting consumer and what it received.
type instance struct {
	name string
	c    *consumer.PushConsumer
	mu   sync.Mutex
	got  map[string]int
}

func (in *instance) count() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.got)
}

func run(ctx context.Context, namesrv, offsetDir string) error {
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
	if offsetDir == "" {
		dir, err := os.MkdirTemp("", "sluice-broadcast-offsets-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		offsetDir = dir
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
	p, err := newProducer(namesrv, log)
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)

	// Broadcasting (every instance gets every message, offsets in a local file) is the
	// RocketMQ push consumer's own, so this example stays on the concrete types.
	start := func(name string) (*instance, error) {
		in := &instance{name: name, got: map[string]int{}}
		c, err := consumer.NewPushConsumer(consumer.Config{
			NamesrvAddrs: []string{namesrv}, Group: group, InstanceName: name,
			MessageModel: consumer.Broadcasting, ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
			OffsetStoreDir: offsetDir, Logger: log,
		})
		if err != nil {
			return nil, err
		}
		if err := c.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			in.mu.Lock()
			defer in.mu.Unlock()
			for _, m := range msgs {
				in.got[string(m.Body)]++
			}
			return message.ConsumeSuccess, nil
		}); err != nil {
			return nil, err
		}
		if err := c.Start(ctx); err != nil {
			return nil, err
		}
		in.c = c
		return in, nil
	}
	var ins []*instance
	for _, name := range []string{"cache-a", "cache-b", "cache-c"} {
		in, err := start(name)
		if err != nil {
			return err
		}
		defer func() { shutdown(in.name, in.c.Shutdown) }()
		ins = append(ins, in)
	}
	sendN := func(prefix string, n int) error {
		for i := 0; i < n; i++ {
			if _, err := p.Send(ctx, message.NewMessage(topic, []byte(fmt.Sprintf("%s-%02d", prefix, i)))); err != nil {
				return err
			}
		}
		return nil
	}
	if err := sendN("price-update", 12); err != nil {
		return err
	}
	for _, in := range ins {
		if err := waitCount(ctx, in, 12); err != nil {
			return err
		}
		fmt.Printf("%s received all %d messages\n", in.name, in.count())
	}

	// Restart cache-b: it resumes from its offset file.
	shutdown("cache-b", ins[1].c.Shutdown)
	file := filepath.Join(offsetDir, group, "cache-b", "offsets.json")
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	fmt.Printf("cache-b stopped; its offsets (%s):\n%s\n", file, b)
	if err := sendN("stock-update", 5); err != nil {
		return err
	}
	again, err := start("cache-b")
	if err != nil {
		return err
	}
	defer shutdown("cache-b (restarted)", again.c.Shutdown)
	if err := waitCount(ctx, again, 5); err != nil {
		return err
	}
	for _, in := range []*instance{ins[0], ins[2]} {
		if err := waitCount(ctx, in, 17); err != nil {
			return err
		}
	}
	again.mu.Lock()
	defer again.mu.Unlock()
	for body, n := range again.got {
		if n != 1 || len(body) < 5 || body[:5] != "stock" {
			return fmt.Errorf("restarted cache-b got %q %d times; want only the 5 new messages", body, n)
		}
	}
	fmt.Printf("restarted cache-b resumed from its file: got only the %d new messages\n", len(again.got))
	return nil
}

// waitCount waits (polling, at most 20 s) until in has n distinct messages.
func waitCount(ctx context.Context, in *instance, n int) error {
	deadline := time.Now().Add(20 * time.Second)
	for in.count() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s received %d messages, want %d", in.name, in.count(), n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if in.count() != n {
		return fmt.Errorf("%s received %d messages, want %d", in.name, in.count(), n)
	}
	return nil
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
		fmt.Fprintf(os.Stderr, "broadcast: %s shutdown: %v\n", what, err)
	}
}
