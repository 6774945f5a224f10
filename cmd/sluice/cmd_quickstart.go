package main

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

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
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

func newQuickstartCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quickstart",
		Short: "Run an embedded name server and broker with a payment-events demo, then exit",
		Long: `Start a name server and a broker in this process on free loopback ports with a
temporary data directory, create topic PayEvents, send one PaySuccess event per order
(key = order id, JSON body) and a few PayFailed events, and consume them with two
consumer groups: order_service subscribes "PaySuccess || PayFailed", points_service
subscribes "PaySuccess". Print what each group received, shut everything down, remove
the data directory and exit 0 — or exit non-zero naming what is missing once --timeout
has passed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			var o qsOptions
			o.orders, _ = f.GetInt("orders")
			o.failed, _ = f.GetInt("failed")
			o.timeout, _ = f.GetDuration("timeout")
			o.log = discardLogger()
			if verbose, _ := f.GetBool("verbose"); verbose {
				l, err := newLogger(cmd)
				if err != nil {
					return err
				}
				o.log = l
			}
			return runQuickstart(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.Int("orders", 10, "orders paid successfully (one PaySuccess event each), 1..1000")
	f.Int("failed", 2, "orders whose payment failed (one PayFailed event each), 0..1000")
	f.Duration("timeout", 30*time.Second, "how long to wait for both groups to receive their events")
	f.Bool("verbose", false, "show the broker, producer and consumer logs on stderr (level from --log-level)")
	return cmd
}

// qsOptions configures runQuickstart.
type qsOptions struct {
	orders, failed int
	timeout        time.Duration
	log            *slog.Logger
	pointsTags     string // test hook: points_service's subscription; default "PaySuccess"
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

// runQuickstart runs the payment scenario and writes a human-readable account to out.
// Everything it starts is shut down before it returns, on success and on failure.
func runQuickstart(ctx context.Context, out io.Writer, o qsOptions) (err error) {
	switch {
	case o.orders < 1 || o.orders > 1000:
		return fmt.Errorf("--orders %d: must be 1..1000", o.orders)
	case o.failed < 0 || o.failed > 1000:
		return fmt.Errorf("--failed %d: must be 0..1000", o.failed)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", o.timeout)
	}
	if o.pointsTags == "" {
		o.pointsTags = qsTagSuccess
	}
	started := time.Now()
	deadline, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	// Stop functions run in reverse start order: producer, consumers, admin client,
	// broker (with its name server), data directory.
	var stops []func(context.Context) error
	var dir string
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
			fmt.Fprintf(out, "\nshut down the producer, both consumer groups, the broker and the name server; removed %s\n", dir)
			fmt.Fprintf(out, "quickstart OK in %v\n", time.Since(started).Round(time.Millisecond))
		}
	}()

	dir, err = os.MkdirTemp("", "sluice-quickstart-")
	if err != nil {
		return fmt.Errorf("temporary data directory: %w", err)
	}
	stops = append(stops, func(context.Context) error { return os.RemoveAll(dir) })

	b, err := broker.New(broker.Config{
		ListenAddr:        "127.0.0.1:0",
		NamesrvListenAddr: "127.0.0.1:0",
		StorePathRootDir:  dir,
		Logger:            o.log,
	})
	if err != nil {
		return err
	}
	stops = append(stops, b.Shutdown)
	if err := b.Start(); err != nil {
		return fmt.Errorf("broker start: %w", err)
	}
	ns := splitAddrs(b.NamesrvAddr())
	fmt.Fprintf(out, "started name server %s and broker %s at %s (data in %s)\n", b.NamesrvAddr(), b.Name(), b.Addr(), dir)

	a, err := admin.New(admin.Config{NamesrvAddrs: ns, Logger: o.log})
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

	col := &qsCollector{got: map[string]map[string]qsReceived{qsOrderGroup: {}, qsPointsGroup: {}}}
	groups := []struct{ name, tags string }{
		{qsOrderGroup, qsTagSuccess + " || " + qsTagFailed},
		{qsPointsGroup, o.pointsTags},
	}
	for _, g := range groups {
		c, err := consumer.NewPushConsumer(consumer.Config{
			NamesrvAddrs:     ns,
			Group:            g.name,
			ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
			Logger:           o.log,
		})
		if err != nil {
			return err
		}
		stops = append(stops, c.Shutdown)
		if err := c.Subscribe(qsTopic, g.tags, col.handler(g.name)); err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return fmt.Errorf("consumer group %s: %w", g.name, err)
		}
		fmt.Fprintf(out, "started consumer group %s subscribed to %s %q\n", g.name, qsTopic, g.tags)
	}

	p, err := producer.New(producer.Config{NamesrvAddrs: ns, Group: qsProducerGrp, Logger: o.log})
	if err != nil {
		return err
	}
	stops = append(stops, p.Shutdown) // stops run in reverse: the sender stops before the receivers
	if err := p.Start(); err != nil {
		return err
	}
	var wantOrder, wantPoints []string
	for i := 1; i <= o.orders+o.failed; i++ {
		ev := payEvent{OrderID: fmt.Sprintf("ORD-%04d", 1000+i), Amount: float64(1999+i*250) / 100, Status: "PAID"}
		tag := qsTagSuccess
		if i > o.orders {
			tag, ev.Status = qsTagFailed, "DECLINED"
		}
		body, _ := json.Marshal(ev)
		msg := message.NewMessage(qsTopic, body).SetTag(tag).SetKeys(ev.OrderID)
		res, err := p.SendSync(deadline, msg)
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
	complete := func() bool {
		for g, w := range want {
			if m, u := col.diff(g, w); len(m)+len(u) > 0 {
				return false
			}
		}
		return true
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !complete() && deadline.Err() == nil {
		select {
		case <-deadline.Done():
		case <-tick.C:
		}
	}

	var problems []string
	for _, g := range groups {
		got := col.sorted(g.name)
		fmt.Fprintf(out, "\nconsumer group %s (subscribed %q) received %d message(s):\n", g.name, g.tags, len(got))
		for _, r := range got {
			fmt.Fprintf(out, "  %-10s key=%s  %s\n", r.tag, r.key, r.body)
		}
		missing, unexpected := col.diff(g.name, want[g.name])
		if len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("group %s is missing %d of %d message(s): %s", g.name, len(missing), len(want[g.name]), strings.Join(missing, ", ")))
		}
		if len(unexpected) > 0 {
			problems = append(problems, fmt.Sprintf("group %s received %d message(s) it did not subscribe to: %s", g.name, len(unexpected), strings.Join(unexpected, ", ")))
		}
	}
	if len(problems) > 0 {
		why := ""
		if ctx.Err() != nil {
			why = " (interrupted)"
		}
		return fmt.Errorf("quickstart failed after %v%s: %s", time.Since(started).Round(time.Millisecond), why, strings.Join(problems, "; "))
	}
	fmt.Fprintf(out, "\nboth groups received exactly what they subscribed to: %s got %d (%s and %s), %s got %d (%s only)\n",
		qsOrderGroup, len(wantOrder), qsTagSuccess, qsTagFailed, qsPointsGroup, len(wantPoints), qsTagSuccess)
	return nil
}
