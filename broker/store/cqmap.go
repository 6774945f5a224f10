package store

import (
	"container/list"
	"fmt"
	"os"
	"sync"
)

// defaultMappedCQFiles is how many consume-queue files the writer keeps mapped at once.
// Each mapping is one entry of the process's memory map (vm.max_map_count, 65530 by
// default) and at most cqReleaseEvery plus a page of resident memory, so 256 of them cost
// about 5 MiB of resident set at worst, whatever the number of queues.
const defaultMappedCQFiles = 256

// cqMapAfterWrites is how many pwrites a consume-queue file takes before it may evict
// another file's mapping once all defaultMappedCQFiles are in use: with more busy queues
// than mappings, a file is mapped again only after that many writes, so mapping and
// unmapping cost at most a fraction of the writes they save instead of one pair per write.
const cqMapAfterWrites = 64

// cqReleaseEvery is how many bytes the writer copies into a consume-queue file's mapping
// between two releases of the pages behind it.
const cqReleaseEvery = 16 << 10

// cqMaps holds the shared, writable memory mappings through which the writer fills
// consume-queue files, as the commitlog's writerMap does for its segment: copying a
// 20-byte entry into a mapping costs no system call, where a pwrite costs one per put.
// The mapping shares the file's page cache, so readers (pread), the consume-queue flush
// (fsync of the file writes back pages dirtied through a mapping too) and a crashed
// process see the same bytes as after a pwrite.
//
// The number of mapped files is bounded: files are mapped when written and kept in an
// LRU list; mapping one more than max unmaps the least recently written one (its data
// stays in the page cache). Above max busy queues, a file must first take
// cqMapAfterWrites pwrites before it may evict another mapping. Pages behind the writer
// are released from the process every cqReleaseEvery bytes, so the resident set does not
// grow with the data. A file whose mapping fails (or outside Linux) or faults is written
// with pwrite; a faulting write is redone with pwrite, which returns the file system's
// error (ENOSPC, EIO).
//
// Lock order: cqMaps.mu is taken under Store.putMu (the writer) and by recovery, DeleteTopic,
// retention and Close when they drop files; it takes fdCache.mu (to open a file to map it).
type cqMaps struct {
	mu     sync.Mutex
	max    int       // most files mapped at once
	lru    list.List // of *cqFile with a mapping; front = most recently written
	maps   int       // mappings made (tests)
	faults int       // writes that faulted and went to pwrite instead (tests)
}

func newCQMaps(max int) *cqMaps { return &cqMaps{max: max} }

// cqMapping is a consume-queue file's mapping state, guarded by cqMaps.mu.
type cqMapping struct {
	data     []byte        // the whole file, mapped; nil while unmapped
	elem     *list.Element // in cqMaps.lru while data != nil
	released int64         // pages below this byte offset are released
	pwrites  int           // pwrites since the file was created or unmapped (admission)
	never    bool          // mapping failed or faulted: pwrite only
}

// mapped returns how many files are mapped now.
func (m *cqMaps) mapped() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len()
}

// write writes b (whole entries) at byte offset off of f: through f's mapping, mapping it
// first if the admission rule allows, or with pwrite. Only the writer calls it.
func (m *cqMaps) write(f *cqFile, b []byte, off int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fm := &f.m
	if fm.data == nil && !fm.never && len(b) < directWriteMin &&
		(m.lru.Len() < m.max || fm.pwrites >= cqMapAfterWrites) {
		m.mapLocked(f)
	}
	if fm.data == nil {
		fm.pwrites++
		return f.pwrite(b, off)
	}
	m.lru.MoveToFront(fm.elem)
	end := off + int64(len(b))
	if ferr := copyMapped(fm.data[off:end], b); ferr != nil {
		m.unmapLocked(f)
		fm.never = true
		m.faults++
		if err := f.pwrite(b, off); err != nil {
			return fmt.Errorf("%v: %w", ferr, err)
		}
		return nil
	}
	if end-fm.released >= cqReleaseEvery {
		to := end &^ (pageSize - 1)
		_ = releasePages(fm.data[fm.released:to]) // best effort: only the resident set is at stake
		fm.released = to
	}
	return nil
}

// mapLocked maps f, unmapping least recently written files while max are mapped. A
// failure marks f pwrite-only.
func (m *cqMaps) mapLocked(f *cqFile) {
	for m.lru.Len() >= m.max && m.lru.Len() > 0 {
		m.unmapLocked(m.lru.Back().Value.(*cqFile))
	}
	if m.max < 1 {
		f.m.never = true
		return
	}
	var data []byte
	err := f.with(func(fd *os.File) error {
		var err error
		data, err = mapFile(fd, f.entries*cqEntrySize)
		return err
	})
	if err != nil {
		f.m.never = true
		return
	}
	f.m.data, f.m.released, f.m.pwrites = data, 0, 0
	f.m.elem = m.lru.PushFront(f)
	m.maps++
}

// unmap removes f's mapping, if any (before f is truncated or deleted).
func (m *cqMaps) unmap(f *cqFile) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unmapLocked(f)
}

func (m *cqMaps) unmapLocked(f *cqFile) {
	fm := &f.m
	if fm.data == nil {
		return
	}
	_ = unmapSegment(fm.data)
	m.lru.Remove(fm.elem)
	fm.data, fm.elem, fm.released, fm.pwrites = nil, nil, 0, 0
}
