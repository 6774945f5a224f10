package consumer

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// PullConfig configures a PullConsumer. NamesrvAddrs and Group are required.
type PullConfig struct {
	// NamesrvAddrs are the name servers, each "host:port". Required.
	NamesrvAddrs []string
	// Group is the consumer group whose offsets CommitOffset and CommittedOffset use.
	// Required; at most message.MaxGroupLength (120) bytes of topic characters
	// (message.ValidateGroupTopics).
	Group string
	// InstanceName distinguishes clients in one process in the client id. Default:
	// unique per PullConsumer.
	InstanceName string
	// Logger receives route and connection events. Default: slog.Default().
	Logger *slog.Logger
	// Credentials, when AccessKey and SecretKey are both set, sign every request with
	// RocketMQ plain ACL 1.0 (HMAC-SHA1 over the sorted ext-field values and the body),
	// for brokers and name servers with aclEnable. Default: none (unsigned).
	Credentials remoting.Credentials
	// TLS, when set, connects to name servers and brokers over TLS with this
	// configuration (crypto/tls; e.g. RootCAs with the servers' CA). Default: nil (plain
	// TCP).
	TLS *tls.Config
	// JSONHeaders makes the consumer send RocketMQ's JSON request headers instead of the
	// binary ones (serialize type ROCKETMQ, docs/protocol.md §1.3). Default false: binary
	// headers, which RocketMQ brokers and name servers have decoded since 4.0 (Java
	// clients send them with -Drocketmq.serialize.type=ROCKETMQ) and which cost less CPU
	// to encode and decode on both sides; servers answer in the request's encoding. Set it
	// for a server or proxy that reads only JSON headers.
	JSONHeaders bool
	// MaxDecompressedSize bounds one message body after decompression, in bytes. A body
	// flagged compressed that is larger, or not valid zlib, is never handed to a handler
	// (nor inflated past the limit): the push consumer moves it to %DLQ%<group> with an
	// error log; the pull consumer returns it with a nil Body and MessageExt.DecodeErr.
	// Default: message.DefaultMaxDecompressedSize (16 MiB).
	MaxDecompressedSize int
}

// Validate reports the first invalid field as an error naming it.
func (c *PullConfig) Validate() error {
	if c.Group == "" {
		return &config.Error{Package: "consumer", Field: "Group", Reason: "empty: a consumer group is required"}
	}
	if err := message.ValidateGroupTopics(c.Group); err != nil {
		return &config.Error{Package: "consumer", Field: "Group", Value: fmt.Sprintf("%.64s", c.Group), Reason: err.Error(), Err: err}
	}
	if len(c.NamesrvAddrs) == 0 {
		return &config.Error{Package: "consumer", Field: "NamesrvAddrs", Reason: `empty: need at least one name server "host:port"`}
	}
	return withPackage("consumer", (&client.Config{NamesrvAddrs: c.NamesrvAddrs}).Validate())
}

// PullStatus is the outcome of one Pull (RocketMQ PullStatus).
type PullStatus int

const (
	// PullFound: messages were found (PULL_MESSAGE answered 0 SUCCESS).
	PullFound PullStatus = iota
	// PullNoNewMsg: nothing at or after the offset yet (19 PULL_NOT_FOUND; with
	// LongPoll after waiting that long).
	PullNoNewMsg
	// PullNoMatchedMsg: messages were scanned but none matched the tag expression (20
	// PULL_RETRY_IMMEDIATELY); pull again from NextBeginOffset.
	PullNoMatchedMsg
	// PullOffsetIllegal: the offset is below the queue's min or beyond its max (21
	// PULL_OFFSET_MOVED); NextBeginOffset is where to go on.
	PullOffsetIllegal
)

// String returns the RocketMQ name, e.g. "FOUND".
func (s PullStatus) String() string {
	switch s {
	case PullFound:
		return "FOUND"
	case PullNoNewMsg:
		return "NO_NEW_MSG"
	case PullNoMatchedMsg:
		return "NO_MATCHED_MSG"
	case PullOffsetIllegal:
		return "OFFSET_ILLEGAL"
	}
	return fmt.Sprintf("PullStatus(%d)", int(s))
}

// PullRequest says what one Pull reads.
type PullRequest struct {
	// Queue is the message queue to read (see PullConsumer.MessageQueues).
	Queue message.MessageQueue
	// Expression is the tag expression: "*" or "" for all, or "TagA || TagB". It is
	// sent with the pull (the PULL_MESSAGE SUBSCRIPTION sysFlag bit), so no heartbeat
	// subscription is needed, and re-checked on the client by exact tag. With
	// ExpressionType ExpressionSQL92 it is a SQL92 expression instead (see SubscribeSQL),
	// compiled on the client first and not re-checked.
	Expression string
	// ExpressionType is ExpressionTag (default, also "") or ExpressionSQL92; the broker
	// refuses SQL92 (a *remoting.ResponseError, code 1) unless its enablePropertyFilter is true.
	ExpressionType string
	// Offset is the queue offset to read from.
	Offset int64
	// MaxNums is the most messages to return, 1..32. Default: 32.
	MaxNums int
	// LongPoll lets the broker hold the pull up to this long when there is no message
	// at Offset yet (long polling); 0 answers at once. At most 60s.
	LongPoll time.Duration
}

