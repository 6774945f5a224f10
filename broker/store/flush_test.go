package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

func TestSyncFlushGroupCommit(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	cfg.FlushConsumeQueueInterval = time.Hour
	s := openStore(t, cfg)

	// Hold the flush lock: no fsync can run while the putters write, so none may be acked.
	s.flusher.syncMu.Lock()
	passesBefore := s.flusher.passes.Load()
	const n = 64
	type result struct {
		r   PutResult
		err error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			r, err := s.PutMessage(context.Background(), newMsg("G", int32(i%4), fmt.Sprintf("g%d", i), ""), 0)
			results <- result{r, err}
		}()
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		var total int64
		for q := int32(0); q < 4; q++ {
			total += s.MaxOffset("G", q)
		}
		return total == n
	})
	select {
	case r := <-results:
		s.flusher.syncMu.Unlock()
		t.Fatalf("a SYNC_FLUSH put returned before any fsync: %+v", r)
	default:
	}
	s.flusher.syncMu.Unlock()
	for range n {
		r := <-results
		if r.err != nil || r.r.Status != PutOK {
			t.Fatalf("put: %+v %v", r.r, r.err)
		}
	}
	// Group commit: one fsync pass covered all 64 puts.
	if passes := s.flusher.passes.Load() - passesBefore; passes != 1 {
		t.Fatalf("%d fsync passes for %d concurrent puts, want 1", passes, n)
	}
	for q := int32(0); q < 4; q++ {
		if got := len(bodies(t, s, "G", q)); got != n/4 {
			t.Fatalf("queue %d: %d readable", q, got)
		}
	}
}

