// Package producer is Sluice's RocketMQ 4.x producer. It looks up topic routes on the
// name servers (falling back to TBW102 so the broker auto-creates a new topic), picks a
// message queue with a MessageQueueSelector (round-robin by default, hash of a sharding
// key for ordered sends, or a queue the caller chooses) and sends with SEND_MESSAGE_V2
// (RocketMQ request code 310) or SEND_BATCH_MESSAGE (320).
//
// A Producer implements [transport.Producer] (Start, Send, SendAsync, SendFunc,
// Shutdown), the shape the Kafka producer shares; the RocketMQ-only forms take
// SendOptions. Send modes:
//   - Send (SendSync with options) waits for the broker; it retries
//     RetryTimesWhenSendFailed more times (default 2), each on another broker when there
//     is one.
//   - SendAsync (SendAsyncWith with options) returns at once and delivers the result to a
//     callback (SendAsyncChan: a channel); it retries RetryTimesWhenSendAsyncFailed times
//     on the same queue. With Config.AutoBatch, async sends bound for one queue while
//     its previous request is in flight (or within Config.AutoBatchLinger) leave
//     together as one SEND_BATCH_MESSAGE, each still with its own callback and
//     SendResult (docs/performance.md "Automatic batching of async sends").
//   - SendOneway sends with the RocketMQ ONEWAY flag and waits for nothing; no retry.
//   - SendBatch sends several messages of one topic in one request (see SplitBatch).
//
// Delayed messages: set a delay level with message.SetDelayLevel (1..18 with the
// broker's default messageDelayLevel table 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m
// 20m 30m 1h 2h; 0 or less means none; a level above the broker's maximum is clamped by
// the broker).
//
// Latency fault tolerance (on by default) makes the round-robin selector avoid a broker
// whose last attempt failed or was slow, for a window that grows with the latency
// (Config.LatencyFaultRules).
//
// Every Producer owns its own connections and goroutines (no process-wide client table);
// Shutdown releases all of them.
package producer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
	"github.com/sluicemq/sluice/transport"
)

var _ transport.Producer = (*Producer)(nil)

type state int

const (
	stateNew state = iota
	stateStarted
	stateClosed
)

// Producer sends messages to RocketMQ-protocol brokers. Create it with New, call Start,
// send, and Shutdown when done. Safe for concurrent use.
type Producer struct {
	cfg     Config
	cl      *client.Client
	fault   *latencyFault // nil when SendLatencyFaultEnable is false
	limiter *asyncLimiter
	batcher *batcher // nil unless Config.AutoBatch

	mu       sync.Mutex
	state    state
	inflight sync.WaitGroup // sends in progress (async ones until their callback returned); Add only under mu while started
	closing  chan struct{}  // closed by Shutdown: wakes SendAsync calls waiting for room

	queues sync.Map // topic → *topicQueues, the queue list of the route last seen

	refreshedAt    sync.Map     // topic → *atomic.Int64: unix ns of the last route refresh after a failed attempt
	routeRefreshes atomic.Int64 // route refreshes after failed attempts (tests)
}

// routeRefreshSpacing is the least time between two route refreshes of one topic that
// failed send attempts trigger.
const routeRefreshSpacing = time.Second

// topicQueues caches the publish queues computed from one route value.
type topicQueues struct {
	route  *wire.TopicRouteData
	queues []message.MessageQueue
}

