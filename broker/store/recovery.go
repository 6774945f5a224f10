package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/sluicemq/sluice/message"
)

// minRecordSize is the smallest possible stored record: IPv4 hosts, empty body, topic and
// properties (docs/protocol.md §4.1).
var minRecordSize = message.RecordSize(0, 0, 0, 0)

// rawProperties returns the PROPERTIES bytes of a record that message.DecodeRecord accepted.
func rawProperties(rec []byte, sysFlag int32) []byte {
	p := message.RecordSize(sysFlag, 0, 0, 0) - 7 // BODY length field
	p += 4 + int(int32(binary.BigEndian.Uint32(rec[p:])))
	p += 1 + int(rec[p]) // TOPIC
	return rec[p+2:]     // after the PROPERTIES length
}

type queueKey struct {
	topic   string
	queueID int32
}

// recover brings the store to a consistent state before Open returns (see the package doc,
// "Recovery"). It returns the commitlog offset below which data is known to be fsynced.
func (s *Store) recover() (int64, error) {
	cp, haveCP, err := readCheckpoint(s.cfg.Dir)
	if err != nil {
		if !errors.Is(err, errBadCheckpoint) {
			return 0, err
		}
		s.log.Warn("ignoring unreadable checkpoint; rebuilding consume queues from the first commitlog segment", "err", err)
	}
	cl, err := openCommitLog(filepath.Join(s.cfg.Dir, "commitlog"), s.cfg.CommitLogSegmentSize)
	if err != nil {
		return 0, err
	}
	cl.pwriteOnly = s.cfg.FlushDiskType == SyncFlush
	s.cl = cl
	first := cl.minOffset()
	var dataEnd int64 = first
	if segs := cl.segments(); len(segs) > 0 {
		dataEnd = segs[len(segs)-1].end()
	}

	// Key index (index.go): load it; it covers the commitlog up to its own offset and
	// re-indexes the records after it in the scan below.
	if !s.cfg.Index.Disable {
		if s.index, err = openIndex(filepath.Join(s.cfg.Dir, "index"), s.cfg.Index, s.log, first, s.fds); err != nil {
			return 0, err
		}
	}

	// d: every consume-queue entry of a record below d is on disk (per the checkpoint).
	d := first
	if haveCP {
		d = min(max(cp.consumeQueueFlushed, first), dataEnd)
	}

	// 1. Load the consume queues; drop tail entries at or after d, rebuild broken queues.
	rebuildFrom := map[queueKey]int64{}
	if err := s.loadQueues(d, first, rebuildFrom); err != nil {
		return 0, err
	}

	// 2. Validate the commitlog from the segment holding the scan start; re-dispatch.
	scanFrom := d
	for _, from := range rebuildFrom {
		scanFrom = min(scanFrom, from)
	}
	if s.index != nil { // key index: scan from where it stops covering the commitlog
		scanFrom = min(scanFrom, max(s.index.covered.Load(), first))
	}
	redispatched := 0
	cut, reason, err := s.scanCommitLog(scanFrom, func(pos int64, m *message.MessageExt) error {
		if err := s.index.recoverRecord(pos, m); err != nil { // key index; nil-safe
			return err
		}
		from, ok := rebuildFrom[queueKey{m.Topic, m.QueueID}]
		if !ok {
			from = d
		}
		if pos < from || !dispatched(m.SysFlag) {
			return nil
		}
		if m.QueueID < 0 {
			s.log.Warn("recovery: record with a negative queue id is not indexed", "commitLogOffset", pos, "topic", m.Topic, "queueId", m.QueueID)
			return nil
		}
		redispatched++
		return s.redispatch(s.queueFor(m.Topic, m.QueueID, true), pos, m)
	})
	if err != nil {
		return 0, err
	}

	// 3. Cut the commitlog at the first invalid record and drop entries pointing past it.
	if segs := cl.segments(); len(segs) > 0 && cut < segs[len(segs)-1].end() {
		if reason != "" {
			s.log.Warn("recovery: commitlog tail cut", "offset", cut, "reason", reason)
		}
	}
	if err := cl.truncateAt(cut); err != nil {
		return 0, err
	}
	// Key index: drop entries at or after the cut; everything below it is now indexed.
	if err := s.index.finishRecovery(cut); err != nil {
		return 0, err
	}
	if cut < d {
		s.log.Warn("recovery: commitlog cut below the checkpoint", "cut", cut, "checkpoint", d)
		for _, cq := range s.queueList() {
			dropped, err := cq.dropTailFrom(cut)
			if err != nil {
				return 0, err
			}
			if dropped > 0 {
				s.log.Warn("recovery: consume queue truncated at the commitlog cut", "topic", cq.topic, "queueId", cq.queueID,
					"entries", dropped, "oldMaxOffset", cq.max.Load()+dropped, "newMaxOffset", cq.max.Load())
			}
		}
	}
	// Queues rebuilt from the commitlog: say what they hold now.
	for k := range rebuildFrom {
		if cq := s.queueFor(k.topic, k.queueID, false); cq != nil {
			s.log.Warn("recovery: consume queue rebuilt from the commitlog", "topic", k.topic, "queueId", k.queueID,
				"newMinOffset", cq.min.Load(), "newMaxOffset", cq.max.Load())
		}
	}
	// Queues may point at segments retention deleted: move their min offsets past them.
	for _, cq := range s.queueList() {
		old := cq.min.Load()
		if err := cq.deleteBelow(cl.minOffset()); err != nil {
			return 0, err
		}
		if now := cq.min.Load(); now != old {
			s.log.Info("recovery: consume queue min offset moved past deleted commitlog data", "topic", cq.topic, "queueId", cq.queueID,
				"oldMinOffset", old, "newMinOffset", now)
		}
	}
	s.log.Info("store recovered", "commitLogMaxOffset", cut, "checkpointOffset", d, "redispatched", redispatched, "queues", len(s.queueList()))

	clFlushed := first
	if haveCP {
		clFlushed = min(max(cp.commitLogFlushed, first), cut)
	}
	return clFlushed, nil
}

