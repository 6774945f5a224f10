package message

import (
	"strings"
	"unicode/utf16"
)

// TagHashCode returns the tag code the broker stores in the consume queue: Java's
// String.hashCode (h = 31*h + c over UTF-16 code units, int32 wrap-around), sign-extended to
// int64; 0 for "". Java clients send the same codes in their subscriptions; the Go client
// hashes UTF-8 bytes instead, so the broker computes codes from tag strings itself.
func TagHashCode(tag string) int64 {
	var h int32
	for _, r := range tag {
		if r >= 0x10000 {
			r1, r2 := utf16.EncodeRune(r)
			h = 31*h + int32(r1)
			h = 31*h + int32(r2)
			continue
		}
		h = 31*h + int32(r)
	}
	return int64(h)
}

// SubscribeAll is the tag expression that matches every message.
const SubscribeAll = "*"

// ParseTagExpression splits a tag subscription expression ("*", "", "TagA", or
// "TagA || TagB") into its tags. It returns nil for "*" or "" (match all). Empty pieces
// are dropped and spaces trimmed, as RocketMQ clients do.
func ParseTagExpression(expr string) []string {
	expr = strings.TrimSpace(expr)
	if expr == "" || expr == SubscribeAll {
		return nil
	}
	var tags []string
	for _, t := range strings.Split(expr, "||") {
		if t = strings.TrimSpace(t); t != "" {
			tags = append(tags, t)
		}
	}
	return tags
}