// New returns a producer for cfg (defaults applied). It opens no connection until Start
// and a send. It fails with an error naming the field when cfg is invalid.
func New(cfg Config) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if cfg.Selector == nil {
		cfg.Selector = RoundRobinSelector()
	}
	p := &Producer{cfg: cfg, closing: make(chan struct{}), limiter: newAsyncLimiter(cfg.MaxAsyncInflight, cfg.MaxAsyncInflightBytes)}
	if cfg.AutoBatch {
		p.batcher = newBatcher(p)
	}
	if *cfg.SendLatencyFaultEnable {
		p.fault = newLatencyFault(cfg.LatencyFaultRules, cfg.FaultIsolationDuration)
	}
	cl, err := client.New(client.Config{
		NamesrvAddrs:         cfg.NamesrvAddrs,
		InstanceName:         cfg.InstanceName,
		Logger:               cfg.Logger,
		Credentials:          cfg.Credentials,
		TLS:                  cfg.TLS,
		SerializeType:        client.HeaderEncoding(cfg.JSONHeaders),
		RouteRefreshInterval: cfg.routeRefreshInterval,
		HeartbeatInterval:    cfg.heartbeatInterval,
		Heartbeat: func() wire.HeartbeatData {
			return wire.HeartbeatData{ProducerDataSet: []wire.ProducerData{{GroupName: cfg.Group}}}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	p.cl = cl
	return p, nil
}

// Start starts route refresh (every 30 s) and heartbeats (every 30 s, and at once to a
// broker first seen in a route); it contacts no broker itself, so ctx only refuses a
// start when it has already ended. A second call does nothing; after Shutdown it returns
// ErrClosed. Implements [transport.Producer].
func (p *Producer) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("producer: start: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case stateClosed:
		return ErrClosed
	case stateStarted:
		return nil
	}
	if err := p.cl.Start(); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	p.state = stateStarted
	return nil
}

// ClientID returns the client id this producer sends in heartbeats ("<ip>@<instance>").
func (p *Producer) ClientID() string { return p.cl.ClientID() }

// SendOption changes one send: which selector picks its message queue, whether
// Config.Middlewares run.
type SendOption func(*sendOptions)

type sendOptions struct {
	selector      MessageQueueSelector
	noMiddlewares bool
}

// WithoutMiddlewares makes one send skip Config.Middlewares: the message goes to the
// broker as given. SendBatch needs it when Config.Middlewares is set (see
// [MiddlewareError]); on other sends it is the caller's explicit choice to bypass the
// chain (for example a resend that the chain already handled).
func WithoutMiddlewares() SendOption {
	return func(o *sendOptions) { o.noMiddlewares = true }
}

// WithSelector makes one send pick its queue with s instead of Config.Selector (nil
// keeps Config.Selector). Example: WithSelector(HashSelector()) for an ordered send.
func WithSelector(s MessageQueueSelector) SendOption {
	return func(o *sendOptions) {
		if s != nil {
			o.selector = s
		}
	}
}

// WithQueue sends to the message queue mq, the caller's choice: WithSelector(ManualSelector(mq)).
func WithQueue(mq message.MessageQueue) SendOption { return WithSelector(ManualSelector(mq)) }

// options applies opts over the producer's defaults.
func (p *Producer) options(opts []SendOption) sendOptions {
	if len(opts) == 0 { // the common case: no options, nothing escapes
		return sendOptions{selector: p.cfg.Selector}
	}
	o := &sendOptions{selector: p.cfg.Selector}
	for _, f := range opts {
		if f != nil {
			f(o)
		}
	}
	return *o
}

// middlewares returns the chain a send with options o runs: none with
// WithoutMiddlewares.
func (p *Producer) middlewares(o sendOptions) []middleware.SendMiddleware {
	if o.noMiddlewares {
		return nil
	}
	return p.cfg.Middlewares
}

// mode is a send mode's retry policy.
type mode int

const (
	modeSync  mode = iota // retries on another broker; RetryAnotherBrokerWhenNotStoreOK applies
	modeAsync             // retries on the same queue
)

// chain runs the send's middlewares around the raw send of msg in mode m.
func (p *Producer) chain(ctx context.Context, msg *message.Message, o sendOptions, m mode) (*message.SendResult, error) {
	mws := p.middlewares(o)
	if len(mws) == 0 {
		return p.rawSend(ctx, msg, o.selector, m)
	}
	raw := func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		return p.rawSend(ctx, msg, o.selector, m)
	}
	return middleware.ChainSend(raw, mws...)(ctx, msg)
}

