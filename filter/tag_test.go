package filter

import (
	"net/netip"
	"testing"

	"github.com/sluicemq/sluice/message"
)

func record(t *testing.T, tag string, v6 bool) []byte {
	t.Helper()
	host := netip.MustParseAddrPort("127.0.0.1:1")
	if v6 {
		host = netip.MustParseAddrPort("[::1]:1")
	}
	m := &message.MessageExt{Message: message.Message{Topic: "T", Body: []byte("body")}, StoreHost: host, BornHost: host}
	m.SetTag(tag)
	b, err := message.EncodeRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTagFilter(t *testing.T) {
	f := NewTagFilter("TagA || TagC")
	for _, c := range []struct {
		tag  string
		want bool
	}{{"TagA", true}, {"TagC", true}, {"TagB", false}, {"", false}, {"TagAA", false}} {
		code := message.TagHashCode(c.tag)
		got := f.MatchTagsCode(code) && f.MatchRecord(record(t, c.tag, c.tag == "TagC"))
		if got != c.want {
			t.Errorf("tag %q: got %v want %v", c.tag, got, c.want)
		}
	}
	// "Aa" and "BB" share a Java hash code: the code matches, the exact tag does not.
	g := NewTagFilter("Aa")
	if !g.MatchTagsCode(message.TagHashCode("BB")) || g.MatchRecord(record(t, "BB", false)) || !g.MatchRecord(record(t, "Aa", false)) {
		t.Fatal("hash collision must be caught by the exact tag check")
	}
	for _, all := range []string{"*", "", "  "} {
		if h := NewTagFilter(all); !h.MatchAll() || !h.MatchTagsCode(123) || !h.MatchRecord(nil) {
			t.Fatalf("%q must match all", all)
		}
	}
	if f.MatchRecord([]byte{1, 2, 3}) {
		t.Fatal("garbage record matched")
	}
}
