// Command dedup-consumer shows redismw.Dedup on push consumers: every payment is sent
// several times (the same message, so the same key — as a producer retry after a lost
// answer, or an upstream replay, would send it), two consumers of one group receive the
// copies concurrently, and the business effect (points credited) happens once per key.
//
//	go run ./examples/dedup-consumer                              # embedded broker + miniredis
//	go run ./examples/dedup-consumer --redis 127.0.0.1:6379       # a real Redis
//	go run ./examples/dedup-consumer --namesrv 127.0.0.1:9876     # an existing broker
//
// The producer sets each message's key with middleware.Keys ("<tag>_<md5(body)>"). Each
// consumer's handler is wrapped with Dedup: a copy whose key has a done marker is
// acknowledged without running the handler (a duplicate); a copy arriving while another
// consumer holds the key's lock is handed back (ReconsumeLater) and comes again through
// the group's retry topic — never acknowledged silently, since the holder may still fail.
// The embedded broker sets every delay level to 1 s so those come back quickly; an
// existing broker uses its own delay table (10 s for the first consume retry by default).
//
// Dedup keys live under a prefix unique to the run; with --redis they are deleted at the
// end (never FLUSHALL). The exit status is 0 only if every payment had its effect exactly
// once and every copy was accounted for.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
)

const (
	topic = "DedupDemoPayments"
	group = "dedup_demo_points"
	tag   = "PaySuccess"
	// runProperty marks this run's messages; a reused topic on an existing broker may
	// still hold earlier runs' payments, which the handler acknowledges and ignores.
	runProperty = "DEMO_RUN"
)

func main() {
	redisAddr := flag.String("redis", "", "Redis host:port (default: an embedded miniredis)")
	namesrv := flag.String("namesrv", "", "name server host:port (default: an embedded broker with 1 s delay levels)")
	payments := flag.Int("payments", 4, "distinct payments, 1..100")
	copies := flag.Int("copies", 3, "copies of each payment sent back to back, 1..10")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to wait for every copy to be settled")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *redisAddr, *namesrv, *payments, *copies, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "dedup-consumer:", err)
		os.Exit(1)
	}
}

type payment struct {
	Order  string `json:"order"`
	Points int    `json:"points"`
}

// ledger is what the consumers did, per message key.
type ledger struct {
	mu         sync.Mutex
	effects    map[string]int // key → points credited (the business effect)
	handled    map[string]int // key → deliveries whose handler ran and succeeded
	duplicates map[string]int // key → deliveries skipped by Dedup (done marker found)
	lockHeld   map[string]int // key → deliveries handed back because another held the lock
}

