package message

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/netip"
)

// Magic codes of the commitlog (Java CommitLog.MESSAGE_MAGIC_CODE and BLANK_MAGIC_CODE).
const (
	// MagicCode marks a stored message record: 0xDAA320A7 (int32 -626843481).
	MagicCode uint32 = 0xDAA320A7
	// BlankMagicCode marks the end-of-segment filler in a commitlog file: 0xCBD43194.
	BlankMagicCode uint32 = 0xCBD43194
)

// Message system flag bits (Java MessageSysFlag).
const (
	SysFlagCompressed          int32 = 0x1   // body is zlib-compressed
	SysFlagMultiTags           int32 = 0x2   // topic filter type MULTI_TAG
	SysFlagTransactionNot      int32 = 0x0   // not transactional
	SysFlagTransactionPrepared int32 = 0x4   // half message
	SysFlagTransactionCommit   int32 = 0x8   // committed transactional message
	SysFlagTransactionRollback int32 = 0xC   // rolled back
	SysFlagBornHostV6          int32 = 0x10  // born host is IPv6 (16-byte address)
	SysFlagStoreHostV6         int32 = 0x20  // store host is IPv6
	SysFlagCompressionMask     int32 = 0x700 // compression type bits: 0 or 0x300 = zlib
	transactionMask            int32 = 0xC
)

// TransactionType returns the transaction bits of a sysFlag (Java getTransactionValue).
func TransactionType(sysFlag int32) int32 { return sysFlag & transactionMask }

// WithTransactionType replaces the transaction bits of sysFlag with t (Java resetTransactionValue).
func WithTransactionType(sysFlag, t int32) int32 { return (sysFlag &^ transactionMask) | t }

// MessageExt is a message as the broker stores it and a consumer receives it: the
// [Message] plus the fields of the stored record (docs/protocol.md §4.1).
type MessageExt struct {
	Message
	// MsgID is the id users see: property UNIQ_KEY when set, else OffsetMsgID.
	MsgID string
	// OffsetMsgID is the offset message id: store host, port and commitlog offset in hex.
	OffsetMsgID string
	// StoreSize is the whole record length in bytes.
	StoreSize int32
	// BodyCRC is CRC32(body) & 0x7FFFFFFF over the stored (possibly compressed) body.
	BodyCRC int32
	// QueueID is the queue id within the topic.
	QueueID int32
	// QueueOffset is the logical offset in the consume queue (0 for half and rollback messages).
	QueueOffset int64
	// CommitLogOffset is the physical offset of the record in the commitlog, in bytes.
	CommitLogOffset int64
	// SysFlag holds the system flag bits (SysFlagCompressed, transaction type, ...).
	SysFlag int32
	// BornTimestamp is when the producer created the message, unix ms.
	BornTimestamp int64
	// BornHost is the producer's address.
	BornHost netip.AddrPort
	// StoreTimestamp is when the broker stored the message, unix ms.
	StoreTimestamp int64
	// StoreHost is the broker's address.
	StoreHost netip.AddrPort
	// ReconsumeTimes counts how often the message came back through the retry topic.
	ReconsumeTimes int32
	// PreparedTransactionOffset is the commitlog offset of the half message a committed
	// transactional message came from (0 otherwise).
	PreparedTransactionOffset int64
	// BrokerName is the name of the broker the message was read from (not encoded).
	BrokerName string
	// DecodeErr is set when decoding with DecodeOptions.Decompress could not decompress
	// a body flagged compressed (not valid zlib, or larger than
	// DecodeOptions.MaxDecompressedSize): it wraps [ErrUndecodableBody] and Body is nil,
	// never the raw compressed bytes. Consumers do not hand such a message to handlers.
	DecodeErr error
}

