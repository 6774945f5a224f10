package producer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// SendAsync is SendAsyncWith without options: the asynchronous send of
// [transport.Producer].
func (p *Producer) SendAsync(ctx context.Context, msg *message.Message, cb func(*message.SendResult, error)) error {
	return p.SendAsyncWith(ctx, msg, cb)
}

// SendAsyncWith starts sending msg and returns without waiting for the broker (it may block
// briefly to connect to a broker for the first time). Unless it returns an error, cb is
// called exactly once, in a goroutine the producer owns (the callbacks of one broker
// connection run one after another; one that blocks holds the later ones back for about
// 10 ms, then another goroutine takes them over), with the stored result or the
// failure (the same errors as SendSync: *SendError, *message.ValidationError from a
// middleware-changed message, ErrClosed, ctx's error). With Config.Middlewares (and no
// WithoutMiddlewares option), one goroutine per send runs them around a blocking send;
// without, no goroutine waits for the broker (the answer's callback continues the send).
//
// ctx bounds the whole send with its retries: a failed attempt is retried up to
// RetryTimesWhenSendAsyncFailed times (default 2) on the same broker and message queue,
// each attempt bounded by SendTimeout. When MaxAsyncInflight sends (or
// MaxAsyncInflightBytes body bytes) are already in flight, SendAsync waits for room,
// bounded by ctx.
//
// SendAsyncWith returns an error, and never calls cb, when cb is nil, msg breaks the rules
// (*message.ValidationError, checked before anything else), the producer is not started
// or is closed (ErrNotStarted, ErrClosed), or ctx ended while waiting for room.
//
// A cb that panics is logged (Config.Logger, ERROR, with the stack); the send still ends.
// A selector or middleware that panics fails the send: cb gets an error naming the panic.
// msg (which gets a UNIQ_KEY) must not be changed until cb runs. Async sends of one
// sharding key may complete in any order: for ordered messages use SendSync. cb should
// return quickly and must not call Shutdown (Shutdown waits for callbacks).
//
// With Config.AutoBatch (and no middlewares), sends to one message queue wait while a
// request of that queue is in flight (or for Config.AutoBatchLinger) and then leave
// together as one SEND_BATCH_MESSAGE request; the callbacks, errors and results stay
// per send (MsgID its UNIQ_KEY, OffsetMsgID and QueueOffset its own). A batch the broker
// refuses fails each of its sends with the refusal (each gets its own *SendError); ctx
// is checked before each attempt, and a send whose ctx ended while it waited fails with
// ctx's error. Once the topic's route is cached, a queue's sends are stored in the order
// of the SendAsync calls, retries included.
func (p *Producer) SendAsyncWith(ctx context.Context, msg *message.Message, cb func(*message.SendResult, error), opts ...SendOption) error {
	if cb == nil {
		return errors.New("producer: SendAsync needs a callback")
	}
	// Without middlewares the send is driven by remoting callbacks (no goroutine waits
	// for the broker); with them, one goroutine runs the chain around a blocking send.
	o := p.options(opts)
	var pr *prepared
	var err error
	if len(p.middlewares(o)) == 0 {
		pr, err = p.prepareSingle(msg)
	} else {
		err = p.checkMessage(msg)
	}
	if err != nil {
		return err
	}
	size := int64(len(msg.Body))
	if err := p.limiter.acquire(ctx, size, p.closing); err != nil {
		if pr != nil {
			pr.release()
		}
		return err
	}
	if err := p.enter(); err != nil {
		p.limiter.release(size)
		if pr != nil {
			pr.release()
		}
		return err
	}
	sel := o.selector
	if pr != nil {
		op := &pr.op
		*op = asyncOp{p: p, ctx: ctx, pr: pr, sel: sel, size: size, cb: cb, max: 1 + p.cfg.RetryTimesWhenSendAsyncFailed}
		if p.batcher != nil {
			op.queued, op.solo = true, !p.batcher.batchable(pr)
		}
		if p.cl.CachedRoute(msg.Topic) != nil {
			op.begin(true)
		} else {
			go op.begin(false) // the route lookup talks to a name server; counted by p.inflight
		}
		return nil
	}
	go func() {
		defer p.inflight.Done()
		r, err := p.chainRecover(ctx, msg, o)
		p.limiter.release(size) // before cb, so a cb that sends again finds room
		p.runCallback(cb, r, err)
	}()
	return nil
}

