package producer

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Automatic batching of SendAsync (Config.AutoBatch).
//
// Each message queue has one batchQueue. At most one request per queue is in flight; the
// records SendAsync hands over while it is (or, with AutoBatchLinger, for that long after
// the first one) wait in the queue's pending list and leave together, in the order they
// came, as one SEND_BATCH_MESSAGE request (code 320, body docs/protocol.md §4.5) of at
// most AutoBatchMaxCount records and AutoBatchMaxBytes encoded bytes. A lone record
// leaves as the SEND_MESSAGE_V2 request it would have been without batching. The broker
// stores a batch's records at consecutive offsets of the queue and answers with the
// first one's queue offset and the offset message ids joined by "," (docs/protocol.md
// §3.3), from which each record gets its own SendResult. One request per queue at a
// time also keeps the queue's order across retries: a failed batch is retried (on the
// same queue, RetryTimesWhenSendAsyncFailed) before anything behind it is sent.

// Defaults and limits of the auto-batching settings.
const (
	// DefaultAutoBatchMaxCount is the default of Config.AutoBatchMaxCount.
	DefaultAutoBatchMaxCount = 256
	// MaxAutoBatchCount bounds Config.AutoBatchMaxCount.
	MaxAutoBatchCount = 4096
	// DefaultAutoBatchMaxBytes is the default of Config.AutoBatchMaxBytes: 256 KiB.
	DefaultAutoBatchMaxBytes = 256 << 10
	// MaxAutoBatchLinger bounds Config.AutoBatchLinger.
	MaxAutoBatchLinger = time.Second
)

// validateAutoBatch checks the auto-batching settings (zero values mean the defaults).
func (c *Config) validateAutoBatch() error {
	maxMsg := c.MaxMessageSize
	if maxMsg == 0 {
		maxMsg = DefaultMaxMessageSize
	}
	switch {
	case c.AutoBatchLinger < 0:
		return &config.Error{Package: "producer", Field: "AutoBatchLinger", Value: c.AutoBatchLinger, Reason: fmt.Sprintf("must not be negative (limit %v)", time.Duration(0))}
	case c.AutoBatchLinger > MaxAutoBatchLinger:
		return &config.Error{Package: "producer", Field: "AutoBatchLinger", Value: c.AutoBatchLinger, Reason: fmt.Sprintf("exceeds the maximum (limit %v)", MaxAutoBatchLinger)}
	case c.AutoBatchMaxCount < 0:
		return &config.Error{Package: "producer", Field: "AutoBatchMaxCount", Value: c.AutoBatchMaxCount, Reason: fmt.Sprintf("must not be negative (limit %v)", 0)}
	case c.AutoBatchMaxCount > MaxAutoBatchCount:
		return &config.Error{Package: "producer", Field: "AutoBatchMaxCount", Value: c.AutoBatchMaxCount, Reason: fmt.Sprintf("exceeds the maximum (limit %v)", MaxAutoBatchCount)}
	case c.AutoBatchMaxBytes < 0:
		return &config.Error{Package: "producer", Field: "AutoBatchMaxBytes", Value: c.AutoBatchMaxBytes, Reason: fmt.Sprintf("must not be negative (limit %v)", 0)}
	case c.AutoBatchMaxBytes > maxMsg:
		return &config.Error{Package: "producer", Field: "AutoBatchMaxBytes", Value: c.AutoBatchMaxBytes, Reason: fmt.Sprintf("exceeds MaxMessageSize (a batch is one request the broker checks against its maxMessageSize) (limit %v)", maxMsg)}
	}
	return nil
}

// batcher holds the batch queues of a producer with Config.AutoBatch.
type batcher struct {
	p        *Producer
	linger   time.Duration
	maxCount int
	maxBytes int

	mu     sync.RWMutex
	queues map[message.MessageQueue]*batchQueue

	// Requests of several records made, and the records in them (tests, metrics).
	batches, batchedRecords atomic.Int64
}

func newBatcher(p *Producer) *batcher {
	return &batcher{p: p, linger: p.cfg.AutoBatchLinger, maxCount: p.cfg.AutoBatchMaxCount, maxBytes: p.cfg.AutoBatchMaxBytes,
		queues: make(map[message.MessageQueue]*batchQueue)}
}

