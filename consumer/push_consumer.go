// Package consumer is Sluice's RocketMQ 4.x consumer SDK.
//
// [PushConsumer] joins a consumer group and pushes messages to handlers. In clustering
// mode it shares the group's message queues with the other members (rebalance,
// AllocateByAveragely), long-polls each assigned queue with PULL_MESSAGE, and stores
// offsets on the brokers; in broadcasting mode it reads every queue and keeps offsets
// in a local file. Concurrent consumption runs handlers on a worker pool and sends
// failed messages back for redelivery through %RETRY%<group> (then %DLQ%<group>);
// orderly consumption locks its queues on the broker and runs one handler call at a
// time per queue, retrying a failed batch locally. Committed offsets never pass a
// message that has not finished.
//
// [PullConsumer] pulls explicit queues from explicit offsets and commits offsets only
// when asked.
//
// Every consumer owns its own connections and goroutines (no process-wide client
// table, no global logger); Shutdown releases all of them.
//
// A delivered message's Body is a slice of the pull response it arrived in (no copy per
// message; its capacity is clipped, so appending to it copies). A handler that keeps a
// message, or its Body, after returning keeps that whole response in memory (up to
// PullBatchSize messages); copy the Body (bytes.Clone) to keep it alone.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
	"github.com/sluicemq/sluice/transport"
)

var _ transport.Consumer = (*PushConsumer)(nil)

var (
	// ErrClosed is returned by Start and Subscribe after Shutdown; it matches
	// transport.ErrClosed.
	ErrClosed = fmt.Errorf("consumer: %w", transport.ErrClosed)
	// ErrStarted is returned by Subscribe after Start (subscriptions are fixed at Start);
	// it matches transport.ErrStarted.
	ErrStarted = fmt.Errorf("consumer: %w", transport.ErrStarted)
	// ErrNoSubscription is returned by Start when Subscribe was never called.
	ErrNoSubscription = errors.New("consumer: no subscription")
)

type state int

const (
	stateNew state = iota
	stateStarted
	stateClosed
)

// subscription is one subscribed topic.
type subscription struct {
	topic   string
	tags    map[string]bool // nil = all tags ("*")
	data    wire.SubscriptionData
	handler middleware.ConsumeFunc // Config.Middlewares around the user's handler; nil for the retry topic
}

// consumeRequest is a batch of messages of one process queue for one handler call.
type consumeRequest struct {
	pq    *processQueue
	msgs  []*message.MessageExt
	topic string // the (restored) topic whose subscription handles the batch
}

// pendingReset is a RESET_CONSUMER_CLIENT_OFFSET waiting for the rebalance goroutine.
type pendingReset struct {
	topic string
	table map[message.MessageQueue]int64
}

// consumeBacklog is how many handler batches may wait for a free worker (all queues
// together) before pull loops block; per queue, flow control (PullThresholdForQueue,
// PullThresholdSizeForQueue) pauses pulling first.
const consumeBacklog = 1024

// PushConsumer consumes the messages of its subscriptions and hands them to handlers.
// Create it with NewPushConsumer, Subscribe, Start, and Shutdown when done.
//
// Delivery is at least once: a message is redelivered when its handler fails
// (concurrent clustering: through %RETRY%<group> after the broker's delay for 3 +
// reconsume count; orderly: locally after SuspendCurrentQueueTime), and messages past
// the last committed offset may come again after a rebalance or a crash.
//
// Lock order: persistMu, then PushConsumer.mu, then processQueue.mu; lockMu, then
// PushConsumer.mu. No lock but persistMu and lockMu is held during network I/O.
type PushConsumer struct {
	cfg        Config
	log        *slog.Logger
	cl         *client.Client
	broker     *brokerAPI
	offsets    offsetStore // set by Start
	retryTopic string      // "" in broadcasting mode

	persistMu sync.Mutex // serializes offset writes: periodic persist, dropped and reset queues

	// lockMu orders this consumer's LOCK_BATCH_MQ and UNLOCK_BATCH_MQ requests (see
	// lockQueuesLocked); locksClosed, under it, is set when Shutdown unlocks: no lock is
	// asked for after that.
	lockMu      sync.Mutex
	locksClosed bool

	mu       sync.Mutex
	state    state
	subs     map[string]*subscription // topic → subscription, including the retry topic
	pqs      map[message.MessageQueue]*processQueue
	draining map[message.MessageQueue]chan struct{} // orderly queues being released; closed when done
	resets   []pendingReset

	ctx    context.Context // rebalance, persist, pull loops, retry timers; cancelled by Shutdown
	cancel context.CancelFunc
	loops  sync.WaitGroup // goroutines started with spawn; never run handlers

	consumeCh     chan *consumeRequest
	workersStop   chan struct{}   // closed when Shutdown begins, under mu; no handler starts after
	workers       sync.WaitGroup  // goroutines that run handlers (spawnWorker); Shutdown waits up to its deadline
	orderSem      chan struct{}   // orderly: one token per running handler call (ConsumeGoroutines)
	handlerCtx    context.Context // given to handlers; cancelled when Shutdown gives up waiting
	handlerCancel context.CancelFunc

	rebalanceKick chan struct{} // buffered 1

	startStamp msStamp // CONSUME_START_TIME strings (run)

	consistencyLast string // rebalance goroutine only: the last logged subscription differences
}

