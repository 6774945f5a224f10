package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Transactional messages (RocketMQ 4.x two-phase send; docs/protocol.md §3.9, §3.10, §7.6):
//
//  1. SendMessageInTransaction sends a half message (property TRAN_MSG=true, PGROUP =
//     the producer group, sysFlag bit 0x4). The broker keeps it in
//     RMQ_SYS_TRANS_HALF_TOPIC, invisible to consumers.
//  2. Once the broker stored it (SEND_OK) the listener's ExecuteLocalTransaction runs.
//  3. Its decision goes to the broker with END_TRANSACTION (RocketMQ request code 37):
//     commit (8) makes the message visible, rollback (12) discards it, unknown (0)
//     leaves it pending.
//  4. For a half message still pending after the broker's transactionTimeOut, the broker
//     sends CHECK_TRANSACTION_STATE (39) to a live producer of the group; the listener's
//     CheckLocalTransaction answers, again with END_TRANSACTION (fromTransactionCheck =
//     true), to the broker the check came from.

// LocalTransactionState is the outcome of a local transaction, as a TransactionListener
// reports it. The zero value is Unknown.
type LocalTransactionState int

const (
	// Unknown leaves the half message pending: the broker asks CheckLocalTransaction
	// later (END_TRANSACTION commitOrRollback 0, Java UNKNOW).
	Unknown LocalTransactionState = iota
	// CommitMessage makes the message visible to consumers, once
	// (END_TRANSACTION commitOrRollback 8, Java COMMIT_MESSAGE).
	CommitMessage
	// RollbackMessage discards the message; no consumer ever sees it
	// (END_TRANSACTION commitOrRollback 12, Java ROLLBACK_MESSAGE).
	RollbackMessage
)

// String returns the Java name: "COMMIT_MESSAGE", "ROLLBACK_MESSAGE" or "UNKNOW"
// (sic, RocketMQ's spelling); other values print as LocalTransactionState(n).
func (s LocalTransactionState) String() string {
	switch s {
	case Unknown:
		return "UNKNOW"
	case CommitMessage:
		return "COMMIT_MESSAGE"
	case RollbackMessage:
		return "ROLLBACK_MESSAGE"
	}
	return "LocalTransactionState(" + strconv.Itoa(int(s)) + ")"
}

// endTransactionCode is the END_TRANSACTION commitOrRollback value of s (Java
// MessageSysFlag TRANSACTION_COMMIT_TYPE 8, TRANSACTION_ROLLBACK_TYPE 12, NOT_TYPE 0).
func (s LocalTransactionState) endTransactionCode() int32 {
	switch s {
	case CommitMessage:
		return message.SysFlagTransactionCommit
	case RollbackMessage:
		return message.SysFlagTransactionRollback
	}
	return message.SysFlagTransactionNot
}

// TransactionListener runs and checks the local transactions of a TransactionProducer.
// A panic in either method counts as Unknown and is logged; a value other than the three
// states counts as Unknown too.
type TransactionListener interface {
	// ExecuteLocalTransaction runs the local transaction that belongs to msg, after the
	// broker stored msg as a half message. ctx is SendMessageInTransaction's context.
	// It returns CommitMessage, RollbackMessage, or Unknown to decide later through
	// CheckLocalTransaction.
	ExecuteLocalTransaction(ctx context.Context, msg *message.Message) LocalTransactionState
	// CheckLocalTransaction reports the outcome of the local transaction of msg, a half
	// message the broker has had no decision for after its transactionTimeOut (60 s by
	// default), with Topic and QueueID restored to the real ones and property UNIQ_KEY
	// (the MsgID SendMessageInTransaction returned) set. It may be called several times
	// for one message (at most the broker's transactionCheckMax, default 15) and on any
	// producer of the group. ctx ends when the producer shuts down.
	CheckLocalTransaction(ctx context.Context, msg *message.MessageExt) LocalTransactionState
}