func run(ctx context.Context, redisAddr, namesrv string, payments, copies int, timeout time.Duration) error {
	if payments < 1 || payments > 100 {
		return fmt.Errorf("--payments %d: must be 1..100", payments)
	}
	if copies < 1 || copies > 10 {
		return fmt.Errorf("--copies %d: must be 1..10", copies)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	runID := newRunID()

	// Redis: embedded miniredis, or the server at --redis (only this run's keys are
	// written, and deleted at the end).
	if redisAddr == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
		fmt.Println("embedded miniredis at", redisAddr)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, DialTimeout: 2 * time.Second})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", redisAddr, err)
	}
	prefix := "sluice:dedup-demo:" + runID // one prefix per consumer group (and here per run)
	defer deleteKeys(rdb, prefix)

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
	if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 4}); err != nil {
		return err
	}
	if _, err := a.WaitTopicRoute(ctx, topic); err != nil {
		return err
	}

	l := &ledger{effects: map[string]int{}, handled: map[string]int{}, duplicates: map[string]int{}, lockHeld: map[string]int{}}
	var printMu sync.Mutex
	printf := func(format string, args ...any) {
		printMu.Lock()
		defer printMu.Unlock()
		fmt.Printf(format, args...)
	}

	// The business handler: credit the points. It knows nothing about duplicates.
	credit := func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		m := msgs[0] // Dedup hands the rest of the chain one message at a time
		if m.Property(runProperty) != runID {
			return message.ConsumeSuccess, nil // an earlier run's payment
		}
		var p payment
		if err := json.Unmarshal(m.Body, &p); err != nil {
			return message.ReconsumeLater, err
		}
		time.Sleep(50 * time.Millisecond) // simulated work: concurrent copies meet the lock
		key := middleware.KeyOf(m)
		l.mu.Lock()
		l.effects[key] += p.Points
		l.mu.Unlock()
		printf("EFFECT  credited %d points for %s (key %s)\n", p.Points, p.Order, key)
		return message.ConsumeSuccess, nil
	}

	var consumers []transport.Consumer
	defer func() {
		for _, c := range consumers {
			shutdown("consumer", c.Shutdown)
		}
	}()
	for _, name := range []string{"A", "B"} {
		dedup, err := redismw.Dedup(redismw.DedupConfig{Client: rdb, Prefix: prefix + ":" + group, Logger: log})
		if err != nil {
			return err
		}
		// Outermost first: observe sees what Dedup decided; Recover turns a handler panic
		// into a failure Dedup records.
		c, err := newConsumer(namesrv, []middleware.ConsumeMiddleware{observe(name, runID, l, printf), dedup, middleware.Recover()}, log)
		if err != nil {
			return err
		}
		if err := c.Subscribe(topic, tag, credit); err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		consumers = append(consumers, c)
	}
	fmt.Printf("consumers A and B of group %s subscribed to %s, handlers wrapped with Dedup (key prefix %s)\n", group, topic, prefix)

	p, err := newProducer(namesrv, log)
	if err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		return err
	}
	defer shutdown("producer", p.Shutdown)

	keys := make([]string, 0, payments)
	orderOf := map[string]string{}
	for i := 1; i <= payments; i++ {
		pay := payment{Order: fmt.Sprintf("ORD-%s-%d", runID[:6], i), Points: 10 * i}
		body, _ := json.Marshal(pay)
		for c := 1; c <= copies; c++ {
			msg := message.NewMessage(topic, body).SetTag(tag).SetProperty(runProperty, runID)
			res, err := p.Send(ctx, msg)
			if err != nil {
				return fmt.Errorf("send %s copy %d: %w", pay.Order, c, err)
			}
			if c == 1 {
				key := middleware.ContentKey(msg) // what Keys set on the sent copy
				keys = append(keys, key)
				orderOf[key] = pay.Order
				fmt.Printf("sent    %s x%d (key %s), first copy to queue %d\n", pay.Order, copies, key, res.Queue.QueueID)
			}
		}
	}

	// Wait until every copy is settled: handled once, or skipped as a duplicate.
	settled := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, k := range keys {
			if l.handled[k] < 1 || l.handled[k]+l.duplicates[k] < copies {
				return false
			}
		}
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !settled() && wctx.Err() == nil {
		select {
		case <-wctx.Done():
		case <-tick.C:
		}
	}

	// Copy the ledger: the consumers keep running (and locking it) until the deferred
	// shutdowns.
	l.mu.Lock()
	handled, dups, held, points := clone(l.handled), clone(l.duplicates), clone(l.lockHeld), clone(l.effects)
	l.mu.Unlock()

	fmt.Println("\nper key:")
	var problems []string
	sort.Slice(keys, func(i, j int) bool { return orderOf[keys[i]] < orderOf[keys[j]] })
	totalEffects, totalDup, totalHeld := 0, 0, 0
	for _, k := range keys {
		fmt.Printf("  %s  %s: effects %d (%d points), duplicates skipped %d, handed back while locked %d\n",
			orderOf[k], k, handled[k], points[k], dups[k], held[k])
		totalEffects += handled[k]
		totalDup += dups[k]
		totalHeld += held[k]
		switch {
		case handled[k] != 1:
			problems = append(problems, fmt.Sprintf("%s had its effect %d times, want 1", orderOf[k], handled[k]))
		case handled[k]+dups[k] < copies:
			problems = append(problems, fmt.Sprintf("%s: %d of %d copies settled", orderOf[k], handled[k]+dups[k], copies))
		}
	}
	fmt.Printf("sent %d copies of %d payments: effects %d, duplicates skipped %d, handed back while locked %d\n",
		payments*copies, payments, totalEffects, totalDup, totalHeld)
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Println("OK: each payment credited exactly once")
	return nil
}

// observe prints and counts what happened to each delivery of this run's messages: the
// reasons Dedup noted (middleware.Report) and the chain's result.
func observe(name, runID string, l *ledger, printf func(string, ...any)) middleware.ConsumeMiddleware {
	return func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			ctx, rep := middleware.WithReport(ctx)
			res, err := next(ctx, msgs)
			m := msgs[0] // one message per call (ConsumeMessageBatchMaxSize default 1)
			if m.Property(runProperty) != runID {
				return res, err
			}
			key := middleware.KeyOf(m)
			l.mu.Lock()
			defer l.mu.Unlock()
			switch {
			case rep.Has(middleware.ReasonDuplicate):
				l.duplicates[key]++
				printf("%s       duplicate of %s skipped (done marker), acknowledged; reconsumeTimes %d\n", name, key, m.ReconsumeTimes)
			case rep.Has(middleware.ReasonLockHeld):
				l.lockHeld[key]++
				printf("%s       %s is being handled elsewhere (lock held): handed back, comes again later\n", name, key)
			case res == message.ConsumeSuccess && err == nil:
				l.handled[key]++
				printf("%s       handled %s\n", name, key)
			default:
				printf("%s       %s failed, comes again later: %v\n", name, key, err)
			}
			return res, err
		}
	}
}

// newConsumer and newProducer are the only code that picks the engine (RocketMQ
// protocol: the embedded broker or Apache RocketMQ); run sends and handles through the
// transport contract, so kafka.NewConsumer and kafka.NewProducer with the same
// middlewares fit here too.
func newConsumer(namesrv string, mws []middleware.ConsumeMiddleware, log *slog.Logger) (transport.Consumer, error) {
	return consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{namesrv}, Group: group,
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Middlewares: mws, Logger: log})
}

// newProducer's Keys middleware sets each message's key: "<tag>_<md5(body)>".
func newProducer(namesrv string, log *slog.Logger) (transport.Producer, error) {
	return producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Middlewares: []middleware.SendMiddleware{middleware.Keys()}, Logger: log})
}

// deleteKeys deletes the run's Dedup keys (SCAN MATCH prefix* + DEL, bounded).
func deleteKeys(rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for page := 0; page < 10000; page++ {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 500).Result()
		if err != nil {
			fmt.Fprintln(os.Stderr, "dedup-consumer: delete keys:", err)
			return
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		if next == 0 {
			return
		}
		cursor = next
	}
}

func shutdown(what string, f func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "dedup-consumer: %s shutdown: %v\n", what, err)
	}
}

func clone(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func newRunID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
