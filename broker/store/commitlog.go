package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/sluicemq/sluice/message"
)

// blankFillerSize is the size of the end-of-segment filler header: [int32 remaining][BlankMagicCode].
const blankFillerSize = 8

// segment is one commitlog file holding the bytes [start, start+size).
type segment struct {
	start int64
	size  int64
	path  string
	f     *os.File
}

func (s *segment) end() int64 { return s.start + s.size }

// fileName returns the 20-digit zero-padded name RocketMQ uses for store files.
func fileName(offset int64) string { return fmt.Sprintf("%020d", offset) }

// parseFileName parses a 20-digit store file name.
func parseFileName(name string) (int64, bool) {
	if len(name) != 20 {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(name, 10, 64)
	return n, err == nil
}

// commitLog is the sequence of segment files. Writes are serialized by the caller
// (Store.putMu); reads are lock-free: they load the segment list atomically and never read
// past the published write position.
type commitLog struct {
	dir     string
	segSize int64 // size of newly created segments

	// segs is an immutable, sorted slice, replaced (copy-on-write) when a segment is added.
	segs atomic.Pointer[[]*segment]
	// writePos is the published end of the data: every byte below it belongs to a complete
	// record or blank filler. Updated only by the writer, after the bytes are written.
	writePos atomic.Int64

	wmap writerMap  // the writer's mapping of the segment it fills; only the writer uses it
	pre  prefaulter // faults the writer's mapping in ahead of it

	// pwriteOnly writes every record with pwrite instead of through wmap (SYNC_FLUSH):
	// each group commit's fsync cleans the page being filled, and the next copy into the
	// mapping faults on it again (page_mkwrite), which costs more than a system call.
	pwriteOnly bool
}

// writerMap is the shared, writable memory mapping of the segment the writer is filling.
// Records are copied into it instead of written with one pwrite each: the bytes land in
// the same page cache pages a pwrite would fill, so readers (pread), the flusher (fsync
// of the file writes back pages dirtied through the mapping too) and a process crash see
// the same data. Pages behind the writer are released from the process's page tables
// every releaseEvery bytes, so the mapping does not grow the resident set; pages ahead
// of it are faulted in by the prefaulter's goroutine (prefaultAhead bytes). Where mapping
// fails (or outside Linux) the segment is written with pwrite as before; a write that
// faults (the file system cannot back the page) is redone with pwrite, which returns the
// file system's error, and the rest of that segment is written with pwrite.
type writerMap struct {
	seg      *segment
	data     []byte
	released int64    // pages below this segment-local offset are released
	failed   *segment // mapping this segment failed or faulted: pwrite it
	faults   int      // writes that faulted and went to pwrite instead (tests)
}

// releaseEvery is how many bytes the writer copies into its mapping between two
// releases of the pages behind it.
const releaseEvery = 8 << 20

// directWriteMin is the size from which a write goes to the file with pwrite even when the
// segment is mapped: copying many fresh pages through the mapping (a page fault each) costs
// more than one system call.
const directWriteMin = 16 << 10

// pageSize is the memory page size (releases start on a page boundary).
var pageSize = int64(os.Getpagesize())

// write writes b at the segment-local offset off of seg, the segment the writer fills,
// through the writer's mapping (see writerMap) or with pwrite: always with direct (a run
// of sends stored by PutGroup, see Store.writeRuns: one system call for the run, and
// pwrite fills fresh page-cache pages without zeroing them first, which a fault through
// the mapping, or the prefaulter, does), for directWriteMin bytes or more, and under
// SYNC_FLUSH. Only the writer calls it.
func (cl *commitLog) write(seg *segment, b []byte, off int64, direct bool) error {
	m := &cl.wmap
	if direct || len(b) >= directWriteMin || cl.pwriteOnly {
		if _, err := seg.f.WriteAt(b, off); err != nil {
			return fmt.Errorf("store: write commitlog: %w", err)
		}
		return nil
	}
	if m.seg != seg && m.failed != seg {
		cl.unmapWriter()
		if data, err := mapSegment(seg); err != nil {
			m.failed = seg
		} else {
			m.seg, m.data, m.released = seg, data, 0
			cl.pre.attach(data, off)
		}
	}
	if m.seg != seg {
		if _, err := seg.f.WriteAt(b, off); err != nil {
			return fmt.Errorf("store: write commitlog: %w", err)
		}
		return nil
	}
	end := off + int64(len(b))
	if ferr := copyMapped(m.data[off:end], b); ferr != nil {
		// The file system could not back a page (disk full, I/O error). Write the bytes
		// with pwrite instead, which reports the file system's own error (ENOSPC makes
		// the store refuse writes until space is back), and stop mapping this segment.
		cl.unmapWriter()
		m.failed = seg
		m.faults++
		if _, err := seg.f.WriteAt(b, off); err != nil {
			return fmt.Errorf("store: write commitlog (%v): %w", ferr, err)
		}
		return nil
	}
	cl.pre.ahead(end)
	if end-m.released >= releaseEvery {
		to := end &^ (pageSize - 1)
		_ = releasePages(m.data[m.released:to]) // best effort: only the resident set is at stake
		m.released = to
	}
	return nil
}

// copyMapped copies src into mapped memory. A fault while doing so (the file system
// cannot back the page: disk full, I/O error, the file cut short) is returned as an error
// instead of crashing the process.
func copyMapped(dst, src []byte) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("fault writing through a memory mapping: %v", r)
		}
	}()
	copy(dst, src)
	return nil
}

