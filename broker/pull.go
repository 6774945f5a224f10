package broker

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/filter"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Transfer limits of one pull (Java maxTransferCountOnMessageInMemory and
// maxTransferBytesOnMessageInMemory).
const (
	maxPullMessages = 32
	maxPullBytes    = 256 << 10
	// maxSuspend caps a client's suspendTimeoutMillis so a held pull always ends
	// before the Go client's 30 s RPC timeout.
	maxSuspend = 25 * time.Second
)

// isSQL reports whether an expression type names a SQL92 filter ("" and "TAG" are tags).
func isSQL(exprType string) bool { return exprType == "SQL92" }

// subscriptionFilter compiles a subscription's filter: a tag filter for TAG (or ""), a
// SQL92 filter (cached per expression) when enablePropertyFilter is on. It returns an
// error response for a refused subscription: SYSTEM_ERROR (1) when SQL92 is off or the
// type is unknown, SUBSCRIPTION_PARSE_FAILED (23) with position and reason for a
// malformed expression.
func (b *Broker) subscriptionFilter(expr, exprType string) (store.Filter, *remoting.RemotingCommand) {
	switch {
	case exprType == "" || exprType == "TAG":
		return filter.NewTagFilter(expr), nil
	case !isSQL(exprType):
		return nil, errResponse(remoting.SubscriptionParseFailed, "unknown expression type %q (TAG or SQL92)", exprType)
	case !b.cfg.EnablePropertyFilter:
		return nil, errResponse(remoting.SystemError, "The broker does not support consumer to filter message by SQL92: set enablePropertyFilter=true in broker.conf")
	}
	f, err := b.sqlCache.Get(expr)
	if err != nil {
		shown := expr
		if len(shown) > 200 {
			shown = shown[:200] + "..."
		}
		return nil, errResponse(remoting.SubscriptionParseFailed, "parse SQL92 expression %q failed: %v", shown, err)
	}
	return f, nil
}

// compiledFilter is the filter of a subscription already checked by subscriptionFilter.
func (b *Broker) compiledFilter(sd wire.SubscriptionData) store.Filter {
	f, resp := b.subscriptionFilter(sd.SubString, sd.ExpressionType)
	if resp != nil {
		return filter.NewTagFilter("") // unreachable: heartbeats drop refused subscriptions
	}
	return f
}

// pullFilter returns the filter for a pull, from the request (SUBSCRIPTION bit) or from
// the group's heartbeat, or an error response (docs/protocol.md §3.4 checks 7 and 8).
func (b *Broker) pullFilter(h *wire.PullHeader) (store.Filter, *remoting.RemotingCommand) {
	if h.SysFlag&wire.PullFlagSubscription != 0 {
		return b.subscriptionFilter(h.Subscription, h.ExpressionType)
	}
	sub := b.clients.subscription(h.ConsumerGroup, h.Topic)
	if sub == nil {
		return nil, errResponse(remoting.SubscriptionNotExist, "the consumer's subscription not exist, group: %s, topic: %s", h.ConsumerGroup, h.Topic)
	}
	if sub.data.SubVersion < h.SubVersion {
		return nil, errResponse(remoting.SubscriptionNotLatest, "the consumer's subscription not latest")
	}
	return sub.filter, nil
}

// pullRequest is a PULL_MESSAGE that passed handlePull's checks.
type pullRequest struct {
	h       wire.PullHeader
	f       store.Filter
	maxNums int
	start   time.Time // arrival: a hold ends suspendTimeoutMillis after it
}

