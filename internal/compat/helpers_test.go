package compat_test

// No goleak in this package: the official client keeps process-wide state by design
// (a global client map keyed by client id, a global logger, timers started by its
// package init and never stopped), so goroutines outlive every Shutdown. Sluice's own
// packages check for leaks in their own tests.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	rmqproducer "github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/officialclient"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

func TestMain(m *testing.M) {
	rlog.SetLogger(clientLog)
	os.Exit(m.Run())
}

// ---------------------------------------------------------------------------------
// Logs: the official client's global logger and the broker's slog go to ring buffers
// that a failing test prints.

// ring keeps the last lines written to it.
type ring struct {
	mu    sync.Mutex
	lines []string
}

const ringSize = 200

func (r *ring) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) == ringSize {
		r.lines = r.lines[1:]
	}
	r.lines = append(r.lines, s)
}

func (r *ring) Write(p []byte) (int, error) {
	r.add(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

// rmqLog implements rlog.Logger: warnings and errors go to a ring, the rest is dropped.
type rmqLog struct{ r ring }

func (l *rmqLog) Debug(string, map[string]interface{}) {}
func (l *rmqLog) Info(string, map[string]interface{})  {}
func (l *rmqLog) Warning(msg string, f map[string]interface{}) {
	l.r.add(fmt.Sprintf("WARN %s %v", msg, f))
}
func (l *rmqLog) Error(msg string, f map[string]interface{}) {
	l.r.add(fmt.Sprintf("ERROR %s %v", msg, f))
}
func (l *rmqLog) Fatal(msg string, f map[string]interface{}) {
	l.r.add(fmt.Sprintf("FATAL %s %v", msg, f))
}
func (l *rmqLog) Level(string)            {}
func (l *rmqLog) OutputPath(string) error { return nil }

var clientLog = &rmqLog{}

// testLogger returns a Warn-level slog logger whose output is printed if t fails,
// together with the official client's recent warnings.
func testLogger(t *testing.T) *slog.Logger {
	r := &ring{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sluice log (last %d lines):\n%s", ringSize, r.String())
			t.Logf("official client log (last %d lines):\n%s", ringSize, clientLog.r.String())
		}
	})
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// ---------------------------------------------------------------------------------
// Broker environment.

// env is one embedded broker (with its embedded name server) over a temporary store,
// plus an admin client and a raw remoting client for checks.
type env struct {
	t   *testing.T
	dir string
	log *slog.Logger
	b   *broker.Broker
	adm *admin.Admin
	rc  *remoting.Client
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, dir: t.TempDir(), log: testLogger(t)}
	e.startBroker("127.0.0.1:0", "127.0.0.1:0")
	var err error
	if e.adm, err = admin.New(admin.Config{NamesrvAddrs: []string{e.ns()}, Logger: e.log}); err != nil {
		t.Fatal(err)
	}
	if e.rc, err = remoting.NewClient(remoting.ClientConfig{Logger: e.log}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.adm.Close()
		_ = e.rc.Close()
		e.stopBroker()
	})
	return e
}

// startBroker starts a SYNC_FLUSH broker on addr with its name server on ns, retrying
// for up to 20 s while a fixed address is still in use.
func (e *env) startBroker(addr, ns string) {
	e.t.Helper()
	var err error
	testkit.EventuallyEvery(20*time.Second, 100*time.Millisecond, func() bool { // bind attempts 100 ms apart
		var b *broker.Broker
		b, err = broker.New(broker.Config{
			ListenAddr:        addr,
			NamesrvListenAddr: ns,
			StorePathRootDir:  e.dir,
			FlushDiskType:     "SYNC_FLUSH",
			Logger:            e.log,
		})
		if err != nil {
			return true
		}
		if err = b.Start(); err == nil {
			e.b = b
		}
		return err == nil || !errors.Is(err, syscall.EADDRINUSE)
	})
	if err != nil {
		e.t.Fatalf("start broker on %s (name server %s): %v", addr, ns, err)
	}
}

func (e *env) stopBroker() {
	if e.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := e.b.Shutdown(ctx); err != nil {
		e.t.Errorf("broker shutdown: %v", err)
	}
	e.b = nil
}

func (e *env) ns() string { return e.b.NamesrvAddr() }

// createTopic creates topic with queues read/write queues and waits for its route.
func (e *env) createTopic(topic string, queues int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := e.adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: queues}); err != nil {
		e.t.Fatalf("create topic %s: %v", topic, err)
	}
	if _, err := e.adm.WaitTopicRoute(ctx, topic); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) invoke(code remoting.RequestCode, ext map[string]string) *remoting.RemotingCommand {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.rc.InvokeSync(ctx, e.b.Addr(), remoting.NewRequest(code, ext, nil))
	if err != nil {
		e.t.Fatalf("%v: %v", code, err)
	}
	return resp
}