// batchQueue is one message queue's pending records and its request in flight.
type batchQueue struct {
	b  *batcher
	mq message.MessageQueue

	mu       sync.Mutex
	pending  []*asyncOp
	bytes    int       // encoded batch bytes of pending
	solos    int       // records in pending that may not share a request
	firstAt  time.Time // when the first pending record came (linger)
	inflight int       // requests of this queue in flight
	timer    *time.Timer
	armed    bool // timer set and not fired
}

// queueInflight is how many requests of one queue may be in flight at once: one, so
// that a failed request is retried before anything behind it is sent (order per queue
// across retries). Two were faster at 64 sends in flight but still slower than no
// batching there (docs/performance.md "Automatic batching of async sends").
const queueInflight = 1

// batchable reports whether a prepared single send may travel in an automatic batch: not
// compressed (a batch's records are stored with the batch's sysFlag, and batches are
// never compressed), not transactional, not delayed (delay level or timer properties),
// not to a retry or DLQ topic, and small enough for a batch on its own.
func (b *batcher) batchable(pr *prepared) bool {
	if pr.header.SysFlag != 0 || batchRecordLen(pr) > b.maxBytes {
		return false
	}
	t := pr.header.Topic
	if message.IsRetryTopic(t) || message.IsDLQTopic(t) {
		return false
	}
	m := pr.selMsg
	if len(m.Properties) > 1 { // more than the UNIQ_KEY: look for delays
		if m.DelayLevel() > 0 || m.Property(message.PropertyTimerDeliverMs) != "" ||
			m.Property(message.PropertyTimerDelaySec) != "" || m.Property(message.PropertyTimerDelayMs) != "" {
			return false
		}
	}
	return true
}

// batchRecordLen is the size of pr's message inside a batch body.
func batchRecordLen(pr *prepared) int {
	return message.BatchRecordSize(len(pr.body), len(pr.header.Properties))
}

// queue returns mq's batch queue, creating it.
func (b *batcher) queue(mq message.MessageQueue) *batchQueue {
	b.mu.RLock()
	q := b.queues[mq]
	b.mu.RUnlock()
	if q != nil {
		return q
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if q = b.queues[mq]; q == nil {
		q = &batchQueue{b: b, mq: mq}
		b.queues[mq] = q
	}
	return q
}

// add hands op (its queue picked) to its batch queue. inline: on SendAsync's caller's
// goroutine.
func (b *batcher) add(op *asyncOp, inline bool) {
	q := b.queue(op.mq)
	q.mu.Lock()
	if len(q.pending) == 0 {
		q.firstAt = time.Time{}
		if b.linger > 0 {
			q.firstAt = time.Now()
		}
	}
	q.pending = append(q.pending, op)
	q.bytes += batchRecordLen(op.pr)
	if op.solo {
		q.solos++
	}
	var ab *autoBatch
	var dead []*asyncOp
	if q.inflight < queueInflight {
		if b.linger == 0 || q.fullLocked() || b.p.isClosing() {
			ab, dead = q.takeLocked()
		} else if !q.armed {
			q.armLocked(b.linger)
		}
	}
	q.mu.Unlock()
	q.failDead(dead, inline)
	if ab != nil {
		ab.try(inline)
	}
}

// fullLocked reports whether pending need not wait for more records: a batch's worth
// is there, or a record that cannot join one (those before it cannot grow). q.mu held.
func (q *batchQueue) fullLocked() bool {
	return q.bytes >= q.b.maxBytes || len(q.pending) >= q.b.maxCount || q.solos > 0
}

// takeLocked takes the next batch off pending (records whose context ended fail instead:
// dead) and marks the queue in flight; nil when nothing is left. q.mu held.
func (q *batchQueue) takeLocked() (*autoBatch, []*asyncOp) {
	var dead []*asyncOp
	n, size := 0, 0
	for _, op := range q.pending {
		if n > 0 && (op.solo || q.pending[0].solo || n >= q.b.maxCount || size+batchRecordLen(op.pr) > q.b.maxBytes) {
			break
		}
		n++
		size += batchRecordLen(op.pr)
		if op.solo {
			q.solos--
		}
	}
	ops := make([]*asyncOp, 0, n)
	for _, op := range q.pending[:n] {
		if op.ctx.Err() != nil {
			dead = append(dead, op)
		} else {
			ops = append(ops, op)
		}
	}
	rest := copy(q.pending, q.pending[n:])
	clear(q.pending[rest:])
	q.pending = q.pending[:rest]
	q.bytes -= size
	if rest > 0 && q.b.linger > 0 {
		q.firstAt = time.Now() // those left waited for a full batch: they go next
	}
	if len(ops) == 0 {
		return nil, dead
	}
	q.inflight++
	return &autoBatch{q: q, ops: ops}, dead
}

// armLocked sets the linger timer. q.mu held.
func (q *batchQueue) armLocked(d time.Duration) {
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.lingered)
	} else {
		q.timer.Reset(d)
	}
	q.armed = true
}