// PullResult is the answer of one Pull.
type PullResult struct {
	Status PullStatus
	// NextBeginOffset is the offset to pull from next.
	NextBeginOffset int64
	// MinOffset and MaxOffset are the queue's first available offset and next offset
	// to be written.
	MinOffset, MaxOffset int64
	// Messages are the messages found (Status PullFound), bodies decompressed, tags
	// matching the expression.
	Messages []*message.MessageExt
}

// Limits of a PullRequest.
const (
	MaxPullNums     = 32               // most messages one Pull returns (a broker's cap)
	MaxPullLongPoll = 60 * time.Second // longest PullRequest.LongPoll
)

// PullConsumer reads explicit message queues from explicit offsets; nothing is
// consumed or committed unless asked. It does not join its group's rebalance (it sends
// no heartbeat). Safe for concurrent use.
type PullConsumer struct {
	cfg    PullConfig
	cl     *client.Client
	broker *brokerAPI

	mu     sync.Mutex
	state  state
	ctx    context.Context // cancelled by Shutdown: in-flight calls end
	cancel context.CancelFunc
	calls  sync.WaitGroup
}

// NewPullConsumer returns a pull consumer for cfg. It connects on first use. Errors
// name the invalid field.
func NewPullConsumer(cfg PullConfig) (*PullConsumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cl, err := client.New(client.Config{NamesrvAddrs: cfg.NamesrvAddrs, InstanceName: cfg.InstanceName, Logger: cfg.Logger,
		Credentials: cfg.Credentials, TLS: cfg.TLS, SerializeType: client.HeaderEncoding(cfg.JSONHeaders)})
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c := &PullConsumer{cfg: cfg, cl: cl, broker: &brokerAPI{cl: cl, group: cfg.Group, maxBody: cfg.MaxDecompressedSize}}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Start begins the periodic route refresh; it contacts no broker itself, so ctx only
// refuses a start when it has already ended. Calls made before Start work too. It returns
// ErrClosed after Shutdown; a second call does nothing.
func (c *PullConsumer) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("consumer: start: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateClosed:
		return ErrClosed
	case stateStarted:
		return nil
	}
	c.state = stateStarted
	return c.cl.Start()
}

// enter registers a call; the returned context ends at Shutdown.
func (c *PullConsumer) enter(ctx context.Context) (context.Context, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == stateClosed {
		return nil, nil, ErrClosed
	}
	c.calls.Add(1)
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel)
	return cctx, func() { stop(); cancel(); c.calls.Done() }, nil
}

// MessageQueues returns the readable queues of topic from its route, sorted.
func (c *PullConsumer) MessageQueues(ctx context.Context, topic string) ([]message.MessageQueue, error) {
	if err := message.ValidateTopic(topic); err != nil {
		return nil, err
	}
	ctx, done, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	rd, err := c.cl.FetchRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	return wire.SubscribeQueues(topic, rd), nil
}

// ensureBroker makes sure an address to read mq's broker from is known, its master's or
// a slave's (fetching mq.Topic's route if not).
func (c *PullConsumer) ensureBroker(ctx context.Context, mq message.MessageQueue) error {
	if _, _, ok := c.cl.ReadAddr(mq.BrokerName); ok {
		return nil
	}
	if _, err := c.cl.FetchRoute(ctx, mq.Topic); err != nil {
		return err
	}
	if _, _, ok := c.cl.ReadAddr(mq.BrokerName); !ok {
		return fmt.Errorf("consumer: broker %q is not in the route of %q", mq.BrokerName, mq.Topic)
	}
	return nil
}

