package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sync/atomic"
	"time"
)

// Index file format (see the package doc, "Key index"). All integers big-endian.
//
//	header   indexHeaderSize (128) bytes
//	entries  capacity × 20 bytes: keyHash uint32, commitlog offset int64,
//	         time delta int32 (seconds since the header's base time), prev entry uint32
//	slots    slotCount × 4 bytes (uint32 entry number, 0 = empty); written only when the
//	         file is sealed, at byte indexHeaderSize + capacity×20
//
// Entries are numbered from 1; entry i is at byte indexHeaderSize + (i-1)×20. The slot of a
// key is keyHash % slotCount and holds the newest entry of that slot; each entry's prev is
// the entry the slot held before it, so one slot's entries form a chain from newest to
// oldest.
//
// Header layout:
//
//	0   magic "SLIX"
//	4   version uint32 (1)
//	8   flags uint32 (bit 0: sealed — full, slot table on disk, immutable)
//	12  slotCount uint32
//	16  capacity uint32 (entries)
//	20  count uint32 (entries written and fsynced when this header was written)
//	24  base int64: creation time, unix ms (also the file name)
//	32  minTimestamp int64, 40 maxTimestamp int64: store times of the entries, unix ms
//	48  minPhyOffset int64, 56 maxPhyOffset int64: commitlog offsets of the entries
//	64  startCovered int64: the index's covered offset when the file was created
//	72  covered int64: every record below this commitlog offset has its entries in this
//	    file or an older one
//	80  CRC32 (IEEE) of bytes 0..79
//	84  reserved (zero) up to 128
const (
	indexMagic       = "SLIX"
	indexVersion     = 1
	indexHeaderSize  = 128
	indexEntrySize   = 20
	indexFlagSealed  = 1
	indexNameLayout  = "20060102150405.000" // UTC creation time; the dot is removed in the name
	indexNameLen     = 17
	indexHeaderCRCAt = 80
)

// indexHeader is the decoded header of an index file.
type indexHeader struct {
	sealed       bool
	slotCount    uint32
	capacity     uint32
	count        uint32
	base         int64
	minTS, maxTS int64
	minPhy       int64
	maxPhy       int64
	startCovered int64
	covered      int64
}

func (h *indexHeader) marshal() []byte {
	b := make([]byte, indexHeaderSize)
	copy(b, indexMagic)
	binary.BigEndian.PutUint32(b[4:], indexVersion)
	var flags uint32
	if h.sealed {
		flags |= indexFlagSealed
	}
	binary.BigEndian.PutUint32(b[8:], flags)
	binary.BigEndian.PutUint32(b[12:], h.slotCount)
	binary.BigEndian.PutUint32(b[16:], h.capacity)
	binary.BigEndian.PutUint32(b[20:], h.count)
	for i, v := range []int64{h.base, h.minTS, h.maxTS, h.minPhy, h.maxPhy, h.startCovered, h.covered} {
		binary.BigEndian.PutUint64(b[24+8*i:], uint64(v))
	}
	binary.BigEndian.PutUint32(b[indexHeaderCRCAt:], crc32.ChecksumIEEE(b[:indexHeaderCRCAt]))
	return b
}

var errBadIndexHeader = errors.New("bad index file header")

