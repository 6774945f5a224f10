package quickstart

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

// KafkaEmbedded is the Options.Kafka (and --kafka) value meaning "an in-process
// Kafka-protocol cluster".
const KafkaEmbedded = "embedded"

// qsPoisonOrder is the order whose event body is not JSON: points_service cannot parse
// it, retries it twice through its retry topics, then it lands in its dead-letter topic.
const qsPoisonOrder = "ORD-BAD1"

// qsKafkaRun is one quickstart run on Kafka.
type qsKafkaRun struct {
	out      io.Writer
	o        qsOptions
	started  time.Time
	deadline context.Context
	brokers  []string
	suffix   string // "" on the embedded cluster, "-<hex>" on a real one (fresh topic and groups)
	col      *qsCollector
	ledger   *qsLedger
	redis    *qsRedis

	mu        sync.Mutex
	flaky     string // the order whose first points_service delivery fails
	flakySeen []int32
}

func (r *qsKafkaRun) topic() string         { return qsTopic + r.suffix }
func (r *qsKafkaRun) group(g string) string { return g + r.suffix }
func (r *qsKafkaRun) groupTopics() []string { // the retry and dead-letter topics of both groups
	var out []string
	for _, g := range []string{qsOrderGroup, qsPointsGroup} {
		out = append(out, kafka.RetryTopic(r.group(g), 1), kafka.RetryTopic(r.group(g), 2), kafka.DLQTopic(r.group(g)))
	}
	return out
}

// runKafkaQuickstart runs the payment scenario on Kafka: at addr, or on an embedded
// kfake cluster when addr is "embedded". Everything it starts is stopped before it
// returns; on a real cluster the topics it created are deleted and its Redis keys too.
func runKafkaQuickstart(ctx context.Context, out io.Writer, o qsOptions, addr string) (err error) {
	switch {
	case o.orders < 1 || o.orders > 1000:
		return fmt.Errorf("--orders %d: must be 1..1000", o.orders)
	case o.failed < 0 || o.failed > 1000:
		return fmt.Errorf("--failed %d: must be 0..1000", o.failed)
	case o.timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", o.timeout)
	}
	r := &qsKafkaRun{out: out, o: o, started: time.Now(), ledger: newQSLedger(),
		col: &qsCollector{got: map[string]map[string]qsReceived{qsOrderGroup: {}, qsPointsGroup: {}}}}
	deadline, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	r.deadline = deadline

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
			fmt.Fprintf(out, "\nshut down the producer, both consumer groups and the cluster connections; deleted the Redis keys of namespace %s\n", r.redis.ns)
			fmt.Fprintf(out, "quickstart on Kafka OK in %v\n", time.Since(r.started).Round(time.Millisecond))
		}
	}()

	if addr == KafkaEmbedded {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
		if err != nil {
			return fmt.Errorf("start the embedded Kafka cluster: %w", err)
		}
		stops = append(stops, func(context.Context) error { c.Close(); return nil })
		r.brokers = c.ListenAddrs()
		fmt.Fprintf(out, "started an embedded Kafka-protocol cluster (kfake) at %s\n", strings.Join(r.brokers, ","))
	} else {
		r.brokers = strings.FieldsFunc(addr, func(c rune) bool { return c == ',' || c == ';' || c == ' ' })
		var b [4]byte
		_, _ = rand.Read(b[:])
		r.suffix = "-" + hex.EncodeToString(b[:])
		fmt.Fprintf(out, "using the Kafka cluster at %s; this run's topic and groups end in %s\n", strings.Join(r.brokers, ","), r.suffix)
	}
	tr := &kafkago.Transport{DialTimeout: 5 * time.Second}
	stops = append(stops, func(context.Context) error { tr.CloseIdleConnections(); return nil })
	cl := &kafkago.Client{Addr: kafkago.TCP(r.brokers...), Timeout: 10 * time.Second, Transport: tr}

	r.redis, err = openQSRedis(deadline, o.redisAddr)
	if err != nil {
		return err
	}
	stops = append(stops, func(ctx context.Context) error { _, err := r.redis.close(ctx); return err })

	if err := kafka.EnsureTopics(deadline, cl, qsQueues, -1, r.topic()); err != nil {
		return err
	}
	if r.suffix != "" {
		stops = append(stops, func(ctx context.Context) error {
			res, err := cl.DeleteTopics(ctx, &kafkago.DeleteTopicsRequest{Topics: append(r.groupTopics(), r.topic())})
			if err != nil {
				return fmt.Errorf("delete the run's topics: %w", err)
			}
			for t, e := range res.Errors {
				if e != nil {
					err = errors.Join(err, fmt.Errorf("delete topic %s: %w", t, e))
				}
			}
			return err
		})
	}
	fmt.Fprintf(out, "created topic %s with %d partitions\n", r.topic(), qsQueues)

	groups := []struct{ name, tags string }{{qsOrderGroup, qsTagSuccess + " || " + qsTagFailed}, {qsPointsGroup, qsTagSuccess}}
	for _, g := range groups {
		handler, err := r.chain(g.name)
		if err != nil {
			return err
		}
		c, err := kafka.NewConsumer(kafka.Config{
			Brokers: r.brokers, Group: r.group(g.name), Logger: o.log,
			RetrySchedule:     []time.Duration{300 * time.Millisecond, 600 * time.Millisecond},
			MaxReconsumeTimes: kafka.Retries(2),
			HeartbeatInterval: 500 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 10 * time.Second,
			FetchMaxWait: 200 * time.Millisecond, CommitInterval: 200 * time.Millisecond,
		})
		if err != nil {
			return err
		}
		stops = append(stops, c.Shutdown)
		if err := qsStartConsumer(deadline, c, r.topic(), g.tags, handler); err != nil {
			return fmt.Errorf("consumer group %s: %w", r.group(g.name), err)
		}
		fmt.Fprintf(out, "started consumer group %s subscribed to %s %q (retries: %s.retry.1..2, dead letters: %s)\n",
			r.group(g.name), r.topic(), g.tags, r.group(g.name), kafka.DLQTopic(r.group(g.name)))
	}

	p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: r.brokers, Logger: o.log})
	if err != nil {
		return err
	}
	stops = append(stops, p.Shutdown)
	if err := p.Start(ctx); err != nil {
		return err
	}
	return r.scenario(ctx, middleware.ChainSend(p.SendFunc(), middleware.Keys()), cl)
}

