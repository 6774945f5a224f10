package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sluicemq/sluice/message"
)

// Pull limits (docs/protocol.md §3.4, §6.2).
const (
	// DefaultMaxTransferBytes is the byte cap GetMessage uses when maxBytes < 1: 256 KiB
	// (RocketMQ maxTransferBytesOnMessageInMemory).
	DefaultMaxTransferBytes = 256 << 10
	// minScanBytes is the least number of consume-queue bytes one GetMessage scans: 16000
	// (800 entries), or maxMsgNums*20 when larger.
	minScanBytes = 16000
)

// GetMessage reads up to maxMsgNums messages and at most maxBytes bytes of records (but
// always at least one matching message) from the consume queue topic/queueID, starting at
// queue offset offset, skipping entries the filter rejects (nil matches all). It scans at
// most max(16000, maxMsgNums*20) bytes of consume-queue entries, never past the end of one
// consume-queue file. maxMsgNums < 1 means 1; maxBytes < 1 means 256 KiB. The broker applies
// its own transfer caps (32 messages) by passing them here.
//
// Status and NextBeginOffset follow docs/protocol.md §3.4 "Store lookup":
//
//	no consume queue          NO_MATCHED_LOGIC_QUEUE  0
//	queue empty (max = 0)     NO_MESSAGE_IN_QUEUE     0
//	offset < min              OFFSET_TOO_SMALL        min
//	offset == max             OFFSET_OVERFLOW_ONE     offset
//	offset > max              OFFSET_OVERFLOW_BADLY   max
//	some entries match        FOUND                   offset + entries scanned
//	none match the filter     NO_MATCHED_MESSAGE      offset + entries scanned
//	records deleted           MESSAGE_WAS_REMOVING    offset + entries scanned
//	consume-queue file gone   OFFSET_FOUND_NULL       start of the next file
//
// It returns ErrClosed after Close and an error for I/O failures; statuses are not errors.
// Body is freshly allocated; see GetMessageAppend to read into a buffer of the caller's.
func (s *Store) GetMessage(topic string, queueID int32, offset int64, maxMsgNums int, maxBytes int, f Filter) (GetResult, error) {
	return s.GetMessageAppend(nil, topic, queueID, offset, maxMsgNums, maxBytes, f)
}

// GetMessageAppend is GetMessage reading the records into buf's array (from buf[:0],
// growing it when it is too small): a caller that answers a pull and then no longer needs
// the records (the response frame holds a copy) can reuse one buffer for many pulls
// instead of allocating a body each time. Body and Records alias buf's array when it was
// large enough.
func (s *Store) GetMessageAppend(buf []byte, topic string, queueID int32, offset int64, maxMsgNums int, maxBytes int, f Filter) (GetResult, error) {
	if err := s.begin(); err != nil {
		return GetResult{}, err
	}
	defer s.end()
	maxMsgNums = max(maxMsgNums, 1)
	if maxBytes < 1 {
		maxBytes = DefaultMaxTransferBytes
	}
	cq := s.queueFor(topic, queueID, false)
	if cq == nil {
		return GetResult{Status: NoMatchedLogicQueue}, nil
	}
	minOff, maxOff := cq.min.Load(), cq.max.Load()
	res := GetResult{MinOffset: minOff, MaxOffset: maxOff}
	switch {
	case maxOff == 0:
		res.Status = NoMessageInQueue
		return res, nil
	case offset < minOff:
		res.Status, res.NextBeginOffset = OffsetTooSmall, minOff
		return res, nil
	case offset == maxOff:
		res.Status, res.NextBeginOffset = OffsetOverflowOne, offset
		return res, nil
	case offset > maxOff:
		res.Status, res.NextBeginOffset = OffsetOverflowBadly, maxOff
		return res, nil
	}

	scanEntries := int64(max(minScanBytes, maxMsgNums*cqEntrySize) / cqEntrySize)
	bufs := getBufs.Get().(*getBuffers)
	defer getBufs.Put(bufs)
	entries, err := cq.readEntriesInto(bufs.entries, offset, scanEntries)
	if entries != nil && cap(entries) <= maxPooledBuffer {
		bufs.entries = entries
	}
	if err != nil {
		return GetResult{}, err
	}
	if entries == nil && cq.deleted.Load() {
		return GetResult{Status: NoMatchedLogicQueue}, nil // DeleteTopic ran under this reader
	}
	if entries == nil {
		res.Status = OffsetFoundNull
		res.NextBeginOffset = cq.nextFileStart(offset)
		return res, nil
	}

	res.Status = NoMatchedMessage
	minPhy := s.cl.minOffset()
	rr := recordReader{cl: s.cl, win: bufs.window[:0]}
	defer func() {
		if cap(rr.win) <= maxPooledBuffer {
			bufs.window = rr.win[:0]
		}
	}()
	body := slices.Grow(buf[:0], bodySizeHint(entries, maxMsgNums, maxBytes, s.cl.maxRecordBytes()))
	var ends []int
	n := int64(len(entries) / cqEntrySize)
	i := int64(0)
	for ; i < n; i++ {
		e := getEntry(entries[i*cqEntrySize:])
		if e.empty() || e.padding() {
			continue
		}
		if e.size < int32(minRecordSize) || int64(e.size) > s.cl.maxRecordBytes() || e.phy < 0 {
			s.log.Error("invalid consume queue entry skipped", "topic", topic, "queueId", queueID, "queueOffset", offset+i, "commitLogOffset", e.phy, "size", e.size)
			continue
		}
		if len(ends) > 0 && (len(ends) >= maxMsgNums || len(body)+int(e.size) > maxBytes) {
			break // batch full; this entry is not consumed
		}
		if e.phy < minPhy {
			if len(ends) == 0 {
				res.Status = MessageWasRemoving
			}
			continue
		}
		if f != nil && !f.MatchTagsCode(e.tags) {
			if len(ends) == 0 {
				res.Status = NoMatchedMessage
			}
			continue
		}
		start := len(body)
		body = slices.Grow(body, int(e.size))[:start+int(e.size)]
		rec := body[start:]
		if err := rr.read(rec, e.phy, entries[(i+1)*cqEntrySize:]); err != nil {
			body = body[:start]
			if errors.Is(err, ErrNotFound) {
				if len(ends) == 0 {
					res.Status = MessageWasRemoving
				}
				continue
			}
			return GetResult{}, err
		}
		if !validRecordHeader(rec, e.phy) {
			// The entry does not point at its record: never serve what is there.
			s.log.Error("consume queue entry does not match the commitlog", "topic", topic, "queueId", queueID, "queueOffset", offset+i, "commitLogOffset", e.phy, "size", e.size)
			body = body[:start]
			continue
		}
		if f != nil && !f.MatchRecord(rec) {
			body = body[:start]
			if len(ends) == 0 {
				res.Status = NoMatchedMessage
			}
			continue
		}
		ends = append(ends, len(body))
		res.Status = Found
	}
	res.NextBeginOffset = offset + i
	if len(ends) > 0 {
		res.Body = body
		res.Records = make([][]byte, len(ends))
		start := 0
		for k, end := range ends {
			res.Records[k] = body[start:end:end]
			start = end
		}
		res.MessageCount = len(ends)
	}
	return res, nil
}

