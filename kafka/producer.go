package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/config"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/transport"
)

// Producer defaults (see ProducerConfig).
const (
	DefaultBatchTimeout       = 0                             // ProducerConfig.BatchTimeout: no linger
	DefaultBatchBytes         = 1 << 20                       // ProducerConfig.BatchBytes, 1 MiB
	DefaultMaxBufferedRecords = 10000                         // ProducerConfig.MaxBufferedRecords
	DefaultWriteTimeout       = 10 * time.Second              // ProducerConfig.WriteTimeout
	DefaultMaxAttempts        = 3                             // ProducerConfig.MaxAttempts
	DefaultDialTimeout        = 5 * time.Second               // ProducerConfig.DialTimeout
	DefaultMaxBodyBytes       = message.DefaultMaxMessageSize // ProducerConfig.MaxBodyBytes, 4 MiB
)

// DelayTopicPrefix starts the topics delayed sends go to: "sluice.delay.<level>".
const DelayTopicPrefix = "sluice.delay."

// DelayTopic returns the topic of delay level (1-based): "sluice.delay.<level>".
func DelayTopic(level int) string { return DelayTopicPrefix + strconv.Itoa(level) }

// The life-cycle errors of the producer and the consumer; each matches its counterpart in
// package transport (errors.Is(err, transport.ErrNotStarted) …), as the RocketMQ
// producer's and consumer's do.
var (
	// ErrNotStarted is returned by sends before Producer.Start.
	ErrNotStarted = fmt.Errorf("kafka: %w", transport.ErrNotStarted)
	// ErrStarted is returned by Consumer.Subscribe after Start.
	ErrStarted = fmt.Errorf("kafka: %w", transport.ErrStarted)
	// ErrClosed is returned by sends, Start and Subscribe after Shutdown started.
	ErrClosed = fmt.Errorf("kafka: %w", transport.ErrClosed)
)

var (
	_ transport.Producer = (*Producer)(nil)
	_ transport.Consumer = (*Consumer)(nil)
)