// chainRecover runs the middlewares and the send of a SendAsync with middlewares in the
// producer's goroutine: a middleware that panics fails the send with an error naming the
// panic (logged with its stack) instead of ending the process.
func (p *Producer) chainRecover(ctx context.Context, msg *message.Message, o sendOptions) (r *message.SendResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			p.cfg.Logger.Error("producer: send middleware panicked", "topic", msg.Topic, "panic", v, "stack", string(debug.Stack()))
			r, err = nil, fmt.Errorf("producer: a send middleware panicked: %v", v)
		}
	}()
	return p.chain(ctx, msg, o, modeAsync)
}

// runCallback calls a SendAsync callback; a panic in it is logged (with its stack) instead
// of ending the process from a goroutine the caller does not own.
func (p *Producer) runCallback(cb func(*message.SendResult, error), r *message.SendResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			p.cfg.Logger.Error("producer: SendAsync callback panicked", "panic", v, "stack", string(debug.Stack()))
		}
	}()
	cb(r, err)
}

// asyncOp is one SendAsync without middlewares: each attempt is an InvokeAsync whose
// callback (in a goroutine of the remoting client) handles the answer, retries on the
// same queue or finishes. The caller's p.inflight.Add and limiter room are released by
// finish, after cb.
type asyncOp struct {
	p    *Producer
	ctx  context.Context
	pr   *prepared
	sel  MessageQueueSelector
	size int64
	cb   func(*message.SendResult, error)
	max  int // attempts allowed
	// queued: the send goes through the producer's batcher (Config.AutoBatch) once its
	// queue is picked, which makes the attempts; solo: it may not share a request.
	queued, solo bool

	mq message.MessageQueue
	n  int // attempts made

	// The attempt in flight: its broker and when it was sent (for its latency).
	addr  string
	start time.Time
}

// begin picks the queue and makes the first attempt. inline: it runs on SendAsync's
// caller's goroutine (see finish).
func (op *asyncOp) begin(inline bool) {
	topic := op.pr.header.Topic
	queues, err := op.p.publishQueues(op.ctx, topic)
	if err == nil {
		op.mq, err = op.p.pick(op.sel, op.pr.selMsg, queues, "")
	}
	if err != nil {
		op.finish(nil, &SendError{Topic: topic, Err: err}, inline)
		return
	}
	if op.queued {
		op.p.batcher.add(op, inline)
		return
	}
	op.try(inline)
}

// try makes attempts until one is in flight (its callback continues) or the send is
// over. It loops only over attempts that failed before reaching the network. inline: it
// runs on SendAsync's caller's goroutine; the attempts' callbacks do not.
func (op *asyncOp) try(inline bool) {
	p := op.p
	for {
		op.n++
		addr, req, se := p.request(op.pr, op.mq)
		if se == nil {
			// SendTimeout is enforced by the remoting client's deadline sweep: no timer
			// or context per attempt; the sweep's deadline counts from start, the
			// attempt's one clock reading until its answer.
			op.addr, op.start = addr, time.Now()
			if op.pr.answered == nil {
				op.pr.answered = op.answered // once per prepared: kept by release
			}
			err := p.cl.InvokeAsyncTimeoutSince(op.ctx, addr, req, op.start, p.cfg.SendTimeout, op.pr.answered)
			if err == nil {
				return // op may already be over: the answer's callback owns it
			}
			_, se, _ = p.outcome(op.ctx, op.pr, op.mq, addr, nil, err, time.Since(op.start))
		}
		if !op.again(se, true, inline) {
			return
		}
	}
}

// answered is the callback of an attempt in flight (op.addr, op.start): it finishes the
// send or makes the next attempt. One method value per prepared (prepared.answered)
// serves all its sends, instead of a closure per attempt.
func (op *asyncOp) answered(resp *remoting.RemotingCommand, err error) {
	r, se, retry := op.p.outcome(op.ctx, op.pr, op.mq, op.addr, resp, err, time.Since(op.start))
	if se == nil {
		op.finish(r, nil, false)
	} else if op.again(se, retry, false) {
		op.try(false)
	}
}

// again reports whether another attempt follows the failed one; if not, it finishes.
func (op *asyncOp) again(se *SendError, retry, inline bool) bool {
	se.Attempts = op.n
	if !retry || op.n >= op.max || op.ctx.Err() != nil {
		op.finish(nil, se, inline)
		return false
	}
	return true
}