// getBuffers are GetMessage's scratch buffers (consume-queue entries, read-ahead window),
// pooled; the returned body is the caller's (GetMessageAppend) or freshly allocated.
type getBuffers struct{ entries, window []byte }

var getBufs = sync.Pool{New: func() any { return new(getBuffers) }}

// maxPooledBuffer is the largest scratch buffer kept in the pool: 1 MiB.
const maxPooledBuffer = 1 << 20

// bodySizeHint estimates the body size of a GetMessage: the sizes of the first maxMsgNums
// plausible entries, stopping before maxBytes is exceeded (but counting at least one).
func bodySizeHint(entries []byte, maxMsgNums, maxBytes int, maxRecord int64) int {
	total, n := 0, 0
	for ; len(entries) >= cqEntrySize && n < maxMsgNums; entries = entries[cqEntrySize:] {
		e := getEntry(entries)
		if e.empty() || e.padding() || e.size <= 0 || int64(e.size) > maxRecord {
			continue
		}
		if n > 0 && total+int(e.size) > maxBytes {
			break
		}
		total += int(e.size)
		n++
	}
	return min(total, maxBodyHint)
}

// maxBodyHint caps the pre-allocation of a GetMessage body: 16 MiB (it grows if needed).
const maxBodyHint = 16 << 20

// readAheadMax bounds one read-ahead of GetMessage: 64 KiB.
const readAheadMax = 64 << 10

// recordReader reads the records of one GetMessage. Records of a queue are often close to
// each other in the commitlog, so instead of one pread per record it reads a window that
// also covers the following entries' records, as long as the window stays under
// readAheadMax and at least half of its bytes belong to those records.
type recordReader struct {
	cl    *commitLog
	win   []byte
	start int64 // commitlog offset of win[0]
}