// checkPull parses and checks a PULL_MESSAGE (docs/protocol.md §3.4) and stores the commit
// offset it carries; it returns the request or the error response.
func (b *Broker) checkPull(req *remoting.RemotingCommand) (*pullRequest, *remoting.RemotingCommand) {
	h, err := wire.ParsePullHeader(req)
	if err != nil {
		return nil, errResponse(remoting.SystemError, "%v", err)
	}
	if b.cfg.BrokerPermission&permRead == 0 {
		return nil, errResponse(remoting.NoPermission, "the broker[%s] pulling message is forbidden", b.cfg.BrokerName)
	}
	if resp := groupError("consumerGroup", h.ConsumerGroup); resp != nil {
		return nil, resp
	}
	g := b.groups.find(h.ConsumerGroup)
	if g == nil {
		return nil, errResponse(remoting.SubscriptionGroupNotExist, "subscription group [%s] does not exist", h.ConsumerGroup)
	}
	if !g.ConsumeEnable {
		return nil, errResponse(remoting.NoPermission, "subscription group no permission, %s", h.ConsumerGroup)
	}
	switch h.Topic {
	case message.ScheduleTopic, message.TransHalfTopic, message.TransOpHalfTopic:
		return nil, errResponse(remoting.NoPermission, "the topic[%s] is an internal system topic and cannot be consumed", h.Topic)
	}
	tc := b.topics.get(h.Topic)
	if tc == nil {
		return nil, errResponse(remoting.TopicNotExist, "topic[%s] not exist, apply first please!", h.Topic)
	}
	if tc.Perm&permRead == 0 {
		return nil, errResponse(remoting.NoPermission, "the topic[%s] pulling message is forbidden", h.Topic)
	}
	if h.QueueID < 0 || int(h.QueueID) >= tc.ReadQueueNums {
		return nil, errResponse(remoting.SystemError, "queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d]", h.QueueID, h.Topic, tc.ReadQueueNums)
	}
	f, resp := b.pullFilter(&h)
	if resp != nil {
		return nil, resp
	}
	if h.SysFlag&wire.PullFlagCommitOffset != 0 && h.CommitOffset >= 0 {
		b.offsets.commit(h.ConsumerGroup, h.Topic, h.QueueID, h.CommitOffset)
	}
	maxNums := int(h.MaxMsgNums)
	if maxNums <= 0 || maxNums > maxPullMessages {
		maxNums = maxPullMessages
	}
	return &pullRequest{h: h, f: f, maxNums: maxNums, start: time.Now()}, nil
}

// lookup reads what p asks for into buf's array (see store.GetMessageAppend) and maps it
// to the answer.
func (b *Broker) lookup(p *pullRequest, buf []byte) *remoting.RemotingCommand {
	res, err := b.store.GetMessageAppend(buf, p.h.Topic, p.h.QueueID, p.h.QueueOffset, p.maxNums, maxPullBytes, p.f)
	if err != nil {
		return errResponse(remoting.SystemError, "get message: %v", err)
	}
	return pullResponse(p.h.QueueOffset, res)
}

// handlePull serves PULL_MESSAGE (RocketMQ request code 11) with long polling, as a
// remoting.AsyncHandler. The checks and the first lookup run on the connection's reader,
// into a pooled buffer: a pull that finds messages (or an error) is answered from there,
// with no goroutine of its own, and the buffer goes back to the pool once reply has
// encoded the answer (the frame holds a copy of the body; TestPullBufferReuse pins it).
// Every "nothing yet" answer (PULL_NOT_FOUND: at the end of the queue, or an empty queue
// read from 0) of a pull with the SUSPEND bit is held, as Java does — answering at once
// would make an idle client re-pull in a tight loop —: a goroutine of the broker waits
// for a matching arrival, the hold time (suspendTimeoutMillis from the request's arrival,
// at most 25 s; shortPollingTimeMills without longPollingEnable), the broker stopping or
// the connection closing.
func (b *Broker) handlePull(ctx context.Context, _ *remoting.Conn, req *remoting.RemotingCommand, reply func(*remoting.RemotingCommand)) {
	p, resp := b.checkPull(req)
	if resp != nil {
		reply(resp)
		return
	}
	buf := pullBufs.Get().(*[]byte)
	resp = b.lookup(p, (*buf)[:0])
	if resp.ResponseCode() != remoting.PullNotFound || p.h.SysFlag&wire.PullFlagSuspend == 0 || !b.held.enter() {
		reply(resp) // encodes resp: its body, in buf, is copied into the frame
		if body := resp.Body; cap(body) > 0 && cap(body) <= maxPooledPullBuffer {
			*buf = body[:0] // GetMessageAppend may have grown it
		}
		pullBufs.Put(buf)
		return
	}
	pullBufs.Put(buf) // PULL_NOT_FOUND carries no body
	if !b.spawn(func() {
		defer b.held.leave()
		defer func() {
			if r := recover(); r != nil { // as the remoting server does for its handlers
				b.log.Error("held pull panicked", "topic", p.h.Topic, "queueId", p.h.QueueID, "panic", r, "stack", string(debug.Stack()))
				reply(errResponse(remoting.SystemError, "handler panic: %v", r))
			}
		}()
		reply(b.holdPull(ctx, p))
	}) {
		b.held.leave()
		reply(resp) // the broker is stopping
	}
}

