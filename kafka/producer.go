package kafka

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicemq/sluice/config"
	"log/slog"
	"strconv"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/transport"
)

// Producer defaults (see ProducerConfig).
const (
	DefaultBatchTimeout = 5 * time.Millisecond          // ProducerConfig.BatchTimeout
	DefaultWriteTimeout = 10 * time.Second              // ProducerConfig.WriteTimeout
	DefaultMaxAttempts  = 3                             // ProducerConfig.MaxAttempts
	DefaultDialTimeout  = 5 * time.Second               // ProducerConfig.DialTimeout
	DefaultMaxBodyBytes = message.DefaultMaxMessageSize // ProducerConfig.MaxBodyBytes, 4 MiB
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
// usable.
type ProducerConfig struct {
	// Brokers are bootstrap addresses, host:port. Required.
	Brokers []string
	// ClientID is sent to Kafka with every request. Default "sluice".
	ClientID string
	// Balancer picks a record's partition. Default kafka-go's Murmur2Balancer (the Java
	// client's key hash): one sharding key, one partition, its order kept; records
	// without a key are spread at random.
	Balancer kafkago.Balancer
	// RequiredAcks is how many replicas must store a record before a send succeeds.
	// Default (and zero) kafkago.RequireAll: every in-sync replica. kafkago.RequireOne
	// is accepted; fire-and-forget (no acknowledgement) is not offered.
	RequiredAcks kafkago.RequiredAcks
	// BatchTimeout is how long the writer waits to fill a batch. Default 5 ms
	// (kafka-go's own default, 1 s, would make every synchronous send take a second).
	BatchTimeout time.Duration
	// BatchSize is the most records in one produce batch. Default 100.
	BatchSize int
	// WriteTimeout bounds one produce request. Default 10 s.
	WriteTimeout time.Duration
	// MaxAttempts is how often a batch is tried before its sends fail. Default 3.
	MaxAttempts int
	// DialTimeout bounds a connection attempt. Default 5 s.
	DialTimeout time.Duration
	// MaxBodyBytes refuses larger bodies before sending (a *message.ValidationError).
	// Default 4 MiB, RocketMQ's maxMessageSize. Two smaller limits apply as well:
	// kafka-go's writer refuses a record (body, key and headers) over 1 MiB, its batch
	// size (also a *message.ValidationError, Field "body"), and the broker's
	// message.max.bytes (Apache's default about 1 MiB; a kafka-go error). So on
	// Kafka a body stays under 1 MiB.
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
	if c.Balancer == nil {
		c.Balancer = kafkago.Murmur2Balancer{}
	}
	if c.RequiredAcks == kafkago.RequireNone {
		c.RequiredAcks = kafkago.RequireAll
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = 100
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
	}
	for i, d := range c.DelayLevels {
		if d <= 0 {
			return &config.Error{Package: "kafka", Field: "DelayLevels", Reason: fmt.Sprintf("level %d is %v; every level must be positive", i+1, d)}
		}
	}
	return nil
}

// Producer sends Sluice messages to Kafka through two kafka-go Writers (one synchronous,
// one asynchronous) that share one Transport. It is safe for concurrent use.
type Producer struct {
	cfg   ProducerConfig
	conns *conns
	sync  *kafkago.Writer
	async *kafkago.Writer
	log   *slog.Logger

	mu      sync.Mutex
	started bool
	closed  bool
	pending int           // async sends whose completion has not run yet
	idle    chan struct{} // closed when pending drops to 0 after Shutdown began
}

// sendSlot carries a synchronous send's outcome out of the Completion callback.
type sendSlot struct {
	partition int
	offset    int64
	done      bool
}

// asyncSlot carries an asynchronous send's callback to the Completion callback.
type asyncSlot struct {
	msg *message.Message
	cb  func(*message.SendResult, error)
}

// NewProducer validates cfg and returns a Producer. It dials nothing until Start.
func NewProducer(cfg ProducerConfig) (*Producer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Producer{cfg: cfg, conns: newConns(cfg.DialTimeout), log: cfg.Logger}
	tr := p.conns.transport(cfg.ClientID)
	mk := func(async bool) *kafkago.Writer {
		return &kafkago.Writer{
			Addr:         kafkago.TCP(cfg.Brokers...),
			Balancer:     cfg.Balancer,
			RequiredAcks: cfg.RequiredAcks,
			BatchTimeout: cfg.BatchTimeout,
			BatchSize:    cfg.BatchSize,
			WriteTimeout: cfg.WriteTimeout,
			MaxAttempts:  cfg.MaxAttempts,
			Async:        async,
			Transport:    tr,
			Completion:   p.complete,
		}
	}
	p.sync, p.async = mk(false), mk(true)
	return p, nil
}

// complete runs on the writers' goroutines once per batch.
func (p *Producer) complete(msgs []kafkago.Message, err error) {
	for i := range msgs {
		switch s := msgs[i].WriterData.(type) {
		case *sendSlot:
			s.partition, s.offset, s.done = msgs[i].Partition, msgs[i].Offset, err == nil
		case *asyncSlot:
			var res *message.SendResult
			var serr error
			if err == nil {
				res = result(s.msg, msgs[i].Partition, msgs[i].Offset)
			} else {
				serr = fmt.Errorf("kafka: send to topic %q: %w", s.msg.Topic, err)
			}
			p.callback(s, res, serr)
			p.asyncDone()
		}
	}
}

func (p *Producer) callback(s *asyncSlot, res *message.SendResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("kafka: async send callback panicked", "topic", s.msg.Topic, "panic", r)
		}
	}()
	s.cb(res, err)
}

