// Command async shows asynchronous sends: SendAsync returns at once and reports the
// outcome to a callback; SendAsyncChan reports it on a channel. At most MaxAsyncInflight
// sends are outstanding (SendAsync waits for room), a failed attempt is retried on the
// same queue (RetryTimesWhenSendAsyncFailed), and Shutdown waits for the sends still in
// flight before it unregisters. The program prints the rate and every failure.
//
//	go run ./examples/async                          # embedded broker, 50000 messages
//	go run ./examples/async --n 200000 --inflight 512
//	go run ./examples/async --namesrv 127.0.0.1:9876 # an existing name server
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
)

const topic = "ExampleAsync"

func main() {
	namesrv := flag.String("namesrv", "", "name server host:port (default: start an embedded broker)")
	n := flag.Int("n", 50000, "number of messages")
	inflight := flag.Int("inflight", 0, "MaxAsyncInflight (0 = the default, 1000)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *namesrv, *n, *inflight); err != nil {
		fmt.Fprintln(os.Stderr, "async:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, namesrv string, n, inflight int) error {
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
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, MaxAsyncInflight: inflight, Logger: log})
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}

	// One send through a channel (SendAsyncChan is the RocketMQ producer's own): the first
	// send of a topic also looks up its route.
	res := <-p.SendAsyncChan(ctx, message.NewMessage(topic, []byte("first")))
	if res.Err != nil {
		return res.Err
	}
	fmt.Printf("first message stored in %s at offset %d (msgId %s)\n", res.Result.Queue, res.Result.QueueOffset, res.Result.MsgID)
	return sendMany(ctx, p, n)
}

// sendMany sends n messages through a callback, then shuts p down. It needs only the
// transport contract, so it runs as well with a kafka.Producer.
func sendMany(ctx context.Context, p transport.Producer, n int) error {
	var (
		wg       sync.WaitGroup
		ok, fail atomic.Int64
		firstErr atomic.Value
	)
	body := make([]byte, 1024)
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		err := p.SendAsync(ctx, message.NewMessage(topic, body), func(_ *message.SendResult, err error) {
			defer wg.Done()
			if err != nil {
				fail.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			ok.Add(1)
		})
		if err != nil { // not started, closed, or ctx ended while waiting for room
			wg.Done()
			fmt.Fprintln(os.Stderr, "async: send refused:", err)
			break
		}
	}
	sent := time.Since(start)
	// Shutdown waits (here up to 30 s) for the callbacks of the sends still in flight.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	wg.Wait()
	all := time.Since(start)
	fmt.Printf("issued %d sends in %v; all callbacks done after %v: %d stored, %d failed (%.0f msgs/s)\n",
		n, sent.Round(time.Millisecond), all.Round(time.Millisecond), ok.Load(), fail.Load(), float64(ok.Load())/all.Seconds())
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("first failure: %w", err)
	}
	return nil
}

// shutdown calls a Shutdown(ctx) method with a 10 s deadline and reports a failure.
func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "async: %s shutdown: %v\n", what, err)
	}
}
