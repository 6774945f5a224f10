package store

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzIndexRecovery overwrites bytes of the index files at a fuzzed position (across all
// files, in name order) after a clean close and checks: Open succeeds, no query fails or
// returns a message without the key, and new messages are indexed and found. (Entries
// carry no checksum, so a flipped hash in an entry can hide a message; torn writes and
// bad headers are repaired, see TestIndexRecoveryRepairs.)
func FuzzIndexRecovery(f *testing.F) {
	f.Add(uint16(0), []byte{0xFF})
	f.Add(uint16(90), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint16(200), []byte("garbage in an entry"))
	f.Add(uint16(700), []byte{0x7F, 0xFF, 0xFF, 0xFF})
	f.Add(uint16(1500), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Fuzz(func(t *testing.T, at uint16, data []byte) {
		if len(data) == 0 || len(data) > 512 {
			return
		}
		cfg := indexConfig(t.TempDir(), 5, 24)
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		const n = 20
		for i := range n {
			put(t, s, keyedMsg("Fz", fmt.Sprintf("fz-%02d", i), fmt.Sprintf("k%d", i), "all"))
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(cfg.Dir, "index")
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		total := int64(0)
		sizes := make([]int64, len(ents))
		for i, e := range ents {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			sizes[i] = fi.Size()
			total += fi.Size()
		}
		off := int64(at) % total
		for i := range ents {
			if off < sizes[i] {
				writeFile(t, filepath.Join(dir, ents[i].Name()), off, data[:min(int64(len(data)), sizes[i]-off)])
				break
			}
			off -= sizes[i]
		}

		s2, err := Open(cfg)
		if err != nil {
			t.Fatalf("Open after damaging the index files at %d: %v", at, err)
		}
		defer s2.Close()
		for i := range n {
			key := fmt.Sprintf("k%d", i)
			got := byKey(t, s2, "Fz", key)
			if len(got) > 1 || len(got) == 1 && got[0] != fmt.Sprintf("fz-%02d", i) {
				t.Fatalf("%s: %v", key, got)
			}
		}
		r, err := s2.Query(IndexQuery{Topic: "Fz", Key: "all", MaxNum: MaxQueryMaxNum, EndTimestamp: math.MaxInt64})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range r.Messages {
			if !slices.Contains(m.Keys(), "all") {
				t.Fatalf("all: returned %q", m.Body)
			}
		}
		put(t, s2, keyedMsg("Fz", "new", "fresh"))
		if got := byKey(t, s2, "Fz", "fresh"); !slices.Equal(got, []string{"new"}) {
			t.Fatalf("fresh: %v", got)
		}
	})
}