func unmarshalIndexHeader(b []byte) (indexHeader, error) {
	if len(b) < indexHeaderSize || string(b[:4]) != indexMagic {
		return indexHeader{}, fmt.Errorf("%w: magic", errBadIndexHeader)
	}
	if crc32.ChecksumIEEE(b[:indexHeaderCRCAt]) != binary.BigEndian.Uint32(b[indexHeaderCRCAt:]) {
		return indexHeader{}, fmt.Errorf("%w: crc mismatch", errBadIndexHeader)
	}
	if v := binary.BigEndian.Uint32(b[4:]); v != indexVersion {
		return indexHeader{}, fmt.Errorf("%w: version %d", errBadIndexHeader, v)
	}
	h := indexHeader{
		sealed:    binary.BigEndian.Uint32(b[8:])&indexFlagSealed != 0,
		slotCount: binary.BigEndian.Uint32(b[12:]),
		capacity:  binary.BigEndian.Uint32(b[16:]),
		count:     binary.BigEndian.Uint32(b[20:]),
	}
	v := make([]int64, 7)
	for i := range v {
		v[i] = int64(binary.BigEndian.Uint64(b[24+8*i:]))
	}
	h.base, h.minTS, h.maxTS, h.minPhy, h.maxPhy, h.startCovered, h.covered = v[0], v[1], v[2], v[3], v[4], v[5], v[6]
	switch {
	case h.slotCount == 0 || h.slotCount > MaxIndexHashSlots:
		return indexHeader{}, fmt.Errorf("%w: slot count %d", errBadIndexHeader, h.slotCount)
	case h.capacity == 0 || h.capacity > MaxIndexEntries:
		return indexHeader{}, fmt.Errorf("%w: capacity %d", errBadIndexHeader, h.capacity)
	case h.count > h.capacity:
		return indexHeader{}, fmt.Errorf("%w: count %d over capacity %d", errBadIndexHeader, h.count, h.capacity)
	case h.sealed && h.count != h.capacity:
		return indexHeader{}, fmt.Errorf("%w: sealed with %d of %d entries", errBadIndexHeader, h.count, h.capacity)
	case h.covered < 0 || h.startCovered < 0 || h.startCovered > h.covered:
		return indexHeader{}, fmt.Errorf("%w: covered offsets %d..%d", errBadIndexHeader, h.startCovered, h.covered)
	}
	return h, nil
}

// indexEntry is one decoded index entry.
type indexEntry struct {
	hash  uint32
	phy   int64
	delta int32  // seconds since the file's base time
	prev  uint32 // previous entry of the same slot, 0 = none
}

func putIndexEntry(b []byte, e indexEntry) {
	binary.BigEndian.PutUint32(b[0:], e.hash)
	binary.BigEndian.PutUint64(b[4:], uint64(e.phy))
	binary.BigEndian.PutUint32(b[12:], uint32(e.delta))
	binary.BigEndian.PutUint32(b[16:], e.prev)
}

func getIndexEntry(b []byte) indexEntry {
	return indexEntry{
		hash:  binary.BigEndian.Uint32(b[0:]),
		phy:   int64(binary.BigEndian.Uint64(b[4:])),
		delta: int32(binary.BigEndian.Uint32(b[12:])),
		prev:  binary.BigEndian.Uint32(b[16:]),
	}
}

// timeDelta returns the entry time field for a store time: whole seconds since base
// (floor), clamped to int32.
func timeDelta(base, ts int64) int32 {
	d := ts - base
	q := d / 1000
	if d < 0 && d%1000 != 0 {
		q--
	}
	return int32(max(min(q, math.MaxInt32), math.MinInt32))
}

// keyHash is the 32-bit FNV-1a hash of topic + "#" + key, the index key RocketMQ builds
// (IndexService.buildKey).
func keyHash(topic, key string) uint32 {
	const prime = 16777619
	h := uint32(2166136261)
	for i := 0; i < len(topic); i++ {
		h = (h ^ uint32(topic[i])) * prime
	}
	h = (h ^ '#') * prime
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * prime
	}
	return h
}

// slotPageSize is the number of slots of one page of a memory slot table (1 KiB).
const slotPageSize = 256

// slotPage is one page of a memory slot table.
type slotPage [slotPageSize]atomic.Uint32

// slotTable is the memory slot table of a writable index file: pages allocated when a
// slot in them is first set, so a file with few entries costs little memory (8 bytes per
// page pointer, 1 KiB per page touched; 4 MiB for 1,000,000 slots once all are touched).
// One writer stores; readers load without locks.
type slotTable struct {
	pages []atomic.Pointer[slotPage]
}

