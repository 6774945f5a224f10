package producer

import (
	"context"
	"errors"
	"sync"

	"github.com/sluicemq/sluice/message"
)

// SendAsync starts sending msg and returns without waiting for the broker. Unless it
// returns an error, cb is called exactly once, in a goroutine the producer owns, with
// the stored result or the failure (the same errors as SendSync: *SendError,
// *message.ValidationError from a middleware-changed message, ErrClosed, ctx's error).
// Config.Middlewares run around the send in that goroutine.
//
// ctx bounds the whole send with its retries: a failed attempt is retried up to
// RetryTimesWhenSendAsyncFailed times (default 2) on the same broker and message queue,
// each attempt bounded by SendTimeout. When MaxAsyncInflight sends (or
// MaxAsyncInflightBytes body bytes) are already in flight, SendAsync waits for room,
// bounded by ctx.
//
// SendAsync returns an error, and never calls cb, when cb is nil, msg breaks the rules
// (*message.ValidationError, checked before anything else), the producer is not started
// or is closed (ErrNotStarted, ErrClosed), or ctx ended while waiting for room.
//
// msg (which gets a UNIQ_KEY) must not be changed until cb runs. Async sends of one
// sharding key may complete in any order: for ordered messages use SendSync. cb should
// return quickly and must not call Shutdown (Shutdown waits for callbacks).
func (p *Producer) SendAsync(ctx context.Context, msg *message.Message, cb func(*message.SendResult, error), opts ...SendOption) error {
	if cb == nil {
		return errors.New("producer: SendAsync needs a callback")
	}
	if err := p.checkMessage(msg); err != nil {
		return err
	}
	size := int64(len(msg.Body))
	if err := p.limiter.acquire(ctx, size, p.closing); err != nil {
		return err
	}
	if err := p.enter(); err != nil {
		p.limiter.release(size)
		return err
	}
	sel := p.selector(opts)
	go func() {
		defer p.inflight.Done()
		r, err := p.chain(ctx, msg, sel, modeAsync)
		p.limiter.release(size) // before cb, so a cb that sends again finds room
		cb(r, err)
	}()
	return nil
}

// AsyncResult is the outcome of one SendAsyncChan: the stored result, or the error.
type AsyncResult struct {
	Result *message.SendResult
	Err    error
}

// SendAsyncChan is SendAsync delivering the outcome on a channel instead of a callback:
// the returned channel (buffered, capacity 1) receives exactly one AsyncResult, also
// when SendAsync itself would have returned an error.
func (p *Producer) SendAsyncChan(ctx context.Context, msg *message.Message, opts ...SendOption) <-chan AsyncResult {
	ch := make(chan AsyncResult, 1)
	if err := p.SendAsync(ctx, msg, func(r *message.SendResult, err error) { ch <- AsyncResult{r, err} }, opts...); err != nil {
		ch <- AsyncResult{Err: err}
	}
	return ch
}

// asyncLimiter bounds async sends in flight by count and by body bytes. A send larger
// than the byte limit is admitted when nothing else is in flight.
type asyncLimiter struct {
	maxCount int
	maxBytes int64

	mu      sync.Mutex
	count   int
	bytes   int64
	waiters int
	wake    chan struct{} // closed (and replaced) on release while waiters > 0
}

func newAsyncLimiter(maxCount int, maxBytes int64) *asyncLimiter {
	return &asyncLimiter{maxCount: maxCount, maxBytes: maxBytes, wake: make(chan struct{})}
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
		w := l.wake
		l.waiters++
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
		l.waiters--
		if err != nil {
			l.mu.Unlock()
			return err
		}
	}
}

// release returns the room of one send of n bytes.
func (l *asyncLimiter) release(n int64) {
	l.mu.Lock()
	l.count--
	l.bytes -= n
	if l.waiters > 0 {
		close(l.wake)
		l.wake = make(chan struct{})
	}
	l.mu.Unlock()
}
