package filter

import (
	"fmt"
	"testing"
)

const benchSQL = "TAGS IN ('TagA', 'TagB') AND region = 'eu' AND price BETWEEN 10 AND 20 AND (vip = TRUE OR score > 4.5)"

func benchProps() map[string]string {
	p := P("TAGS", "TagB", "region", "eu", "price", "15", "vip", "false", "score", "4.75", "KEYS", "order-1",
		"UNIQ_KEY", "7F0000010001", "WAIT", "true")
	for i := range 6 {
		p[fmt.Sprintf("user%d", i)] = "value"
	}
	return p
}

// BenchmarkSQL92Evaluate measures one evaluation on a property map (the broker's per-message
// cost once properties are decoded).
func BenchmarkSQL92Evaluate(b *testing.B) {
	f, err := CompileSQL92(benchSQL)
	if err != nil {
		b.Fatal(err)
	}
	props := benchProps()
	if !f.Evaluate(props) {
		b.Fatal("benchmark message must match")
	}
	b.ReportAllocs()
	for b.Loop() {
		f.Evaluate(props)
	}
}

// BenchmarkSQL92MatchRecord measures the store path: properties read from a raw record.
func BenchmarkSQL92MatchRecord(b *testing.B) {
	f, err := CompileSQL92(benchSQL)
	if err != nil {
		b.Fatal(err)
	}
	rec := sqlRecord(b, benchProps(), false)
	if !f.MatchRecord(rec) {
		b.Fatal("benchmark record must match")
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		f.MatchRecord(rec)
	}
}

// BenchmarkSQL92Compile measures parsing and checking one expression.
func BenchmarkSQL92Compile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileSQL92(benchSQL); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSQLCacheGet measures a cache hit.
func BenchmarkSQLCacheGet(b *testing.B) {
	c := NewSQLCache(0)
	if _, err := c.Get(benchSQL); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Get(benchSQL)
	}
}