// lingered runs when the linger timer fires: the pending records leave.
func (q *batchQueue) lingered() {
	q.mu.Lock()
	q.armed = false
	var ab *autoBatch
	var dead []*asyncOp
	if q.inflight < queueInflight && len(q.pending) > 0 {
		ab, dead = q.takeLocked()
	}
	q.mu.Unlock()
	q.failDead(dead, false)
	if ab != nil {
		ab.try(false)
	}
}

// next is called when the queue's request is over: it sends what is pending (when its
// linger is over) or arms the timer for it.
func (q *batchQueue) next() {
	q.mu.Lock()
	q.inflight--
	for {
		var ab *autoBatch
		var dead []*asyncOp
		if len(q.pending) > 0 && q.inflight < queueInflight {
			wait := time.Duration(0)
			if q.b.linger > 0 && !q.fullLocked() && !q.b.p.isClosing() {
				wait = q.b.linger - time.Since(q.firstAt)
			}
			if wait > 0 {
				if !q.armed {
					q.armLocked(wait)
				}
			} else {
				ab, dead = q.takeLocked()
			}
		}
		q.mu.Unlock()
		q.failDead(dead, false)
		if ab != nil {
			ab.try(false)
			return
		}
		if dead == nil {
			return
		}
		// Every record taken had ended: look again.
		q.mu.Lock()
	}
}

// failDead fails records whose context ended while they waited.
func (q *batchQueue) failDead(dead []*asyncOp, inline bool) {
	for _, op := range dead {
		op.finish(nil, &SendError{Topic: q.mq.Topic, Queue: q.mq, Err: op.ctx.Err()}, inline)
	}
}

// flush sends every queue's lingering records now (Shutdown).
func (b *batcher) flush() {
	b.mu.RLock()
	qs := make([]*batchQueue, 0, len(b.queues))
	for _, q := range b.queues {
		qs = append(qs, q)
	}
	b.mu.RUnlock()
	for _, q := range qs {
		q.mu.Lock()
		var ab *autoBatch
		var dead []*asyncOp
		if q.armed && q.timer.Stop() {
			q.armed = false
			if q.inflight < queueInflight {
				ab, dead = q.takeLocked()
			}
		}
		q.mu.Unlock()
		q.failDead(dead, false)
		if ab != nil {
			ab.try(false)
		}
	}
}

// autoBatch is one request of a batch queue: one record (sent as SEND_MESSAGE_V2) or
// several (SEND_BATCH_MESSAGE), with its attempts.
type autoBatch struct {
	q   *batchQueue
	ops []*asyncOp
	pr  *prepared // ops[0].pr for one record; own for several
	own prepared
	n   int // attempts made

	addr  string
	start time.Time
}

// prepare builds the request's prepared send from ops.
func (ab *autoBatch) prepare() {
	if len(ab.ops) == 1 {
		ab.pr = ab.ops[0].pr
		return
	}
	size := 0
	for _, op := range ab.ops {
		size += batchRecordLen(op.pr)
	}
	body := make([]byte, 0, size)
	be := binary.BigEndian
	for _, op := range ab.ops {
		pr := op.pr
		body = be.AppendUint32(body, uint32(batchRecordLen(pr)))
		body = be.AppendUint64(body, 0) // MAGICCODE, BODYCRC
		body = be.AppendUint32(body, uint32(pr.header.Flag))
		body = be.AppendUint32(body, uint32(len(pr.body)))
		body = append(body, pr.body...)
		body = be.AppendUint16(body, uint16(len(pr.header.Properties)))
		body = append(body, pr.header.Properties...)
	}
	ab.q.b.batches.Add(1)
	ab.q.b.batchedRecords.Add(int64(len(ab.ops)))
	h := ab.ops[0].pr.header
	h.SysFlag, h.Flag, h.Properties, h.Batch = 0, 0, "", true
	ab.own = prepared{code: remoting.SendBatchMessage, header: h, body: body, selMsg: ab.ops[0].pr.selMsg}
	ab.pr = &ab.own
}