// NewPushConsumer returns a consumer for cfg (defaults applied). It opens no connection
// or file before Start. It fails with an error naming the field when cfg is invalid.
func NewPushConsumer(cfg Config) (*PushConsumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	c := &PushConsumer{
		cfg:           cfg,
		log:           cfg.Logger,
		subs:          make(map[string]*subscription),
		pqs:           make(map[message.MessageQueue]*processQueue),
		draining:      make(map[message.MessageQueue]chan struct{}),
		consumeCh:     make(chan *consumeRequest, consumeBacklog),
		workersStop:   make(chan struct{}),
		orderSem:      make(chan struct{}, cfg.ConsumeGoroutines),
		rebalanceKick: make(chan struct{}, 1),
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.handlerCtx, c.handlerCancel = context.WithCancel(context.Background())
	cl, err := client.New(client.Config{
		NamesrvAddrs:         cfg.NamesrvAddrs,
		InstanceName:         cfg.InstanceName,
		Logger:               cfg.Logger,
		Credentials:          cfg.Credentials,
		TLS:                  cfg.TLS,
		SerializeType:        client.HeaderEncoding(cfg.JSONHeaders),
		RouteRefreshInterval: cfg.routeRefreshInterval,
		HeartbeatInterval:    cfg.HeartbeatInterval,
		Heartbeat:            c.heartbeatData,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c.cl = cl
	c.broker = &brokerAPI{cl: cl, group: cfg.Group, maxBody: cfg.MaxDecompressedSize}
	if cfg.MessageModel == Clustering {
		// The retry topic is subscribed automatically in clustering mode (docs/protocol.md §3.6).
		c.retryTopic = message.RetryTopic(cfg.Group)
		c.subs[c.retryTopic] = &subscription{topic: c.retryTopic, data: wire.NewTagSubscription(c.retryTopic, message.SubscribeAll, time.Now().UnixNano())}
	}
	return c, nil
}

// ClientID returns the id this consumer is known by in its group ("<ip>@<instance>").
func (c *PushConsumer) ClientID() string { return c.cl.ClientID() }

// Subscribe registers handler for the messages of topic whose tag matches tagExpr: "*"
// (or "") for all, or "TagA || TagB" (parsed with message.ParseTagExpression; tags match
// exactly, and are re-checked on the client because brokers filter by hash code).
// Config.Middlewares wrap handler. Retried messages of topic arrive at the same handler,
// with Topic restored from %RETRY%<group> and ReconsumeTimes counting the redeliveries.
// Errors: a *message.ValidationError for a bad topic or tag, an error for a nil handler
// or a topic subscribed twice, ErrStarted after Start, ErrClosed after Shutdown.
func (c *PushConsumer) Subscribe(topic, tagExpr string, handler middleware.ConsumeFunc) error {
	if err := message.ValidateTopic(topic); err != nil {
		return err
	}
	if message.IsRetryTopic(topic) || message.IsDLQTopic(topic) {
		return &message.ValidationError{Field: "topic", Reason: fmt.Sprintf("%q is a retry or DLQ topic; retries of a group are consumed automatically", topic)}
	}
	tags := message.ParseTagExpression(tagExpr)
	for _, t := range tags {
		if err := message.ValidateTag(t); err != nil {
			return err
		}
	}
	if handler == nil {
		return errors.New("consumer: Subscribe: handler is nil")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateStarted:
		return ErrStarted
	case stateClosed:
		return ErrClosed
	}
	if _, dup := c.subs[topic]; dup {
		return fmt.Errorf("consumer: topic %q is already subscribed", topic)
	}
	s := &subscription{
		topic:   topic,
		data:    wire.NewTagSubscription(topic, tagExpr, time.Now().UnixNano()),
		handler: middleware.ChainConsume(handler, c.cfg.Middlewares...),
	}
	if tags != nil {
		s.tags = make(map[string]bool, len(tags))
		for _, t := range tags {
			s.tags[t] = true
		}
	}
	c.subs[topic] = s
	return nil
}

// heartbeatData builds the HEART_BEAT body (docs/protocol.md §3.6): one consumer data with all
// subscriptions, sorted by topic, the retry topic included in clustering mode.
func (c *PushConsumer) heartbeatData() wire.HeartbeatData {
	return wire.HeartbeatData{ConsumerDataSet: []wire.ConsumerData{{
		GroupName:           c.cfg.Group,
		ConsumeType:         wire.ConsumeTypePassively,
		MessageModel:        c.cfg.MessageModel.String(),
		ConsumeFromWhere:    c.cfg.ConsumeFromWhere.String(),
		SubscriptionDataSet: c.subscriptionData(),
	}}}
}

func (c *PushConsumer) subscriptionData() []wire.SubscriptionData {
	c.mu.Lock()
	subs := make([]wire.SubscriptionData, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s.data)
	}
	c.mu.Unlock()
	sort.Slice(subs, func(i, j int) bool { return subs[i].Topic < subs[j].Topic })
	return subs
}

// spawn runs f in a goroutine counted by c.loops; false once Shutdown has begun. f must
// not run handlers.
func (c *PushConsumer) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return false
	}
	c.loops.Add(1)
	go func() {
		defer c.loops.Done()
		f()
	}()
	return true
}

