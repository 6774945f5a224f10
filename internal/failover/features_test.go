package failover

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/peers/peertest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/producer"
)

// The campaigns of features_test.go, txn_test.go and delay_test.go kill and restart the master of broker-a of a two-group
// SYNC_MASTER cluster while a RocketMQ feature is in use: orderly consumption, a
// transaction's check-back, delay levels.

// featureCluster starts the SYNC_MASTER cluster, creates topic (4 queues on each master;
// ordered: with the name servers' ORDER_TOPIC_CONFIG entry) and waits until its route is
// listed and the slaves can have copied the topic config (they copy it every 10 s; a
// slave without it answers pulls with TOPIC_NOT_EXIST).
func featureCluster(t *testing.T, topic string, opt peers.RocketMQClusterOptions, ordered bool) *peers.RocketMQCluster {
	t.Helper()
	opt.Mode = peers.ModeSyncMaster
	c := peertest.StartRocketMQCluster(t, opt)
	ctx := context.Background()
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{c.NamesrvAddr}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = adm.Close() }()
	created := time.Now()
	if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: 4, Cluster: c.Cluster, Order: ordered}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.WaitTopicRoute(testkit.Context(t, 60*time.Second), topic); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return time.Since(created) > 15*time.Second }, "slaves' topic config sync")
	return c
}

// killMaster kills broker-a's master, keeps it down until down has passed and
// downUntil (nil: nothing more) holds — at most 120 s, then restarts it and waits until
// it is registered again.
func killMaster(t *testing.T, c *peers.RocketMQCluster, down time.Duration, afterKill func(), downUntil func() bool) outageRec {
	t.Helper()
	ctx := context.Background()
	i, err := c.WaitMaster(ctx, "broker-a", "", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := c.Brokers[i]
	o := outageRec{what: b.Name + "@" + b.Addr, kill: time.Now()}
	if err := c.Kill(i); err != nil {
		t.Fatal(err)
	}
	if afterKill != nil {
		afterKill()
	}
	testkit.WaitFor(t, down+120*time.Second, func() bool {
		return time.Since(o.kill) >= down && (downUntil == nil || downUntil())
	}, "end of the outage")
	if err := c.Restart(ctx, i, 180*time.Second); err != nil {
		t.Fatal(err)
	}
	o.back = time.Now()
	return o
}

// percentiles returns the median and the maximum of ds (0, 0 when empty).
func percentiles(ds []time.Duration) (p50, maxD time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[len(s)-1]
}

// orderDelivery is one handler call's message in an orderly campaign.
type orderDelivery struct {
	id, shard string
	seq       int
	queue     string
	at        time.Time
}

// orderLog records the orderly handler calls in the order they began.
type orderLog struct {
	mu   sync.Mutex
	list []orderDelivery
	held chan struct{} // non-nil: handler calls wait until it is closed
}

// hold makes handler calls wait until release, so that a backlog builds up on the
// brokers (the consumers cache few messages per queue).
func (o *orderLog) hold() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held == nil {
		o.held = make(chan struct{})
	}
}

func (o *orderLog) release() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held != nil {
		close(o.held)
		o.held = nil
	}
}

func (o *orderLog) wrap(next middleware.ConsumeFunc) middleware.ConsumeFunc {
	return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		o.mu.Lock()
		held := o.held
		o.mu.Unlock()
		if held != nil {
			select {
			case <-held:
			case <-ctx.Done():
				return message.ReconsumeLater, ctx.Err()
			}
		}
		now := time.Now()
		o.mu.Lock()
		for _, m := range msgs {
			shard, seq, _ := strings.Cut(string(m.Body), "/")
			n, _ := strconv.Atoi(seq)
			o.list = append(o.list, orderDelivery{id: string(m.Body), shard: shard, seq: n,
				queue: fmt.Sprintf("%s/%d", m.BrokerName, m.QueueID), at: now})
		}
		o.mu.Unlock()
		return next(ctx, msgs)
	}
}

// orderFigures are the order counts of a campaign.
type orderFigures struct {
	shardsMoved     int // sharding keys whose acknowledged messages were stored in more than one queue
	sameQueue       int // first deliveries of a message after a later one of its key, both in one queue
	crossQueue      int // the same, the two in different queues (the key moved during an outage)
	replays         int // deliveries of a message delivered before
	fromAInOutage   int // deliveries of broker-a's queues while its master was down (read from the slave)
	stalledOutages  int // outages in which broker-a's queues delivered nothing although messages were due
	violationsShown []string
}

