// Command retry-dlq shows consume retries and the dead-letter queue of a concurrent
// push consumer. A handler that fails hands the message back to the broker
// (CONSUMER_SEND_MSG_BACK); it comes again through %RETRY%<group> after the delay of
// level 3 + reconsume count (10s, 30s, 1m, ... 2h on a default broker), with its
// original topic, tag and keys and a growing ReconsumeTimes. After MaxReconsumeTimes
// redeliveries the next failure moves it to %DLQ%<group>, which normal consumers never
// read. Once the bug is fixed, an operator re-drives the dead letters to their topic
// (here through the admin API; from a shell: sluice admin dlq resend --group G) and the
// fixed consumer handles them with a fresh retry budget.
//
//	go run ./examples/retry-dlq                          # embedded broker, 1 s retry delays
//	go run ./examples/retry-dlq --namesrv 127.0.0.1:9876 # an existing broker: its delay table applies (10s, 30s, ...)
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
	"sync/atomic"
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
	topic = "ExamplePayments"
	group = "ExamplePaymentsGroup"
)

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker with 1 s delay levels)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *namesrv); err != nil {
		fmt.Fprintln(os.Stderr, "retry-dlq:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namesrv string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if namesrv == "" {
		b, stopBroker, err := broker.StartEphemeral(broker.Config{Logger: log, MessageDelayLevel: strings.TrimSpace(strings.Repeat("1s ", 18))})
		if err != nil {
			return err
		}
		defer shutdown("broker", stopBroker)
		namesrv = b.NamesrvAddr()
		fmt.Println("embedded broker at", b.Addr(), "name server", namesrv, "(every delay level 1s)")
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
	p, c, err := connect(namesrv, log)
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)

	var (
		mu      sync.Mutex
		flaky   = make(chan struct{}) // closed when "pay-flaky" finally succeeded
		redrove = make(chan struct{}) // closed when the fixed consumer handled "pay-bug"
		fixed   atomic.Bool
		once1   sync.Once
		once2   sync.Once
	)
	handler := func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		m := msgs[0]
		mu.Lock()
		fmt.Printf("deliver %-9s topic %s tag %s keys %v reconsumeTimes %d\n", m.Body, m.Topic, m.Tag(), m.Keys(), m.ReconsumeTimes)
		mu.Unlock()
		switch string(m.Body) {
		case "pay-flaky": // a downstream timeout twice, then fine
			if m.ReconsumeTimes < 2 {
				return message.ReconsumeLater, fmt.Errorf("gateway timeout")
			}
			once1.Do(func() { close(flaky) })
		case "pay-bug": // fails until the bug is fixed
			if !fixed.Load() {
				return message.ReconsumeLater, fmt.Errorf("nil pointer in the handler")
			}
			once2.Do(func() { close(redrove) })
		}
		return message.ConsumeSuccess, nil
	}
	if err := c.Subscribe(topic, "*", handler); err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	defer shutdown("consumer", c.Shutdown)
	for _, body := range []string{"pay-ok", "pay-flaky", "pay-bug"} {
		if _, err := p.Send(ctx, message.NewMessage(topic, []byte(body)).SetTag("Pay").SetKeys("order-"+strings.TrimPrefix(body, "pay-"))); err != nil {
			return err
		}
	}
	if err := wait(ctx, flaky, 2*time.Minute, "pay-flaky to succeed on its third delivery"); err != nil {
		return err
	}
	// Dead letters are engine-specific: admin.ListDLQ/ResendDLQ here, kafka.ListDLQ/ResendDLQ on Kafka.
	var dead []admin.DLQMessage
	deadline := time.Now().Add(2 * time.Minute)
	for len(dead) == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("pay-bug did not reach the DLQ")
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil { // poll the DLQ
			return err
		}
		if dead, err = a.ListDLQ(ctx, group, admin.DLQListOptions{}); err != nil {
			return err
		}
	}
	fmt.Printf("DLQ of %s: %q from %s, keys %v, reconsumeTimes %d\n", group, dead[0].Message.Body, dead[0].OriginTopic, dead[0].Message.Keys(), dead[0].Message.ReconsumeTimes)

	fmt.Println("the bug is fixed; re-driving the dead letters")
	fixed.Store(true)
	res, err := a.ResendDLQ(ctx, group, admin.DLQResendOptions{})
	if err != nil {
		return err
	}
	for _, r := range res.Resent {
		fmt.Printf("resent %s to %s (keys %v)\n", r.MsgID, r.Topic, r.Keys)
	}
	return wait(ctx, redrove, time.Minute, "the re-driven pay-bug to be handled")
}

// connect builds (without starting) the producer and the consumer: the only code that
// picks the engine; run sends and handles through the transport contract alone.
func connect(namesrv string, log *slog.Logger) (transport.Producer, transport.Consumer, error) {
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs: []string{namesrv}, Group: group, ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		MaxReconsumeTimes: consumer.Retries(2), // default 16
		Logger:            log,
	})
	if err != nil {
		return nil, nil, err
	}
	return p, c, nil
}

func wait(ctx context.Context, ch <-chan struct{}, d time.Duration, what string) error {
	select {
	case <-ch:
		return nil
	case <-time.After(d):
		return fmt.Errorf("timed out waiting for %s", what)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown calls a Shutdown(ctx) method with a 10 s deadline and reports a failure.
func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "retry-dlq: %s shutdown: %v\n", what, err)
	}
}