// unmapWriter removes the writer's mapping, if any (the writer, Close, or retention
// and recovery under the writer lock).
func (cl *commitLog) unmapWriter() {
	m := &cl.wmap
	if m.data != nil {
		cl.pre.detach()
		_ = unmapSegment(m.data)
	}
	m.seg, m.data, m.released = nil, nil, 0
}

// openCommitLog opens the existing segments in dir. It checks names and that the segments
// are contiguous; a trailing segment of size 0 (a crash while creating it) is resized.
func openCommitLog(dir string, segSize int64) (*commitLog, error) {
	cl := &commitLog{dir: dir, segSize: segSize}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: read commitlog dir: %w", err)
	}
	var segs []*segment
	closeAll := func() {
		for _, s := range segs {
			s.f.Close()
		}
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		start, ok := parseFileName(e.Name())
		if !ok {
			continue // temp files and foreign files are not ours
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("store: open commitlog segment: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			closeAll()
			return nil, fmt.Errorf("store: stat commitlog segment: %w", err)
		}
		segs = append(segs, &segment{start: start, size: fi.Size(), path: path, f: f})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].start < segs[j].start })
	for i, s := range segs {
		if s.size == 0 && i == len(segs)-1 {
			if err := s.f.Truncate(segSize); err != nil {
				closeAll()
				return nil, fmt.Errorf("store: resize commitlog segment: %w", err)
			}
			s.size = segSize
		}
		if s.size < MinCommitLogSegmentSize || s.size > MaxCommitLogSegmentSize {
			closeAll()
			return nil, &CorruptError{Path: s.path, Reason: fmt.Sprintf("size %d bytes is not a valid segment size", s.size)}
		}
		if i > 0 && segs[i-1].end() != s.start {
			closeAll()
			return nil, &CorruptError{Path: s.path, Reason: fmt.Sprintf("segment starts at %d but the previous one ends at %d", s.start, segs[i-1].end())}
		}
	}
	cl.segs.Store(&segs)
	return cl, nil
}

// segments returns the current segment list (do not modify).
func (cl *commitLog) segments() []*segment { return *cl.segs.Load() }

// minOffset returns the first commitlog offset still on disk.
func (cl *commitLog) minOffset() int64 {
	segs := cl.segments()
	if len(segs) == 0 {
		return 0
	}
	return segs[0].start
}

// segmentFor returns the segment holding offset, or nil.
func (cl *commitLog) segmentFor(offset int64) *segment {
	segs := cl.segments()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].end() > offset })
	if i < len(segs) && segs[i].start <= offset {
		return segs[i]
	}
	return nil
}

// readAt fills dst with the bytes at offset. The range must lie below the write position and
// inside one segment; otherwise it returns an error wrapping ErrNotFound.
func (cl *commitLog) readAt(dst []byte, offset int64) error {
	if offset < 0 || offset+int64(len(dst)) > cl.writePos.Load() {
		return fmt.Errorf("%w: commitlog range [%d, %d) is beyond the written data", ErrNotFound, offset, offset+int64(len(dst)))
	}
	seg := cl.segmentFor(offset)
	if seg == nil || offset+int64(len(dst)) > seg.end() {
		return fmt.Errorf("%w: commitlog range [%d, %d) is not in one segment", ErrNotFound, offset, offset+int64(len(dst)))
	}
	if _, err := seg.f.ReadAt(dst, offset-seg.start); err != nil {
		if errors.Is(err, os.ErrClosed) {
			// DeleteExpiredFiles (or Close) removed the segment under this reader.
			return fmt.Errorf("%w: commitlog segment %d was deleted", ErrNotFound, seg.start)
		}
		return fmt.Errorf("store: read commitlog at %d: %w", offset, err)
	}
	return nil
}

