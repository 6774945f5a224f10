// Package quickstart is sluice quickstart: an embedded name server and broker (or a
// Kafka cluster) with a payment-events demo of the SDK and the reliability middleware
// (Keys, Park and the retry task, Dedup, the transactional inbox), which prints what
// happened and fails naming what is missing or doubled. The command's help in cmd/sluice
// tells the story; [Run] is its entry and [RunInboxChild] the hidden child process of
// its inbox part.
package quickstart

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/transport"
)

// Quickstart scenario names.
const (
	qsTopic        = "PayEvents"
	qsTagSuccess   = "PaySuccess"
	qsTagFailed    = "PayFailed"
	qsOrderGroup   = "order_service"
	qsPointsGroup  = "points_service"
	qsProducerGrp  = "pay_service"
	qsQueues       = 4
	qsShutdownTime = 10 * time.Second
)

// Defaults of Options (the flags' defaults of sluice quickstart).
const (
	DefaultOrders      = 10
	DefaultFailed      = 2
	DefaultOutageSends = 3
	DefaultTimeout     = 30 * time.Second
)

// Options configures Run: what the flags of sluice quickstart say.
type Options struct {
	Orders      int           // orders paid successfully, 1..1000
	Failed      int           // orders whose payment failed, 0..1000
	OutageSends int           // payments sent while the broker is down, 1..100 (not with Kafka)
	Redis       string        // Redis host:port of the reliability part; "" = an embedded miniredis
	Postgres    string        // PostgreSQL DSN of the inbox part; "" = an embedded SQLite file
	Kafka       string        // "" = the RocketMQ scenario; KafkaEmbedded or host:port[,host:port] = the Kafka one
	Timeout     time.Duration // how long the whole run may take
	Out         io.Writer     // the human-readable account; nil = discarded
	Logger      *slog.Logger  // broker, client, middleware and retry task logs; nil = none
}

// Run runs the quickstart (see the package doc) and writes its account to o.Out.
// Everything it starts is shut down before it returns; it fails naming what is missing
// or doubled.
func Run(ctx context.Context, o Options) error {
	q := qsOptions{orders: o.Orders, failed: o.Failed, outageSends: o.OutageSends, redisAddr: o.Redis,
		timeout: o.Timeout, log: o.Logger, postgresDSN: o.Postgres}
	if q.log == nil {
		q.log = discardLogger()
	}
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if o.Kafka != "" {
		return runKafkaQuickstart(ctx, out, q, o.Kafka)
	}
	return runQuickstart(ctx, out, q)
}

// discardLogger is the logger of a run without Options.Logger.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// qsOptions configures runQuickstart.
type qsOptions struct {
	orders, failed int
	outageSends    int    // payments sent while the broker is down
	redisAddr      string // "" = embedded miniredis
	timeout        time.Duration
	log            *slog.Logger

	// Test hooks (zero = the real demo).
	pointsTags  string // points_service's subscription; default "PaySuccess"
	noDedup     bool   // points_service runs without Dedup: the duplicate adds points twice
	noRetryTask bool   // the retry task is not started: parked payments are never resent
	noInbox     bool   // ledger_service's restarted consumer books without the inbox

	postgresDSN string // the inbox part's database; "" = embedded SQLite
}

// payEvent is the JSON body of a payment event.
type payEvent struct {
	OrderID string  `json:"orderId"`
	Amount  float64 `json:"amount"`
	Status  string  `json:"status"`
}

// qsReceived is one message as a consumer group saw it.
type qsReceived struct {
	tag, key, body string
}

// qsCollector keeps the distinct messages (by order id and tag) each group received.
type qsCollector struct {
	mu  sync.Mutex
	got map[string]map[string]qsReceived // group → tag/key → message
}

func (c *qsCollector) handler(group string) func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
	return func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range msgs {
			key := strings.Join(m.Keys(), ",")
			c.got[group][m.Tag()+"/"+key] = qsReceived{tag: m.Tag(), key: key, body: string(m.Body)}
		}
		return message.ConsumeSuccess, nil
	}
}

// missing returns the tag/key ids of want that group has not received, and ids it
// received that it should not have.
func (c *qsCollector) diff(group string, want []string) (missing, unexpected []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := make(map[string]bool, len(want))
	for _, id := range want {
		w[id] = true
		if _, ok := c.got[group][id]; !ok {
			missing = append(missing, id)
		}
	}
	for id := range c.got[group] {
		if !w[id] {
			unexpected = append(unexpected, id)
		}
	}
	sort.Strings(unexpected)
	return missing, unexpected
}

