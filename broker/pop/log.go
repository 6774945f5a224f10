package pop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// The POP state of one consumer group lives in one append-only file
// <dir>/<hex of the group name>.pop (docs/rocketmq5.md, "POP state"). Every change of
// the state is one record, written (one write(2) per request) before the request is
// answered, so a process killed at any point leaves a file whose replay gives the state
// the clients were told about, or a later one:
//
//	record = length u32 (of type+body) | crc32c u32 (of type+body) | type u8 | body
//
// A torn last record (length or checksum wrong) ends the replay; the file is truncated
// there. When the file has grown well past the state it describes, it is compacted: the
// state is written as records to <file>.tmp, synced, and renamed over the file.

// record types
const (
	recHeader  byte = 1 // group string
	recSeq     byte = 2 // seq u64: the highest sequence number issued so far
	recAdvance byte = 3 // topic, queueID, popOffset: every offset below was delivered or filtered out
	recDeliver byte = 4 // topic, queueID, offset, attempt, seq, visibleAt, message group (attempt 0: held behind its group)
	recAck     byte = 5 // topic, queueID, offset, seq: acknowledged
	recChange  byte = 6 // topic, queueID, offset, seq, visibleAt: invisibility changed
	recDead    byte = 7 // topic, queueID, offset: dead-lettered (or gone from the store)
)

// record is one decoded log record.
type record struct {
	typ       byte
	group     string // recHeader
	topic     string
	queueID   int32
	offset    int64 // queue offset; popOffset for recAdvance
	attempt   int32
	seq       uint64
	visibleAt int64
	msgGroup  string // recDeliver: the message's group ("" none)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxRecordLen bounds one record's length: a topic (≤ 127 bytes in RocketMQ, 32767 here
// with slack) and fixed fields.
const maxRecordLen = 1 << 16

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// appendRecord appends r's encoding to b.
func appendRecord(b []byte, r record) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, r.typ)
	switch r.typ {
	case recHeader:
		b = appendString(b, r.group)
	case recSeq:
		b = binary.BigEndian.AppendUint64(b, r.seq)
	default:
		b = appendString(b, r.topic)
		b = binary.BigEndian.AppendUint32(b, uint32(r.queueID))
		b = binary.BigEndian.AppendUint64(b, uint64(r.offset))
		switch r.typ {
		case recDeliver:
			b = binary.BigEndian.AppendUint32(b, uint32(r.attempt))
			b = binary.BigEndian.AppendUint64(b, r.seq)
			b = binary.BigEndian.AppendUint64(b, uint64(r.visibleAt))
			b = appendString(b, r.msgGroup)
		case recAck:
			b = binary.BigEndian.AppendUint64(b, r.seq)
		case recChange:
			b = binary.BigEndian.AppendUint64(b, r.seq)
			b = binary.BigEndian.AppendUint64(b, uint64(r.visibleAt))
		}
	}
	body := b[start+8:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b
}

var errShort = errors.New("short record")

type reader struct {
	b   []byte
	err error
}

func (r *reader) n(k int) []byte {
	if r.err != nil || len(r.b) < k {
		r.err = errShort
		return make([]byte, k)
	}
	v := r.b[:k]
	r.b = r.b[k:]
	return v
}
func (r *reader) u32() uint32 { return binary.BigEndian.Uint32(r.n(4)) }
func (r *reader) u64() uint64 { return binary.BigEndian.Uint64(r.n(8)) }
func (r *reader) str() string {
	l := int(binary.BigEndian.Uint16(r.n(2)))
	return string(r.n(l))
}

// decodeRecordBody decodes a record's type and body (checksum already checked).
func decodeRecordBody(body []byte) (record, error) {
	if len(body) == 0 {
		return record{}, errShort
	}
	rec := record{typ: body[0]}
	r := &reader{b: body[1:]}
	switch rec.typ {
	case recHeader:
		rec.group = r.str()
	case recSeq:
		rec.seq = r.u64()
	case recAdvance, recDeliver, recAck, recChange, recDead:
		rec.topic = r.str()
		rec.queueID = int32(r.u32())
		rec.offset = int64(r.u64())
		switch rec.typ {
		case recDeliver:
			rec.attempt = int32(r.u32())
			rec.seq = r.u64()
			rec.visibleAt = int64(r.u64())
			rec.msgGroup = r.str()
		case recAck:
			rec.seq = r.u64()
		case recChange:
			rec.seq = r.u64()
			rec.visibleAt = int64(r.u64())
		}
	default:
		return record{}, fmt.Errorf("unknown record type %d", rec.typ)
	}
	if r.err != nil {
		return record{}, r.err
	}
	if len(r.b) != 0 {
		return record{}, fmt.Errorf("record type %d has %d trailing bytes", rec.typ, len(r.b))
	}
	return rec, nil
}

// decodeRecords decodes the records of a log file's contents. It returns the records up
// to the first torn or invalid one and the length of that valid prefix.
func decodeRecords(data []byte) ([]record, int) {
	var out []record
	pos := 0
	for len(data)-pos >= 8 {
		l := int(binary.BigEndian.Uint32(data[pos:]))
		sum := binary.BigEndian.Uint32(data[pos+4:])
		if l == 0 || l > maxRecordLen || len(data)-pos-8 < l {
			break
		}
		body := data[pos+8 : pos+8+l]
		if crc32.Checksum(body, castagnoli) != sum {
			break
		}
		rec, err := decodeRecordBody(body)
		if err != nil {
			break
		}
		out = append(out, rec)
		pos += 8 + l
	}
	return out, pos
}

// readLog reads a group's log file, truncating a torn tail. A missing file is no records.
func readLog(path string) ([]record, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	recs, valid := decodeRecords(data)
	if valid < len(data) {
		if err := os.Truncate(path, int64(valid)); err != nil {
			return nil, fmt.Errorf("truncate the torn tail of %s: %w", path, err)
		}
	}
	return recs, nil
}

// writeFileSync writes data to path through path.tmp, syncing the file and the
// directory, so that path holds either its old contents or data after a crash.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// openAppend opens path for appending (creating it) and returns its size.
func openAppend(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, 0, err
	}
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		_ = f.Close()
		return nil, 0, err
	}
	return f, off, nil
}
