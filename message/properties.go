package message

import (
	"slices"
	"strings"
)

// Separators of the RocketMQ properties string (Java MessageDecoder NAME_VALUE_SEPARATOR
// and PROPERTY_SEPARATOR).
const (
	NameValueSeparator = '\x01'
	PropertySeparator  = '\x02'
)

// MarshalProperties encodes p as a RocketMQ properties string:
// name 0x01 value 0x02 name 0x01 value, names in byte order so the output is
// deterministic, with no trailing separator (as Java 4.9.8 writes it). Pairs with an empty
// name or value are left out, as both official clients do. It returns "" for an empty map.
func MarshalProperties(p map[string]string) string {
	if len(p) == 0 {
		return ""
	}
	// Keys on the stack for the usual handful of properties, and one allocation of the
	// exact size for the result.
	var arr [16]string
	keys := arr[:0]
	n := 0
	for k, v := range p {
		if k == "" || v == "" {
			continue
		}
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	if len(keys) == 0 {
		return ""
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(n - 1)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(PropertySeparator)
		}
		b.WriteString(k)
		b.WriteByte(NameValueSeparator)
		b.WriteString(p[k])
	}
	return b.String()
}

// UnmarshalProperties decodes a RocketMQ properties string. It accepts both the Java form
// (no trailing 0x02) and the Go client's form (a 0x02 after every pair) and, like the Java
// parser, skips pieces that are not name 0x01 value with both parts non-empty. It never
// fails: malformed pieces are dropped. It returns nil for "".
func UnmarshalProperties(s string) map[string]string { return unmarshalProperties(s, 0) }

// consumerProperties is how many properties a push consumer adds to a pulled message
// (MIN_OFFSET, MAX_OFFSET, CONSUME_START_TIME): decoded maps are sized for them.
const consumerProperties = 3

// unmarshalProperties is UnmarshalProperties with room for extra more entries.
func unmarshalProperties(s string, extra int) map[string]string {
	if s == "" {
		return nil
	}
	// Size hint from the separators, capped: a string of bare separators must not
	// reserve map room for thousands of entries it does not have.
	m := make(map[string]string, min(strings.Count(s, "\x02")+1, 16)+extra) // "\x02" is PropertySeparator
	for len(s) > 0 {
		var piece string
		if i := strings.IndexByte(s, PropertySeparator); i >= 0 {
			piece, s = s[:i], s[i+1:]
		} else {
			piece, s = s, ""
		}
		j := strings.IndexByte(piece, NameValueSeparator)
		if j <= 0 || j == len(piece)-1 {
			continue
		}
		m[piece[:j]] = piece[j+1:]
	}
	return m
}
