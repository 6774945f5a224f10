package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/config"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/filter"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Consumer defaults.
const (
	DefaultConsumeWorkers    = 4           // concurrent handler calls per partition
	DefaultMaxInFlight       = 256         // fetched, unfinished records per partition
	DefaultMaxReconsumeTimes = 16          // RocketMQ's maxReconsumeTimes
	DefaultSuspendTime       = time.Second // orderly: pause before a failed message runs again
	DefaultCommitInterval    = time.Second // periodic commit of finished offsets
	DefaultFetchMaxWait      = 500 * time.Millisecond
	DefaultFetchMaxBytes     = 1 << 20
	DefaultTimeout           = 5 * time.Second // coordinator calls, dials, retry sends
	DefaultHeartbeatInterval = 3 * time.Second
	DefaultSessionTimeout    = 30 * time.Second
	DefaultRebalanceTimeout  = 30 * time.Second
	DefaultJoinGroupBackoff  = time.Second
)

// DefaultRetrySchedule returns RocketMQ's consume-retry schedule: attempt n waits element
// n-1, delay levels 3..18 of the default delay table (10 s … 2 h, 16 tries). Each call
// returns a fresh slice.
func DefaultRetrySchedule() []time.Duration { return message.DefaultDelayLevels()[2:] }

// RetryTopic returns the retry topic of attempt level n (1-based) of group:
// "<group>.retry.<n>".
func RetryTopic(group string, n int) string { return group + ".retry." + strconv.Itoa(n) }

// DLQTopic returns the dead-letter topic of group: "<group>.dlq".
func DLQTopic(group string) string { return group + ".dlq" }

// Config configures a [Consumer]. Brokers and Group are required; every other zero
// value takes the default named in its doc.
type Config struct {
	// Brokers are bootstrap addresses, host:port. Required.
	Brokers []string
	// Group is the Kafka consumer group id; it also names the retry and dead-letter
	// topics. Required; a valid topic-name prefix (a-z A-Z 0-9 . _ -).
	Group string
	// ClientID is sent to Kafka with every request. Default "sluice".
	ClientID string
	// Orderly consumes each partition serially: a failed message is retried in place
	// after SuspendCurrentQueueTime (the partition waits, as RocketMQ's orderly consumer
	// does) and goes to the dead-letter topic after MaxReconsumeTimes local retries.
	// Default false: concurrent, failed messages go through the retry topics.
	Orderly bool
	// ConsumeWorkers bounds concurrent handler calls per partition (concurrent mode).
	// Default 4.
	ConsumeWorkers int
	// MaxInFlight bounds the records of a partition fetched but not yet finished (the
	// commit can only move past finished ones). Default 256; at least
	// ConsumeMessageBatchMaxSize.
	MaxInFlight int
	// ConsumeMessageBatchMaxSize is the most records one handler call gets, consecutive
	// records of one partition and subscription (RocketMQ's consumeMessageBatchMaxSize).
	// A failed call fails all of them. Default 1, at most 1024.
	ConsumeMessageBatchMaxSize int
	// MaxReconsumeTimes is how often a failed message is retried before it goes to
	// "<group>.dlq"; 0 sends it there at its first failure. Default (nil or -1) 16.
	MaxReconsumeTimes *int
	// RetrySchedule is how long attempt n waits: RetrySchedule[n-1]; attempts beyond its
	// length wait the last entry (topic "<group>.retry.<len>"). Default
	// DefaultRetrySchedule() (10 s … 2 h). Tests use milliseconds.
	RetrySchedule []time.Duration
	// SuspendCurrentQueueTime is the orderly consumer's pause before a failed message
	// runs again. Default 1 s.
	SuspendCurrentQueueTime time.Duration
	// RetryPartitions is the partition count of the retry and dead-letter topics the
	// consumer creates at Start when missing. Default 1.
	RetryPartitions int
	// ReplicationFactor of the topics the consumer creates. Default -1: the broker's
	// default.replication.factor.
	ReplicationFactor int
	// NoTopicCreation: the retry and dead-letter topics exist already (an operator made
	// them; the client may not create topics), so Start does not try. A missing one then
	// shows as failed copies of failed messages, whose offsets are not committed.
	NoTopicCreation bool
	// CommitInterval is how often finished offsets are committed while consuming (they
	// are also committed when a partition is revoked and at Shutdown). Default 1 s.
	CommitInterval time.Duration
	// StartOffset is where a partition without a committed offset starts:
	// kafkago.FirstOffset (default) or kafkago.LastOffset.
	StartOffset int64
	// FetchMaxWait is the longest a fetch waits for new records. Default 500 ms.
	FetchMaxWait time.Duration
	// FetchMaxBytes bounds one fetch response. Default 1 MiB.
	FetchMaxBytes int
	// Timeout bounds dials, coordinator calls and one retry or dead-letter send.
	// Default 5 s.
	Timeout time.Duration
	// HeartbeatInterval, SessionTimeout, RebalanceTimeout and JoinGroupBackoff are the
	// group settings (defaults 3 s, 30 s, 30 s, 1 s). The broker's
	// group.min.session.timeout.ms (6 s on Apache Kafka) bounds SessionTimeout.
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	JoinGroupBackoff  time.Duration
	// ControlHeaderKey, when set, authenticates Sluice's control headers (SLUICE_DUE_MS,
	// SLUICE_ORIGIN_*, SLUICE_RECONSUME_TIMES, …) outside the group's own retry and
	// dead-letter topics: records carrying them with a valid SLUICE_HMAC under this key
	// are honoured on any topic (e.g. copies a DelayForwarder with the same key forwarded,
	// keeping their first send time), and the consumer signs its own retry and
	// dead-letter copies. Without it (default), control headers on other topics are
	// ignored and counted (ForgedControlHeaders): any producer can set them.
	ControlHeaderKey []byte
	// Logger receives the consumer's log lines. Default slog.Default().
	Logger *slog.Logger
	// Middlewares wrap every handler given to Subscribe and SubscribeSQL, the first listed
	// outermost (middleware.ChainConsume), as consumer.Config.Middlewares does on the
	// RocketMQ push consumer.
	Middlewares []middleware.ConsumeMiddleware

	// retryForever (DelayForwarder): an orderly failure is retried until it succeeds.
	retryForever bool
}

