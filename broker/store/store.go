package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/message"
)

// Store is the message store: one commitlog, one consume queue per topic/queue id, a flush
// goroutine, a checkpoint goroutine. Create it with Open and release it with Close. All
// methods are safe for concurrent use.
type Store struct {
	diskFull atomic.Bool // a write hit ENOSPC; cleared when free space is back (see put)

	cfg     Config
	log     *slog.Logger
	lock    *os.File // flock on <Dir>/lock
	cl      *commitLog
	flusher *flusher
	cqRoot  string   // <Dir>/consumequeue
	fds     *fdCache // open consume-queue files, at most Config.MaxOpenFiles idle ones (fdcache.go)
	cqMaps  *cqMaps  // the writer's mappings of consume-queue files (cqmap.go)
	index   *index   // key index (index.go); nil when Config.Index.Disable

	lifeMu sync.RWMutex // read side: an operation is running; write side: Close
	closed bool         // guarded by lifeMu

	putMu sync.Mutex // the single writer of the commitlog and the consume queues

	queuesMu sync.RWMutex
	queues   map[string]map[int32]*consumeQueue // guarded by queuesMu

	hooksMu sync.RWMutex
	hooks   []func(DispatchEvent)

	cpMu   sync.Mutex // serializes checkpoint
	lastCP checkpoint // guarded by cpMu

	stop      chan struct{} // closed by Close: goroutines exit
	stopped   chan struct{} // closed at the end of Close: SYNC_FLUSH waiters give up
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	bufPool sync.Pool // *[]byte encode buffers

	runs         []queueRun // writeRunLocked's per-queue scratch, reused; guarded by putMu
	lastRunMulti bool       // the last PutGroup run had several records; guarded by putMu
}

// Open opens (creating if needed) the store in cfg.Dir, recovers it (see the package doc:
// the commitlog tail after the last checkpoint is validated and a torn tail cut, consume
// queues are truncated and rebuilt) and starts the flush and checkpoint goroutines.
// It returns a *config.Error for a bad Config, a *CorruptError for store files it cannot
// repair, and an error when another process holds the directory.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	for _, d := range []string{cfg.Dir, filepath.Join(cfg.Dir, "commitlog"), filepath.Join(cfg.Dir, "consumequeue")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("store: create %s: %w", d, err)
		}
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Store{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "store"),
		lock:    lock,
		cqRoot:  filepath.Join(cfg.Dir, "consumequeue"),
		queues:  make(map[string]map[int32]*consumeQueue),
		fds:     newFDCache(cfg.MaxOpenFiles),
		cqMaps:  newCQMaps(defaultMappedCQFiles),
		stop:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	clFlushed, err := s.recover()
	if err != nil {
		if s.cl != nil {
			s.cl.close()
		}
		for _, cq := range s.queueList() {
			cq.close()
		}
		s.index.close() // key index (index.go); nil-safe
		unlockDir(lock)
		return nil, err
	}
	s.flusher = newFlusher(s.cl, clFlushed)
	// Make the recovered state durable and record it before taking traffic. On a full
	// disk the previous checkpoint stays (still a valid lower bound: recovery re-checks
	// everything after it) and the store opens anyway: reads are served, writes fail
	// with ENOSPC until space is freed.
	if err := s.checkpoint(); errors.Is(err, syscall.ENOSPC) {
		s.diskFull.Store(true)
		s.log.Error("store: disk full at start: serving reads, writes will fail until space is freed", "dir", cfg.Dir, "err", err)
	} else if err != nil {
		s.cl.close()
		for _, cq := range s.queueList() {
			cq.close()
		}
		s.index.close() // key index (index.go); nil-safe
		unlockDir(lock)
		return nil, err
	}
	s.wg.Add(2)
	go s.runCommitLogFlusher()
	go s.runCheckpointer()
	if s.cfg.FlushDiskType == SyncFlush {
		s.wg.Add(1)
		go s.runFlushSweeper()
	}
	return s, nil
}

// Close stops the goroutines, flushes the commitlog and consume queues, writes the
// checkpoint and closes all files. Safe to call more than once; later calls return the
// first call's result. Stop order: refuse new operations and wait for running ones, stop
// the goroutines, final flush + checkpoint, release SYNC_FLUSH waiters, close files.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.lifeMu.Lock()
		s.closed = true
		s.lifeMu.Unlock()
		close(s.stop)
		s.wg.Wait()
		err := s.checkpoint()
		close(s.stopped)
		s.flusher.closeWaiters() // after the final flush: true for what it covered
		if cerr := s.cl.close(); err == nil && cerr != nil {
			err = fmt.Errorf("store: close commitlog: %w", cerr)
		}
		for _, cq := range s.queueList() {
			cq.close()
		}
		s.index.close() // key index (index.go); nil-safe, flushed by the checkpoint above
		unlockDir(s.lock)
		s.closeErr = err
	})
	return s.closeErr
}

