// Package producer is Sluice's RocketMQ 4.x producer: it looks up topic routes on the
// name servers, picks message queues round-robin and sends with SEND_MESSAGE_V2
// (RocketMQ request code 310), retrying on another broker when a send fails.
//
// Every Producer owns its own connections and goroutines (no process-wide client table);
// Shutdown releases all of them.
package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

type state int

const (
	stateNew state = iota
	stateStarted
	stateClosed
)

// Producer sends messages to RocketMQ-protocol brokers. Create it with New, call Start,
// send with SendSync, and Shutdown when done. Safe for concurrent use.
type Producer struct {
	cfg  Config
	cl   *client.Client
	send middleware.SendFunc // Config.Middlewares around rawSend

	mu       sync.Mutex
	state    state
	inflight sync.WaitGroup // raw sends in progress; Add only under mu while started

	rrMu sync.Mutex
	rr   map[string]*atomic.Uint32 // topic → round-robin counter
}

// New returns a producer for cfg (defaults applied). It opens no connection until a
// send. It fails with an error naming the field when cfg is invalid.
func New(cfg Config) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	p := &Producer{cfg: cfg, rr: make(map[string]*atomic.Uint32)}
	cl, err := client.New(client.Config{
		NamesrvAddrs:         cfg.NamesrvAddrs,
		InstanceName:         cfg.InstanceName,
		Logger:               cfg.Logger,
		RouteRefreshInterval: cfg.routeRefreshInterval,
		HeartbeatInterval:    cfg.heartbeatInterval,
		Heartbeat: func() client.HeartbeatData {
			return client.HeartbeatData{ProducerDataSet: []client.ProducerData{{GroupName: cfg.Group}}}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	p.cl = cl
	p.send = middleware.ChainSend(p.rawSend, cfg.Middlewares...)
	return p, nil
}

// Start starts route refresh (every 30 s) and heartbeats (every 30 s, and at once to a
// broker first seen in a route). A second call does nothing; after Shutdown it returns
// ErrClosed.
func (p *Producer) Start() error {
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

// SendSync sends msg and waits for the broker's answer, running Config.Middlewares
// around the send. It sets property UNIQ_KEY on msg when missing (the SendResult's
// MsgID). Errors: a *message.ValidationError before any network traffic for a message
// that breaks the rules (topic, tag, empty body, size over MaxMessageSize, a system
// topic); a *SendError when no attempt stored the message; ErrNotStarted / ErrClosed.
// A nil error means the broker stored the message; Status tells whether flushing or
// replication timed out.
func (p *Producer) SendSync(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
	return p.send(ctx, msg)
}

// AsSendFunc returns SendSync as a middleware.SendFunc (Config.Middlewares included),
// for code that wraps producers generically.
func (p *Producer) AsSendFunc() middleware.SendFunc { return p.SendSync }

// enter registers a raw send in progress; the caller must call p.inflight.Done.
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

// rawSend is the send without middlewares: validate, route, then up to
// 1+RetryTimesWhenSendFailed attempts.
func (p *Producer) rawSend(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
	if err := message.Validate(msg, p.cfg.MaxMessageSize); err != nil {
		return nil, err
	}
	if message.IsSendForbiddenTopic(msg.Topic) {
		return nil, &message.ValidationError{Field: "topic", Reason: fmt.Sprintf("%q is a system topic producers may not send to", msg.Topic)}
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.inflight.Done()

	if msg.UniqKey() == "" {
		msg.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
	}
	body := msg.Body
	var sysFlag int32
	if p.cfg.CompressMsgBodyOverHowmuch > 0 && len(body) >= p.cfg.CompressMsgBodyOverHowmuch {
		z, err := message.Deflate(body, p.cfg.CompressLevel)
		if err != nil {
			return nil, fmt.Errorf("producer: compress body: %w", err)
		}
		body, sysFlag = z, sysFlag|message.SysFlagCompressed
	}
	if msg.Property(message.PropertyTransactionPrepared) == "true" {
		sysFlag |= message.SysFlagTransactionPrepared
	}
	props := message.MarshalProperties(msg.Properties)

	queues, err := p.publishQueues(ctx, msg.Topic)
	if err != nil {
		return nil, &SendError{Topic: msg.Topic, Err: err}
	}
	header := client.SendHeader{
		ProducerGroup:         p.cfg.Group,
		Topic:                 msg.Topic,
		DefaultTopic:          message.AutoCreateTopicKey,
		DefaultTopicQueueNums: client.DefaultTopicQueueNums,
		SysFlag:               sysFlag,
		BornTimestamp:         time.Now().UnixMilli(),
		Flag:                  msg.Flag,
		Properties:            props,
	}
	counter := p.counter(msg.Topic)
	attempts := 1 + p.cfg.RetryTimesWhenSendFailed
	var last *SendError
	lastBroker := ""
	for i := 0; i < attempts; i++ {
		mq := selectQueue(queues, counter, lastBroker)
		lastBroker = mq.BrokerName
		last = &SendError{Topic: msg.Topic, Queue: mq, Attempts: i + 1}
		addr, ok := p.cl.BrokerAddr(mq.BrokerName)
		if !ok {
			last.Err = fmt.Errorf("no master address known for broker %q", mq.BrokerName)
			continue
		}
		last.BrokerAddr = addr
		h := header
		h.QueueID = mq.QueueID
		h.BrokerName = mq.BrokerName
		req := remoting.NewRequest(remoting.SendMessageV2, h.Ext(), body)
		actx, cancel := context.WithTimeout(ctx, p.cfg.SendTimeout)
		resp, err := p.cl.InvokeSync(actx, addr, req)
		cancel()
		if err != nil {
			last.Err = err
			if ctx.Err() != nil { // the caller gave up: no further attempts
				return nil, last
			}
			p.cfg.Logger.Debug("producer: send attempt failed", "topic", msg.Topic, "queue", mq.String(), "broker", addr, "err", err)
			continue
		}
		code := resp.ResponseCode()
		if client.SendStored(code) {
			r, err := client.ParseSendResponse(resp, mq, msg.UniqKey())
			if err != nil { // stored, but the answer is malformed: report, do not resend
				return nil, &SendError{Topic: msg.Topic, Queue: mq, BrokerAddr: addr, Attempts: i + 1, Code: code, Err: err}
			}
			return r, nil
		}
		last.Code, last.Remark = code, resp.Remark
		if !code.Retryable() {
			return nil, last
		}
		p.cfg.Logger.Debug("producer: send attempt refused", "topic", msg.Topic, "queue", mq.String(), "broker", addr, "code", code.String(), "remark", resp.Remark)
	}
	return nil, last
}

// publishQueues returns the writable queues of topic. A topic the name servers do not
// know gets the route of TBW102 with at most 4 queues per broker, so the broker
// auto-creates it on the first send (PROTOCOL §7.2).
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
	qs, err := client.PublishQueues(topic, rd)
	if err != nil {
		return nil, err
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("%w for topic %q", ErrNoQueue, topic)
	}
	return qs, nil
}

func (p *Producer) counter(topic string) *atomic.Uint32 {
	p.rrMu.Lock()
	defer p.rrMu.Unlock()
	c := p.rr[topic]
	if c == nil {
		c = new(atomic.Uint32)
		p.rr[topic] = c
	}
	return c
}

// selectQueue picks the next queue round-robin. With avoidBroker set (a retry), it takes
// the next queue on a different broker if the list has one.
func selectQueue(queues []message.MessageQueue, counter *atomic.Uint32, avoidBroker string) message.MessageQueue {
	n := uint32(len(queues))
	if avoidBroker != "" {
		for i := uint32(0); i < n; i++ {
			q := queues[(counter.Add(1)-1)%n]
			if q.BrokerName != avoidBroker {
				return q
			}
		}
	}
	return queues[(counter.Add(1)-1)%n]
}

// Shutdown stops the producer: new sends fail with ErrClosed, sends in progress may
// finish until ctx is done, then UNREGISTER_CLIENT (RocketMQ request code 35) goes to
// every known broker, and connections and goroutines are released. It returns ctx's
// error if in-flight sends or the unregister did not finish in time (resources are
// released anyway), or the unregister failures. Idempotent.
//
// Stop order: refuse new sends → wait for in-flight sends (bounded by ctx) → unregister
// → close the client.
func (p *Producer) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	if p.state == stateClosed {
		p.mu.Unlock()
		return nil
	}
	wasStarted := p.state == stateStarted
	p.state = stateClosed
	p.mu.Unlock()

	done := make(chan struct{})
	go func() { p.inflight.Wait(); close(done) }()
	var errs []error
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("producer: in-flight sends still running: %w", ctx.Err()))
	}
	if wasStarted {
		if err := p.cl.Unregister(ctx, p.cfg.Group, ""); err != nil {
			errs = append(errs, fmt.Errorf("producer: %w", err))
		}
	}
	_ = p.cl.Close() // fails any send still waiting
	<-done
	return errors.Join(errs...)
}