func (c *qsCollector) sorted(group string) []qsReceived {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]qsReceived, 0, len(c.got[group]))
	for _, r := range c.got[group] {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].key != out[j].key {
			return out[i].key < out[j].key
		}
		return out[i].tag < out[j].tag
	})
	return out
}

// qsRun is one quickstart run: what it started and what it observed.
type qsRun struct {
	out      io.Writer
	o        qsOptions
	started  time.Time
	deadline context.Context // bounds the whole run (--timeout)

	dir     string         // the broker's data directory
	b       *broker.Broker // the running broker (replaced by the restart; nil while down)
	ns      []string       // name server addresses
	p       transport.Producer
	redis   *qsRedis
	col     *qsCollector
	ledger  *qsLedger
	deleted int       // Redis keys of the run's namespace deleted at shutdown
	paid    []qsEvent // the reliability part's payments (outage and duplicate), for the inbox part
}

// runQuickstart runs the payment scenario, then the reliability scenario
// (qsRun.reliability), and writes a human-readable account to out. Everything it starts
// is shut down before it returns, on success and on failure, and the Redis keys it wrote
// are deleted.
func runQuickstart(ctx context.Context, out io.Writer, o qsOptions) (err error) {
	switch {
	case o.orders < 1 || o.orders > 1000:
		return fmt.Errorf("--orders %d: must be 1..1000", o.orders)
	case o.failed < 0 || o.failed > 1000:
		return fmt.Errorf("--failed %d: must be 0..1000", o.failed)
	case o.outageSends < 1 || o.outageSends > 100:
		return fmt.Errorf("--outage-sends %d: must be 1..100", o.outageSends)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", o.timeout)
	}
	if o.pointsTags == "" {
		o.pointsTags = qsTagSuccess
	}
	r := &qsRun{out: out, o: o, started: time.Now(), ledger: newQSLedger()}
	deadline, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r.deadline = deadline

	// Stop functions run in reverse start order: retry task, parker, producer, consumers,
	// admin client, broker (with its name server), Redis keys and client, data directory.
	var stops []func(context.Context) error
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), qsShutdownTime)
		defer scancel()
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i](sctx))
		}
		if serr := errors.Join(errs...); serr != nil {
			err = errors.Join(err, fmt.Errorf("quickstart shutdown: %w", serr))
		} else if err == nil {
			fmt.Fprintf(out, "\nshut down the retry task, the producer, the consumer groups, the inbox database, the broker and the name server; deleted the %d Redis key(s) of namespace %s; removed %s\n",
				r.deleted, r.redis.ns, r.dir)
			fmt.Fprintf(out, "quickstart OK in %v\n", time.Since(r.started).Round(time.Millisecond))
		}
	}()

	r.dir, err = os.MkdirTemp("", "sluice-quickstart-")
	if err != nil {
		return fmt.Errorf("temporary data directory: %w", err)
	}
	stops = append(stops, func(context.Context) error { return os.RemoveAll(r.dir) })

	// Redis first: points_service's Dedup needs it from its first message on.
	r.redis, err = openQSRedis(deadline, o.redisAddr)
	if err != nil {
		return err
	}
	stops = append(stops, func(ctx context.Context) error {
		n, err := r.redis.close(ctx)
		r.deleted = n
		return err
	})

	b, err := broker.New(broker.Config{
		ListenAddr:        "127.0.0.1:0",
		NamesrvListenAddr: "127.0.0.1:0",
		StorePathRootDir:  r.dir,
		Logger:            o.log,
	})
	if err != nil {
		return err
	}
	r.b = b
	stops = append(stops, func(ctx context.Context) error { // the broker running at the end
		if r.b == nil {
			return nil
		}
		return r.b.Shutdown(ctx)
	})
	if err := b.Start(); err != nil {
		r.b = nil // Start stopped it again
		return fmt.Errorf("broker start: %w", err)
	}
	r.ns = []string{b.NamesrvAddr()}
	fmt.Fprintf(out, "started name server %s and broker %s at %s (data in %s)\n", b.NamesrvAddr(), b.Name(), b.Addr(), r.dir)

	a, err := admin.New(admin.Config{NamesrvAddrs: r.ns, Logger: o.log})
	if err != nil {
		return err
	}
	stops = append(stops, func(context.Context) error { return a.Close() })
	if _, err := a.CreateTopic(deadline, admin.TopicSpec{Topic: qsTopic, Queues: qsQueues}); err != nil {
		return fmt.Errorf("create topic %s: %w", qsTopic, err)
	}
	if _, err := a.WaitTopicRoute(deadline, qsTopic); err != nil {
		return err
	}
	fmt.Fprintf(out, "created topic %s with %d queues\n", qsTopic, qsQueues)

	r.col = &qsCollector{got: map[string]map[string]qsReceived{qsOrderGroup: {}, qsPointsGroup: {}}}
	groups := []struct{ name, tags string }{
		{qsOrderGroup, qsTagSuccess + " || " + qsTagFailed},
		{qsPointsGroup, o.pointsTags},
	}
	for _, g := range groups {
		mws, handler, err := r.consumerChain(g.name)
		if err != nil {
			return err
		}
		c, err := consumer.NewPushConsumer(consumer.Config{
			NamesrvAddrs:     r.ns,
			Group:            g.name,
			ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
			// One message per handler call, so Dedup and the ledger see each delivery.
			ConsumeMessageBatchMaxSize: 1,
			// Heartbeats tell a restarted broker the group's subscription again; until
			// one arrives it refuses the group's pulls (SUBSCRIPTION_NOT_EXIST). 1 s keeps
			// the outage demo short (default 30 s).
			HeartbeatInterval: time.Second,
			Middlewares:       mws,
			Logger:            o.log,
		})
		if err != nil {
			return err
		}
		stops = append(stops, c.Shutdown)
		if err := qsStartConsumer(ctx, c, qsTopic, g.tags, handler); err != nil {
			return fmt.Errorf("consumer group %s: %w", g.name, err)
		}
		fmt.Fprintf(out, "started consumer group %s subscribed to %s %q\n", g.name, qsTopic, g.tags)
	}

	r.p, err = producer.New(producer.Config{NamesrvAddrs: r.ns, Group: qsProducerGrp, Logger: o.log})
	if err != nil {
		return err
	}
	stops = append(stops, r.p.Shutdown) // stops run in reverse: the sender stops before the receivers
	if err := r.p.Start(ctx); err != nil {
		return err
	}
	if err := r.fanOut(ctx); err != nil {
		return err
	}
	if err := r.reliability(ctx, &stops); err != nil {
		return err
	}
	paid := make([]qsEvent, 0, o.orders+len(r.paid))
	for i := 1; i <= o.orders; i++ { // the fan-out's PaySuccess payments: key = order id
		id := fmt.Sprintf("ORD-%04d", 1000+i)
		paid = append(paid, qsEvent{order: id, key: id})
	}
	if err := r.inboxPart(ctx, &stops, append(paid, r.paid...)); err != nil {
		return err
	}
	return r.outboxPart(ctx, &stops)
}

