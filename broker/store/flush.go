package store

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// flusher fsyncs the commitlog and tells SYNC_FLUSH waiters when their bytes are durable.
//
// Group commit: a waiter records the end offset of its records, kicks the flush goroutine
// and waits on done, a channel closed (and replaced) after every fsync pass. One pass fsyncs
// everything written up to the moment it starts, so every put that arrived while the
// previous fsync ran is covered by the next single fsync.
type flusher struct {
	cl *commitLog

	syncMu sync.Mutex // serializes fsync passes
	compMu sync.Mutex // serializes completing waiters (held while their callbacks run)

	mu          sync.Mutex // guards the fields below
	flushed     int64      // every commitlog byte below this offset is fsynced
	flushedTime int64      // unix ms of the last pass that advanced flushed
	done        chan struct{}
	err         error // last fsync error (cleared by a successful pass)

	// waiters are the SYNC_FLUSH puts queued by await (PutMessageAsync): each is
	// completed by the first pass whose fsync covers its end offset, by the deadline sweep,
	// or by closeWaiters. spare is the slice reused to collect the ones to complete.
	waiters []flushWaiter
	spare   []flushWaiter
	closed  bool // closeWaiters ran: await completes at once

	kick chan struct{} // capacity 1: "someone is waiting"

	passes atomic.Int64 // fsync passes that advanced flushed (for tests and metrics)

	observe atomic.Pointer[func(time.Duration)] // Store.OnFlush: told each pass's duration
}

func newFlusher(cl *commitLog, flushed int64) *flusher {
	return &flusher{cl: cl, flushed: flushed, done: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// state returns the flushed offset and the channel that the next pass closes.
func (fl *flusher) state() (int64, chan struct{}) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.flushed, fl.done
}

// flush fsyncs every segment holding bytes between the flushed offset and the current write
// position, then wakes the waiters. It returns the new flushed offset.
func (fl *flusher) flush() (int64, error) {
	fl.syncMu.Lock()
	defer fl.syncMu.Unlock()
	target := fl.cl.writePos.Load()
	from, _ := fl.state()
	if target <= from {
		return from, nil
	}
	var err error
	start := time.Now()
	for _, s := range fl.cl.segments() {
		if s.end() > from && s.start < target {
			if err = s.f.Sync(); err != nil {
				break
			}
		}
	}
	fl.mu.Lock()
	fl.err = err
	if err != nil {
		flushed := fl.flushed
		fl.mu.Unlock()
		return flushed, err
	}
	fl.flushed = target
	fl.flushedTime = time.Now().UnixMilli()
	fl.passes.Add(1)
	if f := fl.observe.Load(); f != nil {
		(*f)(time.Since(start))
	}
	close(fl.done)
	fl.done = make(chan struct{})
	if len(fl.waiters) == 0 {
		fl.mu.Unlock()
		return target, nil
	}
	fl.mu.Unlock()
	fl.compMu.Lock()
	fl.mu.Lock()
	ready := fl.takeWaiters(func(w *flushWaiter) bool { return w.end <= target })
	fl.mu.Unlock()
	fl.complete(ready, true)
	fl.compMu.Unlock()
	return target, nil
}

// OnFlush registers f to be told the duration of every commitlog fsync pass that made
// data durable (a SYNC_FLUSH group commit or an ASYNC_FLUSH tick with new data), for
// metrics. f runs on the flushing goroutine, must not block, and replaces an earlier f.
func (s *Store) OnFlush(f func(d time.Duration)) {
	if f == nil {
		s.flusher.observe.Store(nil)
		return
	}
	s.flusher.observe.Store(&f)
}

// flushWaiter is one queued SYNC_FLUSH put: f(true) once the commitlog is fsynced up to
// end, f(false) at deadline (unix ns) or at Close if it is not.
type flushWaiter struct {
	end      int64
	deadline int64
	f        func(ok bool)
}

// await calls f(true) once the commitlog is fsynced up to end, or f(false) when that has
// not happened by deadline (unix ns; the sweep runs every sweepInterval) or the store
// closes first. f runs on this goroutine when end is already fsynced or the flusher is
// closed, else on the goroutine of the fsync pass, the sweep or Close. No timer or
// goroutine is kept per call: one queue, completed after each pass.
func (fl *flusher) await(end, deadline int64, f func(ok bool)) {
	fl.mu.Lock()
	if fl.flushed >= end || fl.closed {
		ok := fl.flushed >= end
		fl.mu.Unlock()
		f(ok)
		return
	}
	fl.waiters = append(fl.waiters, flushWaiter{end: end, deadline: deadline, f: f})
	fl.mu.Unlock()
	fl.wake()
}

// takeWaiters removes from the queue the waiters done reports true for and returns them
// (in queue order). The returned slice is valid until the next call; fl.mu must be held.
func (fl *flusher) takeWaiters(done func(w *flushWaiter) bool) []flushWaiter {
	ready := fl.spare[:0]
	keep := fl.waiters[:0]
	for i := range fl.waiters {
		if w := &fl.waiters[i]; done(w) {
			ready = append(ready, *w)
		} else {
			keep = append(keep, *w)
		}
	}
	clear(fl.waiters[len(keep):]) // drop the callbacks of completed waiters
	fl.waiters = keep
	fl.spare = ready
	return ready
}

// complete calls each waiter's f with ok, in order, and forgets them. It must be called
// with fl.compMu held (so that spare is not reused meanwhile) and fl.mu not held.
func (fl *flusher) complete(ready []flushWaiter, ok bool) {
	for i := range ready {
		ready[i].f(ok)
		ready[i].f = nil
	}
}

// sweep completes with false every waiter whose deadline (unix ns) is at or before now.
func (fl *flusher) sweep(now int64) {
	fl.compMu.Lock()
	defer fl.compMu.Unlock()
	fl.mu.Lock()
	if len(fl.waiters) == 0 {
		fl.mu.Unlock()
		return
	}
	flushed := fl.flushed
	ready := fl.takeWaiters(func(w *flushWaiter) bool { return w.deadline <= now || w.end <= flushed })
	fl.mu.Unlock()
	for i := range ready {
		ready[i].f(ready[i].end <= flushed)
		ready[i].f = nil
	}
}

// closeWaiters marks the flusher closed and completes every queued waiter: true if the
// final flush covered it.
func (fl *flusher) closeWaiters() {
	fl.compMu.Lock()
	defer fl.compMu.Unlock()
	fl.mu.Lock()
	fl.closed = true
	flushed := fl.flushed
	ready := fl.takeWaiters(func(*flushWaiter) bool { return true })
	fl.mu.Unlock()
	for i := range ready {
		ready[i].f(ready[i].end <= flushed)
		ready[i].f = nil
	}
}

// wake asks the flush goroutine for a pass without blocking.
func (fl *flusher) wake() {
	select {
	case fl.kick <- struct{}{}:
	default:
	}
}

// waitFlushed waits until the commitlog is fsynced up to end. It returns false when
// timeout passes, ctx ends or stopped is closed first.
func (fl *flusher) waitFlushed(ctx context.Context, end int64, timeout time.Duration, stopped <-chan struct{}) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		flushed, done := fl.state()
		if flushed >= end {
			return true
		}
		fl.wake()
		select {
		case <-done:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		case <-stopped:
			flushed, _ := fl.state()
			return flushed >= end
		}
	}
}