// createSegment creates (or resets) the segment file starting at start, preallocated to the
// configured size, and makes its directory entry durable.
func (cl *commitLog) createSegment(start int64) (*segment, error) {
	path := filepath.Join(cl.dir, fileName(start))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("store: create commitlog segment: %w", err)
	}
	if err := f.Truncate(cl.segSize); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("store: preallocate commitlog segment: %w", err)
	}
	if err := syncDir(cl.dir); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return &segment{start: start, size: cl.segSize, path: path, f: f}, nil
}

// addSegment publishes a new last segment.
func (cl *commitLog) addSegment(s *segment) {
	old := cl.segments()
	segs := make([]*segment, len(old), len(old)+1)
	copy(segs, old)
	segs = append(segs, s)
	cl.segs.Store(&segs)
}

// reserve returns the segment and offset where n contiguous bytes of records are to be
// written. When the current segment has fewer than n+8 bytes left, it writes the blank
// filler over the rest, creates the next segment and publishes the write position at its
// start. It must be called by the single writer. n must fit in an empty segment (checked by
// the caller with maxRecordBytes).
func (cl *commitLog) reserve(n int64) (*segment, int64, error) {
	pos := cl.writePos.Load()
	segs := cl.segments()
	if len(segs) == 0 {
		s, err := cl.createSegment(pos)
		if err != nil {
			return nil, 0, err
		}
		cl.addSegment(s)
		return s, pos, nil
	}
	cur := segs[len(segs)-1]
	left := cur.end() - pos
	if n+blankFillerSize <= left {
		return cur, pos, nil
	}
	if left >= blankFillerSize {
		var filler [blankFillerSize]byte
		binary.BigEndian.PutUint32(filler[0:], uint32(left))
		binary.BigEndian.PutUint32(filler[4:], message.BlankMagicCode)
		if err := cl.write(cur, filler[:], pos-cur.start, false); err != nil {
			return nil, 0, fmt.Errorf("store: write commitlog blank filler: %w", err)
		}
	}
	next, err := cl.createSegment(cur.end())
	if err != nil {
		return nil, 0, err
	}
	cl.addSegment(next)
	cl.writePos.Store(next.start)
	return next, next.start, nil
}

// room returns how many bytes of records reserve can place in the current segment
// without starting a new one (the filler that must still fit after them aside); a whole
// segment's worth when there is no segment yet. Only the writer calls it.
func (cl *commitLog) room() int64 {
	segs := cl.segments()
	if len(segs) == 0 {
		return cl.maxRecordBytes()
	}
	return segs[len(segs)-1].end() - cl.writePos.Load() - blankFillerSize
}

// maxRecordBytes is the largest run of records one append can hold: a whole segment minus
// the filler that must still fit after it.
func (cl *commitLog) maxRecordBytes() int64 { return cl.segSize - blankFillerSize }

// close closes all segment files.
func (cl *commitLog) close() error {
	cl.unmapWriter()
	cl.pre.stop()
	var first error
	for _, s := range cl.segments() {
		if err := s.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// syncDir fsyncs a directory so that file creations, renames and removals in it survive a
// power failure.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("store: open dir for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("store: fsync dir %s: %w", dir, err)
	}
	return nil
}

// segmentReader reads a segment sequentially through a large buffer (for recovery scans).
type segmentReader struct {
	seg    *segment
	buf    []byte
	bufOff int64 // segment-local offset of buf[0]
	n      int   // valid bytes in buf
}

const scanChunk = 4 << 20

// at returns n bytes at the segment-local offset off (n must not run past the segment end).
func (r *segmentReader) at(off int64, n int) ([]byte, error) {
	if off >= r.bufOff && off+int64(n) <= r.bufOff+int64(r.n) {
		i := off - r.bufOff
		return r.buf[i : i+int64(n)], nil
	}
	want := max(n, scanChunk)
	if rest := r.seg.size - off; int64(want) > rest {
		want = int(rest)
	}
	if want < n {
		return nil, io.ErrUnexpectedEOF
	}
	if cap(r.buf) < want {
		r.buf = make([]byte, want)
	}
	r.buf = r.buf[:want]
	m, err := r.seg.f.ReadAt(r.buf, off)
	if m < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	r.bufOff, r.n = off, m
	return r.buf[:n], nil
}