// Pull reads up to req.MaxNums messages of req.Queue from req.Offset with PULL_MESSAGE
// (RocketMQ request code 11): sysFlag SUBSCRIPTION (4), plus SUSPEND (2) with
// LongPoll; no commit. Errors: a *message.ValidationError or an error naming the field
// for a bad request, a *remoting.ResponseError for a refusal (e.g. 16 NO_PERMISSION for a DLQ
// topic) or a transport failure, ErrClosed after Shutdown.
func (c *PullConsumer) Pull(ctx context.Context, req PullRequest) (*PullResult, error) {
	if err := message.ValidateTopic(req.Queue.Topic); err != nil {
		return nil, err
	}
	if req.MaxNums == 0 {
		req.MaxNums = MaxPullNums
	}
	switch {
	case req.Queue.BrokerName == "" || req.Queue.QueueID < 0:
		return nil, fmt.Errorf("consumer: PullRequest.Queue %v: broker name and queue id >= 0 are required", req.Queue)
	case req.Offset < 0:
		return nil, fmt.Errorf("consumer: PullRequest.Offset %d is negative", req.Offset)
	case req.MaxNums < 1 || req.MaxNums > MaxPullNums:
		return nil, fmt.Errorf("consumer: PullRequest.MaxNums %d must be 1..%d", req.MaxNums, MaxPullNums)
	case req.LongPoll < 0 || req.LongPoll > MaxPullLongPoll:
		return nil, fmt.Errorf("consumer: PullRequest.LongPoll %v must be 0..%v", req.LongPoll, MaxPullLongPoll)
	}
	expr := strings.TrimSpace(req.Expression)
	if expr == "" {
		expr = message.SubscribeAll
	}
	exprType, err := pullExpressionType(req) // selector.go
	if err != nil {
		return nil, err
	}
	tags := message.ParseTagExpression(expr)
	if exprType == ExpressionSQL92 {
		tags = nil // the broker filters by properties; no tag re-check
	}
	for _, t := range tags {
		if err := message.ValidateTag(t); err != nil {
			return nil, err
		}
	}
	ctx, done, err := c.enter(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := c.ensureBroker(ctx, req.Queue); err != nil {
		return nil, err
	}
	a := pullArgs{mq: req.Queue, offset: req.Offset, maxNums: req.MaxNums, sysFlag: wire.PullFlagSubscription,
		subscription: expr, expressionType: exprType}
	if req.LongPoll > 0 {
		a.sysFlag |= wire.PullFlagSuspend
		a.suspend = req.LongPoll
	}
	r, err := c.broker.pull(ctx, a)
	if err != nil {
		if c.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, err
	}
	res := &PullResult{NextBeginOffset: r.nextBegin, MinOffset: r.minOffset, MaxOffset: r.maxOffset}
	switch r.code {
	case remoting.Success:
		res.Status = PullFound
		set := map[string]bool{}
		for _, t := range tags {
			set[t] = true
		}
		for _, m := range r.msgs {
			if tags == nil || set[m.Tag()] {
				res.Messages = append(res.Messages, m)
			}
		}
		if len(res.Messages) == 0 {
			res.Status = PullNoMatchedMsg
		}
	case remoting.PullNotFound:
		res.Status = PullNoNewMsg
	case remoting.PullRetryImmediately:
		res.Status = PullNoMatchedMsg
	default:
		res.Status = PullOffsetIllegal
	}
	return res, nil
}

// CommitOffset stores offset as the group's offset of mq on its broker
// (UPDATE_CONSUMER_OFFSET, RocketMQ request code 15) and waits for the answer. By
// convention it is the next offset to consume: the NextBeginOffset of the last
// handled pull.
func (c *PullConsumer) CommitOffset(ctx context.Context, mq message.MessageQueue, offset int64) error {
	if offset < 0 {
		return fmt.Errorf("consumer: CommitOffset: offset %d is negative", offset)
	}
	ctx, done, err := c.enter(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := c.ensureBroker(ctx, mq); err != nil {
		return err
	}
	return c.broker.updateOffset(ctx, mq, offset)
}

// CommittedOffset returns the group's stored offset of mq (QUERY_CONSUMER_OFFSET, 14),
// -1 when there is none.
func (c *PullConsumer) CommittedOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	return c.queueCall(ctx, mq, func(ctx context.Context) (int64, error) { return c.broker.queryOffset(ctx, mq) })
}

// MinOffset returns the first offset of mq still stored (GET_MIN_OFFSET, 31).
func (c *PullConsumer) MinOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	return c.queueCall(ctx, mq, func(ctx context.Context) (int64, error) { return c.broker.minOffset(ctx, mq) })
}

// MaxOffset returns the next offset to be written to mq (GET_MAX_OFFSET, 30).
func (c *PullConsumer) MaxOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	return c.queueCall(ctx, mq, func(ctx context.Context) (int64, error) { return c.broker.maxOffset(ctx, mq) })
}

// OffsetForTime returns the offset of the message of mq stored nearest to t
// (SEARCH_OFFSET_BY_TIMESTAMP, 29).
func (c *PullConsumer) OffsetForTime(ctx context.Context, mq message.MessageQueue, t time.Time) (int64, error) {
	return c.queueCall(ctx, mq, func(ctx context.Context) (int64, error) { return c.broker.searchOffset(ctx, mq, t) })
}

// queueCall runs an offset request for mq against its broker, as a call of this consumer
// (ErrClosed after Shutdown).
func (c *PullConsumer) queueCall(ctx context.Context, mq message.MessageQueue, f func(context.Context) (int64, error)) (int64, error) {
	ctx, done, err := c.enter(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	if err := c.ensureBroker(ctx, mq); err != nil {
		return 0, err
	}
	return f(ctx)
}

// Shutdown ends calls in flight (they return ErrClosed or a context error), waits for
// them until ctx is done, and closes the connections. Idempotent.
func (c *PullConsumer) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.state == stateClosed {
		c.mu.Unlock()
		return nil
	}
	c.state = stateClosed
	c.mu.Unlock()
	c.cancel()
	done := make(chan struct{})
	go func() { c.calls.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("consumer: pull calls still running at shutdown: %w", ctx.Err())
	}
	_ = c.cl.Close()
	<-done
	return err
}