// TransactionSendResult is the result of SendMessageInTransaction: the half message's
// send result, the decision sent to the broker and whether it arrived.
type TransactionSendResult struct {
	// SendResult is the half message's send result: MsgID is its UNIQ_KEY, OffsetMsgID
	// its offset message id in RMQ_SYS_TRANS_HALF_TOPIC, QueueOffset its half-queue
	// offset, Queue the message queue of the real topic it was sent for.
	message.SendResult
	// State is the decision: the listener's, or RollbackMessage without running the
	// local transaction when the broker stored the half message with a status other
	// than SEND_OK (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE).
	State LocalTransactionState
	// EndTransactionErr is why END_TRANSACTION did not reach the broker, or its error
	// response; nil when a commit or rollback was acknowledged (also when a check had
	// already ended the transaction the same way), and for Unknown (sent one-way, the
	// broker never answers it). A transport error leaves the half message pending: the
	// broker asks CheckLocalTransaction later. A *remoting.ResponseError with code
	// TRANSACTION_FAILED (4) means a check had already ended the transaction with the
	// other decision, which stands (its remark names it).
	EndTransactionErr error
}

// Defaults of the transaction check workers (see WithCheckWorkers, WithCheckBacklog).
const (
	// DefaultCheckWorkers is how many CheckLocalTransaction calls run at once.
	DefaultCheckWorkers = 4
	// DefaultCheckBacklog is how many received checks may wait for a worker; further
	// checks are dropped (and logged): the broker checks again after
	// transactionCheckInterval.
	DefaultCheckBacklog = 1024
	// MaxCheckWorkers bounds WithCheckWorkers.
	MaxCheckWorkers = 256
	// MaxCheckBacklog bounds WithCheckBacklog.
	MaxCheckBacklog = 1 << 16
)

// TransactionOption changes how a TransactionProducer answers broker checks.
type TransactionOption func(*txnOptions)

type txnOptions struct {
	workers int
	backlog int
}

// WithCheckWorkers sets how many CheckLocalTransaction calls may run at once, 1..256.
// Default: DefaultCheckWorkers (4).
func WithCheckWorkers(n int) TransactionOption { return func(o *txnOptions) { o.workers = n } }

// WithCheckBacklog sets how many checks may wait for a free worker, 1..65536; a check
// arriving when the backlog is full is dropped and logged (the broker sends it again
// after its transactionCheckInterval). Default: DefaultCheckBacklog (1024).
func WithCheckBacklog(n int) TransactionOption { return func(o *txnOptions) { o.backlog = n } }

// txnCheck is one CHECK_TRANSACTION_STATE waiting for a worker.
type txnCheck struct {
	addr                 string // the broker connection the check came from
	tranStateTableOffset int64
	commitLogOffset      int64
	transactionID        string
	msg                  *message.MessageExt
}

// TransactionProducer sends transactional messages: see the comment at the top of
// transaction.go and SendMessageInTransaction. It is a Producer (Config, routes,
// retries, fault tolerance) plus a TransactionListener and a bounded pool of workers
// that answer the broker's checks. Create it with NewTransactionProducer, call Start,
// and Shutdown when done. Safe for concurrent use.
//
// Lock order: TransactionProducer.mu is never held while calling the listener or doing
// network I/O.
type TransactionProducer struct {
	p        *Producer
	listener TransactionListener
	group    string
	log      *slog.Logger

	checks  chan *txnCheck // bounded backlog; never closed
	workers int

	// Check counters (CheckStats).
	received, answered, answerFailed, dropped atomic.Uint64

	mu       sync.Mutex
	state    state
	inflight sync.WaitGroup // SendMessageInTransaction calls; Add only under mu while started
	stop     chan struct{}  // closed by Shutdown: workers return
	wg       sync.WaitGroup // check workers

	ctx    context.Context // given to CheckLocalTransaction; cancelled when Shutdown gives up waiting
	cancel context.CancelFunc
}

