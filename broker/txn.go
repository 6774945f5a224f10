package broker

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Transactional messages (RocketMQ 4.x two-phase send, Java TransactionalMessageService).
//
//  1. The producer sends a half message: property TRAN_MSG=true and PGROUP=<group>. The
//     broker stores it in RMQ_SYS_TRANS_HALF_TOPIC queue 0, with its real topic and queue
//     id in REAL_TOPIC/REAL_QID, so no consumer sees it, and answers with the half
//     queue offset and the offset message id.
//  2. The producer runs its local transaction and sends END_TRANSACTION (37) with commit
//     (8), rollback (12) or unknown (0). Commit writes the real message to its topic
//     (delivered once); rollback writes nothing; unknown changes nothing. Each final
//     decision is recorded as an op message in RMQ_SYS_TRANS_OP_HALF_TOPIC (tag "d",
//     body = the half queue offset), and the first decision wins: the same decision again
//     is answered SUCCESS, a different one TRANSACTION_FAILED (4) naming the recorded
//     decision, and logged.
//  3. A check service scans the half queue every transactionCheckInterval ms. A half
//     message with no decision, older than transactionTimeOut ms (or its
//     CHECK_IMMUNITY_TIME_IN_SECONDS), is checked: CHECK_TRANSACTION_STATE (39) goes,
//     one-way, to a live producer of its group, which answers with END_TRANSACTION. The
//     check count grows only when a check is actually sent (no live producer: no count);
//     after transactionCheckMax checks the half message is copied to
//     TRANS_CHECK_MAX_TIME_TOPIC for operators, an error is logged, and it is never
//     delivered.
//
// Decisions are rebuilt from the op queue at start; check counts persist in
// config/transactionCheck.json, so check progress survives a restart.
type txnService struct {
	b    *Broker
	path string

	mu     sync.Mutex
	done   map[int64]string // half queue offset -> "commit", "rollback" or "discard"
	checks map[int64]int    // half queue offset -> checks sent
	from   int64            // every half offset below this has a decision
	// deciding holds the half offsets whose commit is being written: claimed in done (a
	// second decision is refused) but not final, as the write may fail and release the
	// claim. They count as undecided, and the check service's from stops at them.
	deciding map[int64]bool
	// trimmed: the entries of done and checks below this half offset were dropped
	// (forget), their half messages deleted by retention.
	trimmed int64
	// commit writes a committed half message to its real topic (b.commitHalf; tests
	// replace it).
	commit func(ctx context.Context, half *message.MessageExt) error
}

// Transaction decision codes of END_TRANSACTION's commitOrRollback (Java MessageSysFlag).
const (
	txnCommit   = 8
	txnRollback = 12
)

// propTxnState is a Sluice property on op messages naming the decision.
const propTxnState = "SLUICE_TXN_STATE"

type txnCheckFile struct {
	CheckTimes map[string]int `json:"checkTimes"`
}

func newTxnService(b *Broker) *txnService {
	return &txnService{b: b, path: filepath.Join(b.cfg.StorePathRootDir, "config", "transactionCheck.json"),
		done: map[int64]string{}, checks: map[int64]int{}, deciding: map[int64]bool{},
		commit: b.commitHalf}
}

// load reads check counts and replays the op queue (after the store is open).
func (t *txnService) load() error {
	var f txnCheckFile
	if err := readJSONFile(t.path, &f); err != nil {
		return err
	}
	for k, v := range f.CheckTimes {
		if off, err := strconv.ParseInt(k, 10, 64); err == nil {
			t.checks[off] = v
		}
	}
	s := t.b.store
	for off := s.MinOffset(message.TransOpHalfTopic, 0); ; {
		res, err := s.GetMessage(message.TransOpHalfTopic, 0, off, maxPullMessages, maxPullBytes, nil)
		if err != nil {
			return err
		}
		if res.Status != store.Found {
			break
		}
		for _, rec := range res.Records {
			m, _, err := message.DecodeRecord(rec, message.DecodeOptions{})
			if err != nil {
				return err
			}
			if half, err := strconv.ParseInt(string(m.Body), 10, 64); err == nil {
				state := m.Property(propTxnState)
				if state == "" {
					state = "commit-or-rollback" // an op written by another broker: final either way
				}
				t.done[half] = state
			}
		}
		off = res.NextBeginOffset
	}
	return nil
}

