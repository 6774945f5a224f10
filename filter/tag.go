// Package filter decides which stored messages a subscription receives. This file holds
// tag matching: a subscription is "*" (everything) or "TagA || TagB"; the broker compares
// the consume queue's tag code (Java String.hashCode of the tag) first, which is cheap,
// and then the exact tag string of the record, so hash collisions never reach a consumer.
package filter

import (
	"encoding/binary"

	"github.com/sluicemq/sluice/message"
)

// TagFilter matches messages by tag. The zero value and a filter made from "*" or ""
// match every message. It is immutable and safe for concurrent use.
type TagFilter struct {
	all   bool
	codes map[int64]struct{}
	tags  map[string]struct{}
}

// NewTagFilter returns a filter for a tag subscription expression ("*", "", "TagA" or
// "TagA || TagB"). The tag codes are computed here from the tag strings with
// [message.TagHashCode] rather than taken from the client, because the Go client hashes
// UTF-8 bytes where the consume queue holds Java's UTF-16 hash.
func NewTagFilter(expr string) *TagFilter {
	tags := message.ParseTagExpression(expr)
	if len(tags) == 0 {
		return &TagFilter{all: true}
	}
	f := &TagFilter{codes: make(map[int64]struct{}, len(tags)), tags: make(map[string]struct{}, len(tags))}
	for _, t := range tags {
		f.codes[message.TagHashCode(t)] = struct{}{}
		f.tags[t] = struct{}{}
	}
	return f
}

// MatchAll reports whether the filter lets every message through.
func (f *TagFilter) MatchAll() bool { return f == nil || f.all }

// Tags returns the subscribed tags (nil when the filter matches all).
func (f *TagFilter) Tags() []string {
	if f.MatchAll() {
		return nil
	}
	out := make([]string, 0, len(f.tags))
	for t := range f.tags {
		out = append(out, t)
	}
	return out
}

// MatchTagsCode reports whether a consume-queue entry's tag code may match.
func (f *TagFilter) MatchTagsCode(code int64) bool {
	if f.MatchAll() {
		return true
	}
	_, ok := f.codes[code]
	return ok
}

// MatchTag reports whether a message with this exact tag matches.
func (f *TagFilter) MatchTag(tag string) bool {
	if f.MatchAll() {
		return true
	}
	_, ok := f.tags[tag]
	return ok
}

// MatchRecord re-checks the exact tag of a raw stored record (docs/protocol.md §4.1) whose tag
// code already matched. A record that cannot be parsed does not match.
func (f *TagFilter) MatchRecord(rec []byte) bool {
	if f.MatchAll() {
		return true
	}
	props, ok := recordProperties(rec)
	if !ok {
		return false
	}
	return f.MatchTag(message.UnmarshalProperties(props)[message.PropertyTags])
}

// recordProperties returns the PROPERTIES field of a raw stored record without decoding
// the rest of it.
func recordProperties(rec []byte) (string, bool) {
	be := binary.BigEndian
	const sysFlagAt = 4 + 4 + 4 + 4 + 4 + 8 + 8
	if len(rec) < sysFlagAt+4 {
		return "", false
	}
	sys := int32(be.Uint32(rec[sysFlagAt:]))
	born, store := 8, 8
	if sys&message.SysFlagBornHostV6 != 0 {
		born = 20
	}
	if sys&message.SysFlagStoreHostV6 != 0 {
		store = 20
	}
	off := sysFlagAt + 4 + 8 + born + 8 + store + 4 + 8
	if len(rec) < off+4 {
		return "", false
	}
	off += 4 + int(int32(be.Uint32(rec[off:])))
	if off < 0 || len(rec) < off+1 {
		return "", false
	}
	off += 1 + int(rec[off])
	if len(rec) < off+2 {
		return "", false
	}
	n := int(be.Uint16(rec[off:]))
	off += 2
	if len(rec) < off+n {
		return "", false
	}
	return string(rec[off : off+n]), true
}
