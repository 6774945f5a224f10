package message

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// OffsetMsgID returns the offset message id of a stored record: uppercase hex of the store
// host's address (4 bytes IPv4, 16 bytes IPv6), its port (int32) and the commitlog offset
// (int64) — 32 characters for IPv4, 56 for IPv6 (Java MessageDecoder.createMessageId).
func OffsetMsgID(storeHost netip.AddrPort, commitLogOffset int64) string {
	a := storeHost.Addr().Unmap()
	var raw [16 + 4 + 8]byte
	var b []byte
	if a.Is4() {
		x := a.As4()
		b = append(raw[:0], x[:]...)
	} else if a.Is6() {
		x := a.As16()
		b = append(raw[:0], x[:]...)
	} else {
		b = append(raw[:0], 0, 0, 0, 0)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(storeHost.Port()))
	b = binary.BigEndian.AppendUint64(b, uint64(commitLogOffset))
	var out [2 * len(raw)]byte
	for i, c := range b {
		out[2*i], out[2*i+1] = upperHex[c>>4], upperHex[c&0x0f]
	}
	return string(out[:2*len(b)])
}

// upperHex is the digit set of message ids.
const upperHex = "0123456789ABCDEF"

// ParseOffsetMsgID decodes an offset message id into the store host and commitlog offset.
// It returns a *ValidationError with Field "msgId" when the id is not 32 or 56 hex
// characters or the port is out of range.
func ParseOffsetMsgID(id string) (netip.AddrPort, int64, error) {
	if len(id) != 32 && len(id) != 56 {
		return netip.AddrPort{}, 0, &ValidationError{Field: "msgId", Reason: fmt.Sprintf("length %d, want 32 (IPv4) or 56 (IPv6) hex characters", len(id))}
	}
	b, err := hex.DecodeString(id)
	if err != nil {
		return netip.AddrPort{}, 0, &ValidationError{Field: "msgId", Reason: "not hex"}
	}
	ipLen := 4
	if len(b) == 28 {
		ipLen = 16
	}
	a, _ := netip.AddrFromSlice(b[:ipLen])
	port := binary.BigEndian.Uint32(b[ipLen:])
	if port > 65535 {
		return netip.AddrPort{}, 0, &ValidationError{Field: "msgId", Reason: fmt.Sprintf("port %d out of range", port)}
	}
	return netip.AddrPortFrom(a, uint16(port)), int64(binary.BigEndian.Uint64(b[ipLen+4:])), nil
}

var (
	uniqPrefix  string
	uniqCounter atomic.Uint32
)

func init() {
	// 4 random bytes stand in for the IP (we may have none), then the pid (int16) and a
	// random int32, like Java's IP + pid + classloader hash.
	var r [8]byte
	_, _ = rand.Read(r[:])
	b := make([]byte, 0, 10)
	b = append(b, r[:4]...)
	b = binary.BigEndian.AppendUint16(b, uint16(os.Getpid()))
	b = append(b, r[4:]...)
	uniqPrefix = strings.ToUpper(hex.EncodeToString(b))
}

// NewUniqID returns a new client message id for property UNIQ_KEY: 32 uppercase hex
// characters (a 10-byte process prefix, the ms since the start of the month as int32 and a
// 16-bit counter), the layout RocketMQ clients use (docs/protocol.md §4.7). Unique within the
// process for 65536 ids per ms; safe for concurrent use.
func NewUniqID() string {
	var out [UniqIDLen]byte
	return string(AppendUniqID(out[:0], time.Now()))
}

// UniqIDLen is the length in bytes of a client message id (NewUniqID, AppendUniqID).
const UniqIDLen = 32

// AppendUniqID appends a new client message id, as NewUniqID returns it, to dst and
// returns the extended slice (UniqIDLen bytes longer). now is the clock reading the id's
// time comes from: a caller that reads the clock anyway (say, for a born timestamp)
// passes its reading instead of reading the clock twice. With a fresh reading, ids are
// unique within the process as NewUniqID's are (both advance the same counter).
func AppendUniqID(dst []byte, now time.Time) []byte {
	var b [6]byte
	binary.BigEndian.PutUint32(b[:], uint32(now.Sub(monthStart(now)).Milliseconds()))
	binary.BigEndian.PutUint16(b[4:], uint16(uniqCounter.Add(1)))
	dst = append(dst, uniqPrefix...) // 20 hex digits
	for _, c := range b {
		dst = append(dst, upperHex[c>>4], upperHex[c&0x0f])
	}
	return dst
}

// month is the local month [start, next) that NewUniqID last counted from.
type month struct{ start, next time.Time }

var curMonth atomic.Pointer[month]

// monthStart returns the start of now's month in local time, computing it (time.Date with
// a zone lookup) only when now leaves the month cached last.
func monthStart(now time.Time) time.Time {
	if m := curMonth.Load(); m != nil && !now.Before(m.start) && now.Before(m.next) {
		return m.start
	}
	start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, now.Location())
	curMonth.Store(&month{start: start, next: start.AddDate(0, 1, 0)})
	return start
}
