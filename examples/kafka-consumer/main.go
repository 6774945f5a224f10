// Command kafka-consumer runs Sluice handlers and middleware over Kafka (package kafka):
// a producer with the Keys middleware sends payments; a consumer group with the Dedup
// middleware (Redis) credits each payment once. A payment whose first delivery fails
// comes back through the group's retry topic (<group>.retry.1) with ReconsumeTimes 1; a
// payment that keeps failing goes, after MaxReconsumeTimes, to the dead-letter topic
// (<group>.dlq) with its origin and last error; a payment sent twice is credited once.
// Then the "bug is fixed" and the dead letters are re-driven (what `sluice admin kafka
// dlq resend` does) and credited.
//
//	go run ./examples/kafka-consumer                               # embedded Kafka-protocol cluster and miniredis
//	go run ./examples/kafka-consumer --brokers 127.0.0.1:9092 --redis 127.0.0.1:6379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/transport"
)

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap host:port[,host:port] (default: an embedded in-process cluster)")
	redisAddr := flag.String("redis", "", "Redis host:port (default: an embedded miniredis)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := run(ctx, *brokers, *redisAddr); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-consumer:", err)
		os.Exit(1)
	}
}

// ledger is the business effect: credits per payment.
type ledger struct {
	mu      sync.Mutex
	credits map[string]int
}

func (l *ledger) credit(id string) {
	l.mu.Lock()
	l.credits[id]++
	l.mu.Unlock()
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.credits[id]
}

func run(ctx context.Context, brokerList, redisAddr string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	brokers := strings.Split(brokerList, ",")
	topic, group := "payments", "wallet"
	if brokerList == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			return err
		}
		defer c.Close()
		brokers = c.ListenAddrs()
		fmt.Println("embedded Kafka-protocol cluster at", brokers[0])
	} else {
		suffix := fmt.Sprintf("-%d", time.Now().UnixNano()) // a fresh topic and group per run
		topic, group = topic+suffix, group+suffix
	}
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
	}
	rc := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rc.Close()

	p, c, err := connect(brokers, group, log)
	if err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)
	if err := p.Start(ctx); err != nil {
		return err
	}
	send := middleware.ChainSend(p.SendFunc(), middleware.Keys()) // Keys: the dedup key is the payment id

	dedup, err := redismw.Dedup(redismw.DedupConfig{Client: rc, Prefix: "example:" + group, Logger: log})
	if err != nil {
		return err
	}
	book := &ledger{credits: map[string]int{}}
	var fixed atomic.Bool
	var failedOnce atomic.Bool
	credit := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			id := middleware.KeyOf(m)
			switch {
			case id == "pay-2" && failedOnce.CompareAndSwap(false, true):
				fmt.Printf("  %s: first delivery fails (wallet service busy)\n", id)
				return message.ReconsumeLater, errors.New("wallet service busy")
			case id == "pay-bad" && !fixed.Load():
				return message.ReconsumeLater, errors.New("unknown currency XXX")
			}
			book.credit(id)
			fmt.Printf("  %s credited (reconsume times %d, from %s)\n", id, m.ReconsumeTimes, sourceOf(m))
		}
		return message.ConsumeSuccess, nil
	}
	if err := c.Subscribe(topic, "*", middleware.ChainConsume(credit, dedup, middleware.Recover())); err != nil {
		return err
	}
	if err := kafka.EnsureTopicsAt(ctx, brokers, 2, topic); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer shutdown("consumer", c.Shutdown)

	fmt.Println("sending pay-1, pay-2, pay-3, pay-bad, and pay-1 again")
	for _, id := range []string{"pay-1", "pay-2", "pay-3", "pay-bad", "pay-1"} {
		m := message.NewMessage(topic, []byte(`{"id":"`+id+`"}`)).SetKeys(id).SetShardingKey(id)
		if _, err := send(ctx, m); err != nil {
			return err
		}
	}
	if !wait(ctx, func() bool {
		dl, err := kafka.ListDLQ(ctx, brokers, group)
		return err == nil && len(dl) == 1 && book.count("pay-2") == 1 && book.count("pay-1") == 1 && book.count("pay-3") == 1
	}) {
		return fmt.Errorf("payments not settled in time: %v", book.credits)
	}
	// Dead letters are engine-specific: kafka.ListDLQ/ResendDLQ here, admin's on RocketMQ.
	dl, err := kafka.ListDLQ(ctx, brokers, group)
	if err != nil {
		return err
	}
	for _, d := range dl {
		fmt.Printf("dead letter: %s from %s (partition@offset %s) after %d deliveries: %s\n",
			d.MsgID, d.OriginTopic, d.OriginLocation, d.ReconsumeTimes, d.LastError)
	}

	fmt.Println("the currency bug is fixed; re-driving the dead letters")
	fixed.Store(true)
	res, err := kafka.ResendDLQ(ctx, brokers, group, kafka.ResendOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("re-drove %d dead letter(s)\n", len(res.Resent))
	if !wait(ctx, func() bool { return book.count("pay-bad") == 1 }) {
		return errors.New("the re-driven payment was not credited")
	}
	for _, id := range []string{"pay-1", "pay-2", "pay-3", "pay-bad"} {
		if n := book.count(id); n != 1 {
			return fmt.Errorf("%s credited %d times, want once", id, n)
		}
	}
	fmt.Println("every payment credited exactly once (pay-1 was sent twice)")
	return nil
}

// connect builds (without starting) the producer and the consumer: the only code that
// picks the engine; run sends and handles through the transport contract, as it would
// with producer.New and consumer.NewPushConsumer.
func connect(brokers []string, group string, log *slog.Logger) (transport.Producer, transport.Consumer, error) {
	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: brokers, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	c, err := kafka.NewConsumer(kafka.Config{
		Brokers: brokers, Group: group, Logger: log,
		MaxReconsumeTimes: kafka.Retries(2),
		RetrySchedule:     []time.Duration{500 * time.Millisecond, time.Second}, // RocketMQ's is 10s … 2h
		HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 6 * time.Second,
		FetchMaxWait: 200 * time.Millisecond,
	})
	if err != nil {
		return nil, nil, err
	}
	return p, c, nil
}

// sourceOf names where a delivery came from: the topic, or the retry topic.
func sourceOf(m *message.MessageExt) string {
	if rt := m.Property(message.PropertyRetryTopic); rt != "" {
		return rt
	}
	return m.Topic
}

// wait polls cond every 50 ms until it holds (true) or ctx ends (false).
func wait(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "kafka-consumer: %s shutdown: %v\n", what, err)
	}
}