// loadQueues opens every <cqRoot>/<topic>/<queueId> directory. Queues that load drop their
// tail entries pointing at or after d; queues whose files are inconsistent are deleted and
// recorded in rebuildFrom to be rebuilt from the first commitlog offset.
func (s *Store) loadQueues(d, first int64, rebuildFrom map[queueKey]int64) error {
	topics, err := os.ReadDir(s.cqRoot)
	if err != nil {
		return fmt.Errorf("store: read consume queue dir: %w", err)
	}
	for _, td := range topics {
		if !td.IsDir() {
			continue
		}
		topic := td.Name()
		if message.ValidateTopic(topic) != nil {
			s.log.Warn("recovery: ignoring consume queue directory with an invalid topic name", "dir", topic)
			continue
		}
		qds, err := os.ReadDir(filepath.Join(s.cqRoot, topic))
		if err != nil {
			return fmt.Errorf("store: read consume queue dir: %w", err)
		}
		for _, qd := range qds {
			id, err := strconv.ParseInt(qd.Name(), 10, 32)
			if !qd.IsDir() || err != nil || id < 0 {
				continue
			}
			queueID := int32(id)
			dir := queueDir(s.cqRoot, topic, queueID)
			cq, err := loadConsumeQueue(dir, topic, queueID, int64(s.cfg.ConsumeQueueEntries), s.fds, s.cqMaps)
			if err != nil {
				s.log.Warn("recovery: consume queue unreadable, rebuilding it from the commitlog", "topic", topic, "queueId", queueID, "err", err)
				if err := os.RemoveAll(dir); err != nil {
					return fmt.Errorf("store: remove broken consume queue: %w", err)
				}
				cq = newConsumeQueue(dir, topic, queueID, int64(s.cfg.ConsumeQueueEntries), s.fds, s.cqMaps)
				rebuildFrom[queueKey{topic, queueID}] = first
			} else if dropped, err := cq.dropTailFrom(d); err != nil {
				cq.close()
				return err
			} else if dropped > 0 {
				s.log.Info("recovery: consume queue tail dropped for re-dispatch", "topic", topic, "queueId", queueID, "entries", dropped,
					"oldMaxOffset", cq.max.Load()+dropped, "newMaxOffset", cq.max.Load())
			}
			s.queuesMu.Lock()
			s.addQueueLocked(cq)
			s.queuesMu.Unlock()
		}
	}
	return nil
}

// redispatch appends the consume-queue entry of the record at pos during recovery. The
// record's QUEUEOFFSET is where the entry belongs; an empty queue whose first record is not
// at offset 0 is restarted there (padding before it). A disagreement with a non-empty queue
// can only come from corruption: the entry is appended at the queue's end and logged.
func (s *Store) redispatch(cq *consumeQueue, pos int64, m *message.MessageExt) error {
	q, end := m.QueueOffset, cq.max.Load()
	if q != end {
		if cq.min.Load() == end && q > end {
			if err := cq.resetTo(q); err != nil {
				return err
			}
			end = q
		} else {
			s.log.Warn("recovery: record queue offset disagrees with its consume queue", "topic", cq.topic, "queueId", cq.queueID,
				"recordQueueOffset", q, "queueMaxOffset", end, "commitLogOffset", pos)
		}
	}
	var e [cqEntrySize]byte
	putEntry(e[:], cqEntry{phy: pos, size: m.StoreSize, tags: s.cfg.RecoverTagsCode(m)})
	if err := cq.write(end, e[:]); err != nil {
		return err
	}
	cq.max.Store(end + 1)
	return nil
}