func (t *txnService) persist() error {
	t.mu.Lock()
	f := txnCheckFile{CheckTimes: make(map[string]int, len(t.checks))}
	for k, v := range t.checks {
		f.CheckTimes[strconv.FormatInt(k, 10)] = v
	}
	t.mu.Unlock()
	return writeJSONFile(t.path, f)
}

// prepare turns a half message into its stored form and returns nothing to send back on
// success, or an error response.
func (b *Broker) prepareHalf(m *message.MessageExt) *remoting.RemotingCommand {
	if m.DelayLevel() > 0 {
		return b.sendResponse(remoting.MessageIllegal, "a transactional message cannot have a delay level")
	}
	if m.Property(message.PropertyProducerGroup) == "" {
		return b.sendResponse(remoting.MessageIllegal, "a transactional message needs property PGROUP (its producer group)")
	}
	m.SetProperty(message.PropertyRealTopic, m.Topic)
	m.SetProperty(message.PropertyRealQueueID, strconv.Itoa(int(m.QueueID)))
	m.Topic = message.TransHalfTopic
	m.QueueID = 0
	m.SysFlag = message.WithTransactionType(m.SysFlag, message.SysFlagTransactionNot)
	return nil
}

// handleEndTransaction serves END_TRANSACTION (RocketMQ request code 37, docs/protocol.md §3.9).
func (b *Broker) handleEndTransaction(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseEndTransactionHeader(req)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	group, queueOffset, phyOffset, decision, fromCheck := h.ProducerGroup, h.TranStateTableOffset, h.CommitLogOffset, h.CommitOrRollback, h.FromTransactionCheck
	if decision != txnCommit && decision != txnRollback {
		return nil // unknown: the half message stays pending; Java sends no response either
	}
	state := "commit"
	if decision == txnRollback {
		state = "rollback"
	}
	half, _, err := b.store.LookMessageByOffset(phyOffset)
	if err != nil || half.Topic != message.TransHalfTopic {
		return errResponse(remoting.SystemError, "Find prepared transaction message failed")
	}
	// The request names only the producer group: the topic the decision writes to is the
	// half message's real topic, known once it is read. Deciding needs PUB on it.
	if resp := b.checkStoredAccess(conn, req, half.Property(message.PropertyRealTopic), acl.Pub); resp != nil {
		return resp
	}
	switch {
	case half.Property(message.PropertyProducerGroup) != group:
		return errResponse(remoting.SystemError, "The producer group wrong")
	case half.QueueOffset != queueOffset:
		return errResponse(remoting.SystemError, "The transaction state table offset wrong")
	case half.CommitLogOffset != phyOffset:
		return errResponse(remoting.SystemError, "The commit log offset wrong")
	}
	t := b.txn
	t.mu.Lock()
	if prev, ok := t.done[queueOffset]; ok {
		t.mu.Unlock()
		if prev == state {
			// The same decision again (e.g. the producer's own END_TRANSACTION after a
			// check already ended it the same way): nothing to do, and nothing went wrong.
			return okResponse()
		}
		b.log.Warn("transaction decision ignored: the half message already ended", "msgId", half.MsgID,
			"recorded", prev, "ignored", state, "fromCheck", fromCheck)
		return errResponse(remoting.TransactionFailed, "transaction already ended: %s (the %s decision is ignored)", prev, state)
	}
	t.done[queueOffset] = state // claimed; undone below if the writes fail
	if decision == txnCommit {
		t.deciding[queueOffset] = true // not final until the committed message is written
	}
	t.mu.Unlock()

	if decision == txnCommit {
		err := t.commit(ctx, half)
		t.mu.Lock()
		delete(t.deciding, queueOffset)
		if err != nil {
			delete(t.done, queueOffset)
		}
		t.mu.Unlock()
		if err != nil {
			return b.putError(err)
		}
	}
	if err := b.writeOp(ctx, queueOffset, state); err != nil {
		b.log.Error("record transaction decision", "msgId", half.MsgID, "state", state, "err", err)
	}
	return okResponse()
}

