// Command park-and-retry shows a broker outage without a lost message: sends that fail
// while the broker is down are parked in Redis (redismw.Park), and the retry task
// (package retrytask, built-in scheduler) resends them once the broker is back. A
// consumer then counts every message exactly once.
//
//	go run ./examples/park-and-retry            # embedded miniredis
//	go run ./examples/park-and-retry --redis 127.0.0.1:6379
//
// It runs an embedded Sluice broker (with its name server) in a temporary directory,
// stops it for the outage and starts it again on the same ports and store. Everything is
// shut down through package lifecycle; Ctrl-C stops the demo early, in the same order.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/lifecycle"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/retrytask"
	"github.com/sluicemq/sluice/transport"
)

const topic = "Payments"

func main() {
	redisAddr := flag.String("redis", "", "Redis address host:port (default: an embedded miniredis)")
	n := flag.Int("n", 10, "messages to send: half before the outage, half during it")
	flag.Parse()
	if err := run(*redisAddr, *n); err != nil {
		fmt.Fprintln(os.Stderr, "park-and-retry:", err)
		os.Exit(1)
	}
}

func run(redisAddr string, n int) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	namespace := "park-demo-" + strconv.FormatInt(time.Now().UnixNano(), 36)

	dir, err := os.MkdirTemp("", "sluice-park-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	brokerAddr, nsAddr := freePort(), freePort()
	b, err := startBroker(dir, brokerAddr, nsAddr, log)
	if err != nil {
		return err
	}

	// One producer; the send the application uses is Keys + Park around it, the retry
	// task resends through the bare producer (a failed resend is rescheduled by the task,
	// not parked again).
	p, err := newProducer(nsAddr, log)
	if err != nil {
		return err
	}
	if err := p.Start(context.Background()); err != nil {
		return err
	}
	parkMW, parker, err := redismw.Park(redismw.ParkConfig{Client: rdb, Namespace: namespace, Logger: log})
	if err != nil {
		return err
	}
	defer parker.Close()
	send := middleware.ChainSend(p.SendFunc(), middleware.Keys(), parkMW)
	task, err := retrytask.New(retrytask.Config{Client: rdb, Namespace: namespace, Send: p.SendFunc(),
		MinAge: time.Second, BackoffBase: time.Second, Logger: log})
	if err != nil {
		return err
	}

	g, err := lifecycle.New(lifecycle.Config{Logger: log, Timeout: 15 * time.Second})
	if err != nil {
		return err
	}
	_ = g.AddRetryTask("retry-task", task)
	_ = g.AddProducer("producer", p)

	ctx, cancel := context.WithCancel(context.Background())
	demoErr := make(chan error, 1)
	var brokerMu sync.Mutex
	go func() {
		defer cancel()
		nb, err := demo(ctx, g, send, task, b, dir, brokerAddr, nsAddr, n, log)
		brokerMu.Lock()
		b = nb
		brokerMu.Unlock()
		demoErr <- err
	}()
	shutdownErr := g.Run(ctx) // waits for the demo's end or Ctrl-C, then stops everything in order
	err = <-demoErr
	brokerMu.Lock()
	if b != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = b.Shutdown(sctx)
		scancel()
	}
	brokerMu.Unlock()
	return errors.Join(err, shutdownErr)
}

// demo runs the scenario and returns the broker that is running at its end.
func demo(ctx context.Context, g *lifecycle.Group, send middleware.SendFunc, task *retrytask.Task,
	b *broker.Broker, dir, brokerAddr, nsAddr string, n int, log *slog.Logger) (*broker.Broker, error) {
	sendOne := func(i int) error {
		m := message.NewMessage(topic, []byte("payment #"+strconv.Itoa(i))).SetTag("Paid").SetProperty("seq", strconv.Itoa(i))
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := send(sctx, m)
		return err
	}
	direct, parked := 0, 0
	for i := 0; i < n/2; i++ {
		if err := sendOne(i); err != nil {
			return b, fmt.Errorf("send %d before the outage: %w", i, err)
		}
		direct++
	}
	fmt.Printf("sent %d messages with the broker up\n", direct)

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := b.Shutdown(sctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("stop broker: %w", err)
	}
	fmt.Println("broker stopped (outage)")
	for i := n / 2; i < n; i++ {
		err := sendOne(i)
		switch {
		case errors.Is(err, middleware.ErrParked):
			parked++
		case err != nil:
			return nil, fmt.Errorf("send %d during the outage: %w", i, err)
		default:
			return nil, fmt.Errorf("send %d during the outage succeeded: the broker is not down", i)
		}
	}
	fmt.Printf("parked %d sends in Redis while the broker was down\n", parked)

	nb, err := startBroker(dir, brokerAddr, nsAddr, log)
	if err != nil {
		return nil, err
	}
	fmt.Println("broker back; the retry task resends the parked sends")
	if err := task.Start(200 * time.Millisecond); err != nil {
		return nb, err
	}

	var mu sync.Mutex
	got := map[string]int{}
	c, err := newConsumer(nsAddr, log)
	if err != nil {
		return nb, err
	}
	if err := c.Subscribe(topic, "Paid", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[m.Property("seq")]++
		}
		return message.ConsumeSuccess, nil
	}); err != nil {
		return nb, err
	}
	if err := c.Start(ctx); err != nil {
		return nb, err
	}
	_ = g.AddConsumer("consumer", c)

	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k == n {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nb, fmt.Errorf("received %d of %d messages", k, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	counts, err := task.Counts(ctx)
	if err != nil {
		return nb, err
	}
	mu.Lock()
	dups := 0
	for _, k := range got {
		dups += k - 1
	}
	mu.Unlock()
	fmt.Printf("tally: sent directly %d, parked %d, received %d distinct (%d duplicates), still parked %d, dead %d\n",
		direct, parked, len(got), dups, counts.Total(), counts.Dead)
	return nb, nil
}

// startBroker starts a broker with its embedded name server on fixed addresses,
// retrying briefly while the ports are still being released.
// newProducer and newConsumer are the only code that picks the engine: the rest uses
// the transport contract (and middleware.SendFunc), the same with package kafka.
func newProducer(nsAddr string, log *slog.Logger) (transport.Producer, error) {
	return producer.New(producer.Config{NamesrvAddrs: []string{nsAddr}, SendTimeout: time.Second, Logger: log})
}

func newConsumer(nsAddr string, log *slog.Logger) (transport.Consumer, error) {
	return consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{nsAddr}, Group: "park_demo",
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Logger: log})
}

func startBroker(dir, addr, nsAddr string, log *slog.Logger) (*broker.Broker, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := broker.New(broker.Config{ListenAddr: addr, NamesrvListenAddr: nsAddr, StorePathRootDir: dir, Logger: log})
		if err != nil {
			return nil, err
		}
		if err = b.Start(); err == nil {
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("start broker: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort returns a free "127.0.0.1:port".
func freePort() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer ln.Close()
	return ln.Addr().String()
}
