package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
)

// Defaults and limits of IndexConfig.
const (
	// DefaultIndexHashSlots is the number of hash slots per index file: 1,000,000 (4 MB of
	// memory for the writable file). RocketMQ's maxHashSlotNum is 5,000,000.
	DefaultIndexHashSlots = 1_000_000
	// MaxIndexHashSlots is the largest accepted IndexConfig.HashSlots: 50,000,000 (200 MB).
	MaxIndexHashSlots = 50_000_000
	// DefaultIndexEntries is the number of entries per index file: 4,000,000 (80 MB).
	// RocketMQ's maxIndexNum is 20,000,000.
	DefaultIndexEntries = 4_000_000
	// MaxIndexEntries is the largest accepted IndexConfig.Entries: 100,000,000 (2 GB).
	MaxIndexEntries = 100_000_000
)

// ErrIndexDisabled is returned by the query methods when IndexConfig.Disable is set.
var ErrIndexDisabled = errors.New("store: message index disabled")

// IndexConfig configures the key index (see the package doc, "Key index"). The zero value
// means the defaults.
type IndexConfig struct {
	// Disable turns the key index off (RocketMQ messageIndexEnable=false): no index files
	// are written and the query methods return ErrIndexDisabled. Turning it on again later
	// re-indexes, at Open, every record written since the index last covered the commitlog.
	// Default false (indexed).
	Disable bool
	// HashSlots is the number of hash slots of a new index file. The slot table of the file
	// being written is kept in memory, 4 bytes per slot. Default 1,000,000; range
	// 1..50,000,000. Existing files keep the geometry they were created with.
	HashSlots int
	// Entries is the number of entries of a new index file (one entry per key of a
	// message, the UNIQ_KEY counting as one), 20 bytes each; a full file is sealed and a
	// new one started. Default 4,000,000; range 1..100,000,000.
	Entries int
}

func (c *IndexConfig) setDefaults() {
	if c.HashSlots == 0 {
		c.HashSlots = DefaultIndexHashSlots
	}
	if c.Entries == 0 {
		c.Entries = DefaultIndexEntries
	}
}

func (c *IndexConfig) validate() error {
	switch {
	case c.HashSlots < 0 || c.HashSlots > MaxIndexHashSlots:
		return &config.Error{Package: "store", Field: "Index.HashSlots", Value: c.HashSlots, Reason: fmt.Sprintf("want 1..%d slots", MaxIndexHashSlots)}
	case c.Entries < 0 || c.Entries > MaxIndexEntries:
		return &config.Error{Package: "store", Field: "Index.Entries", Value: c.Entries, Reason: fmt.Sprintf("want 1..%d entries", MaxIndexEntries)}
	}
	return nil
}

// pendingKey is one key of a message waiting to be written as an index entry.
type pendingKey struct {
	hash uint32
	phy  int64  // commitlog offset of the record
	ts   int64  // store time, unix ms
	key  string // for de-duplication within one message
}

// index is the key index: index files in <Dir>/index, oldest first, the last one
// writable. It is written by the store's single writer (under Store.putMu, or by recovery
// before Open returns) and read by queries without locks.
//
// Lock order: Store.putMu → index.mu; Store.cpMu → index.flushMu → index.mu.
type index struct {
	dir string
	cfg IndexConfig
	log *slog.Logger
	fds *fdCache // shared with the consume queues: bounds their open files together

	files atomic.Pointer[[]*indexFile] // oldest first; immutable slice, copy-on-write

	mu       sync.Mutex   // the writer and every change of files, current, headers
	current  *indexFile   // the writable file (the last one), nil until one is needed
	covered  atomic.Int64 // every record below this commitlog offset has its entries
	lastBase int64        // base time of the newest file; new names are strictly later
	pending  []pendingKey
	slotsOf  []uint32
	overlay  map[uint32]uint32
	one      [1]*message.MessageExt

	flushMu        sync.Mutex // serializes flush; guards the fields below
	flushedFile    *indexFile
	flushedCount   uint32
	flushedCovered int64
	dirSynced      *indexFile // the writable file whose directory entry was fsynced
}

