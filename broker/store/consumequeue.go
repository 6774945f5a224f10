package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
)

// cqEntrySize is the size of a consume-queue entry: commitlog offset int64, record size
// int32, tags code int64 (RocketMQ CQ_STORE_UNIT_SIZE, docs/protocol.md §6.1).
const cqEntrySize = 20

// paddingSize is the size field of a padding entry (commitlog offset 0, size
// Integer.MAX_VALUE, tags code 0), which RocketMQ writes to fill a consume queue that does
// not start at offset 0. Readers skip padding entries.
const paddingSize = math.MaxInt32

// cqEntry is one decoded consume-queue entry.
type cqEntry struct {
	phy  int64 // commitlog offset of the record
	size int32 // record size in bytes; 0 = never written, paddingSize = padding
	tags int64 // tags code
}

func (e cqEntry) empty() bool   { return e.size == 0 }
func (e cqEntry) padding() bool { return e.size == paddingSize }

func putEntry(b []byte, e cqEntry) {
	binary.BigEndian.PutUint64(b[0:], uint64(e.phy))
	binary.BigEndian.PutUint32(b[8:], uint32(e.size))
	binary.BigEndian.PutUint64(b[12:], uint64(e.tags))
}

func getEntry(b []byte) cqEntry {
	return cqEntry{
		phy:  int64(binary.BigEndian.Uint64(b[0:])),
		size: int32(binary.BigEndian.Uint32(b[8:])),
		tags: int64(binary.BigEndian.Uint64(b[12:])),
	}
}

// cqFile is one consume-queue file holding entries [start, start+entries). Its
// descriptor is opened on demand and closed when idle (fdcache.go); use it through
// acquire/release or with. The writer fills it through a memory mapping while it is
// among the mapped files (cqmap.go).
type cqFile struct {
	start   int64 // queue offset of its first entry
	entries int64
	*lazyFile
	maps *cqMaps   // the store's consume-queue mappings
	m    cqMapping // guarded by maps.mu
}

// pwrite writes b at byte offset off with one pwrite.
func (f *cqFile) pwrite(b []byte, off int64) error {
	return f.with(func(fd *os.File) error {
		_, err := fd.WriteAt(b, off)
		return err
	})
}

// drop unmaps the file and marks it deleted (see lazyFile.drop).
func (f *cqFile) drop() {
	f.maps.unmap(f)
	f.lazyFile.drop()
}

// consumeQueue is the index of one topic/queue id. Entries are written only by the single
// writer (under Store.putMu, or by recovery before Open returns); readers load files, min
// and max atomically and never read at or past max.
type consumeQueue struct {
	topic   string
	queueID int32
	dir     string
	perFile int64 // entries per newly created file
	cache   *fdCache
	maps    *cqMaps // the writer's mappings (cqmap.go)

	files   atomic.Pointer[[]*cqFile] // immutable sorted slice, copy-on-write
	min     atomic.Int64              // first readable queue offset
	max     atomic.Int64              // next queue offset to write (published after the entry is on the page cache)
	deleted atomic.Bool               // set by DeleteTopic

	flushed int64 // entries below this are fsynced; touched only by Store.checkpoint (cpMu)
}

func newConsumeQueue(dir, topic string, queueID int32, perFile int64, cache *fdCache, maps *cqMaps) *consumeQueue {
	cq := &consumeQueue{topic: topic, queueID: queueID, dir: dir, perFile: perFile, cache: cache, maps: maps}
	cq.files.Store(&[]*cqFile{})
	return cq
}

func (cq *consumeQueue) fileList() []*cqFile { return *cq.files.Load() }

// fileFor returns the file holding queue offset idx, or nil.
func (cq *consumeQueue) fileFor(idx int64) *cqFile {
	files := cq.fileList()
	i := sort.Search(len(files), func(i int) bool { return files[i].start+files[i].entries > idx })
	if i < len(files) && files[i].start <= idx {
		return files[i]
	}
	return nil
}

