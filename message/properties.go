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
	var arr [smallProperties]property
	pairs, n := collectProperties(arr[:0], p)
	if len(pairs) == 0 {
		return ""
	}
	var b strings.Builder // one allocation of the exact size
	b.Grow(n)
	for i, kv := range pairs {
		if i > 0 {
			b.WriteByte(PropertySeparator)
		}
		b.WriteString(kv.name)
		b.WriteByte(NameValueSeparator)
		b.WriteString(kv.value)
	}
	return b.String()
}

// AppendProperties appends the encoding of p that MarshalProperties returns to dst and
// returns the extended slice, without building the string.
func AppendProperties(dst []byte, p map[string]string) []byte {
	if len(p) == 0 {
		return dst
	}
	var arr [smallProperties]property
	pairs, _ := collectProperties(arr[:0], p)
	return appendPropertyPairs(dst, pairs)
}

// EncodedPropertiesLen returns len(MarshalProperties(p)) without encoding.
func EncodedPropertiesLen(p map[string]string) int {
	n := 0
	for k, v := range p {
		if k != "" && v != "" {
			n += len(k) + len(v) + 2
		}
	}
	return max(n-1, 0)
}

// smallProperties is how many properties the encoders keep on the stack.
const smallProperties = 16

// property is one name/value pair of a properties string.
type property struct{ name, value string }

// collectProperties appends p's pairs with a non-empty name and value to dst in name
// order and returns them with their encoded length (0 when there are none). One pass over
// the map, no second lookup per name; an insertion sort, as messages have a handful.
func collectProperties(dst []property, p map[string]string) ([]property, int) {
	lo, n := len(dst), 0
	for k, v := range p {
		if k == "" || v == "" {
			continue
		}
		dst = append(dst, property{k, v})
		n += len(k) + len(v) + 2
	}
	sortProperties(dst[lo:])
	return dst, max(n-1, 0)
}

// sortProperties sorts pairs by name (byte order); names are distinct.
func sortProperties(pairs []property) {
	if len(pairs) > 12 {
		slices.SortFunc(pairs, func(a, b property) int { return strings.Compare(a.name, b.name) })
		return
	}
	for i := 1; i < len(pairs); i++ {
		for j := i; j > 0 && pairs[j].name < pairs[j-1].name; j-- {
			pairs[j], pairs[j-1] = pairs[j-1], pairs[j]
		}
	}
}

// appendPropertyPairs appends name 0x01 value, separated by 0x02, to dst.
func appendPropertyPairs(dst []byte, pairs []property) []byte {
	for i, kv := range pairs {
		if i > 0 {
			dst = append(dst, PropertySeparator)
		}
		dst = append(dst, kv.name...)
		dst = append(dst, NameValueSeparator)
		dst = append(dst, kv.value...)
	}
	return dst
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