// ProducerConfig configures a [Producer]. The zero value of every field but Brokers is
// usable. The producer runs on franz-go (github.com/twmb/franz-go/pkg/kgo); the field
// comments name the franz-go option each one sets.
type ProducerConfig struct {
	// Brokers are bootstrap addresses, host:port. Required.
	Brokers []string
	// ClientID is sent to Kafka with every request. Default "sluice".
	ClientID string
	// Balancer picks a record's partition. Default nil: franz-go's sticky key
	// partitioner, which hashes a key with Murmur2 as the Java client does (the same
	// partition kafka-go's Murmur2Balancer picks): one sharding key, one partition, its
	// order kept; records without a key join the batch being filled and move to a random
	// partition with every new batch (so a trickle of sends spreads, a stream of them
	// forms large batches). A kafka-go Balancer set here is asked for every record instead
	// (kgo.BasicConsistentPartitioner), with the partition numbers 0..n-1.
	Balancer kafkago.Balancer
	// RequiredAcks is how many replicas must store a record before a send succeeds.
	// Default (and zero) kafkago.RequireAll: every in-sync replica, with idempotent
	// writes (a retried batch is stored once). kafkago.RequireOne (the leader only)
	// turns idempotence off, as Kafka requires; fire-and-forget (no acknowledgement) is
	// not offered.
	RequiredAcks kafkago.RequiredAcks
	// BatchTimeout is how long a partition's records wait for more to join their batch
	// (kgo.ProducerLinger). Default 0: a batch is sent as soon as the partition's
	// connection can take another request, and records arriving meanwhile form the
	// next one. A linger adds its length to every send when few records are in flight.
	BatchTimeout time.Duration
	// BatchSize bounded the records of one batch under kafka-go.
	//
	// Deprecated: franz-go bounds batches by bytes (BatchBytes); BatchSize is ignored.
	BatchSize int
	// Compression is the codec of produce batches: "snappy", "lz4", "zstd", "gzip" or
	// "none". Default "snappy", franz-go's and most Kafka clients' choice (every
	// Kafka client and broker in use reads it); a batch that does not shrink is sent
	// uncompressed.
	Compression string
	// BatchBytes bounds one record batch (kgo.ProducerBatchMaxBytes), and so one
	// record: a record (body, key, headers and their framing) larger than a batch fails
	// with a *message.ValidationError. Default 1 MiB, under Apache Kafka's default
	// message.max.bytes (1 MiB + 12 B). Raise it only with the brokers' and topics'
	// limit.
	BatchBytes int
	// MaxBufferedRecords bounds SendAsync calls whose callback has not run; a further
	// SendAsync waits (bounded by its ctx) for room. Default 10,000.
	MaxBufferedRecords int
	// WriteTimeout bounds how long the broker may take to answer one produce request
	// (kgo.ProduceRequestTimeout; the client waits that long plus 10 s). Default 10 s.
	WriteTimeout time.Duration
	// MaxAttempts is how often a batch is tried before its sends fail
	// (kgo.RecordRetries). With idempotent writes a batch whose request got no answer
	// is not failed early (that could reorder or duplicate records): it is retried until
	// answered, or failed by Shutdown's deadline. Default 3.
	MaxAttempts int
	// DialTimeout bounds a connection attempt, and Start's check. Default 5 s.
	DialTimeout time.Duration
	// MaxBodyBytes refuses larger bodies before sending (a *message.ValidationError).
	// Default 4 MiB, RocketMQ's maxMessageSize. BatchBytes (1 MiB by default) and the
	// broker's message.max.bytes apply as well, so on Kafka a body stays under 1 MiB
	// unless both are raised.
	MaxBodyBytes int
	// DelayTopics routes a message with a delay level to topic "sluice.delay.<level>"
	// (levels above len(DelayLevels) use the last), where a [DelayForwarder] moves it
	// to its topic when due. Off by default: a delay level then fails with an
	// *UnsupportedError, because without a forwarder the message would never arrive.
	DelayTopics bool
	// DelayLevels is the delay table, level n waits DelayLevels[n-1]. Default
	// message.DefaultDelayLevels(). The forwarder waits until the due time written by the
	// producer, so only the producer's table matters.
	DelayLevels []time.Duration
	// Logger receives warnings (a panicking completion callback). Default slog.Default().
	Logger *slog.Logger
}