// scanCommitLog validates records from the start of the segment holding from and calls fn
// for each valid one. It returns the cut: the offset of the first invalid record (or the end
// of the data), with a reason when it is not a clean end (zeros).
func (s *Store) scanCommitLog(from int64, fn func(pos int64, m *message.MessageExt) error) (int64, string, error) {
	segs := s.cl.segments()
	if len(segs) == 0 {
		return from, "", nil
	}
	i := 0
	for i < len(segs)-1 && segs[i].end() <= from {
		i++
	}
	if from < segs[i].start || from >= segs[i].end() {
		i = 0 // the checkpoint points outside the data: scan everything
	}
	for ; i < len(segs); i++ {
		seg := segs[i]
		last := i == len(segs)-1
		r := &segmentReader{seg: seg}
		local := int64(0)
		for {
			pos := seg.start + local
			left := seg.size - local
			if left < blankFillerSize {
				if last {
					return pos, "", nil
				}
				break // the writer rolled without room for a filler
			}
			hdr, err := r.at(local, blankFillerSize)
			if err != nil {
				return pos, fmt.Sprintf("read error: %v", err), nil
			}
			total := int64(int32(binary.BigEndian.Uint32(hdr)))
			magic := binary.BigEndian.Uint32(hdr[4:])
			if magic == message.BlankMagicCode {
				if total != left {
					return pos, fmt.Sprintf("blank filler says %d bytes, %d left in segment", total, left), nil
				}
				if last {
					return pos, "blank filler without a following segment", nil
				}
				break
			}
			if magic == 0 && total == 0 {
				return pos, "", nil // clean end of data
			}
			if magic != message.MagicCode {
				return pos, fmt.Sprintf("bad magic code %#x", magic), nil
			}
			if total < int64(minRecordSize) || total > left {
				return pos, fmt.Sprintf("record size %d out of range (%d left in segment)", total, left), nil
			}
			rec, err := r.at(local, int(total))
			if err != nil {
				return pos, fmt.Sprintf("read error: %v", err), nil
			}
			m, _, err := message.DecodeRecord(rec, message.DecodeOptions{CheckCRC: true, SkipBody: true})
			if err != nil {
				return pos, fmt.Sprintf("invalid record: %v", err), nil
			}
			if m.CommitLogOffset != pos {
				return pos, fmt.Sprintf("record says it is at offset %d", m.CommitLogOffset), nil
			}
			if err := message.ValidateTopic(m.Topic); err != nil {
				return pos, fmt.Sprintf("invalid topic in record: %v", err), nil
			}
			if bytes.IndexByte(rawProperties(rec, m.SysFlag), 0) >= 0 {
				return pos, "NUL byte in the properties (zero-filled torn write)", nil
			}
			if err := fn(pos, m); err != nil {
				return 0, "", err
			}
			local += total
		}
	}
	return segs[len(segs)-1].end(), "", nil
}

// truncateAt cuts the commitlog at offset cut: the rest of the segment holding it is zeroed
// and fsynced, later segments are deleted, and the write position becomes cut.
func (cl *commitLog) truncateAt(cut int64) error {
	cl.unmapWriter()
	segs := cl.segments()
	keep := segs[:0:0]
	removed := false
	for _, s := range segs {
		switch {
		case s.end() <= cut:
			keep = append(keep, s)
		case s.start <= cut:
			local := cut - s.start
			if err := s.f.Truncate(local); err != nil {
				return fmt.Errorf("store: cut commitlog: %w", err)
			}
			if err := s.f.Truncate(s.size); err != nil {
				return fmt.Errorf("store: cut commitlog: %w", err)
			}
			if err := s.f.Sync(); err != nil {
				return fmt.Errorf("store: cut commitlog: %w", err)
			}
			keep = append(keep, s)
		default:
			s.f.Close()
			if err := os.Remove(s.path); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("store: remove commitlog segment after the cut: %w", err)
			}
			removed = true
		}
	}
	if removed {
		if err := syncDir(cl.dir); err != nil {
			return err
		}
	}
	cl.segs.Store(&keep)
	cl.writePos.Store(cut)
	return nil
}
