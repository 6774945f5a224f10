package filter

import (
	"testing"

	"github.com/sluicemq/sluice/message"
)

// BenchmarkTagFilter matches a consume-queue tags code and a tag against a subscription
// of three tags (what a pull does per entry, and per record when hash codes collide).
func BenchmarkTagFilter(b *testing.B) {
	f := NewTagFilter("TagA || TagB || TagC")
	code := message.TagHashCode("TagB")
	b.Run("tagsCode", func(b *testing.B) {
		for b.Loop() {
			if !f.MatchTagsCode(code) {
				b.Fatal("TagB's code does not match")
			}
		}
	})
	b.Run("tag", func(b *testing.B) {
		for b.Loop() {
			if !f.MatchTag("TagB") || f.MatchTag("TagD") {
				b.Fatal("wrong match")
			}
		}
	})
}
