package broker

import (
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// The broker's statistics, for the Prometheus exporter in broker/brokermetrics (which
// reads them at scrape time through [Broker.StatsSnapshot]) and for tests.
//
// Hot-path counters are atomics reached through a sync.Map (one load per request, no
// lock); everything else (lag, schedule backlog, held pulls, connections, disk usage) is
// computed from the broker's tables when StatsSnapshot is called, so a broker nobody
// scrapes pays only for the counters. Counters are kept per topic and per group/topic
// that saw traffic since the broker started (a deleted topic's stay until a restart).

// LatencyBounds returns the upper bounds of the latency histograms' buckets (see
// [Histogram]). Each call returns a fresh slice.
func LatencyBounds() []time.Duration { return slices.Clone(latencyBounds) }

var latencyBounds = []time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second,
	10 * time.Second, 30 * time.Second,
}

// Histogram is a snapshot of a latency histogram with the buckets of [LatencyBounds].
type Histogram struct {
	// Bounds are the buckets' upper bounds (inclusive), ascending.
	Bounds []time.Duration
	// Cumulative[i] counts the observations <= Bounds[i].
	Cumulative []uint64
	// Count is the number of observations (including those above the last bound).
	Count uint64
	// Sum is the sum of all observations.
	Sum time.Duration
}

// latencyHistogram counts durations in the buckets of latencyBounds with atomics.
type latencyHistogram struct {
	buckets []atomic.Uint64 // len(latencyBounds)+1: the last counts overflows
	sum     atomic.Int64    // nanoseconds
}

func newLatencyHistogram() *latencyHistogram {
	return &latencyHistogram{buckets: make([]atomic.Uint64, len(latencyBounds)+1)}
}

func (h *latencyHistogram) observe(d time.Duration) {
	i, _ := slices.BinarySearch(latencyBounds, d) // first bound >= d
	h.buckets[i].Add(1)
	h.sum.Add(int64(d))
}

func (h *latencyHistogram) snapshot() Histogram {
	s := Histogram{Bounds: LatencyBounds(), Cumulative: make([]uint64, len(latencyBounds))}
	var n uint64
	for i := range h.buckets {
		n += h.buckets[i].Load()
		if i < len(latencyBounds) {
			s.Cumulative[i] = n
		}
	}
	s.Count = n
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// counterPair is two monotonic counters (messages and bytes, or retries and dead letters).
type counterPair struct{ a, b atomic.Int64 }

// brokerStats holds the broker's hot-path counters (Broker.traffic).
type brokerStats struct {
	puts        sync.Map // topic -> *counterPair (messages, bytes)
	gets        sync.Map // groupTopic -> *counterPair (messages, bytes)
	retries     sync.Map // group -> *counterPair (retries, dead letters)
	sendLatency *latencyHistogram
	pullLatency *latencyHistogram
	pullHeld    *latencyHistogram // pulls answered after a long-polling hold
	flush       *latencyHistogram

	txnChecks atomic.Int64
}

type groupTopic struct{ group, topic string }

func newBrokerStats() *brokerStats {
	return &brokerStats{sendLatency: newLatencyHistogram(), pullLatency: newLatencyHistogram(), pullHeld: newLatencyHistogram(), flush: newLatencyHistogram()}
}

func pairFor[K comparable](m *sync.Map, k K) *counterPair {
	if v, ok := m.Load(k); ok {
		return v.(*counterPair)
	}
	v, _ := m.LoadOrStore(k, new(counterPair))
	return v.(*counterPair)
}

// dispatched counts a message reaching a %RETRY% or %DLQ% queue (store dispatch hook).
func (s *brokerStats) dispatched(topic string) {
	switch {
	case strings.HasPrefix(topic, message.RetryGroupTopicPrefix):
		pairFor(&s.retries, strings.TrimPrefix(topic, message.RetryGroupTopicPrefix)).a.Add(1)
	case strings.HasPrefix(topic, message.DLQGroupTopicPrefix):
		pairFor(&s.retries, strings.TrimPrefix(topic, message.DLQGroupTopicPrefix)).b.Add(1)
	}
}

// sendOK reports whether a send response means the message was stored.
func sendOK(resp *remoting.RemotingCommand) bool {
	if resp == nil {
		return false
	}
	switch resp.ResponseCode() {
	case remoting.Success, remoting.FlushDiskTimeout, remoting.FlushSlaveTimeout, remoting.SlaveNotAvailable:
		return true
	}
	return false
}

// timedSend wraps a SEND_MESSAGE/V2/BATCH handler: it observes the send latency and counts
// the stored messages and body bytes per topic. The topic is read from the request header
// ("topic", or "b" in SEND_MESSAGE_V2's short header); the message count of a batch from
// the comma-separated msgId of the answer.
func (b *Broker) timedSend(h remoting.Handler) remoting.Handler {
	return func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		start, size := time.Now(), int64(len(req.Body))
		resp := h(ctx, conn, req)
		b.recordSend(req, resp, start, size)
		return resp
	}
}