// readEntries returns the raw entries from queue offset idx up to n entries, stopping at the
// end of idx's file and at max. It returns nil, nil when the file holding idx is missing or
// was deleted under the reader.
func (cq *consumeQueue) readEntries(idx int64, n int64) ([]byte, error) {
	return cq.readEntriesInto(nil, idx, n)
}

// readEntriesInto is readEntries reusing buf's storage when it is large enough.
func (cq *consumeQueue) readEntriesInto(buf []byte, idx int64, n int64) ([]byte, error) {
	f := cq.fileFor(idx)
	if f == nil {
		return nil, nil
	}
	n = min(n, f.start+f.entries-idx, cq.max.Load()-idx)
	if n <= 0 {
		return nil, nil
	}
	if int64(cap(buf)) < n*cqEntrySize {
		buf = make([]byte, n*cqEntrySize)
	}
	buf = buf[:n*cqEntrySize]
	fd, err := f.acquire()
	if err != nil {
		if errors.Is(err, errFileGone) {
			return nil, nil // deleted under the reader (retention or DeleteTopic)
		}
		return nil, err
	}
	defer f.release()
	if _, err := fd.ReadAt(buf, (idx-f.start)*cqEntrySize); err != nil {
		return nil, fmt.Errorf("store: read consume queue %s/%d at %d: %w", cq.topic, cq.queueID, idx, err)
	}
	return buf, nil
}

// entryAt reads the entry at queue offset idx (which must be below max).
func (cq *consumeQueue) entryAt(idx int64) (cqEntry, error) {
	b, err := cq.readEntries(idx, 1)
	if err != nil {
		return cqEntry{}, err
	}
	if len(b) < cqEntrySize {
		return cqEntry{}, fmt.Errorf("%w: consume queue %s/%d has no entry at %d", ErrNotFound, cq.topic, cq.queueID, idx)
	}
	return getEntry(b), nil
}

// createFile creates the file whose first entry is start, preallocated and zero-filled. The
// first file of a queue also creates its directories and makes them durable (fsync of the
// parents), because recovery only rebuilds queues it can find.
func (cq *consumeQueue) createFile(start int64) (*cqFile, error) {
	if _, err := os.Stat(cq.dir); os.IsNotExist(err) {
		if err := os.MkdirAll(cq.dir, 0o755); err != nil {
			return nil, fmt.Errorf("store: create consume queue dir: %w", err)
		}
		topicDir := filepath.Dir(cq.dir)
		if err := syncDir(topicDir); err != nil {
			return nil, err
		}
		if err := syncDir(filepath.Dir(topicDir)); err != nil {
			return nil, err
		}
	}
	path := filepath.Join(cq.dir, fileName(start*cqEntrySize))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: create consume queue file: %w", err)
	}
	if err := f.Truncate(cq.perFile * cqEntrySize); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("store: preallocate consume queue file: %w", err)
	}
	if err := syncDir(cq.dir); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	nf := &cqFile{start: start, entries: cq.perFile, lazyFile: newLazyFile(path, cq.cache), maps: cq.maps}
	nf.adopt(f)
	return nf, nil
}

// write writes raw entries (a multiple of 20 bytes) starting at queue offset idx, creating
// files as needed, through the writer's mapping of the file or with pwrite (cqmap.go). It
// does not publish max: the caller stores max after write returns, so a reader that sees
// the new max reads the new entries.
func (cq *consumeQueue) write(idx int64, b []byte) error {
	for len(b) > 0 {
		f := cq.fileFor(idx)
		if f == nil {
			files := cq.fileList()
			start := idx - idx%cq.perFile
			if len(files) > 0 {
				last := files[len(files)-1]
				start = last.start + last.entries
				if idx < start || idx >= start+cq.perFile {
					return fmt.Errorf("store: consume queue %s/%d: no file for offset %d", cq.topic, cq.queueID, idx)
				}
			}
			nf, err := cq.createFile(start)
			if err != nil {
				return err
			}
			nfiles := make([]*cqFile, len(files), len(files)+1)
			copy(nfiles, files)
			nfiles = append(nfiles, nf)
			cq.files.Store(&nfiles)
			f = nf
		}
		n := min(int64(len(b))/cqEntrySize, f.start+f.entries-idx)
		if err := cq.maps.write(f, b[:n*cqEntrySize], (idx-f.start)*cqEntrySize); err != nil {
			return fmt.Errorf("store: write consume queue %s/%d: %w", cq.topic, cq.queueID, err)
		}
		b = b[n*cqEntrySize:]
		idx += n
	}
	return nil
}

