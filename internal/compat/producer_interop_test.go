package compat_test

// Producer interop with the official RocketMQ Go client (delay levels, batches, ordered
// sends), against an embedded Sluice broker. Helpers here are prefixed pc so they do not
// collide with the rest of the package.

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/officialclient"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

var pcQuiet = testkit.Quiet()

// pcBroker starts an embedded broker (own name server, default delay table) over a
// temporary store; shut down by t.Cleanup.
func pcBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{})
	return b
}

// pcCreateTopic creates topic with queues queues and waits for its route (the official
// client only sees topics that exist when it starts).
func pcCreateTopic(t *testing.T, b *broker.Broker, topic string, queues int) {
	t.Helper()
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: pcQuiet})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: queues}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.WaitTopicRoute(ctx, topic); err != nil {
		t.Fatal(err)
	}
}

func pcOfficialProducer(t *testing.T, b *broker.Broker, instance string, opts ...rmqproducer.Option) rocketmq.Producer {
	t.Helper()
	opts = append([]rmqproducer.Option{
		rmqproducer.WithNameServer(primitive.NamesrvAddr{b.NamesrvAddr()}),
		rmqproducer.WithGroupName("pc_official_producer"),
		rmqproducer.WithInstanceName(instance),
		rmqproducer.WithSendMsgTimeout(5 * time.Second),
	}, opts...)
	p, err := rocketmq.NewProducer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

func pcSluiceProducer(t *testing.T, b *broker.Broker, instance string) *producer.Producer {
	t.Helper()
	return sdktest.StartProducer(t, producer.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, InstanceName: instance, Logger: pcQuiet}, sdktest.MustShutDown)
}

// pcArrival is one delivered message in client-neutral form, with its arrival time.
type pcArrival struct {
	body    []byte
	props   map[string]string
	queueID int
	offset  int64
	at      time.Time
}

// pcInbox collects arrivals keyed by property "pc_id".
type pcInbox struct {
	mu  sync.Mutex
	got map[string][]pcArrival
	seq []string // ids in arrival order
}

func newPCInbox() *pcInbox { return &pcInbox{got: map[string][]pcArrival{}} }

func (in *pcInbox) add(a pcArrival) {
	in.mu.Lock()
	defer in.mu.Unlock()
	id := a.props["pc_id"]
	in.got[id] = append(in.got[id], a)
	in.seq = append(in.seq, id)
}

func (in *pcInbox) has(id string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.got[id]) > 0
}

func (in *pcInbox) distinct() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.got)
}

func (in *pcInbox) get(id string) []pcArrival {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]pcArrival(nil), in.got[id]...)
}

// pcOfficialConsumer starts an official push consumer of group on topic from the first
// offset, recording into in.
func pcOfficialConsumer(t *testing.T, b *broker.Broker, group, instance, topic string, in *pcInbox) {
	t.Helper()
	c, err := rocketmq.NewPushConsumer(
		rmqconsumer.WithNameServer(primitive.NamesrvAddr{b.NamesrvAddr()}),
		rmqconsumer.WithGroupName(group),
		rmqconsumer.WithInstance(instance),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
			now := time.Now()
			for _, m := range msgs {
				q := -1
				if m.Queue != nil {
					q = m.Queue.QueueId
				}
				in.add(pcArrival{body: m.Body, props: m.GetProperties(), queueID: q, offset: m.QueueOffset, at: now})
			}
			return rmqconsumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = officialclient.ShutdownConsumer(c) })
}

// pcSluiceConsumer starts Sluice's push consumer of group on topic from the first
// offset (orderly when asked), recording into in.
func pcSluiceConsumer(t *testing.T, b *broker.Broker, group, instance, topic string, orderly bool, in *pcInbox) {
	t.Helper()
	sdktest.StartPushConsumer(t, consumer.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Group: group,
		InstanceName: instance, ConsumeFromWhere: consumer.ConsumeFromFirstOffset, Orderly: orderly, Logger: pcQuiet},
		func(c *consumer.PushConsumer) error {
			return c.Subscribe(topic, "*", func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
				now := time.Now()
				for _, m := range msgs {
					in.add(pcArrival{body: m.Body, props: m.Properties, queueID: int(m.QueueID), offset: m.QueueOffset, at: now})
				}
				return message.ConsumeSuccess, nil
			})
		}, sdktest.MustShutDown)
}

