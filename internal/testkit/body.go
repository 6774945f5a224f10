package testkit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
)

// SeqBody returns a deterministic message body of size bytes (at least 8) for sequence
// number seq: seq as 8 big-endian bytes, then compressible text ("seq=N;" repeated)
// when seq%3 == 0, pseudo-random bytes seeded by seq and salt otherwise. A receiver
// recovers seq from the first 8 bytes and checks the rest against SeqBody(seq, ...) or
// its [Sum].
func SeqBody(seq, size int, salt uint64) []byte {
	size = max(size, 8)
	b := make([]byte, 8, size)
	binary.BigEndian.PutUint64(b, uint64(seq))
	if seq%3 == 0 {
		for len(b) < size {
			b = append(b, fmt.Sprintf("seq=%d;", seq)...)
		}
		return b[:size]
	}
	r := rand.New(rand.NewPCG(uint64(seq), salt))
	for len(b) < size {
		b = binary.LittleEndian.AppendUint64(b, r.Uint64())
	}
	return b[:size]
}

// Sum is the hex SHA-256 of b, to compare bodies without keeping them.
func Sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
