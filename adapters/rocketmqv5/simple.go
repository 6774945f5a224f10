package rocketmqv5

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Limits and defaults of [SimpleConfig].
const (
	// MaxBatchSize is the most messages one receive may ask for (the v5 protocol's limit
	// on Apache RocketMQ 5 and Sluice: 32).
	MaxBatchSize = 32
	// DefaultBatchSize is SimpleConfig.BatchSize's default.
	DefaultBatchSize = 16
	// DefaultInvisibleDuration is SimpleConfig.InvisibleDuration's default.
	DefaultInvisibleDuration = 30 * time.Second
	// MaxInvisibleDuration is the longest invisible duration servers accept (12 h).
	MaxInvisibleDuration = 12 * time.Hour
	// MaxReceivers bounds SimpleConfig.Receivers.
	MaxReceivers = 64
)

// emptyReceivePause is the shortest time between two receives that found nothing: a
// server (or a client option) without long polling answers an empty receive at once.
const emptyReceivePause = time.Second

// SimpleConfig configures a [SimpleRunner]. Consumer and Handler are required.
type SimpleConfig struct {
	// Consumer is a started SimpleConsumer with its subscriptions. Required. The runner
	// receives with it and never stops it: stop the runner first, then the consumer
	// (GracefulStop, or [Component]).
	Consumer rmq.SimpleConsumer
	// Handler runs for each received message, as a batch of one (so Dedup and the inbox
	// see one key at a time) — typically a handler wrapped by middleware.ChainConsume.
	// Required. ConsumeSuccess with a nil error acknowledges the message; anything else
	// (ReconsumeLater, an error, a panic) leaves it unacknowledged.
	Handler middleware.ConsumeFunc
	// BatchSize is the most messages one receive asks for: 1..MaxBatchSize. Default
	// DefaultBatchSize (16).
	BatchSize int32
	// InvisibleDuration is how long a received message stays invisible to the rest of the
	// group: the time the handler runs of a whole received batch must fit in (each
	// message's handler context ends when its invisibility does, since an ack after that
	// is refused). Unacknowledged, the message is delivered again when it ends. The
	// server's minimum applies (10 s on Apache RocketMQ 5 and Sluice by default) up to
	// MaxInvisibleDuration. Default DefaultInvisibleDuration (30 s).
	InvisibleDuration time.Duration
	// Receivers is the number of receive loops; each handles its received batch's
	// messages one after another. 1..MaxReceivers; default 1.
	Receivers int
	// RetryDelay, when set, gives how long a message whose handler failed stays invisible
	// before its next delivery, from its delivery attempt (1 for the first delivery): the
	// runner calls ChangeInvisibleDuration with it (at least 0, at most
	// MaxInvisibleDuration). Default nil: the message keeps its invisibility and comes
	// back when InvisibleDuration ends. Either way the server counts the attempt and,
	// after the group's last one (retryMaxTimes + 1, 17 by default), moves the message to
	// %DLQ%<group>.
	RetryDelay func(attempt int32) time.Duration
	// ReceiveBackoff is the wait after a receive that failed (not after one that found
	// nothing: the server's long polling paces those). Default 1 s.
	ReceiveBackoff time.Duration
	// Logger receives the handler failures (topic, message id, attempt, error) and failed
	// receives, acks and invisibility changes. Default slog.Default().
	Logger *slog.Logger
}