// spawnWorker runs f, which may run handlers, in a goroutine counted by c.workers; false
// once Shutdown has begun.
func (c *PushConsumer) spawnWorker(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return false
	}
	c.workers.Add(1)
	go func() {
		defer c.workers.Done()
		f()
	}()
	return true
}

// orderlyLocks reports whether this consumer locks its queues on the broker (orderly
// clustering; broadcasting consumers own every queue anyway).
func (c *PushConsumer) orderlyLocks() bool {
	return c.cfg.Orderly && c.cfg.MessageModel == Clustering
}

// Start opens the offset store (broadcasting: the local file), looks up the routes of
// the subscribed topics, sends HEART_BEAT to their brokers, starts the handler
// goroutines, and starts rebalancing (at once, then every RebalanceInterval and on
// NOTIFY_CONSUMER_IDS_CHANGED), offset persistence (every PersistOffsetInterval) and,
// for orderly clustering consumers, lock renewal. Topics without a route yet are
// logged and picked up by a later rebalance. Errors: ErrNoSubscription, ErrClosed,
// ErrOffsetFileInUse and offset-file errors, ErrSubscriptionRefused when a broker
// refused a subscription in that heartbeat (the consumer is then shut down; see
// SubscribeSQL). ctx bounds the first route lookups and heartbeat (the consumer then
// runs until Shutdown). A second call does nothing. Implements [transport.Consumer].
func (c *PushConsumer) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("consumer: start: %w", err)
	}
	c.mu.Lock()
	need := 1
	if c.retryTopic != "" {
		need = 2 // the retry topic alone is no subscription
	}
	switch {
	case c.state == stateClosed:
		c.mu.Unlock()
		return ErrClosed
	case c.state == stateStarted:
		c.mu.Unlock()
		return nil
	case len(c.subs) < need:
		c.mu.Unlock()
		return ErrNoSubscription
	}
	if c.cfg.MessageModel == Broadcasting {
		path, err := offsetFilePath(c.cfg.OffsetStoreDir, c.cfg.Group, c.cfg.InstanceName)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		lo, err := openLocalOffsets(path)
		if err != nil {
			c.mu.Unlock()
			return err
		}
		c.offsets = lo
	} else {
		c.offsets = remoteOffsets{c.broker}
	}
	c.state = stateStarted
	topics := c.topicsLocked()
	// Workers start under the lock, so a concurrent Shutdown sees all of them.
	if !c.cfg.Orderly {
		for i := 0; i < c.cfg.ConsumeGoroutines; i++ {
			c.workers.Add(1)
			go c.worker()
		}
	}
	c.mu.Unlock()

	c.cl.RegisterHandler(remoting.NotifyConsumerIDsChanged, func(ctx context.Context, addr string, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		c.log.Debug("consumer: consumer ids changed", "group", c.cfg.Group, "broker", addr)
		c.kickRebalance()
		return nil
	})
	c.cl.RegisterHandler(remoting.ResetConsumerClientOffset, c.handleResetOffset)
	if err := c.cl.Start(); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	// Routes of the subscribed topics first: they name the brokers the heartbeat goes to.
	// The retry topic usually appears only after that heartbeat (the broker creates it),
	// so a rebalance picks it up later.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)() // Shutdown ends Start's waits too
	for _, t := range topics {
		if _, err := c.cl.Route(sctx, t); err != nil {
			level := slog.LevelWarn
			if errors.Is(err, client.ErrTopicNotExist) {
				level = slog.LevelDebug
			}
			c.log.Log(sctx, level, "consumer: no route yet", "topic", t, "err", err)
		}
	}
	if err := c.cl.SendHeartbeat(sctx); err != nil {
		if refused := c.refusedAtStart(err); refused != nil { // selector.go
			return refused
		}
		c.log.Warn("consumer: heartbeat failed", "err", err)
	}
	c.spawn(c.rebalanceLoop)
	c.spawn(c.persistLoop)
	if c.orderlyLocks() {
		c.spawn(c.lockLoop)
	}
	return nil
}