// ctx is the context of the request's attempts: a lone record's own (as without
// batching); for several, none, since one record's caller giving up must not fail the
// others (each record's context is checked before every attempt).
func (ab *autoBatch) ctx() context.Context {
	if len(ab.ops) == 1 {
		return ab.ops[0].ctx
	}
	return context.Background()
}

// try makes attempts until one is in flight or the request is over (as asyncOp.try).
func (ab *autoBatch) try(inline bool) {
	p := ab.q.b.p
	if ab.pr == nil {
		ab.prepare()
	}
	for {
		ab.n++
		addr, req, se := p.request(ab.pr, ab.q.mq)
		if se == nil {
			ab.addr, ab.start = addr, time.Now()
			err := p.cl.InvokeAsyncTimeoutSince(ab.ctx(), addr, req, ab.start, p.cfg.SendTimeout, ab.answered)
			if err == nil {
				return
			}
			_, se, _ = p.outcome(ab.ctx(), ab.pr, ab.q.mq, addr, nil, err, time.Since(ab.start))
		}
		if !ab.again(se, true, inline) {
			return
		}
	}
}

// answered handles the answer of an attempt in flight.
func (ab *autoBatch) answered(resp *remoting.RemotingCommand, err error) {
	p := ab.q.b.p
	r, se, retry := p.outcome(ab.ctx(), ab.pr, ab.q.mq, ab.addr, resp, err, time.Since(ab.start))
	if se != nil {
		if ab.again(se, retry, false) {
			ab.try(false)
		}
		return
	}
	ops := ab.ops
	ab.q.next()
	if len(ops) == 1 {
		ops[0].finish(r, nil, false)
		return
	}
	// One result per record: its own UNIQ_KEY, its offset message id (the answer's ids
	// in batch order) and queue offset (the first one's + its index).
	ids := r.OffsetMsgID
	count := strings.Count(ids, ",") + 1
	if count != len(ops) {
		p.cfg.Logger.Warn("producer: batch answer has a different number of message ids than the batch has messages",
			"queue", ab.q.mq.String(), "ids", count, "messages", len(ops))
	}
	for i, op := range ops {
		ri := *r
		ri.MsgID = op.pr.msgID
		ri.QueueOffset = r.QueueOffset + int64(i)
		ri.OffsetMsgID = ""
		if count == len(ops) {
			ri.OffsetMsgID, ids, _ = strings.Cut(ids, ",")
		}
		op.finish(&ri, nil, false)
	}
}

// again reports whether another attempt follows the failed one (with the records whose
// context has not ended); if not, every record fails with se, and the queue moves on.
func (ab *autoBatch) again(se *SendError, retry, inline bool) bool {
	se.Attempts = ab.n
	if retry && ab.n < 1+ab.q.b.p.cfg.RetryTimesWhenSendAsyncFailed {
		if len(ab.ops) == 1 {
			if ab.ops[0].ctx.Err() == nil {
				return true
			}
		} else {
			live := ab.ops[:0]
			var ended []*asyncOp
			for _, op := range ab.ops {
				if op.ctx.Err() == nil {
					live = append(live, op)
				} else {
					ended = append(ended, op)
				}
			}
			for _, op := range ended {
				e := *se
				op.finish(nil, &e, inline)
			}
			if len(live) > 0 {
				clear(ab.ops[len(live):])
				ab.ops = live
				if len(ended) > 0 {
					ab.prepare() // a batch of the rest (or the lone record's own send)
				}
				return true
			}
			ab.ops = nil
		}
	}
	ops := ab.ops
	if inline {
		// On SendAsync's caller's goroutine (nothing reached the network): what waits
		// behind goes from a goroutine of the producer, whose callbacks may run there.
		// The records it sends are counted by p.inflight until their callbacks return.
		go ab.q.next()
	} else {
		ab.q.next()
	}
	for i, op := range ops {
		e := se
		if i > 0 {
			c := *se
			e = &c
		}
		op.finish(nil, e, inline)
	}
	return false
}