// pcDelay and pcSlack are the "5 s ± 1 s" of delay level 2 with the default table.
const pcDelay, pcSlack = 5 * time.Second, time.Second

// TestProducerOfficialDelayToSluiceConsumer: the official producer sends a message with
// delay level 2; Sluice's push consumer receives it 5 s ± 1 s after the send.
func TestProducerOfficialDelayToSluiceConsumer(t *testing.T) {
	t.Parallel() // mostly waiting for the delay
	b := pcBroker(t)
	const topic = "PCDelayOfficialToSluice"
	pcCreateTopic(t, b, topic, 4)
	in := newPCInbox()
	pcSluiceConsumer(t, b, "pc_delay_sluice", "pc-delay-sluice", topic, false, in)
	p := pcOfficialProducer(t, b, "pc-delay-official-producer")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A probe first: the consumer is pulling once it has arrived.
	probe := primitive.NewMessage(topic, []byte("probe"))
	probe.WithProperty("pc_id", "probe")
	if _, err := p.SendSync(ctx, probe); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return in.has("probe") }, func() string { return "probe not consumed" })

	msg := primitive.NewMessage(topic, []byte("delayed by the official producer"))
	msg.WithProperty("pc_id", "delayed")
	msg.WithDelayTimeLevel(2)
	sent := time.Now()
	res, err := p.SendSync(ctx, msg)
	if err != nil || res.Status != primitive.SendOK {
		t.Fatalf("send: %v %v", res, err)
	}
	testkit.WaitFor(t, pcDelay+pcSlack+5*time.Second, func() bool { return in.has("delayed") }, func() string { return "delayed message not consumed" })
	got := in.get("delayed")
	took := got[0].at.Sub(sent)
	t.Logf("delay level 2 from the official producer arrived after %v", took.Round(time.Millisecond))
	if took < pcDelay-pcSlack || took > pcDelay+pcSlack || len(got) != 1 {
		t.Fatalf("arrived %d time(s), after %v; want once, after 5s ± 1s", len(got), took)
	}
	if string(got[0].body) != "delayed by the official producer" {
		t.Fatalf("body %q", got[0].body)
	}
}

// TestProducerSluiceDelayToOfficialConsumer: Sluice's producer sends a message with delay
// level 2; the official push consumer receives it 5 s ± 1 s after the send.
func TestProducerSluiceDelayToOfficialConsumer(t *testing.T) {
	t.Parallel() // mostly waiting for the delay
	b := pcBroker(t)
	const topic = "PCDelaySluiceToOfficial"
	pcCreateTopic(t, b, topic, 4)
	in := newPCInbox()
	pcOfficialConsumer(t, b, "pc_delay_official", "pc-delay-official", topic, in)
	p := pcSluiceProducer(t, b, "pc-delay-sluice-producer")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := p.SendSync(ctx, message.NewMessage(topic, []byte("probe")).SetProperty("pc_id", "probe")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return in.has("probe") }, func() string { return "probe not consumed" })

	sent := time.Now()
	r, err := p.SendSync(ctx, message.NewMessage(topic, []byte("delayed by sluice")).SetProperty("pc_id", "delayed").SetTag("Late").SetDelayLevel(2))
	if err != nil || r.Status != message.SendOK {
		t.Fatalf("send: %v %v", r, err)
	}
	testkit.WaitFor(t, pcDelay+pcSlack+5*time.Second, func() bool { return in.has("delayed") }, func() string { return "delayed message not consumed" })
	got := in.get("delayed")
	took := got[0].at.Sub(sent)
	t.Logf("delay level 2 from the Sluice producer arrived after %v", took.Round(time.Millisecond))
	if took < pcDelay-pcSlack || took > pcDelay+pcSlack || len(got) != 1 {
		t.Fatalf("arrived %d time(s), after %v; want once, after 5s ± 1s", len(got), took)
	}
	if string(got[0].body) != "delayed by sluice" || got[0].props["TAGS"] != "Late" || got[0].props["UNIQ_KEY"] != r.MsgID {
		t.Fatalf("body %q properties %v", got[0].body, got[0].props)
	}
}