// pullBufs holds the buffers handlePull reads records into (*[]byte).
var pullBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledPullBuffer is the largest buffer pullBufs keeps: 512 KiB (a pull reads at most
// maxPullBytes, or one larger record).
const maxPooledPullBuffer = 512 << 10

// holdPull holds pull p, which found nothing yet, and returns its answer: the first
// lookup that finds something (woken by an arrival its filter matches), or the last one
// when the hold time is over or the broker stops; nil when ctx ends (the connection
// closed).
func (b *Broker) holdPull(ctx context.Context, p *pullRequest) *remoting.RemotingCommand {
	hold := time.Duration(b.cfg.ShortPollingTimeMills) * time.Millisecond
	if boolOr(b.cfg.LongPollingEnable, true) {
		hold = min(time.Duration(p.h.SuspendTimeoutMillis)*time.Millisecond, maxSuspend)
	}
	deadline := p.start.Add(hold)
	var timer *time.Timer
	for {
		// Watch before reading, so an arrival between the read and the wait is not missed.
		arrived, forget := b.arrivals.watch(p.h.Topic, p.h.QueueID, p.f) // woken only by a message f matches
		resp := b.lookup(p, nil)
		wait := time.Until(deadline)
		if resp.ResponseCode() != remoting.PullNotFound || wait <= 0 {
			forget()
			return resp
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		} else {
			timer.Reset(wait)
		}
		select {
		case <-arrived:
		case <-timer.C:
			deadline = time.Now() // read once more, then answer
		case <-b.held.stopping:
			deadline = time.Now() // the broker is stopping: answer now, so the client re-pulls elsewhere
		case <-ctx.Done():
			forget()
			return nil // the connection closed
		}
		forget()
	}
}

// pullResponse maps a store lookup to the PULL_MESSAGE response (docs/protocol.md §3.4 table).
// The four offsets ext fields are always present: the Go client reads a missing
// nextBeginOffset as 0.
func pullResponse(offset int64, res store.GetResult) *remoting.RemotingCommand {
	var code remoting.ResponseCode
	switch res.Status {
	case store.Found:
		code = remoting.Success
	case store.NoMatchedMessage, store.MessageWasRemoving:
		code = remoting.PullRetryImmediately
	case store.NoMatchedLogicQueue, store.NoMessageInQueue:
		code = remoting.PullNotFound
		if offset != 0 {
			code = remoting.PullOffsetMoved
		}
	case store.OffsetTooSmall, store.OffsetOverflowBadly:
		code = remoting.PullOffsetMoved
	default: // OffsetOverflowOne, OffsetFoundNull
		code = remoting.PullNotFound
	}
	r := remoting.NewResponse(code, res.Status.String())
	wire.PullResponseHeader{NextBeginOffset: res.NextBeginOffset, MinOffset: res.MinOffset, MaxOffset: res.MaxOffset}.SetExt(r)
	if code == remoting.Success {
		r.Body = res.Body
	}
	return r
}

// heldPulls counts pulls held for long polling, so Shutdown can release them and let
// their answers go out before it closes connections.
type heldPulls struct {
	stopping chan struct{} // closed when the broker begins to stop

	mu      sync.Mutex
	n       int
	stopped bool
	zero    chan struct{} // closed when n drops to 0 after stop
}

func newHeldPulls() *heldPulls {
	return &heldPulls{stopping: make(chan struct{}), zero: make(chan struct{})}
}

// enter registers a pull about to be held; false once the broker is stopping.
func (h *heldPulls) enter() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return false
	}
	h.n++
	return true
}

func (h *heldPulls) leave() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n--
	if h.stopped && h.n == 0 {
		close(h.zero)
	}
}

// release wakes every held pull and waits (up to ctx) until all have answered.
func (h *heldPulls) release(ctx context.Context) {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		close(h.stopping)
		if h.n == 0 {
			close(h.zero)
		}
	}
	h.mu.Unlock()
	select {
	case <-h.zero:
	case <-ctx.Done():
	}
}