// members returns the client ids of group's consumers (GET_CONSUMER_LIST_BY_GROUP, 38).
func (e *env) members(group string) []string {
	e.t.Helper()
	resp := e.invoke(remoting.GetConsumerListByGroup, map[string]string{"consumerGroup": group})
	if resp.ResponseCode() != remoting.Success {
		return nil
	}
	var body struct {
		ConsumerIDList []string `json:"consumerIdList"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		e.t.Fatalf("consumer list body %q: %v", resp.Body, err)
	}
	return body.ConsumerIDList
}

func (e *env) waitMembers(group string, n int) {
	e.t.Helper()
	var got []string
	testkit.WaitFor(e.t, 20*time.Second, func() bool { got = e.members(group); return len(got) == n }, func() string { return fmt.Sprintf("group %s has members %v, want %d", group, got, n) })
}

// maxOffset returns the topic queue's max offset (GET_MAX_OFFSET, 30).
func (e *env) maxOffset(topic string, q int) int64 {
	e.t.Helper()
	resp := e.invoke(remoting.GetMaxOffset, map[string]string{"topic": topic, "queueId": strconv.Itoa(q)})
	off, err := resp.ExtInt64("offset", true)
	if err != nil || resp.ResponseCode() != remoting.Success {
		e.t.Fatalf("max offset %s/%d: %v %v", topic, q, resp.ResponseErr(), err)
	}
	return off
}

// committedOffset returns group's committed offset of a queue (QUERY_CONSUMER_OFFSET,
// 14), or -1 when the broker has none (QUERY_NOT_FOUND, 22).
func (e *env) committedOffset(group, topic string, q int) int64 {
	e.t.Helper()
	resp := e.invoke(remoting.QueryConsumerOffset, map[string]string{"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(q)})
	if resp.ResponseCode() == remoting.QueryNotFound {
		return -1
	}
	off, err := resp.ExtInt64("offset", true)
	if err != nil || resp.ResponseCode() != remoting.Success {
		e.t.Fatalf("consumer offset %s %s/%d: %v %v", group, topic, q, resp.ResponseErr(), err)
	}
	return off
}

// ---------------------------------------------------------------------------------
// Test messages. Message seq has a tag cycling TagA/TagB/TagC, two keys, user
// properties (one non-ASCII) and a deterministic body; every 997th body is 6000 bytes,
// which clients compress (threshold 4 KiB).

const (
	seqProp   = "compat_seq"
	probeProp = "compat_probe"
	probeTag  = "Probe"
)

var tagCycle = []string{"TagA", "TagB", "TagC"}

type testMsg struct {
	topic string
	tag   string
	keys  []string
	body  []byte
	props map[string]string // user properties
}

func specMsg(topic string, seq int) testMsg {
	n := 40 + seq%300
	if seq%997 == 0 {
		n = 6000
	}
	body := make([]byte, 0, n)
	body = fmt.Appendf(body, "body-%d|", seq)
	for i := 0; len(body) < n; i++ {
		body = append(body, byte('a'+(seq+i)%26))
	}
	return testMsg{
		topic: topic,
		tag:   tagCycle[seq%3],
		keys:  []string{"key-" + strconv.Itoa(seq), "order-" + strconv.Itoa(seq/10)},
		body:  body[:n],
		props: map[string]string{
			seqProp: strconv.Itoa(seq),
			"color": []string{"red", "green", "blue", "amber"}[seq%4],
			"note":  "héllo wörld ✓ " + strconv.Itoa(seq),
		},
	}
}

func probeMsg(topic string, i int) testMsg {
	return testMsg{topic: topic, tag: probeTag, keys: []string{"probe-" + strconv.Itoa(i)},
		body: []byte("probe " + strconv.Itoa(i)), props: map[string]string{probeProp: strconv.Itoa(i)}}
}

// received is a delivered message in client-neutral form.
type received struct {
	topic       string
	tag         string
	keys        string // the KEYS property: keys joined by " "
	body        []byte
	props       map[string]string
	queueID     int
	queueOffset int64
}

func fromOfficial(m *primitive.MessageExt) received {
	q := -1
	if m.Queue != nil {
		q = m.Queue.QueueId
	}
	return received{topic: m.Topic, tag: m.GetTags(), keys: m.GetKeys(), body: m.Body, props: m.GetProperties(),
		queueID: q, queueOffset: m.QueueOffset}
}

func fromSluice(m *message.MessageExt) received {
	return received{topic: m.Topic, tag: m.Tag(), keys: strings.Join(m.Keys(), " "), body: m.Body, props: m.Properties,
		queueID: int(m.QueueID), queueOffset: m.QueueOffset}
}

// check compares r with the message it claims to be.
func (r received) check(want testMsg) error {
	switch {
	case r.topic != want.topic:
		return fmt.Errorf("topic %q, want %q", r.topic, want.topic)
	case r.tag != want.tag:
		return fmt.Errorf("tag %q, want %q", r.tag, want.tag)
	case r.keys != strings.Join(want.keys, " "):
		return fmt.Errorf("keys %q, want %q", r.keys, strings.Join(want.keys, " "))
	case !bytes.Equal(r.body, want.body):
		return fmt.Errorf("body %.40q (%d bytes), want %.40q (%d bytes)", r.body, len(r.body), want.body, len(want.body))
	}
	for k, v := range want.props {
		if r.props[k] != v {
			return fmt.Errorf("property %s = %q, want %q", k, r.props[k], v)
		}
	}
	return nil
}

// collector records the deliveries of one consumer group.
type collector struct {
	topic string
	mu    sync.Mutex
	got   map[int][]string // seq → consumer instances that received it, in order
	probe map[int]int      // probe → deliveries
	where map[int]received // seq → first delivery
	bad   []string         // messages that did not match their spec
	total atomic.Int64
}

func newCollector(topic string) *collector {
	return &collector{topic: topic, got: map[int][]string{}, probe: map[int]int{}, where: map[int]received{}}
}

func (c *collector) receive(who string, r received) {
	c.total.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := r.props[probeProp]; ok {
		i, _ := strconv.Atoi(p)
		if err := r.check(probeMsg(c.topic, i)); err != nil {
			c.bad = append(c.bad, fmt.Sprintf("%s: probe %d: %v", who, i, err))
		}
		c.probe[i]++
		return
	}
	seq, err := strconv.Atoi(r.props[seqProp])
	if err != nil {
		c.bad = append(c.bad, fmt.Sprintf("%s: message without %s: %+v", who, seqProp, r.props))
		return
	}
	if err := r.check(specMsg(c.topic, seq)); err != nil {
		c.bad = append(c.bad, fmt.Sprintf("%s: message %d: %v", who, seq, err))
	}
	if _, ok := c.where[seq]; !ok {
		c.where[seq] = r
	}
	c.got[seq] = append(c.got[seq], who)
}

func (c *collector) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func (c *collector) probes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.probe)
}

// missing describes which of want have not arrived.
func (c *collector) missing(want []int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var miss []int
	for _, s := range want {
		if _, ok := c.got[s]; !ok {
			miss = append(miss, s)
		}
	}
	if len(miss) > 10 {
		return fmt.Sprintf("%d of %d missing, e.g. %v", len(miss), len(want), miss[:10])
	}
	return fmt.Sprintf("%d of %d missing: %v", len(miss), len(want), miss)
}

// checkExactly fails t unless the group received exactly the messages want, each once
// and intact. It returns how many messages each consumer instance got.
func (c *collector) checkExactly(t *testing.T, group string, want []int) map[string]int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bad[:min(len(c.bad), 10)] {
		t.Errorf("group %s: %s", group, b)
	}
	if len(c.bad) > 10 {
		t.Errorf("group %s: %d bad messages in all", group, len(c.bad))
	}
	wantSet := make(map[int]bool, len(want))
	for _, s := range want {
		wantSet[s] = true
	}
	per := map[string]int{}
	var dups, extra, miss []int
	for s, who := range c.got {
		for _, w := range who {
			per[w]++
		}
		if len(who) > 1 {
			dups = append(dups, s)
		}
		if !wantSet[s] {
			extra = append(extra, s)
		}
	}
	for s := range wantSet {
		if _, ok := c.got[s]; !ok {
			miss = append(miss, s)
		}
	}
	sort.Ints(dups)
	sort.Ints(extra)
	sort.Ints(miss)
	if len(dups) > 0 {
		t.Errorf("group %s: %d messages delivered more than once, e.g. %d to %v", group, len(dups), dups[0], c.got[dups[0]])
	}
	if len(extra) > 0 {
		t.Errorf("group %s: %d messages that should not have arrived, e.g. %d (tag %s)", group, len(extra), extra[0], c.where[extra[0]].tag)
	}
	if len(miss) > 0 {
		t.Errorf("group %s: %d messages never arrived, e.g. %v", group, len(miss), miss[:min(len(miss), 10)])
	}
	return per
}

func seqRange(from, to int) []int {
	out := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// notTagB lists the seqs in [from, to) whose tag is TagA or TagC.
func notTagB(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		if tagCycle[i%3] != "TagB" {
			out = append(out, i)
		}
	}
	return out
}

// ---------------------------------------------------------------------------------
// Producers and consumers of both kinds behind one shape.

// clientInstance makes a client instance name unique in the process: the official
// client shares one underlying client between all clients with the same client id
// ("ip@instance"), and the tests run in parallel.
func clientInstance(t *testing.T, name string) string {
	return strings.ReplaceAll(t.Name(), "/", "_") + "_" + name
}

// sendFunc sends one message and returns an error unless it was stored with SEND_OK.
type sendFunc func(ctx context.Context, m testMsg) error

// producerFactory starts a producer against e's name server; it is shut down by
// t.Cleanup.
type producerFactory func(t *testing.T, e *env, instance string) sendFunc

// consumerFactory starts a push consumer of group subscribed to topic with tag
// expression expr, from the first offset, recording into col; stop shuts it down and is
// safe to call twice (it is also registered with t.Cleanup).
type consumerFactory func(t *testing.T, e *env, group, instance, topic, expr string, col *collector) (stop func())

func officialMessage(m testMsg) *primitive.Message {
	pm := primitive.NewMessage(m.topic, m.body)
	pm.WithTag(m.tag)
	pm.WithKeys(m.keys)
	for k, v := range m.props {
		pm.WithProperty(k, v)
	}
	return pm
}

func newOfficialProducer(t *testing.T, e *env, instance string) rocketmq.Producer {
	t.Helper()
	p, err := rocketmq.NewProducer(
		rmqproducer.WithNameServer(primitive.NamesrvAddr{e.ns()}),
		rmqproducer.WithGroupName("compat_official_producer"),
		rmqproducer.WithInstanceName(clientInstance(t, instance)),
		rmqproducer.WithRetry(2),
		rmqproducer.WithSendMsgTimeout(5*time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

func officialProducer(t *testing.T, e *env, instance string) sendFunc {
	p := newOfficialProducer(t, e, instance)
	return func(ctx context.Context, m testMsg) error {
		res, err := p.SendSync(ctx, officialMessage(m))
		if err != nil {
			return err
		}
		if res.Status != primitive.SendOK {
			return fmt.Errorf("send status %v", res.Status)
		}
		return nil
	}
}

func sluiceProducer(t *testing.T, e *env, instance string) sendFunc {
	t.Helper()
	p := sdktest.StartProducer(t, producer.Config{
		NamesrvAddrs: []string{e.ns()},
		Group:        "compat_sluice_producer",
		InstanceName: clientInstance(t, instance),
		SendTimeout:  5 * time.Second,
		Logger:       e.log,
	}, sdktest.MustShutDown)
	return func(ctx context.Context, m testMsg) error {
		msg := message.NewMessage(m.topic, m.body)
		msg.SetTag(m.tag).SetKeys(m.keys...)
		for k, v := range m.props {
			msg.SetProperty(k, v)
		}
		res, err := p.SendSync(ctx, msg)
		if err != nil {
			return err
		}
		if res.Status != message.SendOK {
			return fmt.Errorf("send status %v", res.Status)
		}
		return nil
	}
}

func officialConsumer(t *testing.T, e *env, group, instance, topic, expr string, col *collector) func() {
	t.Helper()
	return startOfficialConsumer(t, e, group, instance, topic, expr, func(m *primitive.MessageExt) { col.receive(instance, fromOfficial(m)) })
}

// startOfficialConsumer starts the official client's clustering push consumer of group
// (from the first offset) on topic with the tag expression expr, calling handle for
// every delivery; the returned stop (also run when the test ends, once) shuts it down
// under the client's rebalance mutex (officialclient.ShutdownConsumer).
func startOfficialConsumer(t *testing.T, e *env, group, instance, topic, expr string, handle func(*primitive.MessageExt)) func() {
	t.Helper()
	c, err := rocketmq.NewPushConsumer(
		rmqconsumer.WithNameServer(primitive.NamesrvAddr{e.ns()}),
		rmqconsumer.WithGroupName(group),
		rmqconsumer.WithInstance(clientInstance(t, instance)),
		rmqconsumer.WithConsumerModel(rmqconsumer.Clustering),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: expr},
		func(_ context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
			for _, m := range msgs {
				handle(m)
			}
			return rmqconsumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := officialclient.ShutdownConsumer(c); err != nil {
				t.Errorf("official consumer %s shutdown: %v", instance, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func sluiceConsumer(t *testing.T, e *env, group, instance, topic, expr string, col *collector) func() {
	t.Helper()
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs:     []string{e.ns()},
		Group:            group,
		InstanceName:     clientInstance(t, instance),
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		Logger:           e.log,
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, expr, func(_ context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			col.receive(instance, fromSluice(m))
		}
		return message.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := c.Shutdown(ctx); err != nil {
				t.Errorf("sluice consumer %s shutdown: %v", instance, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// sendAll sends messages seqs with workers goroutines; every send must succeed (the
// clients retry on their own).
func sendAll(t *testing.T, send sendFunc, topic string, seqs []int, workers int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(seqs) || ctx.Err() != nil {
					return
				}
				if err := send(ctx, specMsg(topic, seqs[i])); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("message %d: %w", seqs[i], err))
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("send: %v", errors.Join(errs...))
	}
}