// TestProducerSluiceBatchToOfficialConsumer: Sluice's SendBatch (batches cut by
// SplitBatch, multi-byte bodies, tags, keys) is consumed by the official push consumer:
// every message once, intact, each batch at consecutive offsets of one queue.
func TestProducerSluiceBatchToOfficialConsumer(t *testing.T) {
	b := pcBroker(t)
	const topic = "PCBatchSluiceToOfficial"
	pcCreateTopic(t, b, topic, 4)
	in := newPCInbox()
	pcOfficialConsumer(t, b, "pc_batch_official", "pc-batch-official", topic, in)
	p := pcSluiceProducer(t, b, "pc-batch-sluice-producer")

	const n = 600
	msgs := make([]*message.Message, n)
	for i := range msgs {
		body := []byte(fmt.Sprintf("batch item %d: %s", i, strings.Repeat("ß€", 50+i%200)))
		msgs[i] = message.NewMessage(topic, body).SetProperty("pc_id", strconv.Itoa(i)).SetTag("Tag" + strconv.Itoa(i%3)).SetKeys("k" + strconv.Itoa(i))
	}
	batches, err := producer.SplitBatch(msgs, 64*1024)
	if err != nil {
		t.Fatal(err)
	}
	if len(batches) < 3 {
		t.Fatalf("only %d batches: the test wants several", len(batches))
	}
	type placed struct {
		queue  int
		offset int64
	}
	where := map[string]placed{} // pc_id → expected queue and offset
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, bt := range batches {
		r, err := p.SendBatch(ctx, bt)
		if err != nil {
			t.Fatal(err)
		}
		ids := strings.Split(r.MsgID, ",")
		if len(ids) != len(bt) || r.Status != message.SendOK {
			t.Fatalf("result %+v for %d messages", r, len(bt))
		}
		for j, m := range bt {
			if ids[j] != m.UniqKey() {
				t.Fatalf("MsgID %d is %q, message has %q", j, ids[j], m.UniqKey())
			}
			where[m.Property("pc_id")] = placed{r.Queue.QueueID, r.QueueOffset + int64(j)}
		}
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return in.distinct() >= n }, func() string { return fmt.Sprintf("%d of %d consumed", in.distinct(), n) })
	for i, m := range msgs {
		got := in.get(strconv.Itoa(i))
		if len(got) != 1 {
			t.Fatalf("message %d consumed %d times", i, len(got))
		}
		a, want := got[0], where[strconv.Itoa(i)]
		if !bytes.Equal(a.body, m.Body) || a.props["TAGS"] != m.Tag() || a.props["KEYS"] != m.Property("KEYS") || a.props["UNIQ_KEY"] != m.UniqKey() {
			t.Fatalf("message %d: body %.30q properties %v", i, a.body, a.props)
		}
		if a.queueID != want.queue || a.offset != want.offset {
			t.Fatalf("message %d at queue %d offset %d, want queue %d offset %d", i, a.queueID, a.offset, want.queue, want.offset)
		}
	}
}