// read fills dst with the record at phy; next holds the raw consume-queue entries after it.
func (r *recordReader) read(dst []byte, phy int64, next []byte) error {
	size := int64(len(dst))
	if phy >= r.start && phy+size <= r.start+int64(len(r.win)) {
		copy(dst, r.win[phy-r.start:])
		return nil
	}
	end, useful := phy+size, size
	for ; len(next) >= cqEntrySize; next = next[cqEntrySize:] {
		e := getEntry(next)
		if e.empty() || e.padding() || e.size <= 0 {
			continue
		}
		if e.phy < end {
			break
		}
		newEnd, newUseful := e.phy+int64(e.size), useful+int64(e.size)
		if newEnd-phy > readAheadMax || newEnd-phy > 2*newUseful {
			break
		}
		end, useful = newEnd, newUseful
	}
	if seg := r.cl.segmentFor(phy); seg != nil {
		end = min(end, seg.end())
	}
	end = min(end, r.cl.writePos.Load())
	if end-phy <= size {
		return r.cl.readAt(dst, phy) // nothing to read ahead; readAt reports bounds errors
	}
	if int64(cap(r.win)) < end-phy {
		r.win = make([]byte, end-phy)
	}
	r.win = r.win[:end-phy]
	if err := r.cl.readAt(r.win, phy); err != nil {
		r.win = r.win[:0]
		return err
	}
	r.start = phy
	copy(dst, r.win)
	return nil
}

// validRecordHeader checks that rec starts like the stored record at phy: TOTALSIZE equals
// len(rec), the magic code, and the PHYSICALOFFSET field.
func validRecordHeader(rec []byte, phy int64) bool {
	return len(rec) >= posSysFlag &&
		int(binary.BigEndian.Uint32(rec)) == len(rec) &&
		binary.BigEndian.Uint32(rec[4:]) == message.MagicCode &&
		int64(binary.BigEndian.Uint64(rec[posPhysicalOffset:])) == phy
}

// storeTimestampAt reads the STORETIMESTAMP of the record at commitlog offset phy.
func (s *Store) storeTimestampAt(phy int64) (int64, error) {
	var hdr [posBornHost + 20 + 8]byte // long enough for an IPv6 born host
	n := len(hdr)
	if rest := s.cl.writePos.Load() - phy; rest < int64(n) {
		n = int(max(rest, 0))
	}
	if seg := s.cl.segmentFor(phy); seg != nil && seg.end()-phy < int64(n) {
		n = int(seg.end() - phy)
	}
	if n < posBornHost+16 {
		return 0, fmt.Errorf("%w: no record at commitlog offset %d", ErrNotFound, phy)
	}
	if err := s.cl.readAt(hdr[:n], phy); err != nil {
		return 0, err
	}
	if binary.BigEndian.Uint32(hdr[4:]) != message.MagicCode {
		return 0, fmt.Errorf("%w: no record at commitlog offset %d", ErrNotFound, phy)
	}
	p := storeTimestampPos(int32(binary.BigEndian.Uint32(hdr[posSysFlag:])))
	if p+8 > n {
		return 0, fmt.Errorf("%w: short record at commitlog offset %d", ErrNotFound, phy)
	}
	return int64(binary.BigEndian.Uint64(hdr[p:])), nil
}

// queueStoreTime returns the store timestamp of the message at queue offset idx.
func (s *Store) queueStoreTime(cq *consumeQueue, idx int64) (int64, error) {
	e, err := cq.entryAt(idx)
	if err != nil {
		return 0, err
	}
	if e.empty() || e.padding() {
		return 0, fmt.Errorf("%w: queue offset %d is padding", ErrNotFound, idx)
	}
	return s.storeTimestampAt(e.phy)
}

// OffsetByTimestamp returns the queue offset of the message of topic/queueID stored at
// tsMillis (unix ms) by binary search over store times: the first offset stored exactly
// then, else the nearer of its neighbours (the earlier one on a tie); the min offset when
// tsMillis is before every message and the last offset (max-1) when after (as RocketMQ
// getOffsetInQueueByTime). It returns 0 when the queue does not exist or is empty, and the
// min offset when a record cannot be read.
func (s *Store) OffsetByTimestamp(topic string, queueID int32, tsMillis int64) int64 {
	if err := s.begin(); err != nil {
		return 0
	}
	defer s.end()
	cq := s.queueFor(topic, queueID, false)
	if cq == nil {
		return 0
	}
	lo, hi := cq.min.Load(), cq.max.Load()
	if lo >= hi {
		return 0
	}
	first := lo
	// Skip entries whose records are gone (below the commitlog min offset).
	minPhy := s.cl.minOffset()
	for lo < hi {
		e, err := cq.entryAt(lo)
		if err != nil {
			return first
		}
		if !e.padding() && e.phy >= minPhy {
			break
		}
		lo++
	}
	if lo >= hi {
		return first
	}
	// Lower bound: the first offset whose store time >= tsMillis.
	l, h := lo, hi
	for l < h {
		mid := l + (h-l)/2
		ts, err := s.queueStoreTime(cq, mid)
		if err != nil {
			return first
		}
		if ts < tsMillis {
			l = mid + 1
		} else {
			h = mid
		}
	}
	if l == hi {
		return hi - 1 // after every message
	}
	right, err := s.queueStoreTime(cq, l)
	if err != nil {
		return first
	}
	if right == tsMillis || l == lo {
		return l
	}
	left, err := s.queueStoreTime(cq, l-1)
	if err != nil {
		return l
	}
	if tsMillis-left > right-tsMillis {
		return l
	}
	return l - 1
}