// NewTransactionProducer returns a transaction producer for cfg (defaults applied, as
// New) whose local transactions listener runs and checks. It opens no connection until
// Start and a send.
//
// cfg.Middlewares must be empty: a *MiddlewareError (errors.Is
// ErrMiddlewaresUnsupported) otherwise. Send steps cannot run around a half message:
// they may hand the send a copy of the message (Keys does), while the transaction's
// identity (UNIQ_KEY, the broker's transaction id) and the listener's view must stay on
// the caller's message; and a step that parks a failed send for a later resend
// (redismw.Park) would resend a half message outside the transaction protocol, with no
// local transaction to decide it. Set keys on the message before SendMessageInTransaction
// instead (middleware.ContentKey gives the key Keys would set).
//
// Errors: those of New, the *MiddlewareError above, an error for a nil listener, and an
// error naming the option for a worker count or backlog out of range.
func NewTransactionProducer(cfg Config, listener TransactionListener, opts ...TransactionOption) (*TransactionProducer, error) {
	if listener == nil {
		return nil, errors.New("producer: NewTransactionProducer: listener is nil")
	}
	if len(cfg.Middlewares) > 0 {
		return nil, &MiddlewareError{Path: "NewTransactionProducer",
			Reason: "send steps cannot run around a half message (they may copy it, and a parked half message would be resent outside the transaction); use a Config without Middlewares"}
	}
	o := txnOptions{workers: DefaultCheckWorkers, backlog: DefaultCheckBacklog}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.workers < 1 || o.workers > MaxCheckWorkers {
		return nil, fmt.Errorf("producer: WithCheckWorkers %d must be 1..%d", o.workers, MaxCheckWorkers)
	}
	if o.backlog < 1 || o.backlog > MaxCheckBacklog {
		return nil, fmt.Errorf("producer: WithCheckBacklog %d must be 1..%d", o.backlog, MaxCheckBacklog)
	}
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	tp := &TransactionProducer{
		p:        p,
		listener: listener,
		group:    p.cfg.Group,
		log:      p.cfg.Logger,
		checks:   make(chan *txnCheck, o.backlog),
		workers:  o.workers,
		stop:     make(chan struct{}),
	}
	tp.ctx, tp.cancel = context.WithCancel(context.Background())
	// Registered before any connection exists, so no check can arrive unanswered.
	p.cl.RegisterHandler(remoting.CheckTransactionState, tp.onCheck)
	return tp, nil
}

// Producer returns the underlying Producer, for ordinary sends with the same group and
// connections. Its Start and Shutdown are those of the TransactionProducer; call them
// on the TransactionProducer.
func (tp *TransactionProducer) Producer() *Producer { return tp.p }

// ClientID returns the client id sent in heartbeats ("<ip>@<instance>").
func (tp *TransactionProducer) ClientID() string { return tp.p.ClientID() }

// CheckStats counts the broker checks (CHECK_TRANSACTION_STATE) of a
// TransactionProducer and its answers to them since it was created.
type CheckStats struct {
	// Received counts the checks of this producer group that arrived.
	Received uint64
	// Answered counts the answers (END_TRANSACTION, one-way) queued on the connection of
	// the broker that checked. A one-way request gets no response: whether the broker
	// applied an answer is not known here.
	Answered uint64
	// AnswerFailed counts the answers that could not be queued (each is logged).
	AnswerFailed uint64
	// Dropped counts the checks dropped because the check backlog was full; the broker
	// checks those half messages again later.
	Dropped uint64
}

// CheckStats returns the check counters.
func (tp *TransactionProducer) CheckStats() CheckStats {
	return CheckStats{Received: tp.received.Load(), Answered: tp.answered.Load(), AnswerFailed: tp.answerFailed.Load(), Dropped: tp.dropped.Load()}
}

// Start starts the producer (route refresh, heartbeats naming the producer group — the
// broker sends checks only to producers it knows from a heartbeat) and the check
// workers; ctx as in Producer.Start. A second call does nothing; after Shutdown it returns
// ErrClosed.
func (tp *TransactionProducer) Start(ctx context.Context) error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	switch tp.state {
	case stateClosed:
		return ErrClosed
	case stateStarted:
		return nil
	}
	if err := tp.p.Start(ctx); err != nil {
		return err
	}
	tp.state = stateStarted
	for i := 0; i < tp.workers; i++ {
		tp.wg.Add(1)
		go tp.worker()
	}
	return nil
}

// enter registers a SendMessageInTransaction call; the caller must call inflight.Done.
func (tp *TransactionProducer) enter() error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	switch tp.state {
	case stateNew:
		return ErrNotStarted
	case stateClosed:
		return ErrClosed
	}
	tp.inflight.Add(1)
	return nil
}