func (c *ProducerConfig) setDefaults() {
	if c.ClientID == "" {
		c.ClientID = "sluice"
	}
	if c.RequiredAcks == kafkago.RequireNone {
		c.RequiredAcks = kafkago.RequireAll
	}
	if c.Compression == "" {
		c.Compression = "snappy"
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = DefaultBatchBytes
	}
	if c.MaxBufferedRecords == 0 {
		c.MaxBufferedRecords = DefaultMaxBufferedRecords
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if len(c.DelayLevels) == 0 {
		c.DelayLevels = message.DefaultDelayLevels()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Limits of the producer's settings.
const (
	minBatchBytes         = 1 << 10 // franz-go refuses batches under 512 B; a record needs more
	maxBatchBytes         = 1 << 30 // franz-go's upper bound
	maxMaxBufferedRecords = 1 << 24 // a bound on memory: 16 M callbacks waiting
)

// Validate checks the configuration (after defaults) and returns a *config.Error naming
// the first wrong field.
func (c *ProducerConfig) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return &config.Error{Package: "kafka", Field: "Brokers", Reason: "at least one bootstrap address is required"}
	case c.RequiredAcks != kafkago.RequireAll && c.RequiredAcks != kafkago.RequireOne && c.RequiredAcks != kafkago.RequireNone:
		return &config.Error{Package: "kafka", Field: "RequiredAcks", Reason: fmt.Sprintf("%d is not RequireAll (-1) or RequireOne (1)", c.RequiredAcks)}
	case c.BatchTimeout < 0, c.WriteTimeout < 0, c.DialTimeout < 0:
		return &config.Error{Package: "kafka", Field: "BatchTimeout/WriteTimeout/DialTimeout", Reason: "must not be negative"}
	case c.BatchSize < 0 || c.MaxAttempts < 0 || c.MaxBodyBytes < 0:
		return &config.Error{Package: "kafka", Field: "BatchSize/MaxAttempts/MaxBodyBytes", Reason: "must not be negative"}
	case codec(c.Compression) == nil:
		return &config.Error{Package: "kafka", Field: "Compression", Reason: fmt.Sprintf("%q is not one of snappy, lz4, zstd, gzip, none", c.Compression)}
	case c.BatchBytes < minBatchBytes || c.BatchBytes > maxBatchBytes:
		return &config.Error{Package: "kafka", Field: "BatchBytes", Reason: fmt.Sprintf("%d is outside %d..%d", c.BatchBytes, minBatchBytes, maxBatchBytes)}
	case c.MaxBufferedRecords < 0 || c.MaxBufferedRecords > maxMaxBufferedRecords:
		return &config.Error{Package: "kafka", Field: "MaxBufferedRecords", Reason: fmt.Sprintf("%d is outside 1..%d", c.MaxBufferedRecords, maxMaxBufferedRecords)}
	}
	for i, d := range c.DelayLevels {
		if d <= 0 {
			return &config.Error{Package: "kafka", Field: "DelayLevels", Reason: fmt.Sprintf("level %d is %v; every level must be positive", i+1, d)}
		}
	}
	return nil
}

// Producer sends Sluice messages to Kafka through two franz-go clients started by
// Start: one for Send, one for SendAsync, so a SendAsync callback (franz-go runs them
// one at a time) may call Send without waiting on itself. It is safe for concurrent use.
type Producer struct {
	cfg  ProducerConfig
	log  *slog.Logger
	room chan struct{} // one token per SendAsync whose callback has not started

	startMu sync.Mutex // serializes Start

	// mu guards the state below. Sends hold it for reading from their state check
	// until their record is handed to franz-go (which never blocks: see newClients),
	// so once Shutdown has set closed under the write lock no send can still reach a
	// client it closes.
	mu       sync.RWMutex
	started  bool
	closed   bool
	sync     *kgo.Client
	async    *kgo.Client
	inflight sync.WaitGroup // sends handed to franz-go whose completion has not run
	closing  chan struct{}  // closed by Shutdown: wakes SendAsync calls waiting for room
	shutDone chan struct{}  // closed when the first Shutdown returned

	cbs callbacks // SendAsync completions waiting for their callback
}

// handoffAfter is how long one SendAsync callback may run before another goroutine
// takes over the callbacks queued behind it.
const handoffAfter = 10 * time.Millisecond

// callbacks runs SendAsync callbacks in completion order on a goroutine of the
// producer's, outside franz-go's promise goroutine: a callback that blocks (on a Send,
// on room for a SendAsync, on anything) then holds up neither franz-go nor, after
// handoffAfter, the callbacks behind it — the next completion or a SendAsync waiting for
// room starts another runner, and the blocked one exits when its callback returns.
// Only one runner at a time takes callbacks from the queue.
type callbacks struct {
	mu      sync.Mutex
	queue   []completion
	head    int    // queue[head:] wait
	runner  uint64 // the runner that may take callbacks; 0 when none runs
	next    uint64 // the last runner id given out
	started int64  // when the running callback started, unix ns; 0 between callbacks
}

// completion is one finished SendAsync whose callback has not run.
type completion struct {
	msg *message.Message
	cb  func(*message.SendResult, error)
	res *message.SendResult
	err error
}

// push queues c and starts a runner when none runs or the running callback is stuck.
func (p *Producer) push(c completion) {
	q := &p.cbs
	q.mu.Lock()
	if q.head > 0 && q.head >= len(q.queue)/2 { // a runner that never finds the queue empty: reuse the front
		n := copy(q.queue, q.queue[q.head:])
		clear(q.queue[n:])
		q.queue, q.head = q.queue[:n], 0
	}
	q.queue = append(q.queue, c)
	id := q.takeOverLocked()
	q.mu.Unlock()
	if id != 0 {
		go p.runCallbacks(id)
	}
}

// takeOverLocked returns the id of a runner to start (0: none needed): when no runner
// runs, or the running callback started more than handoffAfter ago.
func (q *callbacks) takeOverLocked() uint64 {
	if q.head == len(q.queue) {
		return 0
	}
	if q.runner != 0 && (q.started == 0 || time.Now().UnixNano()-q.started < int64(handoffAfter)) {
		return 0
	}
	q.next++
	q.runner, q.started = q.next, 0
	return q.runner
}

// unstick starts another runner when the running callback is stuck (see push).
func (p *Producer) unstick() {
	q := &p.cbs
	q.mu.Lock()
	id := q.takeOverLocked()
	q.mu.Unlock()
	if id != 0 {
		go p.runCallbacks(id)
	}
}

// runCallbacks runs queued callbacks while it is the runner and the queue is not empty.
func (p *Producer) runCallbacks(id uint64) {
	q := &p.cbs
	for {
		q.mu.Lock()
		if q.runner != id {
			q.mu.Unlock()
			return
		}
		if q.head == len(q.queue) {
			q.queue, q.head, q.runner, q.started = q.queue[:0], 0, 0, 0
			q.mu.Unlock()
			return
		}
		c := q.queue[q.head]
		q.queue[q.head] = completion{}
		q.head++
		q.started = time.Now().UnixNano()
		q.mu.Unlock()
		<-p.room // before cb, so a cb that sends again finds room
		p.callback(c.msg, c.cb, c.res, c.err)
		q.mu.Lock()
		if q.runner == id {
			q.started = 0
		}
		q.mu.Unlock()
		p.inflight.Done()
	}
}

// NewProducer validates cfg and returns a Producer. It dials nothing and starts no
// goroutine until Start.
func NewProducer(cfg ProducerConfig) (*Producer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Producer{cfg: cfg, log: cfg.Logger, room: make(chan struct{}, cfg.MaxBufferedRecords),
		closing: make(chan struct{}), shutDone: make(chan struct{})}, nil
}

// newClients makes the two franz-go clients. Neither ever blocks a Produce call on its
// buffer: SendAsync holds a room token per record, so the async client buffers at most
// MaxBufferedRecords records plus those whose callback is running (its limit is twice
// that, plus one); the sync client buffers one record per Send call in progress.
func (p *Producer) newClients() (syncCl, asyncCl *kgo.Client, err error) {
	c := &p.cfg
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.DialTimeout(c.DialTimeout),
		kgo.ProducerLinger(c.BatchTimeout),
		kgo.ProducerBatchMaxBytes(int32(c.BatchBytes)),
		kgo.ProducerBatchCompression(*codec(c.Compression)),
		kgo.ProduceRequestTimeout(c.WriteTimeout),
		kgo.RecordRetries(c.MaxAttempts),
		// As the Java producer (and kafka-go's writer before) does: a broker with
		// auto.create.topics.enable creates a missing topic on the first send.
		kgo.AllowAutoTopicCreation(),
		kgo.DisableClientMetrics(),
	}
	if c.RequiredAcks == kafkago.RequireOne {
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	} else {
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	if c.Balancer != nil {
		opts = append(opts, kgo.RecordPartitioner(balancerPartitioner(c.Balancer)))
	} else {
		// Not franz-go's default (uniform bytes: 64 KiB to one partition, then the
		// next), which would put a trickle of small keyless records on one partition
		// and so on one consumer of a group for a long time; this one moves on with
		// every new batch, as the Java client's sticky partitioner (KIP-480) does.
		opts = append(opts, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	}
	syncCl, err = kgo.NewClient(append(opts, kgo.MaxBufferedRecords(math.MaxInt32))...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: producer client: %w", err)
	}
	asyncCl, err = kgo.NewClient(append(opts, kgo.MaxBufferedRecords(2*c.MaxBufferedRecords+1))...)
	if err != nil {
		syncCl.Close()
		return nil, nil, fmt.Errorf("kafka: producer client: %w", err)
	}
	return syncCl, asyncCl, nil
}

// codec returns the franz-go codec named name, nil for an unknown name.
func codec(name string) *kgo.CompressionCodec {
	var c kgo.CompressionCodec
	switch name {
	case "snappy":
		c = kgo.SnappyCompression()
	case "lz4":
		c = kgo.Lz4Compression()
	case "zstd":
		c = kgo.ZstdCompression()
	case "gzip":
		c = kgo.GzipCompression()
	case "none":
		c = kgo.NoCompression()
	default:
		return nil
	}
	return &c
}

// balancerPartitioner asks b for the partition of every record.
func balancerPartitioner(b kafkago.Balancer) kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		return func(r *kgo.Record, n int) int {
			parts := make([]int, n)
			for i := range parts {
				parts[i] = i
			}
			km := kafkago.Message{Topic: topic, Key: r.Key, Value: r.Value, Headers: make([]kafkago.Header, len(r.Headers))}
			for i, h := range r.Headers {
				km.Headers[i] = kafkago.Header{Key: h.Key, Value: h.Value}
			}
			if got := b.Balance(km, parts...); got >= 0 && got < n {
				return got
			}
			return 0 // a balancer answering outside the partitions: the first one
		}
	})
}