// openIndex loads the index files of dir (creating dir) and checks them: a file with a
// bad header, and every newer file, is deleted; the unsealed file's entries are checked
// and its memory slot table rebuilt; files only pointing below firstPhy are deleted. The
// returned index covers the commitlog up to ix.covered: recovery indexes the records from
// there (recoverRecord) and then calls finishRecovery.
func openIndex(dir string, cfg IndexConfig, log *slog.Logger, firstPhy int64, fds *fdCache) (*index, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("store: create %s: %w", dir, err)
	}
	ix := &index{dir: dir, cfg: cfg, log: log, overlay: map[uint32]uint32{}, fds: fds}
	ix.files.Store(&[]*indexFile{})
	if err := ix.load(); err != nil {
		ix.close()
		return nil, err
	}
	if err := ix.deleteBelow(firstPhy); err != nil {
		ix.close()
		return nil, err
	}
	return ix, nil
}

func (ix *index) fileList() []*indexFile { return *ix.files.Load() }

func (ix *index) setFiles(files []*indexFile) { ix.files.Store(&files) }

func (ix *index) load() error {
	ents, err := os.ReadDir(ix.dir)
	if err != nil {
		return fmt.Errorf("store: read index dir: %w", err)
	}
	var names []string
	for _, e := range ents {
		if _, ok := parseIndexFileName(e.Name()); ok && e.Type().IsRegular() {
			names = append(names, e.Name())
		} else {
			ix.log.Warn("recovery: ignoring a file that is not an index file", "dir", ix.dir, "name", e.Name())
		}
	}
	slices.Sort(names)
	var files []*indexFile
	covered := int64(0)
	for k, name := range names {
		f, h, err := ix.openFile(name)
		if err != nil {
			ix.log.Warn("recovery: index file unusable; it and every newer index file are rebuilt from the commitlog",
				"file", name, "err", err)
			if err := ix.removeNames(names[k:]); err != nil {
				closeIndexFiles(files)
				return err
			}
			break
		}
		files = append(files, f)
		ix.lastBase = f.base
		if h.sealed {
			covered = h.covered
			continue
		}
		// Unsealed: only the first h.count entries are known to be durable. Check them and
		// rebuild the memory slot table.
		fileCovered, err := f.recoverEntries(h, ix.log)
		if err != nil {
			closeIndexFiles(files)
			return err
		}
		covered = fileCovered
		if f.count.Load() == f.capacity {
			// Full: it was being sealed when the store stopped.
			if err := f.seal(covered); err != nil {
				closeIndexFiles(files)
				return err
			}
			continue
		}
		if k < len(names)-1 {
			ix.log.Warn("recovery: an index file that is not full is followed by newer ones; they are rebuilt from the commitlog",
				"file", name)
			if err := ix.removeNames(names[k+1:]); err != nil {
				closeIndexFiles(files)
				return err
			}
		}
		ix.current = f
		break
	}
	ix.setFiles(files)
	ix.covered.Store(covered)
	return nil
}

// openFile opens and validates one index file.
func (ix *index) openFile(name string) (*indexFile, indexHeader, error) {
	path := filepath.Join(ix.dir, name)
	fh, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, indexHeader{}, err
	}
	b := make([]byte, indexHeaderSize)
	if _, err := io.ReadFull(io.NewSectionReader(fh, 0, indexHeaderSize), b); err != nil {
		fh.Close()
		return nil, indexHeader{}, fmt.Errorf("read header: %w", err)
	}
	h, err := unmarshalIndexHeader(b)
	if err != nil {
		fh.Close()
		return nil, indexHeader{}, err
	}
	if base, _ := parseIndexFileName(name); base != h.base {
		fh.Close()
		return nil, indexHeader{}, fmt.Errorf("%w: base time %d does not match the name", errBadIndexHeader, h.base)
	}
	f := &indexFile{path: path, f: newLazyFile(path, ix.fds), slotCount: h.slotCount, capacity: h.capacity, base: h.base, startCovered: h.startCovered}
	need := f.entryOffset(h.count + 1)
	if h.sealed {
		need = f.slotsOffset() + int64(h.slotCount)*4
	}
	fi, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, indexHeader{}, err
	}
	if fi.Size() < need {
		fh.Close()
		return nil, indexHeader{}, fmt.Errorf("file has %d bytes, its header needs %d", fi.Size(), need)
	}
	f.f.adopt(fh)
	f.count.Store(h.count)
	f.sealed.Store(h.sealed)
	f.minTS.Store(h.minTS)
	f.maxTS.Store(h.maxTS)
	f.minPhy.Store(h.minPhy)
	f.maxPhy.Store(h.maxPhy)
	return f, h, nil
}