// truncate drops every entry at or after queue offset newMax: it zeroes the rest of the file
// holding newMax and deletes later files (the file starting at newMax is kept, zeroed).
func (cq *consumeQueue) truncate(newMax int64) error {
	files := cq.fileList()
	keep := files[:0:0]
	for _, f := range files {
		switch {
		case f.start+f.entries <= newMax:
			keep = append(keep, f)
		case f.start <= newMax:
			local := (newMax - f.start) * cqEntrySize
			cq.maps.unmap(f) // the writer maps it again on its next write
			if err := f.with(func(fd *os.File) error {
				if err := fd.Truncate(local); err != nil {
					return err
				}
				return fd.Truncate(f.entries * cqEntrySize)
			}); err != nil {
				return fmt.Errorf("store: truncate consume queue file: %w", err)
			}
			keep = append(keep, f)
		default:
			f.drop()
			if err := os.Remove(f.path); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("store: remove consume queue file: %w", err)
			}
		}
	}
	cq.files.Store(&keep)
	cq.max.Store(newMax)
	if cq.min.Load() > newMax {
		cq.min.Store(newMax)
	}
	cq.flushed = min(cq.flushed, newMax)
	return nil
}

// resetTo discards all entries and makes the queue start at queue offset start: its first
// file is the one that holds start, filled with padding entries before it (RocketMQ
// fillPreBlank). Used by recovery when a rebuilt queue's first record is not at offset 0.
func (cq *consumeQueue) resetTo(start int64) error {
	for _, f := range cq.fileList() {
		f.drop()
		if err := os.Remove(f.path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("store: remove consume queue file: %w", err)
		}
	}
	cq.files.Store(&[]*cqFile{})
	fileStart := start - start%cq.perFile
	cq.min.Store(start)
	cq.max.Store(start)
	cq.flushed = fileStart
	if start == fileStart {
		return nil
	}
	pad := make([]byte, (start-fileStart)*cqEntrySize)
	for i := 0; i < len(pad); i += cqEntrySize {
		putEntry(pad[i:], cqEntry{size: paddingSize})
	}
	return cq.write(fileStart, pad)
}

// flush fsyncs the files that may hold entries written since the last flush. It syncs
// every file from the one holding the flushed offset to the last, not only up to the
// published max, so that entries already written but not yet published (a put in progress)
// are durable too: Store.checkpoint relies on that.
func (cq *consumeQueue) flush() error {
	max := cq.max.Load()
	if cq.flushed >= max {
		return nil
	}
	for _, f := range cq.fileList() {
		if f.start+f.entries > cq.flushed {
			if err := f.with((*os.File).Sync); err != nil {
				if cq.deleted.Load() || errors.Is(err, errFileGone) {
					return nil
				}
				return fmt.Errorf("store: fsync consume queue %s/%d: %w", cq.topic, cq.queueID, err)
			}
		}
	}
	cq.flushed = max
	return nil
}

// close closes the files.
func (cq *consumeQueue) close() {
	for _, f := range cq.fileList() {
		f.drop()
	}
}

