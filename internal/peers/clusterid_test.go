package peers

import (
	"encoding/base64"
	"strings"
	"testing"
)

// kafkaClusterID makes ids kafka-storage accepts as one argument: with 16 plain random
// bytes, 1 id in 64 started with "-" and the format step failed with "argument
// --cluster-id/-t: expected one argument". Over 5000 draws the old generator would
// produce such an id with probability 1 - (63/64)^5000 (all but certain), so this
// test fails if the rule is lost.
func TestKafkaClusterIDShape(t *testing.T) {
	seen := make(map[string]bool)
	firsts := make(map[byte]bool)
	for i := 0; i < 5000; i++ {
		id, err := kafkaClusterID()
		if err != nil {
			t.Fatal(err)
		}
		if len(id) != 22 || strings.HasPrefix(id, "-") {
			t.Fatalf("id %q: want 22 characters not starting with \"-\"", id)
		}
		b, err := base64.RawURLEncoding.DecodeString(id)
		if err != nil || len(b) != 16 {
			t.Fatalf("id %q: not 16 bytes of URL-safe base64 without padding: %d bytes, %v", id, len(b), err)
		}
		if b[6]>>4 != 4 || b[8]>>6 != 2 {
			t.Fatalf("id %q: not a version-4 variant-2 UUID (bytes %x)", id, b)
		}
		if seen[id] {
			t.Fatalf("id %q drawn twice", id)
		}
		seen[id] = true
		firsts[id[0]] = true
	}
	// The first character still spans the rest of the alphabet ("_" included): only
	// "-" is excluded, nothing else is biased away.
	if len(firsts) != 63 || !firsts['_'] {
		t.Fatalf("first characters: %d distinct, want the 63 of the URL-safe alphabet except \"-\"", len(firsts))
	}
}