// begin registers a running operation; it fails with ErrClosed after Close.
func (s *Store) begin() error {
	s.lifeMu.RLock()
	if s.closed {
		s.lifeMu.RUnlock()
		return ErrClosed
	}
	return nil
}

func (s *Store) end() { s.lifeMu.RUnlock() }

// queueFor returns the consume queue of topic/queueID; with create it makes a new one.
func (s *Store) queueFor(topic string, queueID int32, create bool) *consumeQueue {
	s.queuesMu.RLock()
	cq := s.queues[topic][queueID]
	s.queuesMu.RUnlock()
	if cq != nil || !create {
		return cq
	}
	s.queuesMu.Lock()
	defer s.queuesMu.Unlock()
	if cq = s.queues[topic][queueID]; cq != nil {
		return cq
	}
	cq = newConsumeQueue(queueDir(s.cqRoot, topic, queueID), topic, queueID, int64(s.cfg.ConsumeQueueEntries), s.fds, s.cqMaps)
	s.addQueueLocked(cq)
	return cq
}

func (s *Store) addQueueLocked(cq *consumeQueue) {
	m := s.queues[cq.topic]
	if m == nil {
		m = make(map[int32]*consumeQueue)
		s.queues[cq.topic] = m
	}
	m[cq.queueID] = cq
}

// queueList returns a snapshot of all consume queues.
func (s *Store) queueList() []*consumeQueue {
	s.queuesMu.RLock()
	defer s.queuesMu.RUnlock()
	var out []*consumeQueue
	for _, m := range s.queues {
		for _, cq := range m {
			out = append(out, cq)
		}
	}
	return out
}

// Byte positions of the fields the store assigns inside an encoded record (docs/protocol.md §4.1).
const (
	posQueueOffset    = 20 // QUEUEOFFSET int64
	posPhysicalOffset = 28 // PHYSICALOFFSET int64
	posSysFlag        = 36 // SYSFLAG int32
	posBornHost       = 48 // BORNHOST: 8 bytes (IPv4) or 20 (IPv6), then STORETIMESTAMP int64
)

// storeTimestampPos returns the position of STORETIMESTAMP in a record with sysFlag.
func storeTimestampPos(sysFlag int32) int {
	if sysFlag&message.SysFlagBornHostV6 != 0 {
		return posBornHost + 20
	}
	return posBornHost + 8
}

// dispatched reports whether a message with sysFlag gets a consume-queue entry: not for
// half messages (PREPARED) and rolled-back ones (docs/protocol.md §4.2).
func dispatched(sysFlag int32) bool {
	t := message.TransactionType(sysFlag)
	return t != message.SysFlagTransactionPrepared && t != message.SysFlagTransactionRollback
}

// PutMessage stores one message in the commitlog and, unless its transaction type is
// PREPARED or ROLLBACK, appends its entry (with tagsCode) to the consume queue of
// msg.Topic/msg.QueueID. The store assigns msg.CommitLogOffset, msg.QueueOffset (the
// queue's next offset; 0 when not dispatched), msg.StoreTimestamp (now, in ms, if zero),
// msg.StoreSize, msg.BodyCRC, msg.OffsetMsgID and msg.MsgID (UNIQ_KEY or the offset id)
// and encodes the record with message.AppendRecord; msg.StoreHost must be set by the caller.
//
// tagsCode is the consume-queue tag slot: message.TagHashCode(tag) normally, the delivery
// timestamp for SCHEDULE_TOPIC_XXXX. With SYNC_FLUSH it returns after the fsync covering the
// record (group commit), or with Status PutFlushDiskTimeout when that takes longer than
// Config.SyncFlushTimeout or ctx ends while waiting (the message is stored either way). ctx
// ending before the write returns ctx.Err() and stores nothing.
//
// Errors: *MessageTooLargeError (body over MaxMessageSize or record over a segment),
// *InvalidArgumentError (bad topic or queue id, a NUL byte in a property), *message.ValidationError (topic or
// properties too long for the record), ErrClosed, or an I/O error.
func (s *Store) PutMessage(ctx context.Context, msg *message.MessageExt, tagsCode int64) (PutResult, error) {
	if msg == nil {
		return PutResult{}, &InvalidArgumentError{Field: "msg", Reason: "nil"}
	}
	return s.putWait(ctx, []*message.MessageExt{msg}, []int64{tagsCode})
}