// timedSendAsync is timedSend for the SYNC_FLUSH send handlers (remoting.Server.HandleAsync):
// the latency runs from the request to the answer, the fsync wait included.
func (b *Broker) timedSendAsync(h remoting.AsyncHandler) remoting.AsyncHandler {
	return func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand, reply func(*remoting.RemotingCommand)) {
		// The body's size is taken now: the handler releases the body (ReleaseBody)
		// before the answer of a SYNC_FLUSH send comes.
		start, size := time.Now(), int64(len(req.Body))
		h(ctx, conn, req, func(resp *remoting.RemotingCommand) {
			b.recordSend(req, resp, start, size)
			reply(resp)
		})
	}
}

// recordSend observes one send's latency and, when it was stored, counts its messages
// and body bytes (size, the request body's length) for its topic.
func (b *Broker) recordSend(req, resp *remoting.RemotingCommand, start time.Time, size int64) {
	b.traffic.sendLatency.observe(time.Since(start))
	if !sendOK(resp) {
		return
	}
	topic, _ := req.Ext("topic") // the request and response may be in list form (ExtList)
	if topic == "" {
		topic, _ = req.Ext("b")
	}
	n := int64(1)
	if remoting.RequestCode(req.Code) == remoting.SendBatchMessage {
		msgID, _ := resp.Ext("msgId")
		n = int64(strings.Count(msgID, ",") + 1)
	}
	c := pairFor(&b.traffic.puts, topic)
	c.a.Add(n)
	c.b.Add(size)
}

// timedPull wraps the PULL_MESSAGE handler: it observes the pull latency (request to
// answer, a long-polling hold included) and counts the messages and bytes a group got
// per topic. It reads the answer before passing it on (handlePull reuses the body's
// buffer once reply returned).
func (b *Broker) timedPull(h remoting.AsyncHandler) remoting.AsyncHandler {
	return func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand, reply func(*remoting.RemotingCommand)) {
		start := time.Now()
		var returned atomic.Bool // the handler returned before answering: the pull was held
		h(ctx, conn, req, func(resp *remoting.RemotingCommand) {
			if resp != nil {
				b.recordPull(req, resp, start, returned.Load())
			}
			reply(resp)
		})
		returned.Store(true)
	}
}

// recordPull observes one pull's latency and counts what it delivered.
func (b *Broker) recordPull(req, resp *remoting.RemotingCommand, start time.Time, held bool) {
	if held {
		b.traffic.pullHeld.observe(time.Since(start))
	} else {
		b.traffic.pullLatency.observe(time.Since(start))
	}
	if resp.ResponseCode() != remoting.Success || len(resp.Body) == 0 {
		return
	}
	c := pairFor(&b.traffic.gets, groupTopic{req.ExtFields["consumerGroup"], req.ExtFields["topic"]})
	c.a.Add(int64(countRecords(resp.Body)))
	c.b.Add(int64(len(resp.Body)))
}

// countRecords counts the stored records in a pull body: each begins with its total
// size, a big-endian int32 (docs/protocol.md §4.1).
func countRecords(body []byte) int {
	n := 0
	for len(body) >= 4 {
		size := int(binary.BigEndian.Uint32(body))
		if size <= 0 || size > len(body) {
			break
		}
		body = body[size:]
		n++
	}
	return n
}