// SendMessageInTransaction sends msg as a half message, runs the listener's
// ExecuteLocalTransaction once the broker stored it with SEND_OK, and sends the
// decision with END_TRANSACTION (RocketMQ request code 37; docs/protocol.md §3.9). It sets
// properties TRAN_MSG=true, PGROUP=<group> and UNIQ_KEY (when missing) on msg, and
// removes TRAN_MSG and PGROUP again when the half message was not stored. The half
// message is sent like SendSync (Config.Selector, retries on another broker, SendTimeout
// per attempt); a TransactionProducer has no Config.Middlewares (see
// NewTransactionProducer). A stored status other than SEND_OK
// rolls back without running the local transaction. A commit or rollback waits for the
// broker's answer (SendTimeout); Unknown goes one-way.
//
// Errors, with a nil result (the local transaction did not run): a
// *message.ValidationError before any network traffic for a message with a delay level
// (Field "delay level": RocketMQ refuses delayed transactional messages) or one that
// breaks the rules of SendSync; a *SendError when the half message was not stored;
// ErrNotStarted / ErrClosed. Once the half message is stored the error is nil and the
// result says the decision and whether it reached the broker (EndTransactionErr).
func (tp *TransactionProducer) SendMessageInTransaction(ctx context.Context, msg *message.Message) (*TransactionSendResult, error) {
	if msg == nil {
		return nil, &message.ValidationError{Field: "message", Reason: "nil"}
	}
	if lvl := msg.DelayLevel(); lvl > 0 {
		return nil, &message.ValidationError{Field: "delay level",
			Reason: fmt.Sprintf("a transactional message cannot be delayed (delay level %d); remove property %s", lvl, message.PropertyDelayTimeLevel)}
	}
	if err := tp.p.checkMessage(msg); err != nil {
		return nil, err
	}
	if err := tp.enter(); err != nil {
		return nil, err
	}
	defer tp.inflight.Done()
	msg.SetProperty(message.PropertyTransactionPrepared, "true")
	msg.SetProperty(message.PropertyProducerGroup, tp.group)
	res, err := tp.p.rawSend(ctx, msg, tp.p.cfg.Selector, modeSync)
	if err != nil {
		// Not stored: msg must not stay a half message if the caller sends it otherwise.
		msg.RemoveProperty(message.PropertyTransactionPrepared)
		msg.RemoveProperty(message.PropertyProducerGroup)
		return nil, err
	}
	r := &TransactionSendResult{SendResult: *res, State: RollbackMessage}
	var remark string
	if res.Status == message.SendOK {
		if res.TransactionID != "" {
			msg.SetProperty(message.PropertyTransactionID, res.TransactionID)
		}
		r.State, remark = tp.execute(ctx, msg)
	} else {
		tp.log.Warn("producer: half message stored with a status other than SEND_OK; rolling back",
			"topic", msg.Topic, "msgId", res.MsgID, "status", res.Status.String())
	}
	r.EndTransactionErr = tp.endTransaction(ctx, res, msg.UniqKey(), r.State, remark)
	if r.EndTransactionErr != nil {
		tp.log.Warn("producer: end transaction failed; the broker will check the half message later",
			"topic", msg.Topic, "msgId", res.MsgID, "state", r.State.String(), "err", r.EndTransactionErr)
	}
	return r, nil
}

// execute runs ExecuteLocalTransaction; a panic or an unknown value is Unknown. The
// returned remark is sent with END_TRANSACTION (Java sets it after an exception).
func (tp *TransactionProducer) execute(ctx context.Context, msg *message.Message) (state LocalTransactionState, remark string) {
	defer func() {
		if v := recover(); v != nil {
			tp.log.Error("producer: ExecuteLocalTransaction panicked; state unknown, the broker will check",
				"topic", msg.Topic, "msgId", msg.UniqKey(), "panic", v)
			state, remark = Unknown, fmt.Sprintf("executeLocalTransactionBranch exception: %v", v)
		}
	}()
	return tp.normalize(tp.listener.ExecuteLocalTransaction(ctx, msg), "ExecuteLocalTransaction", msg.UniqKey()), ""
}

// normalize maps an out-of-range state to Unknown, logged.
func (tp *TransactionProducer) normalize(s LocalTransactionState, method, msgID string) LocalTransactionState {
	switch s {
	case CommitMessage, RollbackMessage, Unknown:
		return s
	}
	tp.log.Warn("producer: "+method+" returned an unknown state; treating it as unknown", "msgId", msgID, "state", int(s))
	return Unknown
}