// PutMessageAsync is [Store.PutMessage] without blocking for the fsync: it writes msg and
// then calls done exactly once with what PutMessage would have returned. With SYNC_FLUSH,
// done runs when the group commit's fsync covers the record, on the goroutine that ran
// that fsync (or with Status PutFlushDiskTimeout after Config.SyncFlushTimeout, from the
// store's deadline sweep, or when Close finds the record not fsynced); no goroutine or
// timer is kept per call. Otherwise (ASYNC_FLUSH, an error, or bytes already fsynced)
// done runs on the calling goroutine before PutMessageAsync returns. ctx counts only
// until the record is written. done must not block: it delays every other SYNC_FLUSH
// put waiting on the same fsync. A nil done is a no-op callback.
func (s *Store) PutMessageAsync(ctx context.Context, msg *message.MessageExt, tagsCode int64, done func(PutResult, error)) {
	if msg == nil {
		callDone(done, PutResult{}, &InvalidArgumentError{Field: "msg", Reason: "nil"})
		return
	}
	s.putAsync(ctx, []*message.MessageExt{msg}, []int64{tagsCode}, done)
}

// PutMessagesAsync is [Store.PutMessages] that reports through done, as
// [Store.PutMessageAsync] does.
func (s *Store) PutMessagesAsync(ctx context.Context, msgs []*message.MessageExt, tagsCodes []int64, done func(PutResult, error)) {
	tagsCodes, err := checkBatch(msgs, tagsCodes)
	if err != nil {
		callDone(done, PutResult{}, err)
		return
	}
	s.putAsync(ctx, msgs, tagsCodes, done)
}

func callDone(done func(PutResult, error), res PutResult, err error) {
	if done != nil {
		done(res, err)
	}
}

// putWait writes and, with SYNC_FLUSH, waits on this goroutine for the fsync.
func (s *Store) putWait(ctx context.Context, msgs []*message.MessageExt, tagsCodes []int64) (PutResult, error) {
	res, end, err := s.put(ctx, msgs, tagsCodes)
	if err != nil || s.cfg.FlushDiskType != SyncFlush {
		return res, err
	}
	if !s.flusher.waitFlushed(ctx, end, s.cfg.SyncFlushTimeout, s.stopped) {
		res.Status = PutFlushDiskTimeout
	}
	return res, nil
}

// putAsync writes and, with SYNC_FLUSH, queues done on the flusher.
func (s *Store) putAsync(ctx context.Context, msgs []*message.MessageExt, tagsCodes []int64, done func(PutResult, error)) {
	res, end, err := s.put(ctx, msgs, tagsCodes)
	if err != nil || s.cfg.FlushDiskType != SyncFlush {
		callDone(done, res, err)
		return
	}
	s.flusher.await(end, time.Now().Add(s.cfg.SyncFlushTimeout).UnixNano(), func(ok bool) {
		if !ok {
			res.Status = PutFlushDiskTimeout
		}
		callDone(done, res, nil)
	})
}

// PutMessages stores a batch atomically in one commitlog append: all records are written
// with one write, are contiguous in one segment, and get consecutive queue offsets. All
// messages must have the same topic and queue id. tagsCodes holds one tags code per message;
// nil means message.TagHashCode of each message's tag. Results describe the first message;
// OffsetMsgIDs has one id per message. Errors as PutMessage, plus *InvalidArgumentError for
// an empty batch, mixed topics/queues or a tagsCodes length mismatch.
func (s *Store) PutMessages(ctx context.Context, msgs []*message.MessageExt, tagsCodes []int64) (PutResult, error) {
	tagsCodes, err := checkBatch(msgs, tagsCodes)
	if err != nil {
		return PutResult{}, err
	}
	return s.putWait(ctx, msgs, tagsCodes)
}