// SendSync sends msg and waits for the broker's answer, running Config.Middlewares
// around the send (unless WithoutMiddlewares). It sets property UNIQ_KEY on msg when missing (the SendResult's
// MsgID). The queue comes from Config.Selector or the WithSelector / WithQueue option.
// A failed attempt (transport error or response code 1, 2, 14, 16, 17) is retried up to
// RetryTimesWhenSendFailed times, on another broker when the round-robin selector has
// one; ctx bounds the whole send, SendTimeout each attempt.
//
// Errors: a *message.ValidationError before any network traffic for a message that
// breaks the rules (topic, tag, empty body, size over MaxMessageSize, a system topic, a
// hash send without sharding key); a *SendError when no attempt stored the message
// (errors.Is(err, ErrTopicNotExist) when the topic has no route and cannot be
// auto-created); ErrNotStarted / ErrClosed. A nil error means the broker stored the
// message; Status tells whether flushing or replication timed out.
func (p *Producer) SendSync(ctx context.Context, msg *message.Message, opts ...SendOption) (*message.SendResult, error) {
	return p.chain(ctx, msg, p.options(opts), modeSync)
}

// Send is SendSync without options: the send of [transport.Producer].
func (p *Producer) Send(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
	return p.chain(ctx, msg, p.options(nil), modeSync)
}

// SendFunc returns Send as a middleware.SendFunc (Config.Middlewares included), for code
// that wraps producers generically.
func (p *Producer) SendFunc() middleware.SendFunc { return p.Send }

// enter registers a send in progress; the caller must call p.inflight.Done.
func (p *Producer) enter() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case stateNew:
		return ErrNotStarted
	case stateClosed:
		return ErrClosed
	}
	p.inflight.Add(1)
	return nil
}

// isClosing reports whether Shutdown has begun.
func (p *Producer) isClosing() bool {
	select {
	case <-p.closing:
		return true
	default:
		return false
	}
}

// prepared is a request ready for attempts: header without queue, body, client ids.
type prepared struct {
	code   remoting.RequestCode
	header wire.SendHeader
	body   []byte
	msgID  string           // UNIQ_KEY(s), comma-joined for a batch
	selMsg *message.Message // what the selector sees (a batch: its first message)

	// req and ext hold the current attempt's request, built in place by request, and op
	// is SendAsync's state: one object carries a send from validation to its result.
	// A single message's prepared comes from preparedPool and goes back (release) once
	// its send is over, so that a send allocates none of them (about 1 KiB) afresh.
	req remoting.RemotingCommand
	ext [wire.SendHeaderFields]remoting.ExtField
	op  asyncOp
	// answered is op.answered, the callback of SendAsync's attempts: made once, kept
	// across release (it refers to this prepared's op, whatever send it carries).
	answered func(*remoting.RemotingCommand, error)
}

// preparedPool recycles the prepared sends of single messages (prepareSingle, release).
var preparedPool = sync.Pool{New: func() any { return new(prepared) }}

// release gives pr back to preparedPool. The caller must be done with it: its send has
// its result, and no attempt of it is still waiting for an answer.
func (pr *prepared) release() {
	*pr = prepared{answered: pr.answered}
	preparedPool.Put(pr)
}

// checkMessage validates msg for a single send.
func (p *Producer) checkMessage(msg *message.Message) error {
	if err := message.Validate(msg, p.cfg.MaxMessageSize); err != nil {
		return err
	}
	if message.IsSendForbiddenTopic(msg.Topic) {
		return &message.ValidationError{Field: "topic", Reason: fmt.Sprintf("%q is a system topic producers may not send to", msg.Topic)}
	}
	return nil
}