func (p *Producer) callback(msg *message.Message, cb func(*message.SendResult, error), res *message.SendResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("kafka: async send callback panicked", "topic", msg.Topic, "panic", r)
		}
	}()
	cb(res, err)
}

func result(msg *message.Message, partition int, offset int64) *message.SendResult {
	return &message.SendResult{
		Status:      message.SendOK,
		MsgID:       msg.UniqKey(),
		Queue:       message.MessageQueue{Topic: msg.Topic, BrokerName: BrokerName, QueueID: partition},
		QueueOffset: offset,
	}
}

// prepare checks msg, gives it a UNIQ_KEY when missing (so a parked and resent message
// keeps its id) and converts it, routing a delay level to its delay topic.
func (p *Producer) prepare(msg *message.Message) (*kgo.Record, error) {
	if err := validateTopic("topic", msg.Topic); err != nil {
		return nil, err
	}
	if len(msg.Body) > p.cfg.MaxBodyBytes {
		return nil, &message.ValidationError{Field: "body", Reason: "too large", Limit: p.cfg.MaxBodyBytes, Value: len(msg.Body)}
	}
	if msg.UniqKey() == "" {
		msg.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
	}
	if err := checkMessage(msg); err != nil {
		return nil, err
	}
	rec := &kgo.Record{Topic: msg.Topic, Value: msg.Body, Headers: make([]kgo.RecordHeader, 0, len(msg.Properties)+4)}
	if sk := msg.ShardingKey(); sk != "" {
		rec.Key = []byte(sk)
	}
	reserved := ""
	for k, v := range msg.Properties {
		if controlHeaders[k] || k == HeaderHMAC {
			if reserved == "" || k < reserved {
				reserved = k
			}
		}
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	if reserved != "" {
		return nil, reservedError(reserved)
	}
	if len(rec.Headers) > 1 {
		slices.SortFunc(rec.Headers, func(a, b kgo.RecordHeader) int { return strings.Compare(a.Key, b.Key) })
	}
	if msg.Flag != 0 {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderFlag, Value: []byte(strconv.FormatInt(int64(msg.Flag), 10))})
	}
	if lvl := msg.DelayLevel(); lvl > 0 {
		if !p.cfg.DelayTopics {
			return nil, &UnsupportedError{Topic: msg.Topic, Feature: "delay level " + strconv.Itoa(lvl) + " without ProducerConfig.DelayTopics"}
		}
		if lvl > len(p.cfg.DelayLevels) {
			lvl = len(p.cfg.DelayLevels)
		}
		now := time.Now()
		rec.Topic = DelayTopic(lvl)
		rec.Headers = append(rec.Headers,
			kgo.RecordHeader{Key: HeaderRealTopic, Value: []byte(msg.Topic)},
			kgo.RecordHeader{Key: HeaderDueMs, Value: []byte(strconv.FormatInt(now.Add(p.cfg.DelayLevels[lvl-1]).UnixMilli(), 10))},
			kgo.RecordHeader{Key: HeaderBornMs, Value: []byte(strconv.FormatInt(now.UnixMilli(), 10))})
	}
	if size := recordSize(rec); size > p.cfg.BatchBytes {
		return nil, p.tooLarge(size)
	}
	return rec, nil
}