// checkBatch validates a batch for PutMessages and fills in nil tagsCodes.
func checkBatch(msgs []*message.MessageExt, tagsCodes []int64) ([]int64, error) {
	if len(msgs) == 0 {
		return nil, &InvalidArgumentError{Field: "msgs", Reason: "empty batch"}
	}
	if tagsCodes == nil {
		tagsCodes = make([]int64, len(msgs))
		for i, m := range msgs {
			if m != nil {
				tagsCodes[i] = message.TagHashCode(m.Tag())
			}
		}
	}
	if len(tagsCodes) != len(msgs) {
		return nil, &InvalidArgumentError{Field: "tagsCodes", Reason: fmt.Sprintf("%d tags codes for %d messages", len(tagsCodes), len(msgs))}
	}
	for i, m := range msgs {
		if m == nil {
			return nil, &InvalidArgumentError{Field: "msgs", Reason: fmt.Sprintf("message %d is nil", i)}
		}
		if m.Topic != msgs[0].Topic || m.QueueID != msgs[0].QueueID {
			return nil, &InvalidArgumentError{Field: "msgs", Reason: fmt.Sprintf("message %d is for %s/%d, the batch for %s/%d: one topic and queue per batch",
				i, m.Topic, m.QueueID, msgs[0].Topic, msgs[0].QueueID)}
		}
	}
	return tagsCodes, nil
}