// EarliestMessageTime returns the store timestamp (unix ms) of the first available message
// of topic/queueID. It returns an error wrapping ErrNotFound when the queue does not exist
// or is empty, ErrClosed after Close.
func (s *Store) EarliestMessageTime(topic string, queueID int32) (int64, error) {
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.end()
	cq := s.queueFor(topic, queueID, false)
	if cq == nil {
		return 0, fmt.Errorf("%w: no consume queue %s/%d", ErrNotFound, topic, queueID)
	}
	minPhy := s.cl.minOffset()
	for idx, hi := cq.min.Load(), cq.max.Load(); idx < hi; idx++ {
		e, err := cq.entryAt(idx)
		if err != nil {
			return 0, err
		}
		if e.padding() || e.empty() || e.phy < minPhy {
			continue
		}
		return s.storeTimestampAt(e.phy)
	}
	return 0, fmt.Errorf("%w: consume queue %s/%d is empty", ErrNotFound, topic, queueID)
}

// MessageTimeAt returns the store timestamp (unix ms) of the first available message of
// topic/queueID at or after queue offset offset — for a consumer group's committed
// offset, the age of its oldest unconsumed message. It scans at most 64 entries. It
// returns an error wrapping ErrNotFound when there is none (offset at or past the end, no
// queue), ErrClosed after Close.
func (s *Store) MessageTimeAt(topic string, queueID int32, offset int64) (int64, error) {
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.end()
	cq := s.queueFor(topic, queueID, false)
	if cq == nil {
		return 0, fmt.Errorf("%w: no consume queue %s/%d", ErrNotFound, topic, queueID)
	}
	minPhy := s.cl.minOffset()
	idx, hi := max(offset, cq.min.Load()), cq.max.Load()
	for end := min(hi, idx+64); idx < end; idx++ {
		e, err := cq.entryAt(idx)
		if err != nil {
			return 0, err
		}
		if e.padding() || e.empty() || e.phy < minPhy {
			continue
		}
		return s.storeTimestampAt(e.phy)
	}
	return 0, fmt.Errorf("%w: no message in %s/%d at or after offset %d", ErrNotFound, topic, queueID, offset)
}

// LookMessageByOffset returns the message whose record starts at commitLogOffset, decoded
// (body as stored, not decompressed; no CRC check), and the raw record. It returns an error
// wrapping ErrNotFound when no record starts there, ErrClosed after Close.
func (s *Store) LookMessageByOffset(commitLogOffset int64) (*message.MessageExt, []byte, error) {
	if err := s.begin(); err != nil {
		return nil, nil, err
	}
	defer s.end()
	return s.lookMessage(commitLogOffset)
}

// lookMessage is LookMessageByOffset for a caller that already holds begin (Store.Query
// verifies key-index candidates with it).
func (s *Store) lookMessage(commitLogOffset int64) (*message.MessageExt, []byte, error) {
	if commitLogOffset < s.cl.minOffset() {
		return nil, nil, fmt.Errorf("%w: commitlog offset %d was deleted or is negative", ErrNotFound, commitLogOffset)
	}
	var hdr [8]byte
	if err := s.cl.readAt(hdr[:], commitLogOffset); err != nil {
		return nil, nil, err
	}
	size := int64(int32(binary.BigEndian.Uint32(hdr[:])))
	// Bound the size before allocating: the offset may come from a client, and a body can
	// contain bytes that look like a record header.
	limit := min(s.cl.maxRecordBytes(), s.cl.writePos.Load()-commitLogOffset)
	if seg := s.cl.segmentFor(commitLogOffset); seg != nil {
		limit = min(limit, seg.end()-commitLogOffset)
	}
	if binary.BigEndian.Uint32(hdr[4:]) != message.MagicCode || size < int64(minRecordSize) || size > limit {
		return nil, nil, fmt.Errorf("%w: no record starts at commitlog offset %d", ErrNotFound, commitLogOffset)
	}
	rec := make([]byte, size)
	if err := s.cl.readAt(rec, commitLogOffset); err != nil {
		return nil, nil, err
	}
	if !validRecordHeader(rec, commitLogOffset) {
		return nil, nil, fmt.Errorf("%w: no record starts at commitlog offset %d", ErrNotFound, commitLogOffset)
	}
	m, _, err := message.DecodeRecord(rec, message.DecodeOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("%w: record at commitlog offset %d: %v", ErrNotFound, commitLogOffset, err)
	}
	return m, rec, nil
}