// Errors returned by DecodeRecord.
var (
	// ErrShortRecord: the buffer ends before the record does.
	ErrShortRecord = errors.New("message: record truncated")
	// ErrBadMagic: the record does not start with MagicCode (BlankMagicCode is reported as ErrBlank).
	ErrBadMagic = errors.New("message: bad magic code")
	// ErrBlank: the record is the commitlog end-of-segment filler.
	ErrBlank = errors.New("message: blank end-of-segment record")
	// ErrBodyCRC: the body does not match its stored CRC.
	ErrBodyCRC = errors.New("message: body crc mismatch")
	// ErrUndecodableBody is wrapped by MessageExt.DecodeErr: a body flagged compressed
	// did not decompress, or would decompress past the limit.
	ErrUndecodableBody = errors.New("message: compressed body cannot be decompressed")
)

// DefaultMaxDecompressedSize is the default limit on one decompressed message body, in
// bytes: 16 MiB (four times the default maxMessageSize, which limits the compressed body).
const DefaultMaxDecompressedSize = 16 << 20

func hostLen(sysFlag, v6bit int32) int {
	if sysFlag&v6bit != 0 {
		return 20
	}
	return 8
}

// RecordSize returns the encoded length in bytes of a stored record with the given
// body, topic and properties lengths (Java CommitLog.calMsgLength).
func RecordSize(sysFlag int32, bodyLen, topicLen, propertiesLen int) int {
	return 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + hostLen(sysFlag, SysFlagBornHostV6) + 8 +
		hostLen(sysFlag, SysFlagStoreHostV6) + 4 + 8 + 4 + bodyLen + 1 + topicLen + 2 + propertiesLen
}

// BodyCRC returns CRC32(body) & 0x7FFFFFFF, the BODYCRC field of a stored record
// (Java UtilAll.crc32).
func BodyCRC(body []byte) int32 { return int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF) }

// hostFlags returns sysFlag with the v6 bits set to match the hosts.
func hostFlags(sysFlag int32, born, store netip.AddrPort) int32 {
	sysFlag &^= SysFlagBornHostV6 | SysFlagStoreHostV6
	if born.Addr().Is6() && !born.Addr().Is4In6() {
		sysFlag |= SysFlagBornHostV6
	}
	if store.Addr().Is6() && !store.Addr().Is4In6() {
		sysFlag |= SysFlagStoreHostV6
	}
	return sysFlag
}

func appendHost(dst []byte, h netip.AddrPort, v6 bool) []byte {
	a := h.Addr()
	if v6 {
		b := a.As16()
		dst = append(dst, b[:]...)
	} else {
		if a.Is4In6() {
			a = a.Unmap()
		}
		if !a.Is4() {
			dst = append(dst, 0, 0, 0, 0)
		} else {
			b := a.As4()
			dst = append(dst, b[:]...)
		}
	}
	return binary.BigEndian.AppendUint32(dst, uint32(h.Port()))
}

// AppendRecord appends the stored-record encoding of m (docs/protocol.md §4.1) to dst using
// propertiesString as the PROPERTIES field (callers pass MarshalProperties(m.Properties)
// or a string they built once). It sets the v6 sysFlag bits from the hosts and computes
// BODYCRC and TOTALSIZE; m.StoreSize, m.BodyCRC and m.SysFlag are updated. It fails with a
// *ValidationError when the topic is longer than 127 bytes or the properties longer than
// 32767 bytes.
func AppendRecord(dst []byte, m *MessageExt, propertiesString string) ([]byte, error) {
	dst, err := appendRecordHead(dst, m, len(propertiesString))
	if err != nil {
		return dst, err
	}
	return append(dst, propertiesString...), nil
}

// AppendRecordProperties is AppendRecord(dst, m, MarshalProperties(m.Properties)) without
// the properties string: they are encoded from the map straight into dst.
func AppendRecordProperties(dst []byte, m *MessageExt) ([]byte, error) {
	var arr [smallProperties]property
	pairs, n := collectProperties(arr[:0], m.Properties)
	dst, err := appendRecordHead(dst, m, n)
	if err != nil {
		return dst, err
	}
	return appendPropertyPairs(dst, pairs), nil
}