func (s *Store) getBuf() *[]byte {
	if b, ok := s.bufPool.Get().(*[]byte); ok {
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

func (s *Store) putBuf(b *[]byte) {
	if cap(*b) <= 1<<20 { // do not pin huge buffers
		*b = (*b)[:0]
		s.bufPool.Put(b)
	}
}

// put refuses writes with ErrDiskFull while the disk is full (refuseWhileFull), then runs
// the write path; a write failing with ENOSPC marks the disk full.
func (s *Store) put(ctx context.Context, msgs []*message.MessageExt, tagsCodes []int64) (PutResult, int64, error) {
	if err := s.refuseWhileFull(); err != nil {
		return PutResult{}, 0, err
	}
	res, end, err := s.write(ctx, msgs, tagsCodes)
	return res, end, s.noteWriteErr(err)
}

// refuseWhileFull returns ErrDiskFull while the disk is marked full, checking the free
// space again on each call (at least twice MaxMessageSize plus 1 MiB must be free).
func (s *Store) refuseWhileFull() error {
	if !s.diskFull.Load() {
		return nil
	}
	free, err := freeBytes(s.cfg.Dir)
	if err != nil || free < uint64(2*s.cfg.MaxMessageSize+1<<20) {
		return fmt.Errorf("%w: %d bytes free in %s", ErrDiskFull, free, s.cfg.Dir)
	}
	s.diskFull.Store(false)
	s.log.Info("store: free space is back, accepting writes", "free_bytes", free)
	return nil
}

// noteWriteErr marks the disk full when err is ENOSPC and returns err, wrapped in
// ErrDiskFull then.
func (s *Store) noteWriteErr(err error) error {
	if !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	if s.diskFull.CompareAndSwap(false, true) {
		s.log.Error("store: disk full: refusing writes until space is freed", "dir", s.cfg.Dir, "err", err)
	}
	return fmt.Errorf("%w: %w", ErrDiskFull, err)
}

// freeBytes returns the bytes available to this process on dir's file system.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// checkDestination checks the topic and queue id a record is put to.
func checkDestination(topic string, queueID int32) error {
	if err := message.ValidateTopic(topic); err != nil {
		return &InvalidArgumentError{Field: "topic", Reason: "not a valid topic name", Err: err}
	}
	if queueID < 0 {
		return &InvalidArgumentError{Field: "queueId", Reason: fmt.Sprintf("%d is negative", queueID)}
	}
	return nil
}

// encodeRecord appends m's record to buf (offsets and the store time are patched in by
// writeRuns). On error buf is returned as it was.
func (s *Store) encodeRecord(buf []byte, m *message.MessageExt) ([]byte, error) {
	if len(m.Body) > s.cfg.MaxMessageSize {
		return buf, &MessageTooLargeError{What: "body", Size: len(m.Body), Limit: s.cfg.MaxMessageSize}
	}
	start := len(buf)
	out, err := message.AppendRecordProperties(buf, m)
	if err != nil {
		return buf, err
	}
	// The properties are the record's last field.
	props := out[start+message.RecordSize(m.SysFlag, len(m.Body), len(m.Topic), 0):]
	if bytes.IndexByte(props, 0) >= 0 {
		// Recovery treats a NUL in the properties as a zero-filled torn write.
		return out[:start], &InvalidArgumentError{Field: "properties", Reason: "contains a NUL byte"}
	}
	return out, nil
}

// write is the write path of PutMessage and PutMessages (see the package doc): one
// message, or a batch for one topic and queue written as one run in one segment.
func (s *Store) write(ctx context.Context, msgs []*message.MessageExt, tagsCodes []int64) (PutResult, int64, error) {
	if err := ctx.Err(); err != nil {
		return PutResult{}, 0, err
	}
	if err := checkDestination(msgs[0].Topic, msgs[0].QueueID); err != nil {
		return PutResult{}, 0, err
	}

	// 1. Encode outside the lock; offsets and the store time are patched in by writeRuns.
	bp := s.getBuf()
	defer s.putBuf(bp)
	buf := *bp
	for _, m := range msgs {
		var err error
		if buf, err = s.encodeRecord(buf, m); err != nil {
			*bp = buf
			return PutResult{}, 0, err
		}
	}
	*bp = buf
	if int64(len(buf)) > s.cl.maxRecordBytes() {
		return PutResult{}, 0, &MessageTooLargeError{What: "record", Size: len(buf), Limit: int(s.cl.maxRecordBytes())}
	}

	// 2. Under the writer lock: assign positions, write, publish.
	end, n, err := s.writeRuns(msgs, tagsCodes, buf, false)
	if err != nil {
		return PutResult{}, 0, err
	}

	// 3. Results and hooks; the callers wait for the fsync under SYNC_FLUSH.
	res := PutResult{
		Status:          PutOK,
		CommitLogOffset: msgs[0].CommitLogOffset,
		QueueOffset:     msgs[0].QueueOffset,
		MsgSize:         msgs[0].StoreSize,
		StoreTimestamp:  msgs[0].StoreTimestamp,
		OffsetMsgIDs:    make([]string, n),
		Count:           n,
		WroteBytes:      int64(len(buf)),
	}
	s.published(msgs, tagsCodes)
	for i, m := range msgs {
		res.OffsetMsgIDs[i] = m.OffsetMsgID
	}
	return res, end, nil
}

// PutGroup stores msgs, each as [Store.PutMessage] would, and writes them together:
// the records that fit in the commitlog's current segment go to it with one write (a
// group that crosses into a new segment takes one write per segment), and the write
// position, consume queues and key index are published once per write instead of once
// per message. It is meant for a burst of single-message sends read from one
// connection. The messages may be for any topics and queues; each message's queue gets
// its records in slice order.
//
// results and errs must have len(msgs) entries; PutGroup sets, for each message, either
// errs[i] (the message was not stored: the errors of PutMessage, per message for what
// concerns that message alone — too large, a bad topic, a NUL in its properties — and
// for every message not yet written when a write fails) or results[i] (as PutMessage's,
// with Count 1). tagsCodes holds one tags code per message. Under SYNC_FLUSH it returns
// once the group commit's fsync covers the last record written, or with Status
// PutFlushDiskTimeout in the results as PutMessage. A length mismatch makes every
// message fail with *InvalidArgumentError (when errs has room for them).
func (s *Store) PutGroup(ctx context.Context, msgs []*message.MessageExt, tagsCodes []int64, results []PutResult, errs []error) {
	if len(tagsCodes) != len(msgs) || len(results) != len(msgs) || len(errs) != len(msgs) {
		err := &InvalidArgumentError{Field: "tagsCodes", Reason: fmt.Sprintf("PutGroup: %d messages, %d tags codes, %d results, %d errors: one of each per message",
			len(msgs), len(tagsCodes), len(results), len(errs))}
		for i := range errs {
			errs[i] = err
		}
		return
	}
	clear(errs)
	fail := func(err error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		fail(err)
		return
	}
	if err := s.refuseWhileFull(); err != nil {
		fail(err)
		return
	}

	// 1. Encode outside the lock, leaving out the messages that cannot be stored.
	bp := s.getBuf()
	defer s.putBuf(bp)
	buf := *bp
	ok := make([]*message.MessageExt, 0, len(msgs))
	okCodes := make([]int64, 0, len(msgs))
	okIdx := make([]int, 0, len(msgs))
	for i, m := range msgs {
		var err error
		if m == nil {
			err = &InvalidArgumentError{Field: "msgs", Reason: fmt.Sprintf("message %d is nil", i)}
		} else {
			err = checkDestination(m.Topic, m.QueueID)
		}
		if err == nil {
			start := len(buf)
			if buf, err = s.encodeRecord(buf, m); err == nil && int64(len(buf)-start) > s.cl.maxRecordBytes() {
				err = &MessageTooLargeError{What: "record", Size: len(buf) - start, Limit: int(s.cl.maxRecordBytes())}
				buf = buf[:start]
			}
		}
		if err != nil {
			errs[i] = err
			continue
		}
		ok = append(ok, m)
		okCodes = append(okCodes, tagsCodes[i])
		okIdx = append(okIdx, i)
	}
	*bp = buf
	if len(ok) == 0 {
		return
	}

	// 2. Under the writer lock: one write per segment, then publish.
	end, n, err := s.writeRuns(ok, okCodes, buf, true)
	err = s.noteWriteErr(err)
	for j := n; j < len(ok); j++ {
		errs[okIdx[j]] = err
	}
	if n == 0 {
		return
	}
	written := ok[:n]

	// 3. Results and hooks; wait for the fsync under SYNC_FLUSH.
	s.published(written, okCodes[:n])
	status := PutOK
	if s.cfg.FlushDiskType == SyncFlush && !s.flusher.waitFlushed(ctx, end, s.cfg.SyncFlushTimeout, s.stopped) {
		status = PutFlushDiskTimeout
	}
	for j, m := range written {
		results[okIdx[j]] = PutResult{
			Status:          status,
			CommitLogOffset: m.CommitLogOffset,
			QueueOffset:     m.QueueOffset,
			MsgSize:         m.StoreSize,
			StoreTimestamp:  m.StoreTimestamp,
			OffsetMsgIDs:    []string{m.OffsetMsgID},
			Count:           1,
			WroteBytes:      int64(m.StoreSize),
		}
	}
}

// queueRun is the consume-queue entries one run of records adds to one queue.
type queueRun struct {
	cq      *consumeQueue
	next    int64  // the queue offset of the next entry
	entries []byte // encoded entries, from the queue's published end
}

// writeRuns writes the encoded records buf of msgs (one after another, each
// StoreSize bytes) under the writer lock: it assigns each message its commitlog offset, store time and queue offset,
// writes the records to the commitlog and the entries to the consume queues and key index,
// then publishes them (commitlog first, then the queues, so that a reader that sees a
// queue entry can read its record). With split the records are written as runs of
// consecutive records, each filling the current segment as far as it goes (one write per
// segment); without, as one run (a batch: contiguous in one segment). It returns the
// commitlog end after the last run written and how many messages (a prefix of msgs) were
// written; on error the rest were not (a failed run is not published: the next put
// overwrites it).
func (s *Store) writeRuns(msgs []*message.MessageExt, tagsCodes []int64, buf []byte, split bool) (end int64, n int, err error) {
	if err := s.begin(); err != nil {
		return 0, 0, err
	}
	defer s.end()
	s.putMu.Lock()
	defer s.putMu.Unlock()
	now := time.Now().UnixMilli()
	off := 0 // where the record of msgs[n] starts in buf
	for n < len(msgs) {
		// The run is msgs[n:k], size bytes; a record that does not fit in the current
		// segment goes to the next one (reserve).
		k, size := len(msgs), len(buf)-off
		if split {
			room := s.cl.room()
			k, size = n+1, int(msgs[n].StoreSize)
			for k < len(msgs) && int64(size)+int64(msgs[k].StoreSize) <= room {
				size += int(msgs[k].StoreSize)
				k++
			}
		}
		// A run of sends is written with pwrite; a lone send through the mapping (no
		// system call on the connection's reader) unless it follows a run of several:
		// the mapping's prefaulter would zero-fill the pages the next runs write.
		direct := split && (k-n > 1 || s.lastRunMulti)
		s.lastRunMulti = split && k-n > 1
		e, err := s.writeRunLocked(msgs[n:k], tagsCodes[n:k], buf[off:off+size], now, direct)
		if err != nil {
			return end, n, err
		}
		end, n, off = e, k, off+size
	}
	return end, n, nil
}

// writeRunLocked writes one run of records (buf, contiguous, in msgs order) to one
// segment and publishes it; the caller holds putMu.
func (s *Store) writeRunLocked(msgs []*message.MessageExt, tagsCodes []int64, buf []byte, now int64, direct bool) (int64, error) {
	seg, pos, err := s.cl.reserve(int64(len(buf)))
	if err != nil {
		return 0, err
	}
	runs := s.runs[:0]
	defer func() {
		for i := range runs {
			runs[i].cq = nil
			runs[i].entries = runs[i].entries[:0]
		}
		s.runs = runs[:0]
	}()
	off := 0
	for i, m := range msgs {
		rec := buf[off : off+int(m.StoreSize)]
		m.CommitLogOffset = pos + int64(off)
		if m.StoreTimestamp == 0 {
			m.StoreTimestamp = now
			binary.BigEndian.PutUint64(rec[storeTimestampPos(m.SysFlag):], uint64(now))
		}
		m.QueueOffset = 0
		if dispatched(m.SysFlag) {
			r := s.runFor(&runs, m.Topic, m.QueueID)
			m.QueueOffset = r.next
			r.next++
			var e [cqEntrySize]byte
			putEntry(e[:], cqEntry{phy: m.CommitLogOffset, size: m.StoreSize, tags: tagsCodes[i]})
			r.entries = append(r.entries, e[:]...)
		}
		binary.BigEndian.PutUint64(rec[posQueueOffset:], uint64(m.QueueOffset))
		binary.BigEndian.PutUint64(rec[posPhysicalOffset:], uint64(m.CommitLogOffset))
		off += int(m.StoreSize)
	}
	if err := s.cl.write(seg, buf, pos-seg.start, direct); err != nil {
		s.unwrite(seg, buf, pos)
		return 0, err
	}
	for i := range runs {
		if err := runs[i].cq.write(runs[i].cq.max.Load(), runs[i].entries); err != nil {
			s.unwriteQueues(runs[:i+1])
			s.unwrite(seg, buf, pos)
			return 0, err
		}
	}
	end := pos + int64(len(buf))
	// Key index (index.go): one entry per key and UNIQ_KEY, written before publishing so
	// that every record below the write position is indexed.
	if s.index != nil {
		if err := s.index.add(msgs, end); err != nil {
			s.unwriteQueues(runs)
			s.unwrite(seg, buf, pos)
			return 0, err
		}
	}
	// Publish: commitlog first, then the queues, so a reader that sees a queue entry can read its record.
	s.cl.writePos.Store(end)
	for i := range runs {
		runs[i].cq.max.Store(runs[i].next)
	}
	return end, nil
}

// unwrite zeroes, in seg, the bytes of a run of records (buf, at commitlog offset pos)
// that is not published because its write failed (or a write after it did): a failed
// write may have put whole records on the file before it stopped (a file system that
// runs out of space part-way), and a later run, written at the same position, may end
// exactly where one of them begins. Recovery, which reads on while records are valid,
// would then take them for stored messages whose senders were told they were not (or
// that they sent again). Zeros are where recovery stops. Writing zeros over the pages
// the failed write got takes no new space; past them the file holds zeros already (the
// zero write stops with the same error there). The caller holds putMu; buf is cleared.
func (s *Store) unwrite(seg *segment, buf []byte, pos int64) {
	clear(buf)
	if err := s.cl.write(seg, buf, pos-seg.start, true); err != nil && !errors.Is(err, syscall.ENOSPC) {
		s.log.Error("store: cannot clear a failed commitlog write; recovery may find its records", "offset", pos, "bytes", len(buf), "err", err)
	}
}

// unwriteQueues zeroes the consume-queue entries of runs, written (some perhaps only in
// part) but not published because a write of the same run failed: a queue that gets no
// later put would otherwise keep them past its end, and recovery, which takes a queue's
// entries up to its first empty one, would serve them after a restart, pointing at
// whatever record a later put wrote at those commitlog offsets (another queue's). Zeros
// are an empty entry. The caller holds putMu; the entries are cleared.
func (s *Store) unwriteQueues(runs []queueRun) {
	for i := range runs {
		r := &runs[i]
		clear(r.entries)
		if err := r.cq.write(r.cq.max.Load(), r.entries); err != nil && !errors.Is(err, syscall.ENOSPC) {
			s.log.Error("store: cannot clear the entries of a failed write; recovery may find them", "topic", r.cq.topic, "queueId", r.cq.queueID, "err", err)
		}
	}
}

// runFor returns the entry of *runs for topic/queueID, adding one (from the queue's
// published end) the first time; the caller holds putMu. A run has few queues: a linear
// search beats a map.
func (s *Store) runFor(runs *[]queueRun, topic string, queueID int32) *queueRun {
	for i := range *runs {
		if r := &(*runs)[i]; r.cq.queueID == queueID && r.cq.topic == topic {
			return r
		}
	}
	cq := s.queueFor(topic, queueID, true)
	if len(*runs) < cap(*runs) {
		*runs = (*runs)[:len(*runs)+1] // reuse the entries buffer of an earlier run
		r := &(*runs)[len(*runs)-1]
		r.cq, r.next = cq, cq.max.Load()
		return r
	}
	*runs = append(*runs, queueRun{cq: cq, next: cq.max.Load()})
	return &(*runs)[len(*runs)-1]
}

// published finishes messages written by writeRuns: it sets their offset message ids and
// message ids and runs the dispatch hooks for those that reached a consume queue.
func (s *Store) published(msgs []*message.MessageExt, tagsCodes []int64) {
	for _, m := range msgs {
		m.OffsetMsgID = message.OffsetMsgID(m.StoreHost, m.CommitLogOffset)
		if m.MsgID == "" {
			if m.MsgID = m.UniqKey(); m.MsgID == "" {
				m.MsgID = m.OffsetMsgID
			}
		}
	}
	s.hooksMu.RLock()
	hooks := s.hooks
	s.hooksMu.RUnlock()
	for _, h := range hooks {
		for i, m := range msgs {
			if dispatched(m.SysFlag) {
				h(DispatchEvent{Topic: m.Topic, QueueID: m.QueueID, QueueOffset: m.QueueOffset, TagsCode: tagsCodes[i], Properties: m.Properties})
			}
		}
	}
}

// OnDispatch registers f to be called after each message reaches its consume queue, with
// the topic, queue id, queue offset and tags code (the broker wakes long-polling pulls
// with it). f runs on the putting goroutine after the writer lock is released, in
// registration order; it must not block. Register hooks before traffic starts.
func (s *Store) OnDispatch(f func(topic string, queueID int32, queueOffset int64, tagsCode int64)) {
	if f == nil {
		return
	}
	s.OnDispatchEvent(func(e DispatchEvent) { f(e.Topic, e.QueueID, e.QueueOffset, e.TagsCode) })
}

// DispatchEvent describes one message that has just reached its consume queue.
type DispatchEvent struct {
	Topic       string
	QueueID     int32
	QueueOffset int64
	TagsCode    int64 // the consume-queue tag slot (tag hash, or delivery time in SCHEDULE_TOPIC_XXXX)
	// Properties are the message's properties; read-only, valid only during the call.
	Properties map[string]string
}

// OnDispatchEvent is OnDispatch with the message's properties too, so a hook can decide
// with a SQL92 filter whether the message concerns it (the broker wakes only the
// long-polling pulls whose subscription matches). Same rules as OnDispatch.
func (s *Store) OnDispatchEvent(f func(DispatchEvent)) {
	if f == nil {
		return
	}
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.hooks = append(s.hooks[:len(s.hooks):len(s.hooks)], f)
}

// MaxOffset returns the next queue offset to be written for topic/queueID (the entry count
// including removed ones); 0 if there is no such consume queue.
func (s *Store) MaxOffset(topic string, queueID int32) int64 {
	if cq := s.queueFor(topic, queueID, false); cq != nil {
		return cq.max.Load()
	}
	return 0
}

// MinOffset returns the first available queue offset of topic/queueID; 0 if there is no
// such consume queue.
func (s *Store) MinOffset(topic string, queueID int32) int64 {
	if cq := s.queueFor(topic, queueID, false); cq != nil {
		return cq.min.Load()
	}
	return 0
}

// MaxPhyOffset returns the commitlog write position in bytes: the offset the next record
// will get (unless it rolls to a new segment).
func (s *Store) MaxPhyOffset() int64 { return s.cl.writePos.Load() }

// MinPhyOffset returns the first commitlog offset still on disk (the start of the oldest
// segment).
func (s *Store) MinPhyOffset() int64 { return s.cl.minOffset() }

// Topics returns every topic that has consume queues, with their queue ids (unsorted).
// The map is a copy.
func (s *Store) Topics() map[string][]int32 {
	s.queuesMu.RLock()
	defer s.queuesMu.RUnlock()
	out := make(map[string][]int32, len(s.queues))
	for t, m := range s.queues {
		ids := make([]int32, 0, len(m))
		for id := range m {
			ids = append(ids, id)
		}
		out[t] = ids
	}
	return out
}

// DeleteTopic removes the consume queues of topic (files and directory). The commitlog is
// untouched, and a checkpoint is written so that recovery does not rebuild the deleted
// queues from records written before the deletion. A later put to the topic starts new
// queues at offset 0. Deleting an unknown topic is not an error.
func (s *Store) DeleteTopic(topic string) error {
	if err := message.ValidateTopic(topic); err != nil {
		return &InvalidArgumentError{Field: "topic", Reason: "not a valid topic name", Err: err}
	}
	if err := s.begin(); err != nil {
		return err
	}
	s.putMu.Lock()
	s.queuesMu.Lock()
	qs := s.queues[topic]
	delete(s.queues, topic)
	s.queuesMu.Unlock()
	for _, cq := range qs {
		cq.deleted.Store(true)
		cq.close()
	}
	err := os.RemoveAll(filepath.Join(s.cqRoot, topic))
	if err == nil {
		err = syncDir(s.cqRoot)
	}
	s.putMu.Unlock()
	defer s.end()
	if err != nil {
		return fmt.Errorf("store: delete topic %s: %w", topic, err)
	}
	return s.checkpoint()
}