// endTransaction sends the decision for the half message of res to the master of its
// broker.
func (tp *TransactionProducer) endTransaction(ctx context.Context, res *message.SendResult, uniqKey string, s LocalTransactionState, remark string) error {
	_, phyOffset, err := message.ParseOffsetMsgID(res.OffsetMsgID)
	if err != nil {
		return fmt.Errorf("producer: end transaction: send result offset msg id %q: %w", res.OffsetMsgID, err)
	}
	addr, ok := tp.p.cl.BrokerAddr(res.Queue.BrokerName)
	if !ok {
		return fmt.Errorf("producer: end transaction: no master address known for broker %q", res.Queue.BrokerName)
	}
	txID := res.TransactionID
	if txID == "" {
		txID = uniqKey
	}
	req := endTransactionRequest(tp.group, res.QueueOffset, phyOffset, s, false, uniqKey, txID, remark)
	req.ExtFields["bname"] = res.Queue.BrokerName
	return tp.sendEnd(ctx, addr, req, s)
}

// endTransactionRequest builds END_TRANSACTION (RocketMQ request code 37; Java
// EndTransactionRequestHeader, docs/protocol.md §3.9).
func endTransactionRequest(group string, tranStateTableOffset, commitLogOffset int64, s LocalTransactionState,
	fromCheck bool, msgID, txID, remark string) *remoting.RemotingCommand {
	req := remoting.NewRequest(remoting.EndTransaction, wire.EndTransactionHeader{
		ProducerGroup: group, TranStateTableOffset: tranStateTableOffset, CommitLogOffset: commitLogOffset,
		CommitOrRollback: s.endTransactionCode(), FromTransactionCheck: fromCheck, MsgID: msgID, TransactionID: txID,
	}.Ext(), nil)
	req.Remark = remark
	return req
}

// sendEnd sends req to addr: a commit or rollback synchronously (SendTimeout) with the
// broker's answer checked, Unknown one-way (a broker never answers it).
func (tp *TransactionProducer) sendEnd(ctx context.Context, addr string, req *remoting.RemotingCommand, s LocalTransactionState) error {
	cctx, cancel := context.WithTimeout(ctx, tp.p.cfg.SendTimeout)
	defer cancel()
	if s == Unknown {
		if err := tp.p.cl.InvokeOneway(cctx, addr, req); err != nil {
			return fmt.Errorf("producer: end transaction to %s: %w", addr, err)
		}
		return nil
	}
	resp, err := tp.p.cl.InvokeSync(cctx, addr, req)
	if err == nil {
		err = resp.ResponseErr()
	}
	if err != nil {
		return fmt.Errorf("producer: end transaction (%s) to %s: %w", s, addr, err)
	}
	return nil
}

// onCheck serves CHECK_TRANSACTION_STATE (RocketMQ request code 39, broker → client,
// one-way; docs/protocol.md §3.10): it decodes the check and queues it for a worker. A check
// for another producer group (property PGROUP) is ignored, as the official clients do;
// a malformed one is logged and ignored; one arriving while the backlog is full is
// dropped (the broker checks again). It never answers: the answer is END_TRANSACTION.
func (tp *TransactionProducer) onCheck(_ context.Context, addr string, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	c, err := parseCheck(addr, req)
	if err != nil {
		tp.log.Warn("producer: malformed transaction check ignored", "broker", addr, "err", err)
		return nil
	}
	if g := c.msg.Property(message.PropertyProducerGroup); g != tp.group {
		tp.log.Warn("producer: transaction check for another producer group ignored", "broker", addr, "group", g, "mine", tp.group)
		return nil
	}
	tp.received.Add(1)
	select {
	case <-tp.stop:
		return nil
	default:
	}
	select {
	case tp.checks <- c:
	default:
		n := tp.dropped.Add(1)
		tp.log.Warn("producer: transaction check backlog full; check dropped, the broker will check again",
			"broker", addr, "msgId", c.msg.UniqKey(), "dropped", n)
	}
	return nil
}