// appendRecordHead appends m's record up to and including the PROPERTIES length, for
// properties of propertiesLen bytes that the caller appends next (see AppendRecord).
func appendRecordHead(dst []byte, m *MessageExt, propertiesLen int) ([]byte, error) {
	if len(m.Topic) > MaxTopicLength {
		return dst, &ValidationError{Field: "topic", Limit: MaxTopicLength, Value: len(m.Topic), Reason: "longer than the record allows"}
	}
	if propertiesLen > MaxPropertiesLength {
		return dst, &ValidationError{Field: "properties", Limit: MaxPropertiesLength, Value: propertiesLen, Reason: "encoded properties too long"}
	}
	m.SysFlag = hostFlags(m.SysFlag, m.BornHost, m.StoreHost)
	size := RecordSize(m.SysFlag, len(m.Body), len(m.Topic), propertiesLen)
	m.StoreSize = int32(size)
	m.BodyCRC = BodyCRC(m.Body)
	be := binary.BigEndian
	dst = be.AppendUint32(dst, uint32(size))
	dst = be.AppendUint32(dst, MagicCode)
	dst = be.AppendUint32(dst, uint32(m.BodyCRC))
	dst = be.AppendUint32(dst, uint32(m.QueueID))
	dst = be.AppendUint32(dst, uint32(m.Flag))
	dst = be.AppendUint64(dst, uint64(m.QueueOffset))
	dst = be.AppendUint64(dst, uint64(m.CommitLogOffset))
	dst = be.AppendUint32(dst, uint32(m.SysFlag))
	dst = be.AppendUint64(dst, uint64(m.BornTimestamp))
	dst = appendHost(dst, m.BornHost, m.SysFlag&SysFlagBornHostV6 != 0)
	dst = be.AppendUint64(dst, uint64(m.StoreTimestamp))
	dst = appendHost(dst, m.StoreHost, m.SysFlag&SysFlagStoreHostV6 != 0)
	dst = be.AppendUint32(dst, uint32(m.ReconsumeTimes))
	dst = be.AppendUint64(dst, uint64(m.PreparedTransactionOffset))
	dst = be.AppendUint32(dst, uint32(len(m.Body)))
	dst = append(dst, m.Body...)
	dst = append(dst, byte(len(m.Topic)))
	dst = append(dst, m.Topic...)
	dst = be.AppendUint16(dst, uint16(propertiesLen))
	return dst, nil
}

// EncodeRecord returns the stored-record encoding of m; see AppendRecord.
func EncodeRecord(m *MessageExt) ([]byte, error) {
	p := MarshalProperties(m.Properties)
	return AppendRecord(make([]byte, 0, RecordSize(m.SysFlag|SysFlagBornHostV6|SysFlagStoreHostV6, len(m.Body), len(m.Topic), len(p))), m, p)
}

// DecodeOptions control DecodeRecord.
type DecodeOptions struct {
	// CheckCRC verifies BODYCRC; a mismatch returns ErrBodyCRC. Default false.
	CheckCRC bool
	// Decompress inflates a zlib body when SysFlagCompressed is set (what a consumer wants);
	// the broker keeps bodies as stored. A body that does not inflate, or would inflate
	// past MaxDecompressedSize, gets a nil Body and MessageExt.DecodeErr; the inflation
	// stops at the limit (a zlib bomb costs at most the limit in memory).
	Decompress bool
	// MaxDecompressedSize bounds one decompressed body in bytes. Default (0):
	// DefaultMaxDecompressedSize.
	MaxDecompressedSize int
	// SkipBody leaves Body nil (cheaper for index and recovery scans).
	SkipBody bool
	// ShareBody makes Body a slice of the decoded buffer (its capacity clipped to the
	// body) instead of a copy: for callers that own the buffer and never reuse it, such
	// as a consumer decoding a PULL_MESSAGE response frame. A message then keeps the whole
	// buffer alive. A decompressed body is always a fresh buffer. Default false (copy).
	ShareBody bool
}

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || r.off+n > len(r.b) {
		r.err = ErrShortRecord
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}
func (r *reader) u32() uint32 {
	if s := r.take(4); s != nil {
		return binary.BigEndian.Uint32(s)
	}
	return 0
}
func (r *reader) u64() uint64 {
	if s := r.take(8); s != nil {
		return binary.BigEndian.Uint64(s)
	}
	return 0
}
func (r *reader) host(v6 bool) netip.AddrPort {
	var a netip.Addr
	if v6 {
		if s := r.take(16); s != nil {
			a = netip.AddrFrom16([16]byte(s))
		}
	} else if s := r.take(4); s != nil {
		a = netip.AddrFrom4([4]byte(s))
	}
	port := r.u32()
	return netip.AddrPortFrom(a, uint16(port))
}