// qsStartConsumer subscribes c's handler to topic and starts c. It is the same for every
// engine (transport.Consumer): only the constructors before it pick the engine.
func qsStartConsumer(ctx context.Context, c transport.Consumer, topic, tags string, handler middleware.ConsumeFunc) error {
	if err := c.Subscribe(topic, tags, handler); err != nil {
		return err
	}
	return c.Start(ctx)
}

// consumerChain returns the middlewares and the handler of consumer group group.
// order_service records what it received, without Dedup: it only notes an order's
// payment status, which a repeat does not change. points_service adds loyalty points (its
// business effect) behind Dedup, so a payment delivered twice adds points once. Both
// count their deliveries in the ledger (outermost, so they see Dedup's duplicates).
func (r *qsRun) consumerChain(group string) ([]middleware.ConsumeMiddleware, middleware.ConsumeFunc, error) {
	record := r.col.handler(group)
	if group != qsPointsGroup {
		return []middleware.ConsumeMiddleware{middleware.Logging(r.o.log), r.ledger.observe(group)}, record, nil
	}
	mws := []middleware.ConsumeMiddleware{middleware.Logging(r.o.log), r.ledger.observe(group)}
	if !r.o.noDedup {
		dedup, err := redismw.Dedup(redismw.DedupConfig{
			Client: r.redis.client,
			Prefix: r.redis.dedupPrefix(group),
			Logger: r.o.log,
		})
		if err != nil {
			return nil, nil, err
		}
		mws = append(mws, dedup)
	}
	mws = append(mws, middleware.Recover())
	addPoints := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if res, err := record(ctx, msgs); res != message.ConsumeSuccess || err != nil {
			return res, err
		}
		for _, m := range msgs {
			var ev payEvent
			if err := json.Unmarshal(m.Body, &ev); err != nil {
				return message.ReconsumeLater, fmt.Errorf("points_service: body of %s: %w", m.MsgID, err)
			}
			r.ledger.addPoints(middleware.KeyOf(m), ev)
		}
		return message.ConsumeSuccess, nil
	}
	return mws, addPoints, nil
}