// recordSize is what franz-go counts of a record against a batch: key, value, header
// names and values (the framing comes on top).
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

func (p *Producer) tooLarge(size int) error {
	return &message.ValidationError{Field: "body", Reason: "too large for one Kafka record batch (body, key, headers and framing; ProducerConfig.BatchBytes)",
		Limit: p.cfg.BatchBytes, Value: size}
}

// maxRecordBytes is the default BatchBytes, which bounds one record.
const maxRecordBytes = DefaultBatchBytes

// sendError wraps a failed write of msg (as rec) as "kafka: send to topic T: …", naming
// the delay topic the record was written to when it is not msg's topic, and turns
// franz-go's refusal of a record larger than a batch (kerr.MessageTooLarge wrapped with
// the size, before anything was sent) into a *message.ValidationError with the limit.
func (p *Producer) sendError(msg *message.Message, rec *kgo.Record, err error) error {
	if errors.Is(err, kerr.MessageTooLarge) && err != error(kerr.MessageTooLarge) {
		return p.tooLarge(recordSize(rec))
	}
	if rec.Topic != msg.Topic {
		return fmt.Errorf("kafka: send to topic %q through delay topic %q (a DelayForwarder's Start creates it): %w", msg.Topic, rec.Topic, err)
	}
	return fmt.Errorf("kafka: send to topic %q: %w", msg.Topic, err)
}