// prepareSingle validates msg, sets UNIQ_KEY, compresses and builds the header.
func (p *Producer) prepareSingle(msg *message.Message) (*prepared, error) {
	if err := p.checkMessage(msg); err != nil {
		return nil, err
	}
	now := time.Now() // the UNIQ_KEY's time and the born timestamp: one clock reading
	key := msg.UniqKey()
	added := key == ""
	bare := added && len(msg.Properties) == 0 // no property but the UNIQ_KEY added here
	var props string
	switch {
	case bare:
		// The common message without properties: its encoded properties are the
		// UNIQ_KEY pair alone, and the id is a substring of them (one allocation).
		props, key = uniqKeyProperties(now)
		msg.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, key)
	case added:
		var id [message.UniqIDLen]byte
		key = string(message.AppendUniqID(id[:0], now))
		msg.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, key)
		fallthrough
	default:
		props = message.MarshalProperties(msg.Properties)
	}
	if len(props) > message.MaxPropertiesLength { // only the UNIQ_KEY just added can do that
		if added {
			msg.RemoveProperty(message.PropertyUniqClientMessageIDKeyIdx)
		}
		return nil, &message.ValidationError{Field: "properties", Reason: "encoded properties too long with the " +
			message.PropertyUniqClientMessageIDKeyIdx + " property the producer adds", Limit: message.MaxPropertiesLength, Value: len(props)}
	}
	body := msg.Body
	var sysFlag int32
	if p.cfg.CompressMsgBodyOverHowmuch > 0 && len(body) >= p.cfg.CompressMsgBodyOverHowmuch {
		z, err := message.Deflate(body, p.cfg.CompressLevel)
		if err != nil {
			return nil, fmt.Errorf("producer: compress body: %w", err)
		}
		// zlib makes incompressible bytes larger: such a body goes as it is (a body near
		// MaxMessageSize would otherwise go over the broker's limit).
		if len(z) < len(body) {
			body, sysFlag = z, sysFlag|message.SysFlagCompressed
		}
	}
	if !bare && msg.Property(message.PropertyTransactionPrepared) == "true" {
		sysFlag |= message.SysFlagTransactionPrepared
	}
	pr := preparedPool.Get().(*prepared)
	pr.code = remoting.SendMessageV2
	pr.header = wire.SendHeader{
		ProducerGroup:         p.cfg.Group,
		Topic:                 msg.Topic,
		DefaultTopic:          message.AutoCreateTopicKey,
		DefaultTopicQueueNums: client.DefaultTopicQueueNums,
		SysFlag:               sysFlag,
		BornTimestamp:         now.UnixMilli(),
		Flag:                  msg.Flag,
		Properties:            props,
	}
	pr.body, pr.msgID, pr.selMsg = body, key, msg
	return pr, nil
}

// uniqKeyPrefix is how an encoded properties string made of the UNIQ_KEY pair alone starts.
const uniqKeyPrefix = message.PropertyUniqClientMessageIDKeyIdx + string(message.NameValueSeparator)

// uniqKeyProperties returns a new client message id for the clock reading now
// (message.AppendUniqID) and the encoded properties of a message whose only property is
// that UNIQ_KEY — what message.MarshalProperties returns for it — in one allocation: id
// is the tail of props.
func uniqKeyProperties(now time.Time) (props, id string) {
	var b strings.Builder
	b.Grow(len(uniqKeyPrefix) + message.UniqIDLen)
	b.WriteString(uniqKeyPrefix)
	var buf [message.UniqIDLen]byte
	b.Write(message.AppendUniqID(buf[:0], now))
	props = b.String()
	return props, props[len(uniqKeyPrefix):]
}

// rawSend is one message's send without middlewares: validate, route, attempts.
func (p *Producer) rawSend(ctx context.Context, msg *message.Message, sel MessageQueueSelector, m mode) (*message.SendResult, error) {
	pr, err := p.prepareSingle(msg)
	if err != nil {
		return nil, err
	}
	if err := p.enter(); err != nil {
		pr.release()
		return nil, err
	}
	defer p.inflight.Done()
	r, err := p.sendPrepared(ctx, pr, sel, m)
	pr.release()
	return r, err
}

