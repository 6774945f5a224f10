package message

import (
	"encoding/binary"
	"strings"
	"time"
)

// NewUniqIDs returns n new client message ids (n <= 0: none) for a batch, each as
// NewUniqID makes it (32 uppercase hex characters: the process prefix, the ms since the
// start of the month, a 16-bit counter), sharing one timestamp and taking n consecutive
// counter values. joined is the ids separated by "," — a batch's MsgID — and each id is
// a substring of it: the batch costs two allocations instead of several per id. Unique
// within the process as NewUniqID's ids are; safe for concurrent use.
func NewUniqIDs(n int) (ids []string, joined string) {
	if n <= 0 {
		return nil, ""
	}
	now := time.Now()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, now.Location())
	var ms [4]byte
	binary.BigEndian.PutUint32(ms[:], uint32(now.Sub(month).Milliseconds()))
	const prefixLen = 20          // uniqPrefix: 10 bytes in hex
	var stamp [prefixLen + 8]byte // prefix and time, shared by the batch
	copy(stamp[:], uniqPrefix)
	for i, c := range ms {
		stamp[prefixLen+2*i], stamp[prefixLen+2*i+1] = uniqDigits[c>>4], uniqDigits[c&0x0f]
	}
	first := uniqCounter.Add(uint32(n)) - uint32(n) + 1
	const idLen = len(stamp) + 4
	var b strings.Builder
	b.Grow(n*(idLen+1) - 1)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(stamp[:])
		c := uint16(first + uint32(i))
		b.WriteByte(uniqDigits[c>>12])
		b.WriteByte(uniqDigits[c>>8&0x0f])
		b.WriteByte(uniqDigits[c>>4&0x0f])
		b.WriteByte(uniqDigits[c&0x0f])
	}
	joined = b.String()
	ids = make([]string, n)
	for i := range ids {
		ids[i] = joined[i*(idLen+1) : i*(idLen+1)+idLen]
	}
	return ids, joined
}

// uniqDigits are the digits of client message ids.
const uniqDigits = "0123456789ABCDEF"