// parseCheck reads the header and the one message record of a check.
func parseCheck(addr string, req *remoting.RemotingCommand) (*txnCheck, error) {
	h, err := wire.ParseCheckTransactionStateHeader(req)
	if err != nil {
		return nil, err
	}
	c := &txnCheck{addr: addr, tranStateTableOffset: h.TranStateTableOffset, commitLogOffset: h.CommitLogOffset}
	if c.msg, _, err = message.DecodeRecord(req.Body, message.DecodeOptions{Decompress: true}); err != nil {
		return nil, fmt.Errorf("check body: %w", err)
	}
	c.msg.MsgID = c.msg.UniqKey()
	if c.msg.MsgID == "" {
		c.msg.MsgID = h.MsgID
	}
	if id := h.OffsetMsgID; id != "" {
		c.msg.OffsetMsgID = id
	}
	// Transaction id: property __transactionId__, else the header's, else UNIQ_KEY
	// (the official Go client's order; docs/protocol.md §3.9).
	c.transactionID = c.msg.Property(message.PropertyTransactionID)
	if c.transactionID == "" {
		c.transactionID = h.TransactionID
	}
	if c.transactionID == "" {
		c.transactionID = c.msg.UniqKey()
	}
	return c, nil
}

// worker answers queued checks until Shutdown.
func (tp *TransactionProducer) worker() {
	defer tp.wg.Done()
	for {
		select {
		case <-tp.stop:
			return
		case c := <-tp.checks:
			tp.answer(c)
		}
	}
}

// answer runs CheckLocalTransaction for c and sends END_TRANSACTION with
// fromTransactionCheck=true, one-way, to the broker the check came from (as the
// official clients do; the broker's answer is not needed: it checks again if the
// decision is lost).
func (tp *TransactionProducer) answer(c *txnCheck) {
	s := tp.check(c.msg)
	req := endTransactionRequest(tp.group, c.tranStateTableOffset, c.commitLogOffset, s, true, c.msg.UniqKey(), c.transactionID, "")
	ctx, cancel := context.WithTimeout(tp.ctx, tp.p.cfg.SendTimeout)
	defer cancel()
	err := tp.p.cl.InvokeOneway(ctx, c.addr, req)
	if err == nil {
		tp.answered.Add(1)
		return
	}
	tp.answerFailed.Add(1)
	if !errors.Is(err, client.ErrClosed) && tp.ctx.Err() == nil {
		tp.log.Warn("producer: answering a transaction check failed; the broker will check again",
			"broker", c.addr, "msgId", c.msg.UniqKey(), "state", s.String(), "err", err)
	}
}

// check runs CheckLocalTransaction; a panic or an unknown value is Unknown.
func (tp *TransactionProducer) check(m *message.MessageExt) (s LocalTransactionState) {
	defer func() {
		if v := recover(); v != nil {
			tp.log.Error("producer: CheckLocalTransaction panicked; state unknown", "topic", m.Topic, "msgId", m.UniqKey(), "panic", v)
			s = Unknown
		}
	}()
	return tp.normalize(tp.listener.CheckLocalTransaction(tp.ctx, m), "CheckLocalTransaction", m.UniqKey())
}

// Shutdown stops the transaction producer: new sends fail with ErrClosed, checks that
// arrive are ignored, SendMessageInTransaction calls in progress (with their local
// transactions) and CheckLocalTransaction calls running may finish until ctx is done
// (then the checks' context is cancelled; queued checks are dropped — the broker sends
// them again to another producer of the group), then the producer shuts down (see
// Producer.Shutdown: UNREGISTER_CLIENT, connections closed). It returns ctx's error if
// calls were still running, joined with the producer's. A listener call that ignores
// its context keeps its goroutine until it returns. Idempotent.
//
// Stop order: refuse sends and checks → wait for sends in progress and check workers
// (bounded by ctx) → Producer.Shutdown.
func (tp *TransactionProducer) Shutdown(ctx context.Context) error {
	tp.mu.Lock()
	if tp.state == stateClosed {
		tp.mu.Unlock()
		return nil
	}
	tp.state = stateClosed
	close(tp.stop)
	tp.mu.Unlock()

	done := make(chan struct{})
	go func() { tp.inflight.Wait(); tp.wg.Wait(); close(done) }()
	var errs []error
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("producer: transactions still running at shutdown: %w", ctx.Err()))
	}
	tp.cancel()
	if err := tp.p.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