// loadConsumeQueue opens the files of an existing consume queue and finds its min and max:
// entries are written in order, so the written part of the last file is a prefix of non-empty
// entries, found by binary search. An error means the files are inconsistent; the caller
// then discards them and rebuilds the queue from the commitlog.
func loadConsumeQueue(dir, topic string, queueID int32, perFile int64, cache *fdCache, maps *cqMaps) (*consumeQueue, error) {
	cq := newConsumeQueue(dir, topic, queueID, perFile, cache, maps)
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*cqFile
	fail := func(err error) (*consumeQueue, error) {
		for _, f := range files {
			f.drop()
		}
		return nil, err
	}
	for _, de := range des {
		byteOff, ok := parseFileName(de.Name())
		if !ok || de.IsDir() {
			continue
		}
		path := filepath.Join(dir, de.Name())
		if byteOff%cqEntrySize != 0 {
			return fail(&CorruptError{Path: path, Reason: "name is not a multiple of 20"})
		}
		// Not kept open: the cache opens the file when it is read (fdcache.go).
		fi, err := os.Stat(path)
		if err != nil {
			return fail(err)
		}
		size := fi.Size()
		if size == 0 {
			if err := os.Truncate(path, perFile*cqEntrySize); err != nil {
				return fail(err)
			}
			size = perFile * cqEntrySize
		}
		files = append(files, &cqFile{start: byteOff / cqEntrySize, entries: size / cqEntrySize, lazyFile: newLazyFile(path, cache), maps: maps})
		if size%cqEntrySize != 0 {
			return fail(&CorruptError{Path: path, Reason: fmt.Sprintf("size %d is not a multiple of 20", size)})
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].start < files[j].start })
	for i := 1; i < len(files); i++ {
		if files[i-1].start+files[i-1].entries != files[i].start {
			return fail(&CorruptError{Path: files[i].path, Reason: "gap or overlap with the previous file"})
		}
	}
	if len(files) == 0 {
		cq.files.Store(&files)
		return cq, nil
	}
	read := func(f *cqFile, i int64) (cqEntry, error) {
		var b [cqEntrySize]byte
		if err := f.with(func(fd *os.File) error {
			_, err := fd.ReadAt(b[:], i*cqEntrySize)
			return err
		}); err != nil {
			return cqEntry{}, err
		}
		return getEntry(b[:]), nil
	}
	// Drop trailing files that hold no entry (created just before a crash), keeping the first.
	for len(files) > 1 {
		last := files[len(files)-1]
		e, err := read(last, 0)
		if err != nil {
			return fail(err)
		}
		if !e.empty() {
			break
		}
		last.drop()
		if err := os.Remove(last.path); err != nil {
			return fail(err)
		}
		files = files[:len(files)-1]
	}
	// Binary search for the first empty entry of the last file.
	last := files[len(files)-1]
	lo, hi := int64(0), last.entries
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := read(last, mid)
		if err != nil {
			return fail(err)
		}
		if e.empty() {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	max := last.start + lo
	// min is the first entry that is not padding.
	first := files[0]
	minOff := first.start
	for minOff < max && minOff < first.start+first.entries {
		e, err := read(first, minOff-first.start)
		if err != nil {
			return fail(err)
		}
		if !e.padding() {
			break
		}
		minOff++
	}
	cq.files.Store(&files)
	cq.min.Store(minOff)
	cq.max.Store(max)
	cq.flushed = max
	return cq, nil
}

// dropTailFrom removes the entries at the end of the queue that point at or after commitlog
// offset phy, or are empty (holes from a torn write), and returns how many were removed.
func (cq *consumeQueue) dropTailFrom(phy int64) (int64, error) {
	const chunk = 1024
	minOff, oldMax := cq.min.Load(), cq.max.Load()
	newMax := oldMax
scan:
	for newMax > minOff {
		from := max(minOff, newMax-chunk)
		if f := cq.fileFor(newMax - 1); f != nil {
			from = max(from, f.start)
		}
		b, err := cq.readEntries(from, newMax-from)
		if err != nil {
			return 0, err
		}
		if len(b) == 0 {
			break
		}
		for i := len(b) - cqEntrySize; i >= 0; i -= cqEntrySize {
			e := getEntry(b[i:])
			if !e.empty() && (e.padding() || e.phy < phy) {
				break scan
			}
			newMax--
		}
	}
	if newMax == oldMax {
		return 0, nil
	}
	return oldMax - newMax, cq.truncate(newMax)
}

// queueDir returns <root>/consumequeue/<topic>/<queueId>.
func queueDir(root, topic string, queueID int32) string {
	return filepath.Join(root, topic, strconv.Itoa(int(queueID)))
}