// sendPrepared makes the attempts of one send. Sync mode: up to
// 1+RetryTimesWhenSendFailed attempts, each retry asking the selector with the failed
// broker as lastBroker. Async mode: up to 1+RetryTimesWhenSendAsyncFailed attempts on the
// first attempt's queue.
func (p *Producer) sendPrepared(ctx context.Context, pr *prepared, sel MessageQueueSelector, m mode) (*message.SendResult, error) {
	topic := pr.header.Topic
	queues, err := p.publishQueues(ctx, topic)
	if errors.Is(err, ErrNoQueue) && p.refreshRoute(ctx, topic) {
		// No broker of the route has a master (a DLedger group electing one, a master
		// down): the name server may list a new one by now.
		queues, err = p.publishQueues(ctx, topic)
	}
	if err != nil {
		return nil, &SendError{Topic: topic, Err: err}
	}
	attempts := 1 + p.cfg.RetryTimesWhenSendFailed
	if m == modeAsync {
		attempts = 1 + p.cfg.RetryTimesWhenSendAsyncFailed
	}
	var (
		mq         message.MessageQueue
		last       *SendError
		notOK      *message.SendResult // a stored result other than SEND_OK, kept while retrying
		lastBroker string
	)
	for i := 0; i < attempts; i++ {
		if i == 0 || m == modeSync {
			if mq, err = p.pick(sel, pr.selMsg, queues, lastBroker); err != nil {
				if last != nil {
					return nil, last
				}
				return nil, &SendError{Topic: topic, Err: err}
			}
		}
		r, se, retry := p.attempt(ctx, pr, mq)
		if se == nil {
			if r.Status != message.SendOK && m == modeSync && p.cfg.RetryAnotherBrokerWhenNotStoreOK && i < attempts-1 {
				notOK, lastBroker = r, mq.BrokerName
				continue
			}
			return r, nil
		}
		se.Attempts = i + 1
		last = se
		if !retry || ctx.Err() != nil {
			break
		}
		lastBroker = mq.BrokerName
	}
	if last != nil && notOK == nil && routeSuspect(last) {
		// Every attempt failed on a broker that may have moved: the next send uses a
		// fresh route.
		p.refreshRoute(ctx, topic)
	}
	if notOK != nil {
		return notOK, nil
	}
	return nil, last
}

// routeSuspect reports whether a failed attempt may come from a stale route: the broker
// could not be reached or had no address (its master died or moved), or it answered
// SERVICE_NOT_AVAILABLE (14, e.g. a node that is a slave now) or NO_PERMISSION (16, a
// broker that no longer takes writes).
func routeSuspect(se *SendError) bool {
	if re := se.answer(); re != nil {
		return re.Code == remoting.ServiceNotAvailable || re.Code == remoting.NoPermission
	}
	return se.Err != nil && !se.stored
}

// refreshRoute asks the name servers for topic's route again after a send failed on
// every attempt or found no writable queue, at most once per routeRefreshSpacing per
// topic (a dead broker fails every attempt at once), so that a master elected elsewhere
// (DLedger) or back at its address is used before the periodic refresh (30 s). A send
// that succeeded on another broker refreshes nothing: the route keeps the failed broker,
// which is used again once its fault isolation ends. It reports whether it fetched a
// route.
func (p *Producer) refreshRoute(ctx context.Context, topic string) bool {
	v, _ := p.refreshedAt.LoadOrStore(topic, new(atomic.Int64))
	at := v.(*atomic.Int64)
	prev, now := at.Load(), time.Now().UnixNano()
	if now-prev < int64(routeRefreshSpacing) || !at.CompareAndSwap(prev, now) {
		return false
	}
	p.routeRefreshes.Add(1)
	_, err := p.cl.FetchRoute(ctx, topic)
	return err == nil
}

// pick asks sel for a queue; the round-robin selector also avoids faulty brokers. A
// queue from a custom selector must be one of queues.
func (p *Producer) pick(sel MessageQueueSelector, msg *message.Message, queues []message.MessageQueue, lastBroker string) (mq message.MessageQueue, err error) {
	if fa, ok := sel.(faultAwareSelector); ok && p.fault != nil {
		return fa.selectAvailable(msg, queues, lastBroker, p.fault), nil
	}
	// A selector is user code: a panic in it fails this send (logged with its stack)
	// instead of ending the process from one of the producer's goroutines, or leaving
	// an async send in flight for ever when it unwinds through SendAsync.
	defer func() {
		if v := recover(); v != nil {
			p.cfg.Logger.Error("producer: message queue selector panicked", "topic", msg.Topic, "panic", v, "stack", string(debug.Stack()))
			err = fmt.Errorf("producer: the message queue selector panicked: %v", v)
		}
	}()
	mq, err = sel.Select(msg, queues, lastBroker)
	if err != nil {
		return mq, err
	}
	switch sel.(type) {
	case *roundRobin, hashSelector, manualSelector: // always from the list
		return mq, nil
	}
	for _, q := range queues {
		if q.BrokerName == mq.BrokerName && q.QueueID == mq.QueueID {
			return q, nil
		}
	}
	return mq, fmt.Errorf("%w: the selector picked %s", ErrQueueNotFound, mq)
}