// fanOut is the payment scenario: send the PaySuccess and PayFailed events, wait until
// both groups have exactly what they subscribed to, print what they received.
func (r *qsRun) fanOut(ctx context.Context) error {
	out, o := r.out, r.o
	var wantOrder, wantPoints []string
	for i := 1; i <= o.orders+o.failed; i++ {
		ev := payEvent{OrderID: fmt.Sprintf("ORD-%04d", 1000+i), Amount: float64(1999+i*250) / 100, Status: "PAID"}
		tag := qsTagSuccess
		if i > o.orders {
			tag, ev.Status = qsTagFailed, "DECLINED"
		}
		body, _ := json.Marshal(ev)
		msg := message.NewMessage(qsTopic, body).SetTag(tag).SetKeys(ev.OrderID)
		res, err := r.p.Send(r.deadline, msg)
		if err != nil {
			return fmt.Errorf("send %s %s: %w", tag, ev.OrderID, err)
		}
		fmt.Fprintf(out, "sent %-10s key=%s  %s  -> queue %d offset %d (%s)\n", tag, ev.OrderID, body, res.Queue.QueueID, res.QueueOffset, res.Status)
		id := tag + "/" + ev.OrderID
		wantOrder = append(wantOrder, id)
		if tag == qsTagSuccess {
			wantPoints = append(wantPoints, id)
		}
	}

	want := map[string][]string{qsOrderGroup: wantOrder, qsPointsGroup: wantPoints}
	qsWait(r.deadline, func() bool {
		for g, w := range want {
			if m, u := r.col.diff(g, w); len(m)+len(u) > 0 {
				return false
			}
		}
		return true
	})

	var problems []string
	for _, g := range []struct{ name, tags string }{{qsOrderGroup, qsTagSuccess + " || " + qsTagFailed}, {qsPointsGroup, o.pointsTags}} {
		got := r.col.sorted(g.name)
		fmt.Fprintf(out, "\nconsumer group %s (subscribed %q) received %d message(s):\n", g.name, g.tags, len(got))
		for _, rec := range got {
			fmt.Fprintf(out, "  %-10s key=%s  %s\n", rec.tag, rec.key, rec.body)
		}
		missing, unexpected := r.col.diff(g.name, want[g.name])
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("group %s is missing %d of %d message(s): %s", g.name, len(missing), len(want[g.name]), strings.Join(missing, ", ")))
		}
		if len(unexpected) > 0 {
			problems = append(problems, fmt.Sprintf("group %s received %d message(s) it did not subscribe to: %s", g.name, len(unexpected), strings.Join(unexpected, ", ")))
		}
	}
	if len(problems) > 0 {
		return r.failed(ctx, problems)
	}
	fmt.Fprintf(out, "\nboth groups received exactly what they subscribed to: %s got %d (%s and %s), %s got %d (%s only)\n",
		qsOrderGroup, len(wantOrder), qsTagSuccess, qsTagFailed, qsPointsGroup, len(wantPoints), qsTagSuccess)
	return nil
}

// failed returns the run's failure naming problems.
func (r *qsRun) failed(ctx context.Context, problems []string) error {
	why := ""
	if ctx.Err() != nil {
		why = " (interrupted)"
	}
	return fmt.Errorf("quickstart failed after %v%s: %s", time.Since(r.started).Round(time.Millisecond), why, strings.Join(problems, "; "))
}

// qsWait polls cond every 20 ms until it holds (true) or ctx is done (cond's last value).
func qsWait(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return cond()
		case <-tick.C:
		}
	}
	return true
}