// recoverEntries checks the durable entries of an unsealed file (its header's count),
// drops an inconsistent tail with the whole record it belongs to, rebuilds the memory
// slot table and returns the commitlog offset the file covers.
func (f *indexFile) recoverEntries(h indexHeader, log *slog.Logger) (int64, error) {
	good, err := f.rebuildSlots(h.count, h.covered)
	if err != nil {
		return 0, err
	}
	if good == h.count {
		return h.covered, nil
	}
	// Entry good+1 is inconsistent. The entries of the last good record may be incomplete:
	// drop them too and let recovery index that record again.
	keep, covered := uint32(0), f.startCovered
	if good > 0 {
		start, phy, err := f.lastRecordStart(good)
		if err != nil {
			return 0, fmt.Errorf("store: read index file %s: %w", f.path, err)
		}
		keep, covered = start-1, phy
	}
	log.Warn("recovery: inconsistent index entries dropped; their records are indexed again", "file", f.path,
		"entries", h.count, "kept", keep, "coveredOffset", covered)
	if _, err := f.rebuildSlots(keep, covered); err != nil {
		return 0, err
	}
	return covered, nil
}

func (ix *index) removeNames(names []string) error {
	for _, n := range names {
		if err := os.Remove(filepath.Join(ix.dir, n)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("store: remove index file: %w", err)
		}
	}
	return syncDir(ix.dir)
}

func closeIndexFiles(files []*indexFile) {
	for _, f := range files {
		f.f.Close()
	}
}

// close closes every index file. The header of the writable file is written by the last
// flush (Store.Close checkpoints first). Safe on a nil index.
func (ix *index) close() {
	if ix == nil {
		return
	}
	closeIndexFiles(ix.fileList())
}

// recoverRecord indexes the record at pos during recovery unless the index already covers
// it. Safe on a nil index.
func (ix *index) recoverRecord(pos int64, m *message.MessageExt) error {
	if ix == nil || pos < ix.covered.Load() {
		return nil
	}
	ix.one[0] = m
	defer func() { ix.one[0] = nil }()
	return ix.add(ix.one[:], pos+int64(m.StoreSize))
}

// finishRecovery drops every entry pointing at or after cut (the commitlog's recovered end),
// declares everything below cut covered and makes sure a writable file exists, so that the
// covered offset has a header to live in. Safe on a nil index.
func (ix *index) finishRecovery(cut int64) error {
	if ix == nil {
		return nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := ix.truncateFromLocked(cut); err != nil {
		return err
	}
	ix.covered.Store(cut)
	if ix.current == nil {
		f, err := ix.createFileLocked(cut)
		if err != nil {
			return err
		}
		ix.current = f
	}
	return nil
}

// truncateFromLocked removes every entry whose commitlog offset is >= cut: newer files
// are deleted, and the file holding the first such entry is cut there (unsealed again if
// it was sealed) and becomes the writable file.
func (ix *index) truncateFromLocked(cut int64) error {
	if ix.current != nil {
		if err := ix.current.spill(); err != nil { // the checks below read the file
			return err
		}
	}
	files := ix.fileList()
	k := 0
	for k < len(files) && (files[k].count.Load() == 0 || files[k].maxPhy.Load() < cut) {
		k++
	}
	if k == len(files) {
		return nil
	}
	f := files[k]
	first, err := f.firstEntryAtOrAfter(cut)
	if err != nil {
		return err
	}
	keep := first - 1
	drop := files[k+1:]
	if keep == 0 {
		drop = files[k:]
	}
	ix.log.Warn("recovery: index entries at or after the commitlog cut dropped", "cut", cut, "file", f.path,
		"keptEntries", keep, "filesDeleted", len(drop))
	rest := files[:len(files)-len(drop)]
	ix.setFiles(slices.Clone(rest))
	names := make([]string, 0, len(drop))
	for _, d := range drop {
		d.f.Close()
		names = append(names, filepath.Base(d.path))
		if d == ix.current {
			ix.current = nil
		}
	}
	if err := ix.removeNames(names); err != nil {
		return err
	}
	if keep == 0 {
		return nil
	}
	// Cut f after entry keep: drop the slot table of a sealed file and the entries after.
	if err := f.f.Truncate(f.entryOffset(keep + 1)); err != nil {
		return fmt.Errorf("store: cut index file: %w", err)
	}
	f.sealed.Store(false)
	if _, err := f.rebuildSlots(keep, cut); err != nil {
		return err
	}
	if err := f.writeHeader(f.header(cut)); err != nil {
		return err
	}
	if err := f.f.Sync(); err != nil {
		return fmt.Errorf("store: fsync index file: %w", err)
	}
	ix.current = f
	return nil
}

// createFileLocked creates a new, empty writable index file named after the current time
// (strictly later than the newest file) and appends it to the file list.
func (ix *index) createFileLocked(startCovered int64) (*indexFile, error) {
	base := max(time.Now().UnixMilli(), ix.lastBase+1)
	var fh *os.File
	var path string
	for range 1000 {
		path = filepath.Join(ix.dir, indexFileName(base))
		var err error
		fh, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			break
		}
		if !os.IsExist(err) {
			return nil, fmt.Errorf("store: create index file: %w", err)
		}
		base++
	}
	if fh == nil {
		return nil, fmt.Errorf("store: create index file: no free name after %s", path)
	}
	f := &indexFile{path: path, f: newLazyFile(path, ix.fds), slotCount: uint32(ix.cfg.HashSlots), capacity: uint32(ix.cfg.Entries), base: base, startCovered: startCovered}
	f.f.adopt(fh)
	// No fsync here: until the first flush that finds entries in it makes it durable (file
	// and directory), losing it only means re-indexing from the previous file's covered
	// offset.
	if err := f.writeHeader(f.header(startCovered)); err != nil {
		f.f.Close()
		os.Remove(path)
		return nil, err
	}
	ix.lastBase = base
	files := ix.fileList()
	nf := make([]*indexFile, len(files), len(files)+1)
	copy(nf, files)
	ix.setFiles(append(nf, f))
	return f, nil
}