// attempt sends pr to mq once and records the outcome in the fault table. It returns the
// result when the broker stored the message; otherwise a *SendError for this attempt
// (Attempts unset) and whether another attempt may help.
func (p *Producer) attempt(ctx context.Context, pr *prepared, mq message.MessageQueue) (*message.SendResult, *SendError, bool) {
	addr, req, se := p.request(pr, mq)
	if se != nil {
		return nil, se, true
	}
	// SendTimeout is enforced by the remoting client's deadline sweep: no timer and no
	// derived context per attempt; its deadline counts from start.
	start := time.Now()
	resp, err := p.cl.InvokeSyncTimeoutSince(ctx, addr, req, start, p.cfg.SendTimeout)
	latency := time.Since(start)
	return p.outcome(ctx, pr, mq, addr, resp, err, latency)
}

// request builds the request of one attempt of pr on mq and finds the broker's
// address; without an address it returns the attempt's *SendError (already observed).
func (p *Producer) request(pr *prepared, mq message.MessageQueue) (string, *remoting.RemotingCommand, *SendError) {
	addr, ok := p.cl.BrokerAddr(mq.BrokerName)
	if !ok {
		se := &SendError{Topic: pr.header.Topic, Queue: mq, Err: fmt.Errorf("no master address known for broker %q", mq.BrokerName)}
		p.observe(mq, 0, se.Err, true)
		return "", nil, se
	}
	h := pr.header
	h.QueueID = int32(mq.QueueID)
	h.BrokerName = mq.BrokerName
	h.Batch = pr.code == remoting.SendBatchMessage
	// The attempt's request lives in pr (an earlier attempt of it has its answer), its
	// header in list form: no map, no key sort when encoding.
	pr.req = *remoting.NewRequest(pr.code, nil, pr.body)
	pr.req.ExtList = h.AppendExtList(pr.ext[:0])
	return addr, &pr.req, nil
}

// outcome turns one attempt's response (or transport error err) into its result or
// *SendError and whether another attempt may help, and records it for fault tolerance.
// ctx is the caller's context (its end is not the broker's fault).
func (p *Producer) outcome(ctx context.Context, pr *prepared, mq message.MessageQueue, addr string,
	resp *remoting.RemotingCommand, err error, latency time.Duration) (*message.SendResult, *SendError, bool) {
	// The *SendError is built only on failure (a stored send allocates none).
	fail := func() *SendError { return &SendError{Topic: pr.header.Topic, Queue: mq, BrokerAddr: addr} }
	if err != nil {
		se := fail()
		se.Err = err
		// The caller giving up says nothing about the broker; a timeout or a transport
		// failure does.
		p.observe(mq, latency, err, ctx.Err() == nil)
		if ctx.Err() == nil {
			p.cfg.Logger.Debug("producer: send attempt failed", "topic", pr.header.Topic, "queue", mq.String(), "broker", addr, "err", err)
		}
		return nil, se, true
	}
	code := resp.ResponseCode()
	if client.SendStored(code) {
		// Stored, but a SYNC_MASTER without its slave (SLAVE_NOT_AVAILABLE, or a slave
		// too slow: FLUSH_SLAVE_TIMEOUT) keeps it on one machine: fault tolerance avoids
		// that broker for FaultIsolationDuration, as it does a failed one.
		p.observe(mq, latency, nil, code == remoting.SlaveNotAvailable || code == remoting.FlushSlaveTimeout)
		r, err := client.ParseSendResponse(resp, mq, pr.msgID)
		if err != nil { // stored, but the answer is malformed: report, do not resend
			se := fail()
			se.Err, se.stored = fmt.Errorf("stored (%d %s), but the answer is unreadable: %w", int16(code), code, err), true
			return nil, se, false
		}
		return r, nil, false
	}
	se := fail()
	se.Err = resp.ResponseErrFor(pr.code, mq.BrokerName, addr)
	p.observe(mq, latency, se.Err, isolates(code))
	if code.Retryable() {
		p.cfg.Logger.Debug("producer: send attempt refused", "topic", pr.header.Topic, "queue", mq.String(), "broker", addr, "code", code.String(), "remark", resp.Remark)
	}
	return nil, se, code.Retryable()
}