// enter checks that sends are allowed and registers one in progress. On success the
// caller holds p.mu for reading and must hand the record to the returned client and
// then call p.mu.RUnlock; the record's completion calls p.inflight.Done.
func (p *Producer) enter(async bool) (*kgo.Client, error) {
	p.mu.RLock()
	switch {
	case p.closed:
		p.mu.RUnlock()
		return nil, ErrClosed
	case !p.started:
		p.mu.RUnlock()
		return nil, ErrNotStarted
	}
	p.inflight.Add(1)
	if async {
		return p.async, nil
	}
	return p.sync, nil
}

// syncOutcome carries a synchronous send's completion to Send.
type syncOutcome struct {
	rec *kgo.Record
	err error
}

// Send writes msg and waits until Kafka acknowledged it (RequiredAcks) or ctx ends.
// The result has Status SendOK, MsgID = UNIQ_KEY (set on msg when missing), and the
// partition (QueueID) and offset (QueueOffset) the record got — of the delay topic for a
// delayed message. Errors: a *message.ValidationError (topic name, body size), an
// *UnsupportedError, ErrNotStarted, ErrClosed, ctx's error, or franz-go's error wrapped
// ("kafka: send to topic T: …"); with an error the message may or may not be stored
// (after ctx ended the record may still be written).
func (p *Producer) Send(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
	rec, err := p.prepare(msg)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kafka: send to topic %q: %w", msg.Topic, err)
	}
	cl, err := p.enter(false)
	if err != nil {
		return nil, err
	}
	done := make(chan syncOutcome, 1)
	// The record's own context is not ctx: franz-go fails every buffered record of a
	// partition when the first one's context ends, so one caller's deadline would fail
	// other callers' sends. ctx bounds the wait below instead.
	cl.TryProduce(context.Background(), rec, func(r *kgo.Record, err error) {
		done <- syncOutcome{r, err}
		p.inflight.Done()
	})
	p.mu.RUnlock()
	select {
	case o := <-done:
		if o.err != nil {
			return nil, p.sendError(msg, rec, o.err)
		}
		return result(msg, int(o.rec.Partition), o.rec.Offset), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("kafka: send to topic %q: waiting for the acknowledgement: %w", msg.Topic, ctx.Err())
	}
}

