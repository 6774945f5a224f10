package namesrv

import "testing"

func TestValidOrderTopicConf(t *testing.T) {
	for _, good := range []string{"broker-a:4", "broker-a:4;broker-b:2"} {
		if !validOrderTopicConf(good) {
			t.Errorf("validOrderTopicConf(%q) refused", good)
		}
	}
	for _, bad := range []string{"", "a", "a:", ":3", "a:0", "a:x", "a:1;", ";a:1", "a:01"} {
		if validOrderTopicConf(bad) {
			t.Errorf("validOrderTopicConf(%q) accepted", bad)
		}
	}
}