func TestSyncFlushManyConcurrentPutters(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	s := openStore(t, cfg)
	const putters, each = 32, 25
	var wg sync.WaitGroup
	errs := make(chan error, putters)
	for p := range putters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r, err := s.PutMessage(context.Background(), newMsg("M", int32(p%3), fmt.Sprintf("%d-%d", p, i), ""), 0)
				if err == nil && r.Status != PutOK {
					err = fmt.Errorf("status %v", r.Status)
				}
				if err == nil {
					flushed, _ := s.flusher.state()
					if flushed < r.CommitLogOffset+int64(r.MsgSize) {
						err = fmt.Errorf("acked at flushed offset %d before its end %d", flushed, r.CommitLogOffset+int64(r.MsgSize))
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for q := int32(0); q < 3; q++ {
		total += len(bodies(t, s, "M", q))
	}
	if total != putters*each {
		t.Fatalf("%d readable, want %d", total, putters*each)
	}
	t.Logf("%d puts, %d fsync passes", putters*each, s.flusher.passes.Load())
}

func TestSyncFlushTimeout(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	cfg.SyncFlushTimeout = 30 * time.Millisecond
	cfg.FlushConsumeQueueInterval = time.Hour
	s := openStore(t, cfg)
	s.flusher.syncMu.Lock() // a disk that does not answer
	r, err := s.PutMessage(context.Background(), newMsg("TO", 0, "slow", ""), 0)
	s.flusher.syncMu.Unlock()
	if err != nil || r.Status != PutFlushDiskTimeout {
		t.Fatalf("got %+v %v, want FLUSH_DISK_TIMEOUT", r, err)
	}
	// The message is stored; only its durability was unconfirmed.
	if got := bodies(t, s, "TO", 0); len(got) != 1 {
		t.Fatalf("stored: %v", got)
	}
}

func TestSyncFlushContextEndsWhileWaiting(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	cfg.SyncFlushTimeout = time.Hour
	cfg.FlushConsumeQueueInterval = time.Hour
	s := openStore(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	s.flusher.syncMu.Lock()
	r, err := s.PutMessage(ctx, newMsg("TO", 0, "ctx", ""), 0)
	s.flusher.syncMu.Unlock()
	if err != nil || r.Status != PutFlushDiskTimeout {
		t.Fatalf("ctx expiry while waiting: %+v %v", r, err)
	}
	if got := bodies(t, s, "TO", 0); len(got) != 1 {
		t.Fatalf("stored: %v", got)
	}
}

func TestCloseReleasesSyncFlushWaiters(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	cfg.SyncFlushTimeout = time.Hour
	cfg.FlushConsumeQueueInterval = time.Hour
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.flusher.syncMu.Lock()
	done := make(chan PutResult, 1)
	go func() {
		r, _ := s.PutMessage(context.Background(), newMsg("CL", 0, "x", ""), 0)
		done <- r
	}()
	testkit.WaitFor(t, 5*time.Second, func() bool { return s.MaxOffset("CL", 0) == 1 })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	s.flusher.syncMu.Unlock() // Close's final flush covers the waiter
	if r := <-done; r.Status != PutOK {
		t.Fatalf("waiter got %v", r.Status)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

func TestAsyncFlushAdvances(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s := openStore(t, cfg)
	r := put(t, s, newMsg("A", 0, "async", ""))
	end := r.CommitLogOffset + int64(r.MsgSize)
	// The background flusher fsyncs within FlushInterval without anyone waiting.
	testkit.WaitFor(t, 5*time.Second, func() bool { f, _ := s.flusher.state(); return f >= end })
	// And the checkpointer records it.
	testkit.WaitFor(t, 5*time.Second, func() bool {
		cp, ok, err := readCheckpoint(cfg.Dir)
		return err == nil && ok && cp.commitLogFlushed >= end && cp.consumeQueueFlushed >= end
	})
}

func TestConcurrentPutAndGet(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.CommitLogSegmentSize = 16 << 10
	cfg.ConsumeQueueEntries = 50
	s := openStore(t, cfg)
	const writers, each, queues = 4, 150, 3
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, writers+queues)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				var err error
				if i%10 == 0 {
					batch := []*message.MessageExt{newMsg("CC", int32(w%queues), "b1", ""), newMsg("CC", int32(w%queues), "b2", "")}
					_, err = s.PutMessages(context.Background(), batch, nil)
				} else {
					_, err = s.PutMessage(context.Background(), newMsg("CC", int32(i%queues), fmt.Sprintf("w%d-%d", w, i), ""), 0)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var readers sync.WaitGroup
	for q := range queues {
		readers.Add(1)
		go func() {
			defer readers.Done()
			off := int64(0)
			for {
				select {
				case <-done:
					return
				default:
				}
				r, err := s.GetMessage("CC", int32(q), off, 16, 0, nil)
				if err != nil {
					errs <- err
					return
				}
				ms, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
				if err != nil {
					errs <- fmt.Errorf("served a bad record: %w", err)
					return
				}
				for k, m := range ms {
					if m.QueueOffset != off+int64(k) || m.QueueID != int32(q) {
						errs <- fmt.Errorf("queue %d: record at %d says queue %d offset %d", q, off+int64(k), m.QueueID, m.QueueOffset)
						return
					}
				}
				if r.Status == Found {
					off = r.NextBeginOffset
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestCorruptConsumeQueueEntriesAreNotServed(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	rs := putN(t, s, "E", 0, 4, "e")
	cq := s.queueFor("E", 0, false)
	bad := []cqEntry{
		{phy: rs[1].CommitLogOffset, size: -5},                         // negative size
		{phy: rs[1].CommitLogOffset, size: 1 << 30},                    // larger than a segment
		{phy: rs[1].CommitLogOffset + 10, size: rs[1].MsgSize},         // points into a record
		{phy: -100, size: rs[1].MsgSize},                               // negative offset
		{phy: rs[3].CommitLogOffset + int64(rs[3].MsgSize), size: 200}, // past the data
		{phy: rs[2].CommitLogOffset, size: rs[2].MsgSize - 1},          // wrong size
	}
	s.putMu.Lock()
	for i, e := range bad {
		var b [cqEntrySize]byte
		putEntry(b[:], e)
		if err := cq.write(4+int64(i), b[:]); err != nil {
			t.Fatal(err)
		}
	}
	cq.max.Store(4 + int64(len(bad)))
	s.putMu.Unlock()
	r, err := s.GetMessage("E", 0, 0, 32, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.MessageCount != 4 || r.NextBeginOffset != 4+int64(len(bad)) {
		t.Fatalf("served %d messages, next %d", r.MessageCount, r.NextBeginOffset)
	}
	if _, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true}); err != nil {
		t.Fatal(err)
	}
	r, err = s.GetMessage("E", 0, 4, 32, 0, nil)
	if err != nil || r.MessageCount != 0 || r.Status == Found {
		t.Fatalf("bad entries served: %v %d %v", r.Status, r.MessageCount, err)
	}
}

// asyncResult is what a PutMessageAsync callback saw: the result, the error, and the
// commitlog's fsynced offset at the moment it ran.
type asyncResult struct {
	r       PutResult
	err     error
	flushed int64
}

// TestPutMessageAsyncSyncFlush: queued SYNC_FLUSH puts complete only after an fsync that
// covers them, all from one group-commit pass, and each callback runs exactly once.
func TestPutMessageAsyncSyncFlush(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	cfg.FlushConsumeQueueInterval = time.Hour
	s := openStore(t, cfg)

	s.flusher.syncMu.Lock() // no fsync while the puts are written
	passesBefore := s.flusher.passes.Load()
	const n = 64
	results := make(chan asyncResult, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.PutMessageAsync(context.Background(), newMsg("A", int32(i%4), fmt.Sprintf("a%d", i), ""), 0, func(r PutResult, err error) {
				flushed, _ := s.flusher.state()
				results <- asyncResult{r, err, flushed}
			})
		}()
	}
	wg.Wait() // every PutMessageAsync returned: they do not block for the fsync
	select {
	case r := <-results:
		s.flusher.syncMu.Unlock()
		t.Fatalf("a SYNC_FLUSH put completed before any fsync: %+v", r)
	default:
	}
	s.flusher.syncMu.Unlock()
	for range n {
		r := <-results
		if r.err != nil || r.r.Status != PutOK {
			t.Fatalf("put: %+v %v", r.r, r.err)
		}
		if end := r.r.CommitLogOffset + r.r.WroteBytes; r.flushed < end {
			t.Fatalf("completed at fsynced offset %d before its end %d", r.flushed, end)
		}
	}
	if passes := s.flusher.passes.Load() - passesBefore; passes != 1 {
		t.Fatalf("%d fsync passes for %d queued puts, want 1", passes, n)
	}
	select {
	case r := <-results:
		t.Fatalf("a callback ran twice: %+v", r)
	default:
	}
	// A batch goes the same way.
	got := make(chan asyncResult, 1)
	s.PutMessagesAsync(context.Background(), []*message.MessageExt{newMsg("A", 0, "b1", ""), newMsg("A", 0, "b2", "")}, nil, func(r PutResult, err error) {
		flushed, _ := s.flusher.state()
		got <- asyncResult{r, err, flushed}
	})
	if r := <-got; r.err != nil || r.r.Status != PutOK || r.r.Count != 2 || r.flushed < r.r.CommitLogOffset+r.r.WroteBytes {
		t.Fatalf("batch: %+v", r)
	}
	// Bad input is reported through the callback, on the caller's goroutine.
	var badErr error
	s.PutMessagesAsync(context.Background(), nil, nil, func(_ PutResult, err error) { badErr = err })
	var iae *InvalidArgumentError
	if !errors.As(badErr, &iae) {
		t.Fatalf("empty batch: %v", badErr)
	}
}

// TestPutMessageAsyncTimeout: with the fsync stuck, the deadline sweep completes a queued
// put with FLUSH_DISK_TIMEOUT; the message is stored.
func TestPutMessageAsyncTimeout(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	cfg.SyncFlushTimeout = 30 * time.Millisecond
	cfg.FlushConsumeQueueInterval = time.Hour
	s := openStore(t, cfg)
	s.flusher.syncMu.Lock() // a disk that does not answer
	got := make(chan asyncResult, 1)
	s.PutMessageAsync(context.Background(), newMsg("TO", 0, "slow", ""), 0, func(r PutResult, err error) { got <- asyncResult{r: r, err: err} })
	r := <-got
	s.flusher.syncMu.Unlock()
	if r.err != nil || r.r.Status != PutFlushDiskTimeout {
		t.Fatalf("got %+v, want FLUSH_DISK_TIMEOUT", r)
	}
	if got := bodies(t, s, "TO", 0); len(got) != 1 {
		t.Fatalf("stored: %v", got)
	}
}

// TestCloseCompletesQueuedPuts: Close's final flush covers a queued put, which then
// completes with PutOK; a put after Close fails with ErrClosed through the callback.
func TestCloseCompletesQueuedPuts(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	cfg.SyncFlushTimeout = time.Hour
	cfg.FlushConsumeQueueInterval = time.Hour
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.flusher.syncMu.Lock()
	got := make(chan asyncResult, 1)
	s.PutMessageAsync(context.Background(), newMsg("CL", 0, "x", ""), 0, func(r PutResult, err error) {
		flushed, _ := s.flusher.state()
		got <- asyncResult{r, err, flushed}
	})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	s.flusher.syncMu.Unlock()
	if r := <-got; r.err != nil || r.r.Status != PutOK || r.flushed < r.r.CommitLogOffset+r.r.WroteBytes {
		t.Fatalf("queued put at Close: %+v", r)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	var after error
	s.PutMessageAsync(context.Background(), newMsg("CL", 0, "y", ""), 0, func(_ PutResult, err error) { after = err })
	if !errors.Is(after, ErrClosed) {
		t.Fatalf("put after Close: %v", after)
	}
}
