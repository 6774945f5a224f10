package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/filter"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

func startConsumer(t *testing.T, cfg Config, subscribe func(*Consumer)) *Consumer {
	t.Helper()
	c, err := NewConsumer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	subscribe(c)
	if err := c.Start(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	return c
}

func recordOK(s *seen) func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
	return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			s.add(m)
		}
		return message.ConsumeSuccess, nil
	}
}

// Records arrive as MessageExt with topic, queue id = partition, queue offset, keys,
// tag, properties and timestamps; tag and SQL92 subscriptions skip what does not match
// (and the skipped offsets are committed too).
func TestConsumeMappingAndFilters(t *testing.T) {
	c := newCluster(t, 2, "tagged", "sql")
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 10; i++ {
		tag := []string{"A", "B", "C"}[i%3]
		if _, err := p.Send(ctx, message.NewMessage("tagged", []byte("t"+strconv.Itoa(i))).SetTag(tag).SetKeys("k"+strconv.Itoa(i)).SetProperty("n", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Send(ctx, message.NewMessage("sql", []byte("s"+strconv.Itoa(i))).SetProperty("n", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var tagged, sql seen
	cons := startConsumer(t, fastConfig(t, brokers, "g-map"), func(c *Consumer) {
		if err := c.Subscribe("tagged", "A || C", recordOK(&tagged)); err != nil {
			t.Fatal(err)
		}
		if err := c.SubscribeSQL("sql", "n >= 5", recordOK(&sql)); err != nil {
			t.Fatal(err)
		}
	})
	testkit.WaitFor(t, 15*time.Second, func() bool { return tagged.len() >= 7 && sql.len() >= 5 }, "filtered messages consumed")
	// All 10+10 offsets finish (matches and skips): the commit reaches the end of every partition.
	testkit.WaitFor(t, 10*time.Second, func() bool {
		var sum int64
		for _, topic := range []string{"tagged", "sql"} {
			for part := 0; part < 2; part++ {
				if off := committed(t, brokers, "g-map", topic, part); off > 0 {
					sum += off
				}
			}
		}
		return sum == 20
	}, "commits past skipped records")
	shutdown(t, cons, 10*time.Second)
	if tagged.len() != 7 || sql.len() != 5 {
		t.Fatalf("tagged %d (want 7), sql %d (want 5)", tagged.len(), sql.len())
	}
	for _, m := range tagged.all() {
		n, _ := strconv.Atoi(m.Property("n"))
		if m.Topic != "tagged" || (m.Tag() != "A" && m.Tag() != "C") || m.Keys()[0] != "k"+m.Property("n") || string(m.Body) != "t"+m.Property("n") ||
			m.QueueID < 0 || m.QueueID > 1 || m.QueueOffset < 0 || m.BornTimestamp == 0 || m.StoreTimestamp == 0 || m.BrokerName != BrokerName ||
			m.MsgID == "" || m.MsgID != m.UniqKey() || m.ReconsumeTimes != 0 || n%3 == 1 {
			t.Fatalf("message %+v", m)
		}
	}
	for _, m := range sql.all() {
		if n, _ := strconv.Atoi(m.Property("n")); n < 5 {
			t.Fatalf("SQL92 n >= 5 let through n=%d", n)
		}
	}
}

// A message that keeps failing goes through "<group>.retry.1", "<group>.retry.2" (the
// schedule's last level, reused) and after MaxReconsumeTimes to "<group>.dlq", with its
// origin, reconsume count and last error in headers; the messages after it are not held
// up. The same message is seen with ReconsumeTimes 0, 1, 2, 3 and under its own topic.
func TestRetryTopicsThenDLQ(t *testing.T) {
	c := newCluster(t, 1, "pay")
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 5; i++ {
		if _, err := p.Send(ctx, message.NewMessage("pay", []byte("m"+strconv.Itoa(i))).SetKeys("k"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var tries []int32
	var retryTopics []string
	var ok seen
	cfg := fastConfig(t, brokers, "g-retry")
	cfg.MaxReconsumeTimes = Retries(3)
	cons := startConsumer(t, cfg, func(c *Consumer) {
		if err := c.Subscribe("pay", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			m := msgs[0]
			if string(m.Body) == "m1" {
				mu.Lock()
				tries = append(tries, m.ReconsumeTimes)
				retryTopics = append(retryTopics, m.Property(message.PropertyRetryTopic))
				mu.Unlock()
				if m.Topic != "pay" {
					t.Errorf("retry shown under topic %q", m.Topic)
				}
				return message.ReconsumeLater, errors.New("card declined")
			}
			ok.add(m)
			return message.ConsumeSuccess, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	defer shutdown(t, cons, 10*time.Second)
	testkit.WaitFor(t, 20*time.Second, func() bool { return len(readTopic(t, brokers, DLQTopic("g-retry"))) == 1 }, "dead letter")
	if ok.len() != 4 {
		t.Fatalf("%d other messages handled, want 4", ok.len())
	}
	mu.Lock()
	got := append([]int32(nil), tries...)
	rts := append([]string(nil), retryTopics...)
	mu.Unlock()
	if len(got) != 4 || got[0] != 0 || got[1] != 1 || got[2] != 2 || got[3] != 3 {
		t.Fatalf("reconsume times seen %v, want [0 1 2 3]", got)
	}
	if rts[0] != "" || rts[1] != RetryTopic("g-retry", 1) || rts[2] != RetryTopic("g-retry", 2) || rts[3] != RetryTopic("g-retry", 2) {
		t.Fatalf("retry topics %v", rts)
	}
	dl, err := ListDLQ(ctx, brokers, "g-retry")
	if err != nil || len(dl) != 1 {
		t.Fatalf("ListDLQ: %v %v", dl, err)
	}
	d := dl[0]
	if d.OriginTopic != "pay" || d.OriginLocation != "0@1" || d.ReconsumeTimes != 4 || d.LastError != "card declined" || string(d.Record.Value) != "m1" {
		t.Fatalf("dead letter %+v", d)
	}
}

// An orderly consumer retries a failed message in place: the messages behind it on its
// partition wait, it runs again with ReconsumeTimes raised, and after MaxReconsumeTimes
// it goes to the DLQ and the partition moves on — in order throughout.
func TestOrderlyRetryInPlace(t *testing.T) {
	c := newCluster(t, 1, "seq")
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 6; i++ {
		if _, err := p.Send(ctx, message.NewMessage("seq", []byte(strconv.Itoa(i))).SetShardingKey("one")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var order []string
	cfg := fastConfig(t, brokers, "g-orderly")
	cfg.Orderly = true
	cfg.MaxReconsumeTimes = Retries(2)
	cons := startConsumer(t, cfg, func(c *Consumer) {
		if err := c.Subscribe("seq", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			m := msgs[0]
			mu.Lock()
			order = append(order, string(m.Body)+"/"+strconv.Itoa(int(m.ReconsumeTimes)))
			mu.Unlock()
			switch string(m.Body) {
			case "1": // succeeds at its second try
				if m.ReconsumeTimes == 0 {
					return message.SuspendCurrentQueueAMoment, nil
				}
			case "3": // never succeeds
				panic("boom")
			}
			return message.ConsumeSuccess, nil
		}); err != nil {
			t.Fatal(err)
		}
	})
	testkit.WaitFor(t, 15*time.Second, func() bool { return committed(t, brokers, "g-orderly", "seq", 0) == 6 }, "all committed")
	shutdown(t, cons, 10*time.Second)
	mu.Lock()
	got := append([]string(nil), order...)
	mu.Unlock()
	want := []string{"0/0", "1/0", "1/1", "2/0", "3/0", "3/1", "3/2", "4/0", "5/0"}
	if len(got) != len(want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
	dl := readTopic(t, brokers, DLQTopic("g-orderly"))
	if len(dl) != 1 || string(dl[0].Value) != "3" {
		t.Fatalf("dead letters %v", dl)
	}
	if le, _ := dl[0].header(HeaderLastError); le != "kafka: handler panicked: boom" {
		t.Fatalf("last error %q", le)
	}
}

// A delayed send goes to "sluice.delay.<level>" and the forwarder puts it on its topic
// when due, not before; properties and id survive, DELAY does not.
func TestDelayLevels(t *testing.T) {
	c := newCluster(t, 1, "later")
	brokers := c.ListenAddrs()
	fcfg := DelayForwarderConfig{Brokers: brokers, Levels: 2, HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second,
		RebalanceTimeout: 3 * time.Second, JoinGroupBackoff: 100 * time.Millisecond, FetchMaxWait: 100 * time.Millisecond,
		CommitInterval: 50 * time.Millisecond, Logger: testkit.Logger(t)}
	f, err := NewDelayForwarder(fcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, f, 10*time.Second)
	const delay = 700 * time.Millisecond
	p := newProducer(t, brokers, func(c *ProducerConfig) {
		c.DelayTopics = true
		c.DelayLevels = []time.Duration{100 * time.Millisecond, delay}
	})
	var got seen
	var arrived atomic.Int64
	cons := startConsumer(t, fastConfig(t, brokers, "g-delay"), func(c *Consumer) {
		if err := c.Subscribe("later", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			arrived.Store(time.Now().UnixMilli())
			return recordOK(&got)(ctx, msgs)
		}); err != nil {
			t.Fatal(err)
		}
	})
	defer shutdown(t, cons, 10*time.Second)
	sent := time.Now()
	res, err := p.Send(ctx, message.NewMessage("later", []byte("x")).SetDelayLevel(5).SetProperty("p", "v"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, func() bool { return got.len() == 1 }, "delayed message")
	m := got.all()[0]
	if waited := time.UnixMilli(arrived.Load()).Sub(sent); waited < delay-10*time.Millisecond {
		t.Fatalf("arrived after %v, before its %v delay", waited, delay)
	}
	if m.Topic != "later" || m.Property("p") != "v" || m.MsgID != res.MsgID || m.DelayLevel() != 0 || m.Property(HeaderRealTopic) != "" {
		t.Fatalf("forwarded %+v", m)
	}
	if n := len(readTopic(t, brokers, DelayTopic(2))); n != 1 {
		t.Fatalf("level 5 clamped to the last level: %d records on %s", n, DelayTopic(2))
	}
}

// Bad consumer settings are *config.Error naming the field; Subscribe after Start, Start
// twice and Start without subscriptions are refused; a bad SQL92 expression is a
// *filter.SQLSyntaxError.
func TestConsumerConfigErrors(t *testing.T) {
	ok := Config{Brokers: []string{"127.0.0.1:1"}, Group: "g"}
	for field, mod := range map[string]func(*Config){
		"Brokers":                    func(c *Config) { c.Brokers = nil },
		"Group":                      func(c *Config) { c.Group = "" },
		"ConsumeWorkers":             func(c *Config) { c.ConsumeWorkers = 5000 },
		"ConsumeMessageBatchMaxSize": func(c *Config) { c.ConsumeMessageBatchMaxSize = 2000 },
		"MaxInFlight":                func(c *Config) { c.MaxInFlight, c.ConsumeMessageBatchMaxSize = 4, 8 },
		"MaxReconsumeTimes":          func(c *Config) { c.MaxReconsumeTimes = Retries(-2) },
		"StartOffset":                func(c *Config) { c.StartOffset = 7 },
		"RetrySchedule":              func(c *Config) { c.RetrySchedule = []time.Duration{-time.Second} },
		"SessionTimeout":             func(c *Config) { c.SessionTimeout = -1 },
		"HeartbeatInterval":          func(c *Config) { c.HeartbeatInterval, c.SessionTimeout = 10*time.Second, 6*time.Second },
	} {
		cfg := ok
		mod(&cfg)
		var ce *config.Error
		if _, err := NewConsumer(cfg); !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: %v, want a *config.Error for that field", field, err)
		}
	}
	if _, err := NewConsumer(Config{Brokers: []string{"x:1"}, Group: "bad group"}); err == nil {
		t.Error("a group that cannot name a topic was accepted")
	}
	c, err := NewConsumer(ok)
	if err != nil {
		t.Fatal(err)
	}
	var ce *config.Error
	if err := c.Start(ctxT(t, 5*time.Second)); !errors.As(err, &ce) {
		t.Errorf("start without subscriptions: %v", err)
	}
	var se *filter.SQLSyntaxError
	if err := c.SubscribeSQL("t", "a >", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ConsumeSuccess, nil
	}); !errors.As(err, &se) {
		t.Errorf("bad SQL92: %v", err)
	}
	if err := c.Subscribe("t", "*", nil); !errors.As(err, &ce) {
		t.Errorf("nil handler: %v", err)
	}
	okHandler := func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ConsumeSuccess, nil
	}
	if err := c.Subscribe("t", "A", okHandler); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("t", "B", okHandler); !errors.As(err, &ce) || !strings.Contains(err.Error(), "already subscribed") {
		t.Errorf("a topic subscribed twice: %v, want a *config.Error (the first handler would be dropped)", err)
	}
	if err := c.SubscribeSQL("t", "a > 1", okHandler); !errors.As(err, &ce) {
		t.Errorf("a topic subscribed twice (SQL92): %v", err)
	}
	if err := c.Shutdown(ctxT(t, 5*time.Second)); err != nil {
		t.Errorf("shutdown of a consumer never started: %v", err)
	}
}

// A retry copy waits on its retry partition until due — it is never handled early —
// while the group's other partitions go on: messages sent after the failure are
// handled before the copy comes back.
func TestRetryWaitsOnlyItsPartition(t *testing.T) {
	c := newCluster(t, 1, "flow")
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 30*time.Second)
	const due = 2 * time.Second
	var mu sync.Mutex
	var order []string
	var failedAt time.Time
	var retriedAfter time.Duration
	cfg := fastConfig(t, brokers, "g-flow")
	cfg.RetrySchedule = []time.Duration{due}
	cons := startConsumer(t, cfg, func(c *Consumer) {
		_ = c.Subscribe("flow", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			b := string(msgs[0].Body)
			order = append(order, b)
			if b == "first" && msgs[0].ReconsumeTimes == 0 {
				failedAt = time.Now()
				return message.ReconsumeLater, nil
			}
			if b == "first" {
				retriedAfter = time.Since(failedAt)
			}
			return message.ConsumeSuccess, nil
		})
	})
	defer shutdown(t, cons, 10*time.Second)
	if _, err := p.Send(ctx, message.NewMessage("flow", []byte("first"))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 1 }, "first failure")
	for i := 0; i < 5; i++ {
		if _, err := p.Send(ctx, message.NewMessage("flow", []byte("later-"+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 15*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 7 }, "all handled")
	mu.Lock()
	defer mu.Unlock()
	if order[6] != "first" {
		t.Fatalf("order %v: the retry copy came back before the later messages", order)
	}
	if retriedAfter < due-50*time.Millisecond {
		t.Fatalf("retry copy handled %v after the failure, before its %v due time", retriedAfter, due)
	}
}

// A subscribed topic the cluster does not have fails Start with a *config.Error naming
// it. Before, Start succeeded and kafka-go's group leader, whose one partitions request
// for all the group's topics failed, assigned nothing at all: the topic that did exist
// (and the retry topics) sat unconsumed, and nothing rebalanced when the topic appeared.
func TestStartRefusesMissingTopic(t *testing.T) {
	c := newCluster(t, 1, "present")
	brokers := c.ListenAddrs()
	cons, err := NewConsumer(fastConfig(t, brokers, "g-missing"))
	if err != nil {
		t.Fatal(err)
	}
	h := func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ConsumeSuccess, nil
	}
	if err := cons.Subscribe("present", "*", h); err != nil {
		t.Fatal(err)
	}
	if err := cons.Subscribe("absent", "*", h); err != nil {
		t.Fatal(err)
	}
	err = cons.Start(ctxT(t, 10*time.Second))
	defer shutdown(t, cons, 10*time.Second)
	var ce *config.Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `"absent"`) || strings.Contains(err.Error(), `"present"`) {
		t.Fatalf("start with a missing subscribed topic: %v, want a *config.Error naming only \"absent\"", err)
	}
}

// lastPartition sends every record to the highest partition.
type lastPartition struct{}

func (lastPartition) Balance(_ kafkago.Message, partitions ...int) int {
	return partitions[len(partitions)-1]
}

// A partition added to a subscribed topic while the group runs is consumed (kafka-go's
// partition watcher rebalances the group). Before, its records waited for the next
// rebalance — a member joining or leaving — which may never come.
func TestPartitionAddedWhileRunning(t *testing.T) {
	c := newCluster(t, 1, "grow")
	brokers := c.ListenAddrs()
	var got seen
	cons := startConsumer(t, fastConfig(t, brokers, "g-grow"), func(c *Consumer) {
		if err := c.Subscribe("grow", "*", recordOK(&got)); err != nil {
			t.Fatal(err)
		}
	})
	defer shutdown(t, cons, 10*time.Second)
	ctx := ctxT(t, 40*time.Second)
	// kafka-go's partition watcher takes its baseline count when the generation starts:
	// a partition added before that read is in the baseline but not in the assignment,
	// and is only picked up at the next rebalance. Let the generation consume a record
	// first, so the partition is added while the watcher runs (the case this covers).
	first := newProducer(t, brokers, nil)
	if _, err := first.Send(ctx, message.NewMessage("grow", []byte("on the first partition"))); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 25*time.Second, func() bool { return got.len() == 1 }, "the first record is consumed")
	res, err := clientFor(t, brokers).CreatePartitions(ctx, &kafkago.CreatePartitionsRequest{
		Topics: []kafkago.TopicPartitionsConfig{{Name: "grow", Count: 2}}})
	if err != nil || res.Errors["grow"] != nil {
		t.Fatalf("create partitions: %v %v", err, res)
	}
	p := newProducer(t, brokers, func(cfg *ProducerConfig) { cfg.Balancer = lastPartition{} })
	r, err := p.Send(ctx, message.NewMessage("grow", []byte("on the new partition")))
	if err != nil {
		t.Fatal(err)
	}
	if r.Queue.QueueID != 1 {
		t.Fatalf("sent to partition %d, want the new partition 1", r.Queue.QueueID)
	}
	testkit.WaitFor(t, 25*time.Second, func() bool { return got.len() == 2 }, "the record on the added partition is consumed")
}

// A forwarder with fewer levels than a delay topic in the cluster refuses to start,
// naming Levels and the topic, instead of leaving that topic's records unmoved.
func TestDelayForwarderRefusesFewerLevelsThanTopics(t *testing.T) {
	c := newCluster(t, 1)
	brokers := c.ListenAddrs()
	ctx := ctxT(t, 30*time.Second)
	if err := EnsureTopicsAt(ctx, brokers, 1, DelayTopic(3)); err != nil {
		t.Fatal(err)
	}
	f, err := NewDelayForwarder(DelayForwarderConfig{Brokers: brokers, Levels: 2, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = f.Start(ctx)
	ce, ok := errors.AsType[*config.Error](err)
	if !ok || ce.Field != "Levels" || !strings.Contains(ce.Reason, DelayTopic(3)) {
		t.Fatalf("Start with Levels 2 and topic %s present: %v", DelayTopic(3), err)
	}
	// With enough levels it starts.
	f3, err := NewDelayForwarder(DelayForwarderConfig{Brokers: brokers, Levels: 3, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := f3.Start(ctx); err != nil {
		t.Fatal(err)
	}
	shutdown(t, f3, 10*time.Second)
}

// Config.Middlewares wrap every handler, the first listed outermost, as on the RocketMQ
// push consumer; a middleware's answer is what the consumer acts on.
func TestConsumerMiddlewares(t *testing.T) {
	c := newCluster(t, 1, "mw")
	brokers := c.ListenAddrs()
	p := newProducer(t, brokers, nil)
	ctx := ctxT(t, 30*time.Second)
	if _, err := p.Send(ctx, message.NewMessage("mw", []byte("m1"))); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var trace []string
	note := func(s string) { mu.Lock(); trace = append(trace, s); mu.Unlock() }
	mw := func(name string) middleware.ConsumeMiddleware {
		return func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
			return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				note(name + ">")
				r, err := next(ctx, msgs)
				note("<" + name)
				return r, err
			}
		}
	}
	var handled seen
	cfg := fastConfig(t, brokers, "g-mw")
	cfg.Middlewares = []middleware.ConsumeMiddleware{mw("outer"), mw("inner")}
	cons := startConsumer(t, cfg, func(c *Consumer) {
		if err := c.Subscribe("mw", "*", func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			note("handler")
			return recordOK(&handled)(ctx, msgs)
		}); err != nil {
			t.Fatal(err)
		}
	})
	testkit.WaitFor(t, 15*time.Second, func() bool { return handled.len() >= 1 }, "the message handled")
	shutdown(t, cons, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(trace, " "); got != "outer> inner> handler <inner <outer" {
		t.Fatalf("call order %q, want %q", got, "outer> inner> handler <inner <outer")
	}
}