// SendAsync queues msg and returns; cb runs exactly once with the result or the error
// (a panicking cb is logged). It returns an error, and cb never runs, when msg is
// refused before queueing (validation, *UnsupportedError, ErrNotStarted, ErrClosed) or
// ctx ends while it waits for room (MaxBufferedRecords callbacks pending). ctx bounds
// only that wait: a queued record is sent even when ctx ends later.
//
// Callbacks run one at a time, in completion order, on a goroutine of the producer's;
// one that blocks holds the later ones back for about 10 ms, then another goroutine
// takes them over (the order is then no longer kept). A cb may call Send and SendAsync.
// Shutdown waits for the callbacks of queued sends; when its deadline passes first,
// they run with an error shortly after — a completion is never dropped.
func (p *Producer) SendAsync(ctx context.Context, msg *message.Message, cb func(*message.SendResult, error)) error {
	if cb == nil {
		return &config.Error{Package: "kafka", Field: "SendAsync callback", Reason: "must not be nil"}
	}
	rec, err := p.prepare(msg)
	if err != nil {
		return err
	}
	if err := p.usable(); err != nil {
		return err
	}
	select {
	case p.room <- struct{}{}:
	default:
		if err := p.waitRoom(ctx); err != nil {
			return fmt.Errorf("kafka: send to topic %q: %w", msg.Topic, err)
		}
	}
	cl, err := p.enter(true)
	if err != nil {
		<-p.room
		return err
	}
	cl.TryProduce(context.Background(), rec, func(r *kgo.Record, err error) {
		c := completion{msg: msg, cb: cb}
		if err == nil {
			c.res = result(msg, int(r.Partition), r.Offset)
		} else {
			c.err = p.sendError(msg, rec, err)
		}
		p.push(c)
	})
	p.mu.RUnlock()
	return nil
}

// waitRoom takes a room token, waiting until a callback frees one, ctx ends or
// Shutdown begins. While it waits it checks every handoffAfter whether the running
// callback is stuck — possibly this very call, made from a callback — and has another
// goroutine run the queued callbacks, whose tokens are freed as they start.
func (p *Producer) waitRoom(ctx context.Context) error {
	tick := time.NewTicker(handoffAfter)
	defer tick.Stop()
	for {
		select {
		case p.room <- struct{}{}:
			return nil
		case <-tick.C:
			p.unstick()
		case <-ctx.Done():
			return fmt.Errorf("waiting for room (%d callbacks pending): %w", p.cfg.MaxBufferedRecords, ctx.Err())
		case <-p.closing:
			return ErrClosed
		}
	}
}

// SendFunc returns p.Send as a [middleware.SendFunc], for middleware.ChainSend.
func (p *Producer) SendFunc() middleware.SendFunc { return p.Send }