// pcOrderedSends has the official producer send steps 0..steps-1 of keys orders with its
// hash selector (FNV-32a of SHARDING_KEY), interleaving the keys, each SendSync
// returning before the key's next step. It returns the queue each key went to.
func pcOrderedSends(t *testing.T, b *broker.Broker, topic string, keys, steps int) map[string]int {
	t.Helper()
	p := pcOfficialProducer(t, b, "pc-ordered-official-producer", rmqproducer.WithQueueSelector(rmqproducer.NewHashQueueSelector()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	queueOf := map[string]int{}
	for s := 0; s < steps; s++ {
		for k := 0; k < keys; k++ {
			key := "order-" + strconv.Itoa(k)
			msg := primitive.NewMessage(topic, []byte(key+"#"+strconv.Itoa(s)))
			msg.WithShardingKey(key)
			msg.WithProperty("pc_id", key+"#"+strconv.Itoa(s))
			res, err := p.SendSync(ctx, msg)
			if err != nil {
				t.Fatal(err)
			}
			if q, ok := queueOf[key]; ok && q != res.MessageQueue.QueueId {
				t.Fatalf("key %s went to queue %d and %d", key, q, res.MessageQueue.QueueId)
			}
			queueOf[key] = res.MessageQueue.QueueId
		}
	}
	return queueOf
}

// pcCheckOrder checks that in each key's arrivals, in arrival order, steps are 0,1,2,...
func pcCheckOrder(t *testing.T, seq []string, keys, steps int) {
	t.Helper()
	next := map[string]int{}
	for _, id := range seq {
		key, step, ok := strings.Cut(id, "#")
		if !ok {
			continue
		}
		if s, _ := strconv.Atoi(step); s != next[key] {
			t.Fatalf("key %s: step %d arrived when %d was due", key, s, next[key])
		}
		next[key]++
	}
	for k := 0; k < keys; k++ {
		if key := "order-" + strconv.Itoa(k); next[key] != steps {
			t.Fatalf("key %s: %d of %d steps", key, next[key], steps)
		}
	}
}

// TestProducerOfficialOrderedPull: the official producer's hash-selected messages sit in
// per-queue order on the broker (read back with PULL_MESSAGE, RocketMQ request code 11),
// one queue per key, and Sluice's HashSelector maps every key to the same queue.
func TestProducerOfficialOrderedPull(t *testing.T) {
	b := pcBroker(t)
	const topic, queues, keys, steps = "PCOrderedPull", 4, 12, 10
	pcCreateTopic(t, b, topic, queues)
	queueOf := pcOrderedSends(t, b, topic, keys, steps)

	// Sluice's hash selector over the same route picks the same queues.
	qs := make([]message.MessageQueue, queues)
	for i := range qs {
		qs[i] = message.MessageQueue{Topic: topic, BrokerName: b.Name(), QueueID: i}
	}
	for key, q := range queueOf {
		mq, err := producer.HashSelector().Select(message.NewMessage(topic, []byte("x")).SetShardingKey(key), qs, "")
		if err != nil || mq.QueueID != q {
			t.Fatalf("key %s: official queue %d, Sluice %v %v", key, q, mq, err)
		}
	}

	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: pcQuiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var all []string
	for q := 0; q < queues; q++ {
		var seq []string
		for off := int64(0); ; {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := rc.InvokeSync(ctx, b.Addr(), remoting.NewRequest(remoting.PullMessage, map[string]string{
				"consumerGroup": "pc_ordered_puller", "topic": topic, "queueId": strconv.Itoa(q), "queueOffset": strconv.FormatInt(off, 10),
				"maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
				"subscription": "*", "subVersion": "0", "expressionType": "TAG",
			}, nil))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if resp.ResponseCode() != remoting.Success {
				break
			}
			ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{})
			if err != nil || len(ms) == 0 {
				t.Fatalf("pull %d@%d: %d messages, %v", q, off, len(ms), err)
			}
			for _, m := range ms {
				if m.QueueOffset != off {
					t.Fatalf("queue %d: offset %d where %d was next", q, m.QueueOffset, off)
				}
				id := m.Property("pc_id")
				key, _, _ := strings.Cut(id, "#")
				if queueOf[key] != q {
					t.Fatalf("key %s found in queue %d, sent to %d", key, q, queueOf[key])
				}
				seq = append(seq, id)
				off++
			}
		}
		all = append(all, seq...)
	}
	if len(all) != keys*steps {
		t.Fatalf("%d messages in the queues, want %d", len(all), keys*steps)
	}
	pcCheckOrder(t, all, keys, steps)
}

// TestProducerOfficialOrderedToOrderlyConsumer: the same ordered stream arrives at
// Sluice's orderly push consumer in per-key order, each message once.
func TestProducerOfficialOrderedToOrderlyConsumer(t *testing.T) {
	b := pcBroker(t)
	const topic, queues, keys, steps = "PCOrderedOrderly", 4, 12, 10
	pcCreateTopic(t, b, topic, queues)
	pcOrderedSends(t, b, topic, keys, steps)
	in := newPCInbox()
	pcSluiceConsumer(t, b, "pc_ordered_orderly", "pc-ordered-orderly", topic, true, in)
	testkit.WaitFor(t, 60*time.Second, func() bool { return in.distinct() >= keys*steps },
		func() string { return fmt.Sprintf("%d of %d consumed", in.distinct(), keys*steps) })
	in.mu.Lock()
	seq := append([]string(nil), in.seq...)
	in.mu.Unlock()
	if len(seq) != keys*steps {
		t.Fatalf("%d deliveries of %d messages: some twice", len(seq), keys*steps)
	}
	pcCheckOrder(t, seq, keys, steps)
}