// seal writes the slot table of a full file after its entries, then the header with the
// sealed flag, each followed by fsync; the memory table is dropped last, so readers switch
// to the disk table only once it is there.
func (f *indexFile) seal(covered int64) error {
	table := make([]byte, int(f.slotCount)*4)
	if mem := f.mem.Load(); mem != nil {
		for i := range f.slotCount {
			binary.BigEndian.PutUint32(table[4*i:], mem.load(i))
		}
	}
	if _, err := f.f.WriteAt(table, f.slotsOffset()); err != nil {
		return fmt.Errorf("store: write index slot table %s: %w", f.path, err)
	}
	if err := f.f.Sync(); err != nil {
		return fmt.Errorf("store: fsync index file: %w", err)
	}
	if err := syncDir(filepath.Dir(f.path)); err != nil { // the file must not vanish
		return err
	}
	f.sealed.Store(true)
	if err := f.writeHeader(f.header(covered)); err != nil {
		return err
	}
	if err := f.f.Sync(); err != nil {
		return fmt.Errorf("store: fsync index file: %w", err)
	}
	f.mem.Store(nil)
	return nil
}

// appendIndexKeys appends the keys RocketMQ indexes for m (IndexService.buildIndex): its
// UNIQ_KEY and each key of its KEYS property split on " ", without empty or repeated keys.
// Rolled-back transactional messages are not indexed.
func appendIndexKeys(p []pendingKey, m *message.MessageExt, phy int64) []pendingKey {
	if message.TransactionType(m.SysFlag) == message.SysFlagTransactionRollback {
		return p
	}
	start := len(p)
	add := func(p []pendingKey, key string) []pendingKey {
		if key == "" {
			return p
		}
		for _, q := range p[start:] {
			if q.key == key {
				return p
			}
		}
		return append(p, pendingKey{hash: keyHash(m.Topic, key), phy: phy, ts: m.StoreTimestamp, key: key})
	}
	p = add(p, m.Properties[message.PropertyUniqClientMessageIDKeyIdx])
	keys := m.Properties[message.PropertyKeys]
	for keys != "" {
		k := keys
		if i := strings.IndexByte(keys, ' '); i >= 0 {
			k, keys = keys[:i], keys[i+1:]
		} else {
			keys = ""
		}
		p = add(p, k)
	}
	return p
}