func (c *PushConsumer) topicsLocked() []string {
	out := make([]string, 0, len(c.subs))
	for t := range c.subs {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (c *PushConsumer) kickRebalance() {
	select {
	case c.rebalanceKick <- struct{}{}:
	default:
	}
}

// sleep waits d or until ctx is done; false if ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (c *PushConsumer) persistLoop() {
	t := time.NewTicker(c.cfg.PersistOffsetInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			// A persist cut short by Shutdown is not worth a warning: Shutdown persists
			// the final offsets itself and reports its own failure.
			if err := c.persistOffsets(c.ctx); err != nil && c.ctx.Err() == nil {
				c.log.Warn("consumer: persisting offsets failed", "err", err)
			}
		}
	}
}

// persistOffsets stores the committable offset of every assigned queue (the lowest
// unfinished message) and flushes the store. Dropped queues are skipped: whoever
// dropped them stores their final offset.
func (c *PushConsumer) persistOffsets(ctx context.Context) error {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	pqs := make([]*processQueue, 0, len(c.pqs))
	for _, pq := range c.pqs {
		pqs = append(pqs, pq)
	}
	c.mu.Unlock()
	var errs []error
	for _, pq := range pqs {
		if pq.dropped.Load() {
			continue
		}
		if off := pq.commitOffset(); off >= 0 {
			if err := c.offsets.update(ctx, pq.mq, off); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := c.offsets.flush(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Shutdown stops the consumer: no more pulls or rebalances; handlers already running may
// finish until ctx is done (then their context is cancelled); the offsets of all
// assigned queues are stored — never past a message that has not finished —; orderly
// queues are unlocked on their brokers (UNLOCK_BATCH_MQ, RocketMQ request code 42);
// UNREGISTER_CLIENT (35) goes to the brokers; connections and the offset file are
// released. It returns ctx's error if handlers were still running, joined with
// persist, unlock and unregister failures. A handler that ignores its context keeps its
// goroutine until it returns. Idempotent.
//
// Stop order: refuse new work and stop starting handlers (workers and orderly loops
// check this before every handler call, so none starts once Shutdown is called) → stop rebalance, persist, lock and pull loops and
// local-retry timers → stop workers and orderly consume loops and wait for running
// handlers (bounded by ctx) → store offsets → unlock orderly queues → unregister →
// close connections.
func (c *PushConsumer) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		return nil
	}
	wasStarted := c.state == stateStarted
	c.state = stateClosed
	close(c.workersStop) // first: from here on no handler starts (worker, orderlyLoop)
	c.mu.Unlock()

	c.cancel()
	if !wasStarted {
		c.loops.Wait()
		c.handlerCancel()
		return c.cl.Close()
	}
	// The deadline covers the whole stop: handlers still running when ctx ends are
	// cancelled then, even while the loops are still stopping.
	stopCancel := context.AfterFunc(ctx, c.handlerCancel)
	defer stopCancel()
	done := make(chan struct{})
	go func() { c.workers.Wait(); close(done) }()
	c.loops.Wait()
	var errs []error
	handlersDone := true
	select {
	case <-done: // finished wins over the deadline when both are ready
	default:
		select {
		case <-done:
		case <-ctx.Done():
			handlersDone = false
			c.handlerCancel()
			errs = append(errs, fmt.Errorf("consumer: handlers still running at shutdown: %w", ctx.Err()))
		}
	}
	// Persist, unlock and unregister even when ctx has expired: with a short budget of
	// their own.
	octx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		octx, cancel = context.WithTimeout(context.Background(), client.DefaultBrokerTimeout)
		defer cancel()
	}
	if err := c.persistOffsets(octx); err != nil {
		errs = append(errs, fmt.Errorf("consumer: persist offsets: %w", err))
	}
	if c.orderlyLocks() {
		if err := c.unlockAll(octx); err != nil {
			errs = append(errs, fmt.Errorf("consumer: unlock queues: %w", err))
		}
	}
	if err := c.cl.Unregister(octx, "", c.cfg.Group); err != nil {
		errs = append(errs, fmt.Errorf("consumer: %w", err))
	}
	c.handlerCancel()
	_ = c.cl.Close()
	c.offsets.close()
	if handlersDone {
		<-done
	}
	return errors.Join(errs...)
}