// commitHalf writes the committed message to its real topic and queue.
func (b *Broker) commitHalf(ctx context.Context, half *message.MessageExt) error {
	qid, _ := strconv.Atoi(half.Property(message.PropertyRealQueueID))
	m := &message.MessageExt{
		Message:                   message.Message{Topic: half.Property(message.PropertyRealTopic), Flag: half.Flag, Body: half.Body, Properties: half.Properties},
		QueueID:                   int32(qid),
		SysFlag:                   message.WithTransactionType(half.SysFlag, message.SysFlagTransactionCommit),
		BornTimestamp:             half.BornTimestamp,
		BornHost:                  half.BornHost,
		StoreHost:                 b.storeHost,
		PreparedTransactionOffset: half.CommitLogOffset,
	}
	m.RemoveProperty(message.PropertyRealTopic)
	m.RemoveProperty(message.PropertyRealQueueID)
	if tc := b.topics.get(m.Topic); tc != nil && qid >= max(tc.ReadQueueNums, tc.WriteQueueNums) {
		m.QueueID = randomQueue(tc.WriteQueueNums)
	}
	_, err := b.store.PutMessage(ctx, m, message.TagHashCode(m.Tag()))
	return err
}

// writeOp records a final decision for a half queue offset.
func (b *Broker) writeOp(ctx context.Context, halfOffset int64, state string) error {
	m := &message.MessageExt{
		Message:   message.Message{Topic: message.TransOpHalfTopic, Body: []byte(strconv.FormatInt(halfOffset, 10))},
		StoreHost: b.storeHost, BornHost: b.storeHost, BornTimestamp: time.Now().UnixMilli(),
	}
	m.SetTag("d").SetProperty(propTxnState, state)
	_, err := b.store.PutMessage(ctx, m, message.TagHashCode("d"))
	return err
}

// checkLoop runs the check service until the broker stops.
func (t *txnService) checkLoop() {
	tick := time.NewTicker(time.Duration(t.b.cfg.TransactionCheckInterval) * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.b.ctx.Done():
			return
		case <-tick.C:
			if err := t.checkOnce(t.b.ctx, time.Now()); err != nil && t.b.ctx.Err() == nil {
				t.b.log.Error("transaction check", "err", err)
			}
		}
	}
}

// undecided returns how many half messages with queue offsets in [lo, hi) have no
// final decision yet (neither committed, rolled back nor discarded; a commit being
// written is not final). It walks the decisions, not the range.
func (t *txnService) undecided(lo, hi int64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var n int64
	for q := range t.deciding { // in done, and possibly below from
		if q >= lo && q < hi {
			n++
		}
	}
	lo = max(lo, t.from, t.trimmed) // every half below from has a decision; below trimmed none is left
	if hi <= lo {
		return n
	}
	n += hi - lo
	for q := range t.done {
		if q >= lo && q < hi {
			n--
		}
	}
	return n
}

// forget drops the decisions and check counts of half offsets below minOff, the half
// queue's first entry: retention deleted those half messages, so no END_TRANSACTION or
// check can reach them any more (END_TRANSACTION looks the half message up first). The
// decisions kept are thus bounded by the half messages retained, not by the broker's
// uptime. Callers hold t.mu.
func (t *txnService) forget(minOff int64) {
	if minOff <= t.trimmed {
		return
	}
	for q := range t.done {
		if q < minOff && !t.deciding[q] {
			delete(t.done, q)
		}
	}
	for q := range t.checks {
		if q < minOff {
			delete(t.checks, q)
		}
	}
	t.trimmed = minOff
}

// checkOnce scans the half queue once and sends the checks that are due.
func (t *txnService) checkOnce(ctx context.Context, now time.Time) error {
	b := t.b
	timeout := b.cfg.TransactionTimeOut
	minOff := b.store.MinOffset(message.TransHalfTopic, 0)
	t.mu.Lock()
	t.forget(minOff)
	off := max(t.from, minOff)
	t.mu.Unlock()
	contiguous := true
	sent := 0
	for ctx.Err() == nil {
		res, err := b.store.GetMessage(message.TransHalfTopic, 0, off, maxPullMessages, maxPullBytes, nil)
		if err != nil {
			return err
		}
		if res.Status != store.Found {
			break
		}
		for _, rec := range res.Records {
			half, _, err := message.DecodeRecord(rec, message.DecodeOptions{})
			if err != nil {
				return err
			}
			q := half.QueueOffset
			t.mu.Lock()
			_, isDone := t.done[q]
			checks := t.checks[q]
			if t.deciding[q] {
				contiguous = false // its commit may still fail: from must not pass it
			}
			if isDone && contiguous {
				t.from = q + 1
				delete(t.checks, q)
			}
			t.mu.Unlock()
			if isDone {
				continue
			}
			contiguous = false
			threshold := timeout
			if s := half.Property(message.PropertyCheckImmunityTimeInSeconds); s != "" {
				if secs, err := strconv.ParseInt(s, 10, 64); err == nil && secs > 0 {
					threshold = secs * 1000
				}
			}
			if now.UnixMilli()-half.StoreTimestamp < threshold {
				continue
			}
			if checks >= b.cfg.TransactionCheckMax {
				t.discard(ctx, half)
				continue
			}
			if t.sendCheck(ctx, half) {
				b.traffic.txnChecks.Add(1)
				t.mu.Lock()
				t.checks[q]++
				t.mu.Unlock()
				sent++
			}
		}
		off = res.NextBeginOffset
	}
	if sent > 0 {
		return t.persist()
	}
	return nil
}