// add writes the index entries of msgs (their CommitLogOffset and StoreTimestamp assigned)
// and declares everything below end covered. It runs under Store.putMu (or in recovery). A
// file that is full is sealed and a new one started before the next entry. On error
// nothing of the failing file is published and covered stays where it was.
func (ix *index) add(msgs []*message.MessageExt, end int64) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	p := ix.pending[:0]
	for _, m := range msgs {
		p = appendIndexKeys(p, m, m.CommitLogOffset)
	}
	defer func() {
		clear(p) // drop the key strings
		ix.pending = p[:0]
	}()
	rest, err := ix.dropPresentLocked(p)
	if err != nil {
		return err
	}
	for len(rest) > 0 {
		f, err := ix.writableLocked(rest[0].phy)
		if err != nil {
			return err
		}
		k := min(int(f.capacity-f.count.Load()), len(rest), indexTailEntries)
		if err := ix.writeEntriesLocked(f, rest[:k]); err != nil {
			return err
		}
		rest = rest[k:]
	}
	ix.covered.Store(end)
	return nil
}

// dropPresentLocked removes from p the keys of its first record that already have an
// entry: the entries of one record can be split over two files when a file fills up, and
// if the newer file's entries are lost (a crash before its header was flushed), recovery
// indexes that record again from the start; a put that failed half way is retried at the
// same offset. Only the newest entries can belong to p's first record, so this reads
// entries only when the newest one has its commitlog offset.
func (ix *index) dropPresentLocked(p []pendingKey) ([]pendingKey, error) {
	if len(p) == 0 {
		return p, nil
	}
	phy := p[0].phy
	var present map[uint32]bool
	files := ix.fileList()
	for i := len(files) - 1; i >= 0; i-- {
		f := files[i]
		n := f.count.Load()
		if n == 0 {
			continue
		}
		if f.maxPhy.Load() != phy {
			break
		}
		for ; n >= 1; n-- {
			e, err := f.readEntry(n)
			if err != nil {
				return nil, fmt.Errorf("store: read index file %s: %w", f.path, err)
			}
			if e.phy != phy {
				break
			}
			if present == nil {
				present = map[uint32]bool{}
			}
			present[e.hash] = true
		}
		if n >= 1 {
			break // the record starts in this file
		}
	}
	if present == nil {
		return p, nil
	}
	out := p[:0]
	for _, k := range p {
		if k.phy != phy || !present[k.hash] {
			out = append(out, k)
		}
	}
	return out, nil
}

// writableLocked returns a file with room for an entry: the current one, or — when it is
// full — a new one after sealing it. startCovered is the commitlog offset of the record
// of the next entry: every record below it has all its entries written.
func (ix *index) writableLocked(startCovered int64) (*indexFile, error) {
	if f := ix.current; f != nil {
		if f.count.Load() < f.capacity {
			return f, nil
		}
		if !f.sealed.Load() {
			if err := f.spill(); err != nil {
				return nil, err
			}
			if err := f.seal(startCovered); err != nil {
				return nil, err
			}
		}
		ix.current = nil
	}
	f, err := ix.createFileLocked(startCovered)
	if err != nil {
		return nil, err
	}
	ix.current = f
	return f, nil
}

// writeEntriesLocked appends entries for p (which fit in f and in one tail) to f's tail,
// spilling the tail first when it lacks room, then publishes the slots and the count. Each
// entry's prev is what its slot held, including earlier entries of p.
func (ix *index) writeEntriesLocked(f *indexFile, p []pendingKey) error {
	n := f.count.Load()
	if t := f.tail.Load(); t != nil && int(n+1-t.start)+len(p) > indexTailEntries {
		if err := f.spill(); err != nil {
			return err
		}
	}
	t := f.tail.Load()
	if t == nil {
		t = &indexTail{start: n + 1, b: make([]byte, indexTailEntries*indexEntrySize)}
		f.tail.Store(t)
	}
	mem := f.mem.Load()
	if mem == nil {
		mem = newSlotTable(f.slotCount)
		f.mem.Store(mem)
	}
	useMap := len(p) > 16
	if useMap {
		clear(ix.overlay)
	}
	buf := t.b[(n+1-t.start)*indexEntrySize:]
	slotsOf := ix.slotsOf[:0]
	minTS, maxTS, maxPhy := f.minTS.Load(), f.maxTS.Load(), f.maxPhy.Load()
	if n == 0 {
		minTS, maxTS = p[0].ts, p[0].ts
		f.minPhy.Store(p[0].phy)
	}
	for j, pk := range p {
		s := pk.hash % f.slotCount
		num := n + 1 + uint32(j)
		prev, found := uint32(0), false
		if useMap {
			prev, found = ix.overlay[s]
			ix.overlay[s] = num
		} else {
			for q := j - 1; q >= 0; q-- {
				if slotsOf[q] == s {
					prev, found = n+1+uint32(q), true
					break
				}
			}
		}
		if !found {
			prev = mem.load(s)
		}
		slotsOf = append(slotsOf, s)
		putIndexEntry(buf[j*indexEntrySize:], indexEntry{hash: pk.hash, phy: pk.phy, delta: timeDelta(f.base, pk.ts), prev: prev})
		minTS, maxTS, maxPhy = min(minTS, pk.ts), max(maxTS, pk.ts), max(maxPhy, pk.phy)
	}
	ix.slotsOf = slotsOf[:0]
	for j, s := range slotsOf {
		mem.store(s, n+1+uint32(j))
	}
	f.minTS.Store(minTS)
	f.maxTS.Store(maxTS)
	f.maxPhy.Store(maxPhy)
	f.count.Store(n + uint32(len(p)))
	return nil
}

