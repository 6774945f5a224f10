// Package suggest finds the names nearest to a mistyped one, for "did you mean" in the
// CLI and the web console.
package suggest

import (
	"sort"
	"strings"
)

// Nearest returns up to 3 candidates close to name: the same ignoring case, containing
// it or contained in it, or within an edit distance of max(2, len/4); nearest first.
func Nearest(name string, candidates []string) []string {
	type hit struct {
		s string
		d int
	}
	var hits []hit
	lname := strings.ToLower(name)
	limit := max(2, len(name)/4)
	for _, c := range candidates {
		if c == name {
			continue
		}
		lc := strings.ToLower(c)
		d := editDistance(lname, lc)
		if lc == lname || (len(lname) >= 3 && (strings.Contains(lc, lname) || strings.Contains(lname, lc))) {
			d = min(d, 1)
		}
		if d <= limit {
			hits = append(hits, hit{c, d})
		}
	}
	sort.SliceStable(hits, func(i, j int) bool {
		if hits[i].d != hits[j].d {
			return hits[i].d < hits[j].d
		}
		return hits[i].s < hits[j].s
	})
	out := make([]string, 0, 3)
	for _, h := range hits[:min(3, len(hits))] {
		out = append(out, h.s)
	}
	return out
}

// editDistance is the Levenshtein distance of a and b (bytes), bounded work for names.
func editDistance(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