// TopicStats counts the messages stored by producers' sends to one topic since the
// broker started.
type TopicStats struct {
	Topic    string
	Messages int64 // messages stored (a batch counts its messages)
	Bytes    int64 // request body bytes (a batch's encoded body)
}

// GetStats counts what one consumer group pulled from one topic since the broker started.
type GetStats struct {
	Group, Topic string
	Messages     int64
	Bytes        int64 // stored record bytes sent
}

// QueueLag is one consumer group's position on one queue.
type QueueLag struct {
	Group, Topic   string
	QueueID        int32
	ConsumerOffset int64 // the group's committed offset
	MaxOffset      int64 // the queue's next offset to be written
	Lag            int64 // MaxOffset - ConsumerOffset, at least 0
	// OldestUnconsumed is the store time (unix ms) of the first message at or after
	// ConsumerOffset when Lag > 0 (how long the group is behind), else 0.
	OldestUnconsumed int64
}

// GroupStats counts a consumer group's redeliveries since the broker started.
type GroupStats struct {
	Group       string
	Retries     int64 // messages that reached %RETRY%<group> (each consume retry once, when due)
	DeadLetters int64 // messages that reached %DLQ%<group>
	Consumers   int   // connected consumer clients now
}

// DelayLevelStats is one delay level's backlog in SCHEDULE_TOPIC_XXXX.
type DelayLevelStats struct {
	Level   int           // 1-based (messageDelayLevel)
	Delay   time.Duration // the level's delay
	Backlog int64         // messages waiting for delivery
}

// CommitLogStats describes the commitlog's size on disk and its fsyncs.
type CommitLogStats struct {
	MinOffset, MaxOffset int64     // physical offsets: the bytes kept are MaxOffset-MinOffset
	DiskUsedPercent      int       // used share of the file system holding the data dir; -1 if unknown
	Flush                Histogram // fsync passes that wrote data (SYNC_FLUSH group commits, ASYNC_FLUSH ticks)
}

// StatsSnapshot is a point-in-time view of a broker, read by [Broker.StatsSnapshot]. Counters count since
// the broker started; slices are sorted by their label fields.
type StatsSnapshot struct {
	Broker, Cluster string
	Connections     int // open client connections
	HeldPulls       int // pulls held for long polling now

	Topics    []TopicStats
	Gets      []GetStats
	Lags      []QueueLag
	Groups    []GroupStats
	Schedule  []DelayLevelStats
	CommitLog CommitLogStats

	SendLatency Histogram // SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE: request to answer
	PullLatency Histogram // PULL_MESSAGE answered at once (found messages or nothing to hold for)
	PullHeld    Histogram // PULL_MESSAGE held for long polling: request to answer, the hold included

	TransactionChecks int64 // CHECK_TRANSACTION_STATE requests sent to producers

	// Counters are the broker's decision counters ([Broker.Stats]): registrations,
	// refusals (names, ACL, limits) and the disk-pressure policy's.
	Counters Stats
}