// orderCheck counts order violations: walking the handler calls in the order they
// began, the first delivery of message (key, n) is a violation when a message (key, m)
// with m > n had its first delivery already. Repeated deliveries (replays of a queue
// from its stored offset) are counted apart: RocketMQ delivers at least once, and a
// replay is in order within itself.
func orderCheck(dels []orderDelivery, queueOf map[string]string, outs []outageRec) orderFigures {
	var f orderFigures
	seen := map[string]bool{}
	maxSeq := map[string]int{}
	maxID := map[string]string{}
	for _, d := range dels {
		for _, o := range outs {
			if strings.HasPrefix(d.queue, "broker-a/") && d.at.After(o.kill) && d.at.Before(o.back) {
				f.fromAInOutage++
			}
		}
		if seen[d.id] {
			f.replays++
			continue
		}
		seen[d.id] = true
		m, ok := maxSeq[d.shard]
		if ok && d.seq < m {
			if queueOf[d.id] != "" && queueOf[d.id] == queueOf[maxID[d.shard]] {
				f.sameQueue++
			} else {
				f.crossQueue++
			}
			if len(f.violationsShown) < 10 {
				f.violationsShown = append(f.violationsShown, fmt.Sprintf("%s (stored in %s) after %s (stored in %s)", d.id, queueOf[d.id], maxID[d.shard], queueOf[maxID[d.shard]]))
			}
			continue
		}
		maxSeq[d.shard], maxID[d.shard] = d.seq, d.id
	}
	queues := map[string]map[string]bool{}
	for id, q := range queueOf {
		shard, _, _ := strings.Cut(id, "/")
		if queues[shard] == nil {
			queues[shard] = map[string]bool{}
		}
		queues[shard][q] = true
	}
	for _, qs := range queues {
		if len(qs) > 1 {
			f.shardsMoved++
		}
	}
	return f
}

