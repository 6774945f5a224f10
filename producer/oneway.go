package producer

import (
	"context"
	"fmt"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

// SendOneway sends msg with the RocketMQ ONEWAY flag (header flag bit1): the broker
// stores it and answers nothing, so there is no result and no retry. It returns once
// the request is queued on the connection (bounded by ctx and SendTimeout). A nil error
// does not mean the message was stored: a broker under load may drop one-way requests
// (a Sluice broker drops those beyond 1024 in progress on one connection, a Java
// broker those its send queue cannot take). The queue comes from Config.Selector or the
// WithSelector / WithQueue option; a broker that could not be reached is avoided
// afterwards like any failed broker.
//
// Config.Middlewares run around the send (unless WithoutMiddlewares), as for SendSync,
// with one difference the steps see: the innermost send returns a nil *SendResult with a
// nil error, meaning "queued", not "stored". Steps that only change the message (Keys),
// time the call (metrics) or act on an error (Park) work unchanged; a step must not
// dereference a nil result.
//
// Errors: a *message.ValidationError before any network traffic; a *SendError when the
// route lookup, the selector or the connection failed; ErrNotStarted / ErrClosed; and
// whatever a middleware returns instead (a parked send's error, for example).
func (p *Producer) SendOneway(ctx context.Context, msg *message.Message, opts ...SendOption) error {
	o := p.options(opts)
	mws := p.middlewares(o)
	if len(mws) == 0 {
		return p.rawOneway(ctx, msg, o.selector)
	}
	raw := func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		return nil, p.rawOneway(ctx, msg, o.selector)
	}
	_, err := middleware.ChainSend(raw, mws...)(ctx, msg)
	return err
}

// rawOneway is one one-way send without middlewares.
func (p *Producer) rawOneway(ctx context.Context, msg *message.Message, sel MessageQueueSelector) error {
	pr, err := p.prepareSingle(msg)
	if err != nil {
		return err
	}
	defer pr.release() // the request is encoded and queued once InvokeOneway returns
	if err := p.enter(); err != nil {
		return err
	}
	defer p.inflight.Done()
	topic := msg.Topic
	queues, err := p.publishQueues(ctx, topic)
	if err != nil {
		return &SendError{Topic: topic, Err: err}
	}
	mq, err := p.pick(sel, msg, queues, "")
	if err != nil {
		return &SendError{Topic: topic, Err: err}
	}
	se := &SendError{Topic: topic, Queue: mq, Attempts: 1}
	addr, ok := p.cl.BrokerAddr(mq.BrokerName)
	if !ok {
		se.Err = fmt.Errorf("no master address known for broker %q", mq.BrokerName)
		p.observe(mq, 0, se.Err, true)
		return se
	}
	se.BrokerAddr = addr
	h := pr.header
	h.QueueID = int32(mq.QueueID)
	h.BrokerName = mq.BrokerName
	actx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
	defer cancel()
	if err := p.cl.InvokeOneway(actx, addr, remoting.NewRequest(pr.code, h.Ext(), pr.body)); err != nil {
		se.Err = err
		p.observe(mq, 0, err, ctx.Err() == nil)
		return se
	}
	// Queued is no evidence of a healthy broker: the fault table is left as it is.
	if p.cfg.attemptHook != nil {
		p.cfg.attemptHook(mq, nil)
	}
	return nil
}