// StatsSnapshot returns the broker's statistics (see [StatsSnapshot]). Safe to call at any time; before
// Start and after Shutdown the store-derived fields are zero. Its cost grows with the
// number of topics, groups and queues with offsets: call it per scrape, not per message.
func (b *Broker) StatsSnapshot() StatsSnapshot {
	s := StatsSnapshot{Broker: b.cfg.BrokerName, Cluster: b.cfg.BrokerClusterName,
		SendLatency: b.traffic.sendLatency.snapshot(), PullLatency: b.traffic.pullLatency.snapshot(), PullHeld: b.traffic.pullHeld.snapshot(),
		TransactionChecks: b.traffic.txnChecks.Load(), Counters: b.Stats(),
		CommitLog: CommitLogStats{DiskUsedPercent: -1, Flush: b.traffic.flush.snapshot()}}
	b.held.mu.Lock()
	s.HeldPulls = b.held.n
	b.held.mu.Unlock()
	if b.server != nil {
		s.Connections = b.server.Conns()
	}
	b.traffic.puts.Range(func(k, v any) bool {
		c := v.(*counterPair)
		s.Topics = append(s.Topics, TopicStats{Topic: k.(string), Messages: c.a.Load(), Bytes: c.b.Load()})
		return true
	})
	slices.SortFunc(s.Topics, func(x, y TopicStats) int { return strings.Compare(x.Topic, y.Topic) })
	b.traffic.gets.Range(func(k, v any) bool {
		gt, c := k.(groupTopic), v.(*counterPair)
		s.Gets = append(s.Gets, GetStats{Group: gt.group, Topic: gt.topic, Messages: c.a.Load(), Bytes: c.b.Load()})
		return true
	})
	slices.SortFunc(s.Gets, func(x, y GetStats) int {
		return cmpPair(x.Group, y.Group, x.Topic, y.Topic)
	})
	consumers := map[string]int{}
	b.clients.mu.Lock()
	for name, g := range b.clients.consumers {
		consumers[name] = len(g.channels)
	}
	b.clients.mu.Unlock()
	groups := map[string]*GroupStats{}
	group := func(name string) *GroupStats {
		g := groups[name]
		if g == nil {
			g = &GroupStats{Group: name}
			groups[name] = g
		}
		return g
	}
	for name, n := range consumers {
		group(name).Consumers = n
	}
	b.traffic.retries.Range(func(k, v any) bool {
		c, g := v.(*counterPair), group(k.(string))
		g.Retries, g.DeadLetters = c.a.Load(), c.b.Load()
		return true
	})
	for _, g := range groups {
		s.Groups = append(s.Groups, *g)
	}
	slices.SortFunc(s.Groups, func(x, y GroupStats) int { return strings.Compare(x.Group, y.Group) })

	st := b.store
	if st == nil || !b.started.Load() || b.stopped.Load() {
		return s
	}
	b.offsets.mu.Lock()
	for k, qs := range b.offsets.table {
		i := strings.LastIndexByte(k, '@')
		if i < 0 {
			continue
		}
		for q, off := range qs {
			s.Lags = append(s.Lags, QueueLag{Group: k[i+1:], Topic: k[:i], QueueID: q, ConsumerOffset: off})
		}
	}
	b.offsets.mu.Unlock()
	for i := range s.Lags {
		l := &s.Lags[i]
		l.MaxOffset = st.MaxOffset(l.Topic, l.QueueID)
		l.Lag = max(l.MaxOffset-l.ConsumerOffset, 0)
		if l.Lag > 0 {
			if ts, err := st.MessageTimeAt(l.Topic, l.QueueID, l.ConsumerOffset); err == nil {
				l.OldestUnconsumed = ts
			}
		}
	}
	slices.SortFunc(s.Lags, func(x, y QueueLag) int {
		if c := cmpPair(x.Group, y.Group, x.Topic, y.Topic); c != 0 {
			return c
		}
		return int(x.QueueID - y.QueueID)
	})
	for i, d := range b.delayLevels {
		level := i + 1
		backlog := st.MaxOffset(message.ScheduleTopic, int32(i)) - b.sched.offset(level)
		s.Schedule = append(s.Schedule, DelayLevelStats{Level: level, Delay: d, Backlog: max(backlog, 0)})
	}
	s.CommitLog.MinOffset, s.CommitLog.MaxOffset = st.MinPhyOffset(), st.MaxPhyOffset()
	if p, err := diskUsedRatio(b.cfg.StorePathRootDir); err == nil {
		s.CommitLog.DiskUsedPercent = p
	}
	return s
}

func cmpPair(a1, b1, a2, b2 string) int {
	if c := strings.Compare(a1, b1); c != 0 {
		return c
	}
	return strings.Compare(a2, b2)
}

// forgetTopic drops a deleted topic's traffic counters, so its metric series end.
func (s *brokerStats) forgetTopic(topic string) {
	s.puts.Delete(topic)
	s.gets.Range(func(k, _ any) bool {
		if k.(groupTopic).topic == topic {
			s.gets.Delete(k)
		}
		return true
	})
}
