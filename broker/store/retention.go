package store

import (
	"fmt"
	"os"
	"time"
)

// DefaultDeleteFilesBatch is how many commitlog segments DeleteExpiredFiles removes per call
// when maxFiles < 1: 10 (RocketMQ deleteFileBatchMax).
const DefaultDeleteFilesBatch = 10

// DeleteExpiredFiles applies retention (RocketMQ fileReservedTime, default 72 h; the broker
// calls this at deleteWhen, e.g. 04 o'clock, with cutoff = now - fileReservedTime). It
// deletes commitlog segments oldest first whose last write (file modification time) is
// before cutoff, at most maxFiles of them (maxFiles < 1: 10), never the segment being
// written, and stops at the first segment that is not expired. Then every consume queue drops
// the files whose entries all point at deleted data and moves its min offset to the first
// entry that still has its record. It returns how many segments it deleted.
//
// Readers racing a deletion see OFFSET_TOO_SMALL, MESSAGE_WAS_REMOVING or OFFSET_FOUND_NULL,
// never an error.
func (s *Store) DeleteExpiredFiles(cutoff time.Time, maxFiles int) (int, error) {
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.end()
	if maxFiles < 1 {
		maxFiles = DefaultDeleteFilesBatch
	}
	s.putMu.Lock()
	defer s.putMu.Unlock()
	segs := s.cl.segments()
	var victims []*segment
	for i := 0; i < len(segs)-1 && len(victims) < maxFiles; i++ {
		fi, err := segs[i].f.Stat()
		if err != nil {
			return 0, fmt.Errorf("store: stat commitlog segment: %w", err)
		}
		if !fi.ModTime().Before(cutoff) {
			break
		}
		victims = append(victims, segs[i])
	}
	if len(victims) == 0 {
		return 0, nil
	}
	rest := append([]*segment(nil), segs[len(victims):]...)
	minPhy := rest[0].start
	// Consume queues first: move min offsets past the data before it disappears.
	for _, cq := range s.queueList() {
		if err := cq.deleteBelow(minPhy); err != nil {
			return 0, err
		}
	}
	s.cl.segs.Store(&rest)
	for _, v := range victims {
		if s.cl.wmap.seg == v {
			s.cl.unmapWriter()
		}
		v.f.Close()
		if err := os.Remove(v.path); err != nil && !os.IsNotExist(err) {
			return 0, fmt.Errorf("store: delete commitlog segment: %w", err)
		}
		s.log.Info("deleted expired commitlog segment", "file", v.path)
	}
	if err := syncDir(s.cl.dir); err != nil {
		return 0, err
	}
	// Key index (index.go): sealed index files pointing only at deleted data go too.
	if err := s.index.deleteBelow(minPhy); err != nil {
		return 0, err
	}
	return len(victims), nil
}

// deleteBelow drops the leading files whose entries all point below commitlog offset minPhy
// (always keeping the last file) and moves min to the first entry at or after minPhy.
// Entries of a queue are in commitlog order (padding, at the start, has offset 0), so the
// new min is found by binary search. It runs under Store.putMu or during recovery.
func (cq *consumeQueue) deleteBelow(minPhy int64) error {
	lo, hi := cq.min.Load(), cq.max.Load()
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := cq.entryAt(mid)
		if err != nil {
			return err
		}
		if !e.padding() && e.phy >= minPhy {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	if lo > cq.min.Load() {
		cq.min.Store(lo)
	}
	newMin := cq.min.Load()
	files := cq.fileList()
	drop := 0
	for drop < len(files)-1 && files[drop].start+files[drop].entries <= newMin {
		drop++
	}
	if drop == 0 {
		return nil
	}
	rest := append([]*cqFile(nil), files[drop:]...)
	cq.files.Store(&rest)
	for _, f := range files[:drop] {
		f.drop()
		if err := os.Remove(f.path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("store: delete consume queue file: %w", err)
		}
	}
	return syncDir(cq.dir)
}

// nextFileStart returns the queue offset where the file after the one that should hold
// offset starts (OFFSET_FOUND_NULL's next begin offset).
func (cq *consumeQueue) nextFileStart(offset int64) int64 {
	for _, f := range cq.fileList() {
		if f.start > offset {
			return f.start
		}
	}
	return offset + cq.perFile - offset%cq.perFile
}

// ExpiredSegments returns what DeleteExpiredFiles(cutoff, maxFiles) would delete now:
// for k = 1..n, element k-1 is the first commitlog offset that remains once the k oldest
// segments are deleted (so len is how many segments are expired, at most maxFiles). The
// broker uses it to count, per consumer group and queue, the messages a deletion would
// take before any reader had them (see [Store.QueueMinOffsetAt]).
func (s *Store) ExpiredSegments(cutoff time.Time, maxFiles int) ([]int64, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.end()
	if maxFiles < 1 {
		maxFiles = DefaultDeleteFilesBatch
	}
	segs := s.cl.segments()
	var out []int64
	for i := 0; i < len(segs)-1 && len(out) < maxFiles; i++ {
		fi, err := segs[i].f.Stat()
		if err != nil {
			return nil, fmt.Errorf("store: stat commitlog segment: %w", err)
		}
		if !fi.ModTime().Before(cutoff) {
			break
		}
		out = append(out, segs[i+1].start)
	}
	return out, nil
}

// QueueMinOffsetAt returns the min offset topic/queueID would have if every commitlog
// record below minPhy were deleted: the first entry at or after minPhy (or the queue's end
// when there is none). Without such a queue it returns 0.
func (s *Store) QueueMinOffsetAt(topic string, queueID int32, minPhy int64) (int64, error) {
	cq := s.queueFor(topic, queueID, false)
	if cq == nil {
		return 0, nil
	}
	lo, hi := cq.min.Load(), cq.max.Load()
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := cq.entryAt(mid)
		if err != nil {
			return 0, err
		}
		if !e.padding() && e.phy >= minPhy {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}