// DecodeRecord decodes the stored record at the start of b and returns it with its length
// in bytes. It returns ErrBlank for an end-of-segment filler, ErrBadMagic for anything else
// that is not a record, ErrShortRecord when b ends early or TOTALSIZE disagrees with the
// fields, and ErrBodyCRC when opts.CheckCRC is set and the body does not match.
func DecodeRecord(b []byte, opts DecodeOptions) (*MessageExt, int, error) {
	m := new(MessageExt)
	n, err := decodeRecordInto(m, b, opts, nil)
	if err != nil {
		return nil, 0, err
	}
	return m, n, nil
}

// decodeRecordInto is DecodeRecord into m. lastTopic, when not nil, holds the topic of the
// previous record of a batch: a record of the same topic shares its string.
func decodeRecordInto(m *MessageExt, b []byte, opts DecodeOptions, lastTopic *string) (int, error) {
	if len(b) < 8 {
		return 0, ErrShortRecord
	}
	total := int(int32(binary.BigEndian.Uint32(b)))
	magic := binary.BigEndian.Uint32(b[4:])
	if magic == BlankMagicCode {
		return 0, ErrBlank
	}
	if magic != MagicCode {
		return 0, ErrBadMagic
	}
	if total < 8 || total > len(b) {
		return 0, ErrShortRecord
	}
	r := &reader{b: b[:total], off: 8}
	m.StoreSize = int32(total)
	m.BodyCRC = int32(r.u32())
	m.QueueID = int32(r.u32())
	m.Flag = int32(r.u32())
	m.QueueOffset = int64(r.u64())
	m.CommitLogOffset = int64(r.u64())
	m.SysFlag = int32(r.u32())
	m.BornTimestamp = int64(r.u64())
	m.BornHost = r.host(m.SysFlag&SysFlagBornHostV6 != 0)
	m.StoreTimestamp = int64(r.u64())
	m.StoreHost = r.host(m.SysFlag&SysFlagStoreHostV6 != 0)
	m.ReconsumeTimes = int32(r.u32())
	m.PreparedTransactionOffset = int64(r.u64())
	bodyLen := int(int32(r.u32()))
	body := r.take(bodyLen)
	var topicLen int
	if s := r.take(1); s != nil {
		topicLen = int(s[0])
	}
	topic := r.take(topicLen)
	var propLen int
	if s := r.take(2); s != nil {
		propLen = int(binary.BigEndian.Uint16(s))
	}
	props := r.take(propLen)
	if r.err != nil {
		return 0, r.err
	}
	if r.off != total {
		return 0, fmt.Errorf("%w: total size %d but fields end at %d", ErrShortRecord, total, r.off)
	}
	if opts.CheckCRC && BodyCRC(body) != m.BodyCRC {
		return 0, ErrBodyCRC
	}
	switch {
	case lastTopic == nil:
		m.Topic = string(topic)
	case *lastTopic != "" && string(topic) == *lastTopic: // the comparison does not allocate
		m.Topic = *lastTopic
	default:
		m.Topic = string(topic)
		*lastTopic = m.Topic
	}
	m.Properties = unmarshalProperties(string(props), consumerProperties)
	if !opts.SkipBody {
		if opts.ShareBody {
			m.Body = body[:len(body):len(body)]
		} else {
			m.Body = append([]byte(nil), body...)
		}
		if opts.Decompress && m.SysFlag&SysFlagCompressed != 0 {
			limit := opts.MaxDecompressedSize
			if limit <= 0 {
				limit = DefaultMaxDecompressedSize
			}
			out, err := inflateLimit(m.Body, limit)
			if err != nil {
				m.Body, m.DecodeErr = nil, err
			} else {
				m.Body = out
			}
		}
	}
	m.OffsetMsgID = OffsetMsgID(m.StoreHost, m.CommitLogOffset)
	m.MsgID = m.UniqKey()
	if m.MsgID == "" {
		m.MsgID = m.OffsetMsgID
	}
	return total, nil
}