func (p *Producer) asyncDone() {
	p.mu.Lock()
	p.pending--
	if p.pending == 0 && p.idle != nil {
		close(p.idle)
		p.idle = nil
	}
	p.mu.Unlock()
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
func (p *Producer) prepare(msg *message.Message) (kafkago.Message, error) {
	if err := validateTopic("topic", msg.Topic); err != nil {
		return kafkago.Message{}, err
	}
	if len(msg.Body) > p.cfg.MaxBodyBytes {
		return kafkago.Message{}, &message.ValidationError{Field: "body", Reason: "too large", Limit: p.cfg.MaxBodyBytes, Value: len(msg.Body)}
	}
	if msg.UniqKey() == "" {
		msg.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
	}
	km, err := ToKafka(msg)
	if err != nil {
		return km, err
	}
	if lvl := msg.DelayLevel(); lvl > 0 {
		if !p.cfg.DelayTopics {
			return km, &UnsupportedError{Topic: msg.Topic, Feature: "delay level " + strconv.Itoa(lvl) + " without ProducerConfig.DelayTopics"}
		}
		if lvl > len(p.cfg.DelayLevels) {
			lvl = len(p.cfg.DelayLevels)
		}
		now := time.Now()
		km.Topic = DelayTopic(lvl)
		km.Headers = append(km.Headers,
			kafkago.Header{Key: HeaderRealTopic, Value: []byte(msg.Topic)},
			kafkago.Header{Key: HeaderDueMs, Value: []byte(strconv.FormatInt(now.Add(p.cfg.DelayLevels[lvl-1]).UnixMilli(), 10))},
			kafkago.Header{Key: HeaderBornMs, Value: []byte(strconv.FormatInt(now.UnixMilli(), 10))})
	}
	return km, nil
}

// maxRecordBytes is kafka-go's Writer.BatchBytes default, which the producer keeps: the
// writer refuses a record (value, key and headers) larger than one batch before sending
// it. A larger batch limit could build batches of small records above the broker's
// message.max.bytes (Apache's default is also about 1 MiB), failing them all.
const maxRecordBytes = 1 << 20

// sendError wraps a failed write of msg (converted to km) as "kafka: send to topic T: …",
// naming the delay topic the record was written to when it is not msg's topic, and turns
// kafka-go's MessageTooLargeError (a client-side refusal whose text reads like the
// broker's) into a *message.ValidationError with the limit.
func (p *Producer) sendError(msg *message.Message, km kafkago.Message, err error) error {
	if errors.As(err, new(kafkago.MessageTooLargeError)) {
		size := len(km.Key) + len(km.Value)
		for _, h := range km.Headers {
			size += len(h.Key) + len(h.Value)
		}
		return &message.ValidationError{Field: "body", Reason: "too large for one Kafka record (body, key and headers; kafka-go's batch limit)", Limit: maxRecordBytes, Value: size}
	}
	if km.Topic != msg.Topic {
		return fmt.Errorf("kafka: send to topic %q through delay topic %q (a DelayForwarder's Start creates it): %w", msg.Topic, km.Topic, err)
	}
	return fmt.Errorf("kafka: send to topic %q: %w", msg.Topic, err)
}

// Send writes msg and waits until Kafka acknowledged it (RequiredAcks). The result has
// Status SendOK, MsgID = UNIQ_KEY (set on msg when missing), and the partition (QueueID)
// and offset (QueueOffset) the record got — of the delay topic for a delayed message.
// Errors: a *message.ValidationError (topic name, body size), an *UnsupportedError,
// ErrNotStarted, ErrClosed, or kafka-go's error wrapped ("kafka: send to topic T: …"); with an error
// the message may or may not be stored.
func (p *Producer) Send(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
	km, err := p.prepare(msg)
	if err != nil {
		return nil, err
	}
	if err := p.usable(); err != nil {
		return nil, err
	}
	slot := &sendSlot{}
	km.WriterData = slot
	if err := write(ctx, p.sync, km); err != nil {
		var werrs kafkago.WriteErrors
		if errors.As(err, &werrs) && len(werrs) == 1 && werrs[0] != nil {
			err = werrs[0]
		}
		return nil, p.sendError(msg, km, err)
	}
	if !slot.done {
		// WriteMessages returned nil but no completion reported this record: never
		// claim a success we did not see.
		return nil, fmt.Errorf("kafka: send to topic %q: no acknowledgement reported by the writer", msg.Topic)
	}
	return result(msg, slot.partition, slot.offset), nil
}

// SendAsync queues msg and returns; cb runs exactly once, on a writer goroutine, with the
// result or the error (a panicking cb is logged). It returns an error, and cb never
// runs, when msg is refused before queueing (validation, *UnsupportedError, ErrNotStarted,
// ErrClosed).
// Shutdown waits for the callbacks of queued sends; when its deadline cuts the
// connections, they run with an error shortly after — a completion is never dropped.
func (p *Producer) SendAsync(ctx context.Context, msg *message.Message, cb func(*message.SendResult, error)) error {
	if cb == nil {
		return &config.Error{Package: "kafka", Field: "SendAsync callback", Reason: "must not be nil"}
	}
	km, err := p.prepare(msg)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if err := p.usableLocked(); err != nil {
		p.mu.Unlock()
		return err
	}
	p.pending++
	p.mu.Unlock()
	km.WriterData = &asyncSlot{msg: msg, cb: cb}
	if err := p.async.WriteMessages(ctx, km); err != nil {
		p.asyncDone()
		return p.sendError(msg, km, err)
	}
	return nil
}

// SendFunc returns p.Send as a [middleware.SendFunc], for middleware.ChainSend.
func (p *Producer) SendFunc() middleware.SendFunc { return p.Send }

// Start checks that the cluster answers — a metadata request to the bootstrap brokers
// over the producer's own connections, bounded by ctx and DialTimeout — and lets sends
// through. Errors: ErrClosed after Shutdown, or the metadata request's error wrapped
// ("kafka: start producer: …"; the producer stays unstarted and Start may be called
// again). A second call on a started producer does nothing. Implements
// [transport.Producer].
func (p *Producer) Start(ctx context.Context) error {
	p.mu.Lock()
	started, closed := p.started, p.closed
	p.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case started:
		return nil
	}
	cl := &kafkago.Client{Addr: kafkago.TCP(p.cfg.Brokers...), Timeout: p.cfg.DialTimeout, Transport: p.sync.Transport}
	if _, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{}}); err != nil {
		return fmt.Errorf("kafka: start producer: brokers %v do not answer: %w", p.cfg.Brokers, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.started = true
	return nil
}

// usable returns ErrNotStarted before Start, ErrClosed after Shutdown began, else nil.
func (p *Producer) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.usableLocked()
}

func (p *Producer) usableLocked() error {
	switch {
	case p.closed:
		return ErrClosed
	case !p.started:
		return ErrNotStarted
	}
	return nil
}

// Shutdown refuses new sends, flushes queued ones and waits for their completions, then
// closes the writers and their connections. When ctx ends first it cuts every
// connection (pending sends then fail and their callbacks run with the error) and
// returns ctx's error wrapped. Calling it again returns nil once the first call
// finished.
func (p *Producer) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		err := errors.Join(p.async.Close(), p.sync.Close())
		if tr, ok := p.sync.Transport.(*kafkago.Transport); ok {
			tr.CloseIdleConnections()
		}
		done <- err
	}()
	select {
	case err := <-done:
		p.conns.cut()
		if err != nil {
			return fmt.Errorf("kafka: close producer: %w", err)
		}
		return nil
	case <-ctx.Done():
		p.conns.cut()
		return fmt.Errorf("kafka: producer shutdown: %w", ctx.Err())
	}
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