// chain returns group's handler: order_service records what it received;
// points_service adds points behind Dedup, fails the first delivery of one order (it
// comes back through the retry topic) and cannot parse the poison order at all.
func (r *qsKafkaRun) chain(group string) (middleware.ConsumeFunc, error) {
	record := r.col.handler(group)
	if group != qsPointsGroup {
		return middleware.ChainConsume(record, middleware.Logging(r.o.log), r.ledger.observe(group)), nil
	}
	dedup, err := redismw.Dedup(redismw.DedupConfig{Client: r.redis.client, Prefix: r.redis.dedupPrefix(r.group(group)), Logger: r.o.log})
	if err != nil {
		return nil, err
	}
	addPoints := func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			var ev payEvent
			if err := json.Unmarshal(m.Body, &ev); err != nil {
				return message.ReconsumeLater, fmt.Errorf("points_service: body of %s: %w", middleware.KeyOf(m), err)
			}
			r.mu.Lock()
			flaky := ev.OrderID == r.flaky
			if flaky {
				r.flakySeen = append(r.flakySeen, m.ReconsumeTimes)
			}
			r.mu.Unlock()
			if flaky && m.ReconsumeTimes == 0 {
				return message.ReconsumeLater, errors.New("points_service: points ledger busy")
			}
		}
		if res, err := record(ctx, msgs); res != message.ConsumeSuccess || err != nil {
			return res, err
		}
		for _, m := range msgs {
			var ev payEvent
			_ = json.Unmarshal(m.Body, &ev)
			r.ledger.addPoints(middleware.KeyOf(m), ev)
		}
		return message.ConsumeSuccess, nil
	}
	return middleware.ChainConsume(addPoints, middleware.Logging(r.o.log), r.ledger.observe(group), dedup, middleware.Recover()), nil
}