func newSlotTable(slots uint32) *slotTable {
	return &slotTable{pages: make([]atomic.Pointer[slotPage], (slots+slotPageSize-1)/slotPageSize)}
}

// load returns slot s (0 = empty).
func (t *slotTable) load(s uint32) uint32 {
	if p := t.pages[s/slotPageSize].Load(); p != nil {
		return p[s%slotPageSize].Load()
	}
	return 0
}

// store sets slot s; only the index's writer calls it.
func (t *slotTable) store(s, v uint32) {
	p := t.pages[s/slotPageSize].Load()
	if p == nil {
		p = new(slotPage)
		t.pages[s/slotPageSize].Store(p)
	}
	p[s%slotPageSize].Store(v)
}

// indexFile is one open index file. Its entries are written only by the index's single
// writer (under index.mu); readers use the atomics and never read an entry before the
// slot or count that points at it was published.
type indexFile struct {
	path         string
	f            *lazyFile // opened on demand, closed when idle (fdcache.go)
	slotCount    uint32
	capacity     uint32
	base         int64 // creation time, unix ms
	startCovered int64

	count  atomic.Uint32             // entries written (published after the write)
	sealed atomic.Bool               // full; slot table on disk
	mem    atomic.Pointer[slotTable] // slot table of the writable file; nil when sealed or still empty
	tail   atomic.Pointer[indexTail] // newest entries, not written to the file yet; nil = none

	minTS, maxTS   atomic.Int64 // store times of the entries, unix ms (valid when count > 0)
	minPhy, maxPhy atomic.Int64 // commitlog offsets of the entries (valid when count > 0)
}

func indexFileName(base int64) string {
	s := time.UnixMilli(base).UTC().Format(indexNameLayout)
	return s[:14] + s[15:]
}

func parseIndexFileName(name string) (int64, bool) {
	if len(name) != indexNameLen {
		return 0, false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return 0, false
		}
	}
	t, err := time.ParseInLocation(indexNameLayout, name[:14]+"."+name[14:], time.UTC)
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

func (f *indexFile) entryOffset(i uint32) int64 {
	return indexHeaderSize + int64(i-1)*indexEntrySize
}

func (f *indexFile) slotsOffset() int64 {
	return indexHeaderSize + int64(f.capacity)*indexEntrySize
}

// header returns the header describing the file's current state with covered.
func (f *indexFile) header(covered int64) indexHeader {
	return indexHeader{
		sealed: f.sealed.Load(), slotCount: f.slotCount, capacity: f.capacity, count: f.count.Load(),
		base: f.base, minTS: f.minTS.Load(), maxTS: f.maxTS.Load(), minPhy: f.minPhy.Load(), maxPhy: f.maxPhy.Load(),
		startCovered: f.startCovered, covered: covered,
	}
}

func (f *indexFile) writeHeader(h indexHeader) error {
	if _, err := f.f.WriteAt(h.marshal(), 0); err != nil {
		return fmt.Errorf("store: write index header %s: %w", f.path, err)
	}
	return nil
}

// indexTailEntries is the capacity of an index tail buffer: 4096 entries (80 KiB).
const indexTailEntries = 4096

// indexTail holds the newest entries of the writable file in memory, from entry start on,
// so that a put costs no extra write system call: the writer appends entries to b and
// publishes them with the slot table and count; spill writes them to the file (when b is
// full, before sealing, and at every flush) and replaces the tail. A tail's bytes are
// never rewritten, so a reader holding an old tail reads valid entries from it.
type indexTail struct {
	start uint32 // number of the entry at b[0]
	b     []byte // indexTailEntries × 20 bytes
}

// readEntry reads entry i (1-based): from the tail when it holds it, else from the file.
// A reader gets i from a slot or a count published after the entry was written to the
// tail, and a tail is dropped only after its entries are in the file.
func (f *indexFile) readEntry(i uint32) (indexEntry, error) {
	if t := f.tail.Load(); t != nil && i >= t.start {
		return getIndexEntry(t.b[(i-t.start)*indexEntrySize:]), nil
	}
	var b [indexEntrySize]byte
	if _, err := f.f.ReadAt(b[:], f.entryOffset(i)); err != nil {
		return indexEntry{}, err
	}
	return getIndexEntry(b[:]), nil
}

