// Command wrap-official-producer shows Sluice's reliability middleware around the
// official RocketMQ Go client (github.com/apache/rocketmq-client-go/v2), through package
// adapters/rocketmqofficial:
//
//   - sends go through middleware.Keys (MD5 content key) and redismw.Park (a failed
//     send is parked in Redis for the retry task) around the official producer;
//
//   - the official push consumer runs a handler wrapped by middleware.Recover and
//     redismw.Dedup (Redis), so a message delivered twice has one business effect;
//
//   - everything stops through package lifecycle.
//
//     go run ./examples/wrap-official-producer            # embedded miniredis and broker
//     go run ./examples/wrap-official-producer --redis 127.0.0.1:6379 --namesrv 127.0.0.1:9876
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/adapters/rocketmqofficial"
	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/lifecycle"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

const topic = "Points"

func main() {
	redisAddr := flag.String("redis", "", "Redis address host:port (default: an embedded miniredis)")
	namesrv := flag.String("namesrv", "", "name server host:port (default: an embedded Sluice broker)")
	n := flag.Int("n", 5, "messages to send")
	flag.Parse()
	rlog.SetLogLevel("error") // the official client logs through its own global logger
	if err := run(*redisAddr, *namesrv, *n); err != nil {
		fmt.Fprintln(os.Stderr, "wrap-official-producer:", err)
		os.Exit(1)
	}
}

func run(redisAddr, namesrv string, n int) error {
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
	if namesrv == "" {
		dir, err := os.MkdirTemp("", "sluice-official-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: dir, Logger: log})
		if err != nil {
			return err
		}
		if err := b.Start(); err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = b.Shutdown(ctx)
		}()
		namesrv = b.NamesrvAddr()
	}
	ns := "official-demo-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := createTopic(namesrv, log); err != nil {
		return err
	}

	// The official client implements no transport interface: Sluice's parts meet it as a
	// middleware.SendFunc and a middleware.ConsumeFunc, as they meet every engine.
	// Producer: the official client behind a SendFunc, with Keys and Park around it.
	p, err := rocketmq.NewProducer(rmqproducer.WithNameServer(primitive.NamesrvAddr{namesrv}),
		rmqproducer.WithGroupName("official_demo_producer"), rmqproducer.WithRetry(2))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	parkMW, parker, err := redismw.Park(redismw.ParkConfig{Client: rdb, Namespace: ns, Logger: log})
	if err != nil {
		return err
	}
	defer parker.Close()
	send := middleware.ChainSend(rocketmqofficial.SendFunc(p), middleware.Keys(), parkMW)

	// Consumer: the official push consumer running a Sluice consume chain.
	dedup, err := redismw.Dedup(redismw.DedupConfig{Client: rdb, Prefix: "sluice:dedup:" + ns, Logger: log})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	effects := map[string]int{} // message key → business effects applied
	deliveries := 0
	handler := middleware.ChainConsume(func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			effects[middleware.KeyOf(m)]++ // "credit points": the business effect
		}
		return message.ConsumeSuccess, nil
	}, middleware.Recover(), dedup)
	counting := func(ctx context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
		mu.Lock()
		deliveries += len(msgs)
		mu.Unlock()
		return rocketmqofficial.ConsumeHandler(handler, log)(ctx, msgs...)
	}
	c, err := rocketmq.NewPushConsumer(rmqconsumer.WithNameServer(primitive.NamesrvAddr{namesrv}),
		rmqconsumer.WithGroupName("official_demo_consumer"), rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset))
	if err != nil {
		return err
	}
	if err := c.Subscribe(topic, rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: "Credit"}, counting); err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}

	g, err := lifecycle.New(lifecycle.Config{Logger: log, Timeout: 15 * time.Second})
	if err != nil {
		return err
	}
	_ = g.AddConsumer("official-consumer", rocketmqofficial.Component(c))
	_ = g.AddProducer("official-producer", rocketmqofficial.Component(p))

	ctx, cancel := context.WithCancel(context.Background())
	demoErr := make(chan error, 1)
	go func() {
		defer cancel()
		demoErr <- func() error {
			// Each message is sent twice (a caller retrying after a timeout it could not
			// interpret): same content, same content key, one business effect.
			for i := 0; i < n; i++ {
				for copy := 0; copy < 2; copy++ {
					m := message.NewMessage(topic, []byte(`{"user":`+strconv.Itoa(i)+`,"points":10}`)).SetTag("Credit")
					sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
					res, err := send(sctx, m)
					scancel()
					if err != nil {
						return fmt.Errorf("send %d: %w", i, err)
					}
					fmt.Printf("sent %s keys=%s msgId=%s\n", m.Body, middleware.ContentKey(m), res.MsgID)
				}
			}
			deadline := time.Now().Add(60 * time.Second)
			for {
				mu.Lock()
				d := deliveries
				mu.Unlock()
				if d >= 2*n {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%d of %d deliveries", d, 2*n)
				}
				time.Sleep(50 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("tally: %d deliveries, %d distinct messages, effects per message %v\n", deliveries, len(effects), effectCounts(effects))
			for k, v := range effects {
				if v != 1 {
					return fmt.Errorf("message %s had %d business effects, want 1", k, v)
				}
			}
			return nil
		}()
	}()
	shutdownErr := g.Run(ctx)
	return errors.Join(<-demoErr, shutdownErr)
}

// createTopic creates the demo topic (4 queues) and waits for its route: the official
// client does not send to a topic its name server does not know.
func createTopic(namesrv string, log *slog.Logger) error {
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 4}); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	_, err = adm.WaitTopicRoute(ctx, topic)
	return err
}

func effectCounts(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