// observe records an attempt's latency (and failure) for fault tolerance and the test hook.
func (p *Producer) observe(mq message.MessageQueue, latency time.Duration, err error, failed bool) {
	if p.fault != nil {
		p.fault.update(mq.BrokerName, latency, failed)
	}
	if p.cfg.attemptHook != nil {
		p.cfg.attemptHook(mq, err)
	}
}

// AvoidedBrokers returns the brokers latency fault tolerance currently avoids, each with
// how long it still is. Empty when fault tolerance is off or every broker is available.
func (p *Producer) AvoidedBrokers() map[string]time.Duration {
	if p.fault == nil {
		return map[string]time.Duration{}
	}
	return p.fault.avoided()
}

// publishQueues returns the writable queues of topic. A topic the name servers do not
// know gets the route of TBW102 with at most 4 queues per broker, so the broker
// auto-creates it on the first send (docs/protocol.md §7.2).
func (p *Producer) publishQueues(ctx context.Context, topic string) ([]message.MessageQueue, error) {
	rd, err := p.cl.Route(ctx, topic)
	if errors.Is(err, client.ErrTopicNotExist) {
		def, derr := p.cl.Route(ctx, message.AutoCreateTopicKey)
		if derr != nil {
			return nil, fmt.Errorf("%w; auto-create route %s: %w", err, message.AutoCreateTopicKey, derr)
		}
		rd = def.CapQueueNums(client.DefaultTopicQueueNums)
		p.cl.SetRoute(topic, rd)
		err = nil
	}
	if err != nil {
		return nil, err
	}
	// Routes are replaced, never modified, so the same pointer means the same list.
	if c, ok := p.queues.Load(topic); ok && c.(*topicQueues).route == rd {
		return c.(*topicQueues).queues, nil
	}
	qs, err := wire.PublishQueues(topic, rd)
	if err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("%w for topic %q", ErrNoQueue, topic)
	}
	p.queues.Store(topic, &topicQueues{route: rd, queues: qs})
	return qs, nil
}

// Shutdown stops the producer: new sends fail with ErrClosed (SendAsync calls waiting
// for room too), sends in progress — async ones until their callback has returned — may
// finish until ctx is done, then UNREGISTER_CLIENT (RocketMQ request code 35) goes to
// every known broker, and connections and goroutines are released; async sends still
// pending then fail with a transport error to their callbacks. It returns ctx's error if
// in-flight sends or the unregister did not finish in time (resources are released
// anyway), or the unregister failures. Idempotent. Do not call it from a SendAsync
// callback (it waits for that callback).
//
// Stop order: refuse new sends → wait for in-flight sends (bounded by ctx) → unregister
// → close the client (failing what is left) → wait for the last callbacks.
func (p *Producer) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.state == stateClosed {
		p.mu.Unlock()
		return nil
	}
	wasStarted := p.state == stateStarted
	p.state = stateClosed
	close(p.closing)
	p.mu.Unlock()
	if p.batcher != nil {
		p.batcher.flush() // lingering records leave now
	}

	done := make(chan struct{})
	go func() { p.inflight.Wait(); close(done) }()
	var errs []error
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("producer: in-flight sends still running: %w", ctx.Err()))
	}
	if wasStarted {
		// Unregister even when ctx has run out waiting for sends: with its own short
		// budget (the broker would otherwise only notice when the connection closes).
		uctx := ctx
		if ctx.Err() != nil {
			var cancel context.CancelFunc
			uctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
		}
		if err := p.cl.Unregister(uctx, p.cfg.Group, ""); err != nil {
			errs = append(errs, fmt.Errorf("producer: %w", err))
		}
	}
	_ = p.cl.Close() // fails any send still waiting
	<-done
	return errors.Join(errs...)
}