// slot returns the newest entry of slot s: from memory while the file is writable, from
// disk once it is sealed. The memory table is read first: seal stores the disk table and
// sets sealed before it drops the memory table.
func (f *indexFile) slot(s uint32) (uint32, error) {
	if mem := f.mem.Load(); mem != nil {
		return mem.load(s), nil
	}
	if !f.sealed.Load() {
		return 0, nil // writable and still empty
	}
	var b [4]byte
	if _, err := f.f.ReadAt(b[:], f.slotsOffset()+int64(s)*4); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b[:]), nil
}

// rebuildSlots recomputes the memory slot table of an unsealed file from its first count
// entries, checking each entry: its prev must be what its slot held, commitlog offsets must
// not decrease and must be below covered, its time must lie in the file's store-time range. It returns how many leading entries are
// consistent (all of them when nothing is wrong) and installs the table for those.
func (f *indexFile) rebuildSlots(count uint32, covered int64) (uint32, error) {
	if count == 0 {
		f.mem.Store(nil)
		return 0, nil
	}
	mem := newSlotTable(f.slotCount)
	const chunk = 4096
	buf := make([]byte, chunk*indexEntrySize)
	lastPhy := int64(-1)
	minTS, maxTS := f.minTS.Load(), f.maxTS.Load() // exact, from the header or the writer
	good := uint32(0)
scan:
	for i := uint32(1); i <= count; i += chunk {
		n := min(count-i+1, chunk)
		b := buf[:n*indexEntrySize]
		if _, err := f.f.ReadAt(b, f.entryOffset(i)); err != nil {
			return 0, fmt.Errorf("store: read index file %s: %w", f.path, err)
		}
		for j := range n {
			e := getIndexEntry(b[j*indexEntrySize:])
			s := e.hash % f.slotCount
			t := f.base + int64(e.delta)*1000 // store time rounded down to the second
			if e.prev != mem.load(s) || e.phy < lastPhy || e.phy < 0 || e.phy >= covered ||
				t <= minTS-1000 || t > maxTS {
				break scan
			}
			mem.store(s, i+j)
			lastPhy = e.phy
			good = i + j
		}
	}
	if good < count {
		return good, nil // the caller truncates and rebuilds again
	}
	f.mem.Store(mem)
	first, err := f.readEntry(1)
	if err != nil {
		return 0, fmt.Errorf("store: read index file %s: %w", f.path, err)
	}
	f.minPhy.Store(first.phy)
	f.maxPhy.Store(lastPhy)
	// The store-time range stays the header's: exact for its count, a superset after a
	// truncation, which is all the file-level time filter needs.
	f.count.Store(count)
	return count, nil
}

// firstEntryAtOrAfter returns the number of the first entry (1-based) whose commitlog
// offset is >= phy, or count+1 when there is none. Entries are in commitlog order.
func (f *indexFile) firstEntryAtOrAfter(phy int64) (uint32, error) {
	lo, hi := uint32(1), f.count.Load()+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := f.readEntry(mid)
		if err != nil {
			return 0, fmt.Errorf("store: read index file %s: %w", f.path, err)
		}
		if e.phy >= phy {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// lastRecordStart returns the number of the first entry of the record whose entry is last
// among the first n (the entries of one record are contiguous).
func (f *indexFile) lastRecordStart(n uint32) (uint32, int64, error) {
	last, err := f.readEntry(n)
	if err != nil {
		return 0, 0, err
	}
	i := n
	for i > 1 {
		e, err := f.readEntry(i - 1)
		if err != nil {
			return 0, 0, err
		}
		if e.phy != last.phy {
			break
		}
		i--
	}
	return i, last.phy, nil
}