// sendCheck sends CHECK_TRANSACTION_STATE (39) for a half message to a live producer of
// its group. It reports whether a check was sent.
func (t *txnService) sendCheck(ctx context.Context, half *message.MessageExt) bool {
	b := t.b
	group := half.Property(message.PropertyProducerGroup)
	conn := b.clients.producerConn(group)
	if conn == nil {
		if f := b.txnChecker.Load(); f != nil { // a producer of a front end (frontend.go)
			return (*f)(ctx, half)
		}
		return false
	}
	view := *half
	view.Topic = half.Property(message.PropertyRealTopic)
	qid, _ := strconv.Atoi(half.Property(message.PropertyRealQueueID))
	view.QueueID = int32(qid)
	body, err := message.EncodeRecord(&view)
	if err != nil {
		b.log.Error("encode half message for check", "err", err)
		return false
	}
	id := half.UniqKey()
	req := remoting.NewRequest(remoting.CheckTransactionState, wire.CheckTransactionStateHeader{
		TranStateTableOffset: half.QueueOffset, CommitLogOffset: half.CommitLogOffset,
		MsgID: id, TransactionID: id, OffsetMsgID: half.OffsetMsgID,
	}.Ext(), body)
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := conn.InvokeOneway(cctx, req); err != nil {
		b.log.Warn("send transaction check", "group", group, "remote", conn.RemoteAddr(), "err", err)
		return false
	}
	return true
}

// discard gives up on a half message checked transactionCheckMax times: it is copied
// to TRANS_CHECK_MAX_TIME_TOPIC for operators and marked final, never delivered.
func (t *txnService) discard(ctx context.Context, half *message.MessageExt) {
	b := t.b
	b.topics.putSystem1(message.TransCheckMaxTimeTopic)
	m := &message.MessageExt{
		Message: message.Message{Topic: message.TransCheckMaxTimeTopic, Flag: half.Flag, Body: half.Body, Properties: half.Properties},
		SysFlag: half.SysFlag, BornTimestamp: half.BornTimestamp, BornHost: half.BornHost, StoreHost: b.storeHost,
	}
	m.SetProperty(message.PropertyTransactionCheckTimes, strconv.Itoa(b.cfg.TransactionCheckMax))
	if _, err := b.store.PutMessage(ctx, m, message.TagHashCode(m.Tag())); err != nil && !errors.Is(err, store.ErrClosed) {
		b.log.Error("copy discarded half message", "err", err)
		return
	}
	t.mu.Lock()
	t.done[half.QueueOffset] = "discard"
	t.mu.Unlock()
	if err := b.writeOp(ctx, half.QueueOffset, "discard"); err != nil {
		b.log.Error("record discarded half message", "err", err)
	}
	b.log.Error("transaction check max reached; half message discarded (kept in "+message.TransCheckMaxTimeTopic+")",
		"group", half.Property(message.PropertyProducerGroup), "topic", half.Property(message.PropertyRealTopic),
		"msgId", half.UniqKey(), "checks", b.cfg.TransactionCheckMax)
}

// putSystem1 creates a one-queue readable system topic if missing.
func (t *topicTable) putSystem1(name string) {
	_, _, _ = t.getOrCreate(name, func() *wire.TopicConfig {
		return &wire.TopicConfig{TopicName: name, ReadQueueNums: 1, WriteQueueNums: 1, Perm: permRead | permWrite, TopicFilterType: "SINGLE_TAG"}
	})
}