// DecodeRecords decodes back-to-back stored records (a PULL_MESSAGE response body, RocketMQ
// request code 11). It fails on the first record that does not decode, returning the
// messages before it. The messages of one call are allocated together (a message kept
// alive keeps its batch's structs alive, and with opts.ShareBody the buffer b), and
// consecutive records of one topic share the Topic string.
func DecodeRecords(b []byte, opts DecodeOptions) ([]*MessageExt, error) {
	n := countRecords(b)
	if n == 0 && len(b) > 0 {
		n = 1 // the first record is malformed: decode it for its error
	}
	out := make([]*MessageExt, 0, n)
	slab := make([]MessageExt, n)
	var topic string
	for len(b) > 0 {
		var m *MessageExt
		if len(out) < len(slab) {
			m = &slab[len(out)]
		} else {
			m = new(MessageExt) // the record countRecords stopped at: it fails to decode
		}
		k, err := decodeRecordInto(m, b, opts, &topic)
		if err != nil {
			return out, err
		}
		out = append(out, m)
		b = b[k:]
	}
	return out, nil
}

// minRecordSize is the smallest possible stored record (IPv4 hosts, empty body, topic
// and properties).
var minRecordSize = RecordSize(0, 0, 0, 0)

// countRecords counts the records of b by their TOTALSIZE fields, up to the first that
// cannot be a record (shorter than the smallest record, past the end, or not starting
// with MagicCode). The count sizes one allocation, so a body of tiny fake records must
// not count more records than could really fit.
func countRecords(b []byte) int {
	n := 0
	for len(b) >= 8 && binary.BigEndian.Uint32(b[4:]) == MagicCode {
		total := int(int32(binary.BigEndian.Uint32(b)))
		if total < minRecordSize || total > len(b) {
			break
		}
		n++
		b = b[total:]
	}
	return n
}

// maxInflate bounds a decompressed body for Inflate (64 MiB).
const maxInflate = 64 << 20

// inflateLimit decompresses a zlib body, reading at most limit+1 bytes of output. Errors
// wrap ErrUndecodableBody and say whether the data was not zlib or too large.
func inflateLimit(b []byte, limit int) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: not zlib data (%d bytes): %v", ErrUndecodableBody, len(b), err)
	}
	defer zr.Close()
	// Grow as the data comes (a small body stays small), never past limit+1.
	var buf bytes.Buffer
	buf.Grow(min(limit+1, max(4*len(b), 512)))
	n, err := buf.ReadFrom(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: corrupt zlib data (%d bytes): %v", ErrUndecodableBody, len(b), err)
	}
	if n > int64(limit) {
		return nil, fmt.Errorf("%w: decompresses to more than %d bytes (limit), from %d compressed bytes", ErrUndecodableBody, limit, len(b))
	}
	return buf.Bytes(), nil
}

// Inflate decompresses a zlib body (RFC 1950), as stored with SysFlagCompressed.
// Output is bounded to 64 MiB; errors wrap [ErrUndecodableBody].
func Inflate(b []byte) ([]byte, error) { return inflateLimit(b, maxInflate) }

// Deflate compresses body with zlib at level (1..9; RocketMQ clients use 5).
func Deflate(body []byte, level int) ([]byte, error) {
	var buf bytes.Buffer
	w, err := zlib.NewWriterLevel(&buf, level)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(body); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