// Retries returns a pointer to n, for Config.MaxReconsumeTimes.
func Retries(n int) *int { return &n }

func (c *Config) setDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	if c.ClientID == "" {
		c.ClientID = "sluice"
	}
	def(&c.ConsumeWorkers, DefaultConsumeWorkers)
	def(&c.MaxInFlight, DefaultMaxInFlight)
	def(&c.ConsumeMessageBatchMaxSize, 1)
	def(&c.RetryPartitions, 1)
	def(&c.ReplicationFactor, -1)
	def(&c.FetchMaxBytes, DefaultFetchMaxBytes)
	if len(c.RetrySchedule) == 0 {
		c.RetrySchedule = DefaultRetrySchedule()
	}
	defD(&c.SuspendCurrentQueueTime, DefaultSuspendTime)
	defD(&c.CommitInterval, DefaultCommitInterval)
	defD(&c.FetchMaxWait, DefaultFetchMaxWait)
	defD(&c.Timeout, DefaultTimeout)
	defD(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	defD(&c.SessionTimeout, DefaultSessionTimeout)
	defD(&c.RebalanceTimeout, DefaultRebalanceTimeout)
	defD(&c.JoinGroupBackoff, DefaultJoinGroupBackoff)
	if c.StartOffset == 0 {
		c.StartOffset = kafkago.FirstOffset
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration (after defaults) and returns a *config.Error naming
// the first wrong field.
func (c *Config) Validate() error {
	switch {
	case len(c.Brokers) == 0:
		return &config.Error{Package: "kafka", Field: "Brokers", Reason: "at least one bootstrap address is required"}
	case c.Group == "":
		return &config.Error{Package: "kafka", Field: "Group", Reason: "required"}
	case c.ConsumeWorkers < 0 || c.ConsumeWorkers > 1024:
		return &config.Error{Package: "kafka", Field: "ConsumeWorkers", Reason: fmt.Sprintf("%d is outside 1..1024", c.ConsumeWorkers)}
	case c.MaxInFlight < 0 || c.MaxInFlight > 1<<20:
		return &config.Error{Package: "kafka", Field: "MaxInFlight", Reason: fmt.Sprintf("%d is outside 1..1048576", c.MaxInFlight)}
	case c.ConsumeMessageBatchMaxSize < 0 || c.ConsumeMessageBatchMaxSize > 1024:
		return &config.Error{Package: "kafka", Field: "ConsumeMessageBatchMaxSize", Reason: fmt.Sprintf("%d is outside 1..1024", c.ConsumeMessageBatchMaxSize)}
	case c.MaxInFlight < c.ConsumeMessageBatchMaxSize:
		return &config.Error{Package: "kafka", Field: "MaxInFlight", Reason: fmt.Sprintf("%d is smaller than ConsumeMessageBatchMaxSize %d", c.MaxInFlight, c.ConsumeMessageBatchMaxSize)}
	case c.MaxReconsumeTimes != nil && *c.MaxReconsumeTimes < -1:
		return &config.Error{Package: "kafka", Field: "MaxReconsumeTimes", Reason: fmt.Sprintf("%d must be -1 (default), 0 (straight to the DLQ) or more", *c.MaxReconsumeTimes)}
	case c.RetryPartitions < 0 || c.ReplicationFactor < -1:
		return &config.Error{Package: "kafka", Field: "RetryPartitions/ReplicationFactor", Reason: "must be positive (ReplicationFactor may be -1)"}
	case c.StartOffset != kafkago.FirstOffset && c.StartOffset != kafkago.LastOffset:
		return &config.Error{Package: "kafka", Field: "StartOffset", Reason: fmt.Sprintf("%d is not kafkago.FirstOffset (-2) or kafkago.LastOffset (-1)", c.StartOffset)}
	case c.FetchMaxBytes < 0:
		return &config.Error{Package: "kafka", Field: "FetchMaxBytes", Reason: "must not be negative"}
	case c.HeartbeatInterval >= c.SessionTimeout && c.SessionTimeout > 0:
		return &config.Error{Package: "kafka", Field: "HeartbeatInterval", Reason: fmt.Sprintf("%v must be shorter than SessionTimeout %v (a third of it is usual)", c.HeartbeatInterval, c.SessionTimeout)}
	}
	if err := validateTopic("Group", DLQTopic(c.Group)); err != nil {
		return &config.Error{Package: "kafka", Field: "Group", Reason: err.Error()}
	}
	for name, d := range map[string]time.Duration{"SuspendCurrentQueueTime": c.SuspendCurrentQueueTime, "CommitInterval": c.CommitInterval,
		"FetchMaxWait": c.FetchMaxWait, "Timeout": c.Timeout, "HeartbeatInterval": c.HeartbeatInterval, "SessionTimeout": c.SessionTimeout,
		"RebalanceTimeout": c.RebalanceTimeout, "JoinGroupBackoff": c.JoinGroupBackoff} {
		if d < 0 {
			return &config.Error{Package: "kafka", Field: name, Reason: fmt.Sprintf("%v must not be negative", d)}
		}
	}
	for i, d := range c.RetrySchedule {
		if d < 0 {
			return &config.Error{Package: "kafka", Field: "RetrySchedule", Reason: fmt.Sprintf("attempt %d waits %v; must not be negative", i+1, d)}
		}
	}
	return nil
}

func (c *Config) maxReconsume() int {
	if c.MaxReconsumeTimes == nil || *c.MaxReconsumeTimes < 0 {
		return DefaultMaxReconsumeTimes
	}
	return *c.MaxReconsumeTimes
}

// subscription is what one topic is consumed with.
type subscription struct {
	topic   string
	tags    *filter.TagFilter
	sql     *filter.SQLFilter
	handler middleware.ConsumeFunc
	raw     func(ctx context.Context, r *Record) error // DelayForwarder: the record itself
}

func (s *subscription) match(m *message.MessageExt) bool {
	if s.sql != nil {
		return s.sql.Evaluate(m.Properties)
	}
	return s.tags.MatchTag(m.Tag())
}

// Consumer states.
const (
	stateNew = iota
	stateRunning
	stateClosed
)

// Consumer consumes Kafka topics in a consumer group and runs Sluice handlers on them
// (see the package doc). Subscribe first, then Start; Shutdown stops it. Its methods
// are safe for concurrent use.
type Consumer struct {
	cfg    Config
	log    *slog.Logger
	conns  *conns
	client *kafkago.Client
	tr     *kafkago.Transport // shared by client and writer
	writer *kafkago.Writer    // retry and dead-letter copies

	mu      sync.Mutex
	state   int
	subs    map[string]*subscription
	stopped bool           // no new partition work after Shutdown began
	work    sync.WaitGroup // partition loops that have not made their final commit

	cg            *kafkago.ConsumerGroup
	stopCtx       context.Context // cancelled by Shutdown: stop fetching
	stopFetch     context.CancelFunc
	handlerCtx    context.Context // cancelled when Shutdown's deadline passes
	handlerCancel context.CancelFunc
	runDone       chan struct{}
	shutdownDone  chan struct{}
	shutdownErr   error
	finalErrs     []error // final commits that failed during Shutdown (guarded by mu)
	forged        atomic.Int64
}

func (c *Consumer) noteShutdownErr(err error) {
	c.mu.Lock()
	c.finalErrs = append(c.finalErrs, err)
	c.mu.Unlock()
}

// NewConsumer validates cfg and returns a Consumer; it connects to nothing until Start.
func NewConsumer(cfg Config) (*Consumer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, log: cfg.Logger.With("group", cfg.Group), conns: newConns(cfg.Timeout), subs: map[string]*subscription{}}
	tr := c.conns.transport(cfg.ClientID)
	c.tr = tr
	c.client = &kafkago.Client{Addr: kafkago.TCP(cfg.Brokers...), Timeout: cfg.Timeout, Transport: tr}
	c.writer = &kafkago.Writer{Addr: kafkago.TCP(cfg.Brokers...), Balancer: kafkago.Murmur2Balancer{}, RequiredAcks: kafkago.RequireAll,
		BatchTimeout: time.Millisecond, WriteTimeout: cfg.Timeout, MaxAttempts: 1, Transport: tr}
	c.stopCtx, c.stopFetch = context.WithCancel(context.Background())
	c.handlerCtx, c.handlerCancel = context.WithCancel(context.Background())
	return c, nil
}

// Subscribe registers handler for the records of topic whose tag (header TAGS) matches
// tagExpr: "*" or "" for all, or "TagA || TagB" (filter.NewTagFilter). Records that do
// not match are skipped (and committed). One handler per topic; Config.Middlewares wrap
// it. Errors: a *message.ValidationError for a bad topic name, ErrStarted after Start,
// ErrClosed after Shutdown, a *config.Error for a nil handler or for a topic subscribed
// already.
func (c *Consumer) Subscribe(topic, tagExpr string, handler middleware.ConsumeFunc) error {
	return c.subscribe(&subscription{topic: topic, tags: filter.NewTagFilter(tagExpr), handler: handler})
}

// SubscribeSQL registers handler for the records of topic whose properties (headers)
// satisfy the SQL92 expression (filter.CompileSQL92), evaluated on the client: Kafka
// brokers filter nothing. Errors as Subscribe, plus a *filter.SQLSyntaxError.
func (c *Consumer) SubscribeSQL(topic, expr string, handler middleware.ConsumeFunc) error {
	f, err := filter.CompileSQL92(expr)
	if err != nil {
		return err
	}
	return c.subscribe(&subscription{topic: topic, sql: f, handler: handler})
}

func (c *Consumer) subscribe(s *subscription) error {
	if err := validateTopic("topic", s.topic); err != nil {
		return err
	}
	if s.handler == nil && s.raw == nil {
		return &config.Error{Package: "kafka", Field: "Subscribe handler", Reason: "must not be nil"}
	}
	if s.handler != nil {
		s.handler = middleware.ChainConsume(s.handler, c.cfg.Middlewares...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateRunning:
		return ErrStarted
	case stateClosed:
		return ErrClosed
	}
	if _, dup := c.subs[s.topic]; dup {
		// Replacing it would silently stop the first handler (one handler per topic, as
		// the RocketMQ push consumer, which refuses it the same way).
		return &config.Error{Package: "kafka", Field: "Subscribe", Reason: fmt.Sprintf("topic %q is already subscribed", s.topic)}
	}
	c.subs[s.topic] = s
	return nil
}

// retryTopics returns the retry topics the group consumes (none in orderly mode).
func (c *Consumer) retryTopics() []string {
	if c.cfg.Orderly {
		return nil
	}
	out := make([]string, len(c.cfg.RetrySchedule))
	for i := range out {
		out[i] = RetryTopic(c.cfg.Group, i+1)
	}
	return out
}

// Start checks that the subscribed topics exist, creates the group's retry and
// dead-letter topics when missing (unless NoTopicCreation; ctx bounds that), joins the
// group and starts consuming in the background. A second call on a started consumer
// does nothing. Errors: ErrClosed after Shutdown (or after a failed Start, which releases
// everything), a *config.Error without subscriptions or naming a subscribed topic the
// cluster does not have (Start creates no subscribed topic: their partition count is the
// application's choice), the metadata request's error, or the topic creation's error.
// Implements [transport.Consumer].
func (c *Consumer) Start(ctx context.Context) error {
	c.mu.Lock()
	switch c.state {
	case stateRunning:
		c.mu.Unlock()
		return nil
	case stateClosed:
		c.mu.Unlock()
		return ErrClosed
	}
	if len(c.subs) == 0 {
		c.mu.Unlock()
		return &config.Error{Package: "kafka", Field: "Start", Reason: "subscribe to at least one topic first"}
	}
	c.state = stateRunning
	c.mu.Unlock()
	if err := c.checkSubscribed(ctx); err != nil {
		c.abandon()
		return err
	}
	retry := c.retryTopics()
	if !c.cfg.NoTopicCreation {
		if err := EnsureTopics(ctx, c.client, c.cfg.RetryPartitions, c.cfg.ReplicationFactor, append(retry, DLQTopic(c.cfg.Group))...); err != nil {
			c.abandon()
			return err
		}
	}
	topics := make([]string, 0, len(c.subs)+len(retry))
	for t := range c.subs {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	topics = append(topics, retry...)
	cg, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{
		ID:      c.cfg.Group,
		Brokers: c.cfg.Brokers,
		Dialer:  c.conns.dialer(c.cfg.ClientID),
		Topics:  topics,
		// Partitions added to a topic while the group runs start being consumed within
		// PartitionWatchInterval (kafka-go's 5 s): the watcher ends the generation and
		// the group rebalances. Without it they would wait for the next rebalance.
		WatchPartitionChanges: true,
		GroupBalancers:        []kafkago.GroupBalancer{kafkago.RoundRobinGroupBalancer{}, kafkago.RangeGroupBalancer{}},
		HeartbeatInterval:     c.cfg.HeartbeatInterval,
		SessionTimeout:        c.cfg.SessionTimeout,
		RebalanceTimeout:      c.cfg.RebalanceTimeout,
		JoinGroupBackoff:      c.cfg.JoinGroupBackoff,
		StartOffset:           c.cfg.StartOffset,
		Timeout:               c.cfg.Timeout,
		ErrorLogger:           kafkago.LoggerFunc(func(f string, a ...any) { c.log.Debug("kafka-go: " + fmt.Sprintf(f, a...)) }),
	})
	if err != nil {
		c.abandon()
		return &config.Error{Package: "kafka", Field: "consumer group", Reason: err.Error()}
	}
	c.cg = cg
	c.runDone = make(chan struct{})
	go c.run()
	return nil
}

// checkSubscribed returns a *config.Error naming the subscribed topics the cluster does
// not have. kafka-go's group leader reads the partitions of all the group's topics in
// one request and, when one of them is missing, assigns nothing at all — not even the
// topics that exist — and nothing rebalances when the topic appears later: the consumer
// would sit idle without a word.
func (c *Consumer) checkSubscribed(ctx context.Context) error {
	c.mu.Lock()
	topics := make([]string, 0, len(c.subs))
	for t := range c.subs {
		topics = append(topics, t)
	}
	c.mu.Unlock()
	sort.Strings(topics)
	var missing []string
	for _, t := range topics {
		if _, err := partitionsOf(ctx, c.client, t); err != nil {
			if !errors.Is(err, kafkago.UnknownTopicOrPartition) {
				return fmt.Errorf("kafka: start: %w", err)
			}
			missing = append(missing, strconv.Quote(t))
		}
	}
	if len(missing) > 0 {
		return &config.Error{Package: "kafka", Field: "Subscribe", Reason: "topic " + strings.Join(missing, ", ") + " does not exist on the cluster; create it first (EnsureTopicsAt)"}
	}
	return nil
}

// abandon releases what a failed Start made.
func (c *Consumer) abandon() {
	c.mu.Lock()
	c.state = stateClosed
	c.stopped = true
	c.mu.Unlock()
	c.stopFetch()
	c.handlerCancel()
	_ = c.writer.Close()
	c.tr.CloseIdleConnections()
	c.conns.cut()
}

// run takes generation after generation from the group until it is closed.
func (c *Consumer) run() {
	defer close(c.runDone)
	for {
		gen, err := c.cg.Next(context.Background())
		if err != nil {
			if errors.Is(err, kafkago.ErrGroupClosed) {
				return
			}
			c.log.Warn("kafka: consumer group generation failed; rejoining", "err", err)
			continue
		}
		c.startGeneration(gen)
	}
}

// genCommitter serialises the commits of one generation (they share its coordinator
// connection).
type genCommitter struct {
	gen *kafkago.Generation
	mu  sync.Mutex
}

func (g *genCommitter) commit(topic string, partition int, offset int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen.CommitOffsets(map[string]map[int]int64{topic: {partition: offset}})
}

func (c *Consumer) startGeneration(gen *kafkago.Generation) {
	type assigned struct {
		topic string
		pa    kafkago.PartitionAssignment
	}
	var parts []assigned
	for topic, pas := range gen.Assignments {
		for _, pa := range pas {
			parts = append(parts, assigned{topic, pa})
		}
	}
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.work.Add(len(parts))
	c.mu.Unlock()
	c.log.Info("kafka: generation joined", "generation", gen.ID, "member", gen.MemberID, "partitions", len(parts))
	gc := &genCommitter{gen: gen}
	for _, a := range parts {
		gen.Start(func(genCtx context.Context) {
			c.partitionLoop(genCtx, gc, a.topic, a.pa)
		})
	}
}

// Shutdown stops the consumer: it stops fetching, lets handlers in flight finish,
// commits the finished offsets of every owned partition, leaves the group and closes
// its connections. When ctx ends first, handlers' contexts are cancelled and every
// connection is cut, so the rest ends at once (unfinished offsets are not committed:
// their messages come again); it then returns ctx's error wrapped. Final commits that
// failed (cluster unreachable) are returned too, joined: their messages come again. A
// handler that ignores its context keeps its goroutine. Calling Shutdown again waits
// for the first call and returns its result.
func (c *Consumer) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.state == stateNew:
		c.state = stateClosed
		c.mu.Unlock()
		c.abandon()
		return nil
	case c.shutdownDone != nil:
		done := c.shutdownDone
		c.mu.Unlock()
		select {
		case <-done:
			return c.shutdownErr
		case <-ctx.Done():
			return fmt.Errorf("kafka: consumer shutdown: %w", ctx.Err())
		}
	}
	c.shutdownDone = make(chan struct{})
	c.stopped = true
	c.state = stateClosed
	cg, runDone := c.cg, c.runDone
	c.mu.Unlock()

	c.stopFetch() // 1. stop fetching
	finished := make(chan struct{})
	go func() {
		c.work.Wait() // 2. handlers finish, final commits made
		if cg != nil {
			_ = cg.Close() // 3. end the generation, leave the group
			<-runDone
		}
		_ = c.writer.Close()
		// Last, so a pool a late fetch or copy opened after a deadline cut is closed too.
		c.tr.CloseIdleConnections()
		close(finished)
	}()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		c.handlerCancel()
		c.conns.cut()
		err = fmt.Errorf("kafka: consumer shutdown: %w", ctx.Err())
		c.log.Warn("kafka: shutdown deadline passed; connections cut, unfinished offsets not committed")
	}
	c.handlerCancel()
	c.tr.CloseIdleConnections()
	c.conns.cut()
	c.mu.Lock()
	err = errors.Join(append([]error{err}, c.finalErrs...)...)
	c.mu.Unlock()
	c.shutdownErr = err
	close(c.shutdownDone)
	return err
}