// runCommitLogFlusher is the flush goroutine. With SYNC_FLUSH it runs a pass whenever a
// waiter kicks it; with ASYNC_FLUSH every FlushInterval. It returns when stop is closed (Close
// runs the final flush itself).
func (s *Store) runCommitLogFlusher() {
	defer s.wg.Done()
	var tick <-chan time.Time
	if s.cfg.FlushDiskType == AsyncFlush {
		t := time.NewTicker(s.cfg.FlushInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-s.stop:
			return
		case <-s.flusher.kick:
		case <-tick:
		}
		if _, err := s.flusher.flush(); err != nil {
			s.log.Error("commitlog fsync failed", "err", err)
		}
	}
}

// sweepInterval is how often the SYNC_FLUSH deadline sweep runs: a queued put gets
// PutFlushDiskTimeout between SyncFlushTimeout and SyncFlushTimeout + sweepInterval.
func sweepInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/8, time.Millisecond), 100*time.Millisecond)
}

// runFlushSweeper completes the queued SYNC_FLUSH puts (PutMessageAsync) whose
// SyncFlushTimeout has passed, separately from the flush goroutine so that a stuck fsync
// does not hold the timeouts back. It returns when stop is closed.
func (s *Store) runFlushSweeper() {
	defer s.wg.Done()
	t := time.NewTicker(sweepInterval(s.cfg.SyncFlushTimeout))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.flusher.sweep(now.UnixNano())
		}
	}
}

// runCheckpointer fsyncs consume queues and writes the checkpoint every
// FlushConsumeQueueInterval until stop is closed.
func (s *Store) runCheckpointer() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.FlushConsumeQueueInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if err := s.checkpoint(); err != nil {
			s.log.Error("checkpoint failed", "err", err)
		}
	}
}

// checkpoint makes the consume queues durable and records how far: it takes the write
// position D (every record below D has its consume-queue entries written), fsyncs all
// consume queues, makes sure the commitlog is fsynced at least up to D, and writes
// {commitLogFlushed, consumeQueueFlushed: D}. It skips the write when nothing changed.
func (s *Store) checkpoint() error {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	d := s.cl.writePos.Load()
	for _, cq := range s.queueList() {
		if err := cq.flush(); err != nil {
			return err
		}
	}
	// Key index (index.go): fsync its entries and record its covered offset (>= d). A
	// failure is logged only: recovery re-indexes from what the index header says.
	if err := s.index.flush(); err != nil {
		s.log.Error("key index flush failed", "err", err)
	}
	clFlushed, err := s.flusher.flush()
	if err != nil {
		return err
	}
	s.flusher.mu.Lock()
	flushedTime := s.flusher.flushedTime
	s.flusher.mu.Unlock()
	cp := checkpoint{commitLogFlushed: clFlushed, commitLogFlushedTime: flushedTime, consumeQueueFlushed: min(d, clFlushed), time: time.Now().UnixMilli()}
	if cp.commitLogFlushed == s.lastCP.commitLogFlushed && cp.consumeQueueFlushed == s.lastCP.consumeQueueFlushed {
		return nil
	}
	if err := writeCheckpoint(s.cfg.Dir, cp); err != nil {
		return err
	}
	s.lastCP = cp
	return nil
}