// Start makes the producer's franz-go clients, checks that the cluster answers — a
// metadata request to the bootstrap brokers, bounded by ctx and DialTimeout — and lets
// sends through. Errors: ErrClosed after Shutdown, or the metadata request's error
// wrapped ("kafka: start producer: …"; the producer stays unstarted and Start may be
// called again). A second call on a started producer does nothing. Implements
// [transport.Producer].
func (p *Producer) Start(ctx context.Context) error {
	p.startMu.Lock()
	defer p.startMu.Unlock()
	if err := p.usable(); !errors.Is(err, ErrNotStarted) {
		if errors.Is(err, ErrClosed) {
			return ErrClosed
		}
		return nil // started
	}
	syncCl, asyncCl, err := p.newClients()
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	err = syncCl.Ping(pctx)
	cancel()
	if err != nil {
		syncCl.Close()
		asyncCl.Close()
		return fmt.Errorf("kafka: start producer: brokers %v do not answer: %w", p.cfg.Brokers, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		syncCl.Close()
		asyncCl.Close()
		return ErrClosed
	}
	p.sync, p.async, p.started = syncCl, asyncCl, true
	return nil
}

// usable returns ErrNotStarted before Start, ErrClosed after Shutdown began, else nil.
func (p *Producer) usable() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case p.closed:
		return ErrClosed
	case !p.started:
		return ErrNotStarted
	}
	return nil
}

// Shutdown refuses new sends, sends the queued ones and waits for their completions
// (callbacks included), then closes the clients and their connections. When ctx ends
// first it closes the clients at once — pending sends then fail with franz-go's
// ErrClientClosed and their callbacks run with it — and returns ctx's error wrapped.
// Calling it again returns nil once the first call finished (bounded by its ctx).
func (p *Producer) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		select {
		case <-p.shutDone:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("kafka: producer shutdown: %w", ctx.Err())
		}
	}
	p.closed = true
	close(p.closing)
	syncCl, asyncCl := p.sync, p.async
	p.mu.Unlock()
	defer close(p.shutDone)
	if syncCl == nil { // never started
		return nil
	}
	// No send is between its state check and franz-go now (they hold mu for reading),
	// so every record is in a client's buffer and p.inflight counts them all.
	err := errors.Join(asyncCl.Flush(ctx), syncCl.Flush(ctx))
	if err == nil {
		idle := make(chan struct{})
		go func() { p.inflight.Wait(); close(idle) }()
		select {
		case <-idle:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	asyncCl.Close() // fails what is still buffered: those callbacks run with ErrClientClosed
	syncCl.Close()
	if err != nil {
		return fmt.Errorf("kafka: producer shutdown: %w", err)
	}
	return nil
}

// validateTopic checks a Kafka topic name: 1..249 bytes of a-z A-Z 0-9 . _ - (Kafka's
// Topic.validate), and not "." or "..".
func validateTopic(field, topic string) error {
	if topic == "" {
		return &message.ValidationError{Field: field, Reason: "empty"}
	}
	if len(topic) > 249 {
		return &message.ValidationError{Field: field, Reason: "too long for a Kafka topic", Limit: 249, Value: len(topic)}
	}
	if topic == "." || topic == ".." {
		return &message.ValidationError{Field: field, Reason: "\".\" and \"..\" are not Kafka topic names"}
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c == '.' || c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return &message.ValidationError{Field: field, Reason: fmt.Sprintf("character %q at position %d; Kafka allows . _ - letters digits", c, i)}
		}
	}
	return nil
}

// SendMessageInTransaction stands for RocketMQ's transactional send: a half message
// whose fate a local transaction decides, the broker checking back on undecided ones
// (CheckLocalTransaction). Kafka's transactions have no such check-back, so it sends
// nothing and always returns an *UnsupportedError (errors.Is ErrUnsupported) — never a
// plain send that would pretend to be transactional.
func (p *Producer) SendMessageInTransaction(_ context.Context, msg *message.Message) (*message.SendResult, error) {
	return nil, &UnsupportedError{Topic: msg.Topic, Feature: "a transactional send with check-back"}
}

// ValidateTopic checks a Kafka topic name (1..249 bytes of a-z A-Z 0-9 . _ -, not "." or
// ".."); it returns a *message.ValidationError with Field "topic". Package outbox takes it
// as Config.ValidateTopic for an outbox whose relay sends to Kafka.
func ValidateTopic(topic string) error { return validateTopic("topic", topic) }