// scenario sends the payments (one of them twice, one malformed), waits until both
// groups have what they subscribed to, the flaky order came back through the retry
// topic, the malformed one is a dead letter and the duplicate was skipped, and prints it.
func (r *qsKafkaRun) scenario(ctx context.Context, send middleware.SendFunc, cl *kafkago.Client) error {
	out, o := r.out, r.o
	var wantOrder, wantPoints []string
	var first *message.Message
	for i := 1; i <= o.orders+o.failed; i++ {
		ev := payEvent{OrderID: fmt.Sprintf("ORD-%04d", 1000+i), Amount: float64(1999+i*250) / 100, Status: "PAID"}
		tag := qsTagSuccess
		if i > o.orders {
			tag, ev.Status = qsTagFailed, "DECLINED"
		}
		body, _ := json.Marshal(ev)
		msg := message.NewMessage(r.topic(), body).SetTag(tag).SetKeys(ev.OrderID).SetShardingKey(ev.OrderID)
		if first == nil {
			first = msg
		}
		if i == 2 && i <= o.orders { // the second paid order fails once (with --orders ≥ 2)
			r.mu.Lock()
			r.flaky = ev.OrderID
			r.mu.Unlock()
		}
		res, err := send(r.deadline, msg)
		if err != nil {
			return fmt.Errorf("send %s %s: %w", tag, ev.OrderID, err)
		}
		fmt.Fprintf(out, "sent %-10s key=%s  %s  -> partition %d offset %d\n", tag, ev.OrderID, body, res.Queue.QueueID, res.QueueOffset)
		wantOrder = append(wantOrder, tag+"/"+ev.OrderID)
		if tag == qsTagSuccess {
			wantPoints = append(wantPoints, tag+"/"+ev.OrderID)
		}
	}
	bad := message.NewMessage(r.topic(), []byte("{not json")).SetTag(qsTagSuccess).SetKeys(qsPoisonOrder).SetShardingKey(qsPoisonOrder)
	if _, err := send(r.deadline, bad); err != nil {
		return fmt.Errorf("send the malformed event: %w", err)
	}
	fmt.Fprintf(out, "sent %-10s key=%s  {not json  (malformed: points_service cannot parse it)\n", qsTagSuccess, qsPoisonOrder)
	wantOrder = append(wantOrder, qsTagSuccess+"/"+qsPoisonOrder)
	// The same payment again (same key, same id): a redelivery as Kafka makes after a
	// crash. points_service must add its points once.
	dup := first.Clone()
	if _, err := send(r.deadline, dup); err != nil {
		return fmt.Errorf("send the duplicate: %w", err)
	}
	fmt.Fprintf(out, "sent %-10s key=%s  again (the same payment twice)\n", first.Tag(), first.Keys()[0])

	want := map[string][]string{qsOrderGroup: wantOrder, qsPointsGroup: wantPoints}
	dupKey := first.Keys()[0]
	var dead []kafka.DeadLetter
	qsWait(r.deadline, func() bool {
		for g, w := range want {
			if m, u := r.col.diff(g, w); len(m)+len(u) > 0 {
				return false
			}
		}
		if _, dups, _ := r.ledger.count(qsPointsGroup, dupKey); dups < 1 {
			return false
		}
		l, err := kafka.ListDLQ(r.deadline, r.brokers, r.group(qsPointsGroup))
		dead = l
		return err == nil && len(l) == 1
	})

	var problems []string
	for _, g := range []struct{ name, tags string }{{qsOrderGroup, qsTagSuccess + " || " + qsTagFailed}, {qsPointsGroup, qsTagSuccess}} {
		got := r.col.sorted(g.name)
		fmt.Fprintf(out, "\nconsumer group %s (subscribed %q) received %d message(s):\n", r.group(g.name), g.tags, len(got))
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
	r.mu.Lock()
	seen, flaky := append([]int32(nil), r.flakySeen...), r.flaky
	r.mu.Unlock()
	if flaky != "" {
		fmt.Fprintf(out, "\n%s failed at its first delivery to points_service and came back through %s: deliveries with reconsume times %v\n",
			flaky, kafka.RetryTopic(r.group(qsPointsGroup), 1), seen)
		if len(seen) != 2 || seen[0] != 0 || seen[1] != 1 {
			problems = append(problems, fmt.Sprintf("%s was not retried once through the retry topic (reconsume times seen %v)", flaky, seen))
		}
	}
	deliveries, dups, effects := r.ledger.count(qsPointsGroup, dupKey)
	fmt.Fprintf(out, "%s reached points_service %d time(s) (the payment and its duplicate); Dedup skipped %d duplicate(s); points added %d time(s)\n",
		dupKey, deliveries, dups, effects)
	if dups < 1 || effects != 1 {
		problems = append(problems, fmt.Sprintf("the duplicate of %s: %d skipped, points added %d times (want ≥1 skipped, 1 effect)", dupKey, dups, effects))
	}
	if doubled := r.ledger.doubled(func(k string) string { return k }); len(doubled) > 0 {
		problems = append(problems, "points added more than once: "+strings.Join(doubled, ", "))
	}
	if len(dead) != 1 {
		problems = append(problems, fmt.Sprintf("%d dead letter(s) in %s, want 1 (%s)", len(dead), kafka.DLQTopic(r.group(qsPointsGroup)), qsPoisonOrder))
	} else {
		d := dead[0]
		fmt.Fprintf(out, "dead letter in %s: key %s from %s partition@offset %s after %d deliveries, last error %q\n",
			kafka.DLQTopic(r.group(qsPointsGroup)), strings.Join(d.Record.ToMessageExt().Keys(), " "), d.OriginTopic, d.OriginLocation, d.ReconsumeTimes, d.LastError)
		if r.suffix != "" { // a real cluster; this run's topics are deleted at its end, so name the command for the user's own groups
			fmt.Fprintf(out, "  (this run deletes its topics at the end; list and re-drive your own groups' dead letters with: sluice admin kafka --brokers %s dlq list|resend --group <group>)\n", strings.Join(r.brokers, ","))
		}
	}
	if len(problems) > 0 {
		why := ""
		if ctx.Err() != nil {
			why = " (interrupted)"
		}
		return fmt.Errorf("quickstart on Kafka failed after %v%s: %s", time.Since(r.started).Round(time.Millisecond), why, strings.Join(problems, "; "))
	}
	fmt.Fprintf(out, "\nboth groups received exactly what they subscribed to; one retry, one dead letter, one duplicate skipped, no payment counted twice\n")
	return nil
}