// finish reports the send's outcome to its callback and ends it: op (which lives in its
// prepared send) is released and must not be used afterwards. The send ends also when
// cb panics (the remoting client recovers callbacks' panics): Shutdown would otherwise
// wait for it for ever. inline: finish runs on SendAsync's caller's goroutine (every
// attempt failed before reaching the network): cb then runs in a goroutine of its own, as
// SendAsync promises, so that a caller holding a lock its cb takes does not deadlock.
func (op *asyncOp) finish(r *message.SendResult, se *SendError, inline bool) {
	p, pr := op.p, op.pr
	p.limiter.release(op.size) // before cb, so a cb that sends again finds room
	if inline {
		cb := op.cb
		pr.release() // op is not used after this
		go func() {
			defer p.inflight.Done()
			if se != nil {
				p.runCallback(cb, nil, se)
			} else {
				p.runCallback(cb, r, nil)
			}
		}()
		return
	}
	defer func() {
		pr.release()
		p.inflight.Done()
	}()
	if se != nil {
		p.runCallback(op.cb, nil, se)
	} else {
		p.runCallback(op.cb, r, nil)
	}
}

// AsyncResult is the outcome of one SendAsyncChan: the stored result, or the error.
type AsyncResult struct {
	Result *message.SendResult // set when the broker stored the message
	Err    error               // set otherwise (see SendAsyncWith)
}

// SendAsyncChan is SendAsyncWith delivering the outcome on a channel instead of a callback:
// the returned channel (buffered, capacity 1) receives exactly one AsyncResult, also
// when SendAsync itself would have returned an error.
func (p *Producer) SendAsyncChan(ctx context.Context, msg *message.Message, opts ...SendOption) <-chan AsyncResult {
	ch := make(chan AsyncResult, 1)
	if err := p.SendAsyncWith(ctx, msg, func(r *message.SendResult, err error) { ch <- AsyncResult{r, err} }, opts...); err != nil {
		ch <- AsyncResult{Err: err}
	}
	return ch
}

// asyncLimiter bounds async sends in flight by count and by body bytes. A send larger
// than the byte limit is admitted when nothing else is in flight.
type asyncLimiter struct {
	maxCount int
	maxBytes int64

	mu    sync.Mutex
	count int
	bytes int64
	// waiting are the wake-up channels of the acquire calls waiting for room; release
	// signals all of them (each checks for room again) and empties the list. The
	// channels (capacity 1) come from wakePool and go back to it: a wait allocates
	// nothing once the pool and the list have grown.
	waiting []chan struct{}
}

// wakePool holds the wake-up channels of asyncLimiter waits, each empty and of capacity 1.
var wakePool = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

func newAsyncLimiter(maxCount int, maxBytes int64) *asyncLimiter {
	return &asyncLimiter{maxCount: maxCount, maxBytes: maxBytes}
}

// acquire takes room for one send of n bytes, waiting until there is room, ctx ends
// (its error) or closing is closed (ErrClosed).
func (l *asyncLimiter) acquire(ctx context.Context, n int64, closing <-chan struct{}) error {
	l.mu.Lock()
	for {
		if l.count < l.maxCount && (l.bytes+n <= l.maxBytes || l.count == 0) {
			l.count++
			l.bytes += n
			l.mu.Unlock()
			return nil
		}
		w := wakePool.Get().(chan struct{})
		l.waiting = append(l.waiting, w)
		l.mu.Unlock()
		var err error
		select {
		case <-w:
		case <-ctx.Done():
			err = ctx.Err()
		case <-closing:
			err = ErrClosed
		}
		l.mu.Lock()
		if i := slices.Index(l.waiting, w); i >= 0 {
			// Not signalled (ctx or closing ended the wait): leave the list.
			l.waiting = slices.Delete(l.waiting, i, i+1)
		} else {
			// Signalled, and the signal was sent under l.mu: take it if the wait ended
			// otherwise, so that w goes back to the pool empty.
			select {
			case <-w:
			default:
			}
		}
		wakePool.Put(w)
		if err != nil {
			l.mu.Unlock()
			return err
		}
	}
}

// release returns the room of one send of n bytes and wakes every waiting acquire.
func (l *asyncLimiter) release(n int64) {
	l.mu.Lock()
	l.count--
	l.bytes -= n
	for _, w := range l.waiting {
		w <- struct{}{} // never blocks: w is empty (signalled once, then off the list)
	}
	clear(l.waiting)
	l.waiting = l.waiting[:0]
	l.mu.Unlock()
}