// spill writes the entries of f's tail to the file with one write and drops the tail
// (the next entry starts a new one). It runs under index.mu. On error the tail stays.
func (f *indexFile) spill() error {
	t := f.tail.Load()
	if t == nil {
		return nil
	}
	if k := f.count.Load() + 1 - t.start; k > 0 {
		if _, err := f.f.WriteAt(t.b[:k*indexEntrySize], f.entryOffset(t.start)); err != nil {
			return fmt.Errorf("store: write index file %s: %w", f.path, err)
		}
	}
	f.tail.Store(nil)
	return nil
}

// flush makes the writable file's entries durable and records its count and the covered
// offset in its header (Store.checkpoint calls it before writing the checkpoint, so the
// header's covered offset is at least the checkpoint's). The header itself becomes durable
// with the next fsync; if it is lost, recovery starts from an older, still consistent
// header and re-indexes more. Safe on a nil index.
func (ix *index) flush() error {
	if ix == nil {
		return nil
	}
	ix.flushMu.Lock()
	defer ix.flushMu.Unlock()
	ix.mu.Lock()
	f := ix.current
	covered := ix.covered.Load()
	var h indexHeader
	var err error
	if f != nil {
		err = f.spill() // the header may count only entries that are in the file
		h = f.header(covered)
	}
	ix.mu.Unlock()
	if err != nil {
		return err
	}
	if f == nil || (f == ix.flushedFile && h.count == ix.flushedCount && covered == ix.flushedCovered) {
		return nil
	}
	// Entries must be durable before a header counts them; a file without entries needs
	// no fsync (if it is lost, recovery re-indexes from the previous file's offset).
	if h.count > 0 && (f != ix.flushedFile || h.count != ix.flushedCount) {
		if err := f.f.Sync(); err != nil {
			return fmt.Errorf("store: fsync index file: %w", err)
		}
		if ix.dirSynced != f {
			if err := syncDir(ix.dir); err != nil {
				return err
			}
			ix.dirSynced = f
		}
	}
	ix.mu.Lock()
	if ix.current == f && !f.sealed.Load() {
		err = f.writeHeader(h)
	}
	ix.mu.Unlock()
	if err != nil {
		return err
	}
	ix.flushedFile, ix.flushedCount, ix.flushedCovered = f, h.count, covered
	return nil
}

// deleteBelow deletes the oldest sealed files whose entries all point below commitlog
// offset minPhy (retention deleted their records). Safe on a nil index.
func (ix *index) deleteBelow(minPhy int64) error {
	if ix == nil {
		return nil
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	files := ix.fileList()
	k := 0
	for k < len(files) && files[k] != ix.current && files[k].sealed.Load() && files[k].maxPhy.Load() < minPhy {
		k++
	}
	if k == 0 {
		return nil
	}
	ix.setFiles(slices.Clone(files[k:]))
	names := make([]string, 0, k)
	for _, f := range files[:k] {
		f.f.Close() // a query reading it gets os.ErrClosed and skips the file
		names = append(names, filepath.Base(f.path))
		ix.log.Info("deleted index file of expired commitlog data", "file", f.path)
	}
	return ix.removeNames(names)
}