// orderlyCampaign sends messages of 16 sharding keys one after another with the hash
// selector (per key a sequence number), consumes them with two orderly push consumers of
// one group through the inbox, and kills broker-a's master kills times. strict: the topic
// is ordered (ORDER_TOPIC_CONFIG on the name server, orderMessageEnable=true), so the
// producer's queue list keeps broker-a's queues while its master is down and the sends of
// their keys fail; otherwise the list drops them and those keys hash to other queues.
func orderlyCampaign(t *testing.T, strict bool) {
	kills := campaignKills(t)
	const topic, group, shards = "OrderlyFailover", "orderly-failover", 16
	opt := peers.RocketMQClusterOptions{}
	if strict {
		opt.NamesrvConf = map[string]string{"orderMessageEnable": "true"}
	}
	c := featureCluster(t, topic, opt, strict)
	ctx := context.Background()

	l := newLedger(t, group)
	ol := &orderLog{}
	for i := 0; i < 2; i++ {
		cons, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{c.NamesrvAddr}, Group: group, Orderly: true,
			ConsumeFromWhere: consumer.ConsumeFromFirstOffset, PersistOffsetInterval: time.Second,
			RebalanceInterval: 5 * time.Second, OffsetStoreDir: t.TempDir(), Logger: testkit.Quiet(),
			// few messages cached per queue: a backlog stays on the broker, and is read
			// from the slave while the master is down
			PullBatchSize: 4, PullThresholdForQueue: 4})
		if err != nil {
			t.Fatal(err)
		}
		if err := cons.Subscribe(topic, "*", ol.wrap(l.handler())); err != nil {
			t.Fatal(err)
		}
		if err := cons.Start(testkit.Context(t, 60*time.Second)); err != nil {
			t.Fatal(err)
		}
		testkit.ShutdownOnCleanup(t, cons.Shutdown)
	}
	t.Cleanup(ol.release) // before the consumers' shutdown (cleanups run last first)
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{c.NamesrvAddr}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, p.Shutdown)

	var qmu sync.Mutex
	queueOf := map[string]string{}
	hashSel := producer.WithSelector(producer.HashSelector())
	l.newMsg = func(i int, topic string) *message.Message {
		shard := fmt.Sprintf("s%02d", i%shards)
		id := fmt.Sprintf("%s/%06d", shard, i/shards)
		return message.NewMessage(topic, []byte(id)).SetKeys(id).SetShardingKey(shard)
	}
	stopLoad := l.startLoad(topic, func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
		res, err := p.SendSync(ctx, m, hashSel)
		if err == nil {
			qmu.Lock()
			queueOf[string(m.Body)] = fmt.Sprintf("%s/%d", res.Queue.BrokerName, res.Queue.QueueID)
			qmu.Unlock()
		}
		return res, err
	})
	defer stopLoad()

	down := outage(t)
	var outs []outageRec
	for k := 0; k < kills; k++ {
		base := l.ackedCount()
		testkit.WaitFor(t, 120*time.Second, func() bool { return l.ackedCount() >= base+50 }, "50 sends acknowledged before kill ", k+1)
		// Consumption pauses while 100 more sends are acknowledged, and resumes at the
		// kill: broker-a's backlog is then read from its slave.
		ol.hold()
		base = l.ackedCount()
		testkit.WaitFor(t, 120*time.Second, func() bool { return l.ackedCount() >= base+100 }, "backlog before kill ", k+1)
		o := killMaster(t, c, down, ol.release, nil)
		outs = append(outs, o)
		t.Logf("kill %d/%d: %s down %v", k+1, kills, o.what, o.back.Sub(o.kill).Round(100*time.Millisecond))
	}
	base := l.ackedCount()
	testkit.WaitFor(t, 120*time.Second, func() bool { return l.ackedCount() >= base+50 }, "50 sends acknowledged after the last restart")
	stopLoad()
	if !testkit.Eventually(180*time.Second, l.allApplied) {
		t.Errorf("not every acknowledged message was applied within 180 s after the load stopped")
	}
	mode := "hash over the queues with a master (plain topic)"
	if strict {
		mode = "strict: ordered topic (orderTopicConf), queue list fixed"
	}
	r := l.summarize("Apache RocketMQ 4.9.7, 2 × (SYNC_MASTER + SLAVE), orderly, "+mode, "kill -9 master broker-a", outs)
	ol.mu.Lock()
	dels := slices.Clone(ol.list)
	ol.mu.Unlock()
	qmu.Lock()
	f := orderCheck(dels, queueOf, outs)
	qmu.Unlock()
	t.Logf("FIGURES %v (load average %s)", r, loadAverage())
	t.Logf("ORDER %d handler deliveries of %d acknowledged messages, 16 sharding keys: order violations in one queue %d, across queues %d; keys whose messages were stored in more than one queue %d; repeated deliveries %d; deliveries of broker-a's queues during its outages (from the slave) %d; examples %v",
		len(dels), r.acked, f.sameQueue, f.crossQueue, f.shardsMoved, f.replays, f.fromAInOutage, f.violationsShown)
	if r.lost != 0 {
		t.Errorf("%d acknowledged messages lost", r.lost)
	}
	if r.doubled != 0 {
		t.Errorf("%d effects applied twice despite the inbox", r.doubled)
	}
	if f.sameQueue != 0 {
		t.Errorf("%d order violations within one queue", f.sameQueue)
	}
	if strict && (f.crossQueue != 0 || f.shardsMoved != 0) {
		t.Errorf("ordered topic: %d keys moved queue, %d order violations across queues", f.shardsMoved, f.crossQueue)
	}
}

// Orderly consumption across master failovers on an ordered topic: per sharding key,
// messages are delivered in send order (0 violations), none lost, no effect doubled.
func TestFailoverOrderlyStrict(t *testing.T) { orderlyCampaign(t, true) }

// The same on a plain topic: the hash selector maps a key onto the queues that have a
// master, so keys of broker-a move while it is down; order violations across queues are
// counted (within a queue they must be 0).
func TestFailoverOrderlyHash(t *testing.T) { orderlyCampaign(t, false) }

// waitReplicating waits until a send to broker-a's queue 0 of topic through p is
// answered SEND_OK, i.e. its restarted SYNC_MASTER has its slave again (until then it
// answers SLAVE_NOT_AVAILABLE, and the producer's fault tolerance avoids it). One probe
// message (key "probe-…") a second at most.
func waitReplicating(t *testing.T, p *producer.Producer, topic string) {
	t.Helper()
	mq := producer.WithQueue(message.MessageQueue{Topic: topic, BrokerName: "broker-a", QueueID: 0})
	n := 0
	ok := testkit.EventuallyEvery(180*time.Second, time.Second, func() bool {
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		id := fmt.Sprintf("probe-%d-%d", time.Now().UnixNano(), n)
		res, err := p.SendSync(ctx, message.NewMessage(topic, []byte(id)).SetKeys(id), mq)
		return err == nil && res.Status == message.SendOK
	})
	if !ok {
		t.Fatalf("broker-a did not answer SEND_OK within 180 s (%d probes)", n)
	}
}