func (c *SimpleConfig) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.InvisibleDuration == 0 {
		c.InvisibleDuration = DefaultInvisibleDuration
	}
	if c.Receivers == 0 {
		c.Receivers = 1
	}
	if c.ReceiveBackoff == 0 {
		c.ReceiveBackoff = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration after defaults: a *config.Error naming the field.
func (c *SimpleConfig) Validate() error {
	bad := func(field string, v any, reason string) error {
		return &config.Error{Package: "rocketmqv5", Field: field, Value: v, Reason: reason}
	}
	switch {
	case c.Consumer == nil:
		return bad("Consumer", nil, "nil")
	case c.Handler == nil:
		return bad("Handler", nil, "nil")
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return bad("BatchSize", c.BatchSize, fmt.Sprintf("want 1..%d", MaxBatchSize))
	case c.InvisibleDuration < time.Millisecond || c.InvisibleDuration > MaxInvisibleDuration:
		return bad("InvisibleDuration", c.InvisibleDuration, fmt.Sprintf("want 1ms..%v", MaxInvisibleDuration))
	case c.Receivers < 1 || c.Receivers > MaxReceivers:
		return bad("Receivers", c.Receivers, fmt.Sprintf("want 1..%d", MaxReceivers))
	case c.ReceiveBackoff < 0:
		return bad("ReceiveBackoff", c.ReceiveBackoff, "negative")
	}
	return nil
}

// SimpleRunner runs a consume chain over a SimpleConsumer: its receive loops receive up
// to BatchSize messages with InvisibleDuration, run the handler for each message (a
// batch of one, converted with [FromV5]), acknowledge it on success, and on failure leave
// it invisible or change its invisible duration (SimpleConfig.RetryDelay). That is the
// v5 retry: the server delivers the message again, attempt increased, when its
// invisibility ends, and dead-letters it after the group's last attempt.
//
// The official client v5.1.4's Ack returns no error when the server refuses the ack
// (e.g. the receipt handle expired because the handler outlived the invisible
// duration): such a message is delivered again. Handlers therefore run at least once per
// message, as with every consumer; put redismw.Dedup or the inbox in the chain for one
// effect.
//
// Start starts the loops; Shutdown stops receiving, lets the loops finish the batches in
// hand until its ctx ends, then cancels the handlers' context. Both are safe to call
// twice and in any order.
type SimpleRunner struct {
	cfg SimpleConfig

	mu        sync.Mutex
	started   bool
	stopped   bool
	recvCtx   context.Context // ends when Shutdown starts: no more receives
	stopRecv  context.CancelFunc
	handleCtx context.Context // ends when Shutdown gives up: handlers are asked to stop
	stopAll   context.CancelFunc
	wg        sync.WaitGroup
}

// NewSimpleRunner returns a runner for cfg (defaults applied), or a *config.Error naming
// the bad field. It does not receive until Start.
func NewSimpleRunner(cfg SimpleConfig) (*SimpleRunner, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &SimpleRunner{cfg: cfg}
	r.handleCtx, r.stopAll = context.WithCancel(context.Background())
	r.recvCtx, r.stopRecv = context.WithCancel(r.handleCtx)
	return r, nil
}

// Start starts the receive loops. A second call, or a call after Shutdown, does nothing
// (after Shutdown it returns an error).
func (r *SimpleRunner) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return errors.New("rocketmqv5: simple runner already shut down")
	}
	if r.started {
		return nil
	}
	r.started = true
	for range r.cfg.Receivers {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.receiveLoop()
		}()
	}
	return nil
}

// Shutdown stops receiving and waits for the loops to finish handling the messages they
// hold (each acknowledged or given back as usual) until ctx ends; then it cancels the
// handlers' context, and messages not yet handled stay invisible until their invisible
// duration ends (then they are delivered again). It returns nil when every loop ended,
// else an error wrapping ctx's. It does not stop the SimpleConsumer.
func (r *SimpleRunner) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.stopRecv()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		r.stopAll()
		return nil
	case <-ctx.Done():
		r.stopAll()
		return fmt.Errorf("rocketmqv5: simple runner: handlers still running: %w", ctx.Err())
	}
}

func (r *SimpleRunner) receiveLoop() {
	for r.recvCtx.Err() == nil {
		began := time.Now()
		mvs, err := r.cfg.Consumer.Receive(r.recvCtx, r.cfg.BatchSize, r.cfg.InvisibleDuration)
		if r.recvCtx.Err() != nil {
			// Stopping: the receive was cut short. A message it may have taken stays
			// invisible and comes back when its invisibility ends.
			return
		}
		received := time.Now()
		if err != nil {
			if rs, ok := rmq.AsErrRpcStatus(err); ok && rs.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
				r.pause(emptyReceivePause - received.Sub(began))
				continue
			}
			r.cfg.Logger.Warn("rocketmqv5: receive failed", "err", err)
			r.pause(r.cfg.ReceiveBackoff)
			continue
		}
		if len(mvs) == 0 {
			r.pause(emptyReceivePause - received.Sub(began))
			continue
		}
		for _, mv := range mvs {
			if r.handleCtx.Err() != nil {
				return
			}
			r.handle(mv, received)
		}
	}
}

// pause waits d or until receiving stops.
func (r *SimpleRunner) pause(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.recvCtx.Done():
	}
}

// handle runs the handler for one delivery received at received, then acks it or
// gives it back.
func (r *SimpleRunner) handle(mv *rmq.MessageView, received time.Time) {
	ctx, cancel := context.WithDeadline(r.handleCtx, received.Add(r.cfg.InvisibleDuration))
	res, err := middleware.CallRecovered(ctx, r.cfg.Handler, []*message.MessageExt{FromV5(mv)})
	cancel()
	log := r.cfg.Logger.With("topic", mv.GetTopic(), "msgId", mv.GetMessageId(), "attempt", mv.GetDeliveryAttempt())
	if err == nil && res == message.ConsumeSuccess {
		actx, acancel := context.WithTimeout(context.WithoutCancel(r.handleCtx), 10*time.Second)
		defer acancel()
		if err := r.cfg.Consumer.Ack(actx, mv); err != nil {
			log.Warn("rocketmqv5: ack failed; the message will be delivered again", "err", err)
		}
		return
	}
	log.Warn("rocketmqv5: consume handler failed; the message will be delivered again", "result", res, "err", err)
	if r.cfg.RetryDelay == nil {
		return
	}
	d := min(max(r.cfg.RetryDelay(mv.GetDeliveryAttempt()), 0), MaxInvisibleDuration)
	if err := r.cfg.Consumer.ChangeInvisibleDuration(mv, d); err != nil {
		log.Warn("rocketmqv5: change invisible duration failed; the message comes back when its invisibility ends", "err", err)
	}
}
