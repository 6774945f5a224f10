package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
)

// keyedMsg returns a message of topic with a UNIQ_KEY and the given KEYS.
func keyedMsg(topic, body string, keys ...string) *message.MessageExt {
	m := newMsg(topic, 0, body, "TagK")
	if len(keys) > 0 {
		m.SetKeys(keys...)
	}
	return m
}

// indexConfig returns a test config with a small key index.
func indexConfig(dir string, slots, entries int) Config {
	cfg := testConfig(dir)
	cfg.Index = IndexConfig{HashSlots: slots, Entries: entries}
	return cfg
}

// queryBodies runs a query and returns the bodies found, in result order.
func queryBodies(t *testing.T, s *Store, q IndexQuery) []string {
	t.Helper()
	r, err := s.Query(q)
	if err != nil {
		t.Fatalf("Query(%+v): %v", q, err)
	}
	if len(r.Messages) != len(r.Records) {
		t.Fatalf("%d messages but %d records", len(r.Messages), len(r.Records))
	}
	out := make([]string, len(r.Messages))
	for i, m := range r.Messages {
		dm, _, err := message.DecodeRecord(r.Records[i], message.DecodeOptions{CheckCRC: true})
		if err != nil {
			t.Fatalf("returned record %d does not decode: %v", i, err)
		}
		if dm.CommitLogOffset != m.CommitLogOffset || string(dm.Body) != string(m.Body) {
			t.Fatalf("record %d and message %d differ", i, i)
		}
		out[i] = string(m.Body)
	}
	return out
}

// byKey queries topic/key over all time with the maximum MaxNum.
func byKey(t *testing.T, s *Store, topic, key string) []string {
	t.Helper()
	return queryBodies(t, s, IndexQuery{Topic: topic, Key: key, MaxNum: MaxQueryMaxNum, EndTimestamp: math.MaxInt64})
}

// entriesFor counts the index entries of topic/key in every file, and checks that each
// entry's commitlog offset is below limit.
func entriesFor(t *testing.T, s *Store, topic, key string) int {
	t.Helper()
	h := keyHash(topic, key)
	n := 0
	for _, f := range s.index.fileList() {
		if err := f.walk(h, func(indexEntry) (bool, error) { n++; return false, nil }); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// allEntries returns every index entry of every file, in file and entry order.
func allEntries(t *testing.T, s *Store) []indexEntry {
	t.Helper()
	var out []indexEntry
	for _, f := range s.index.fileList() {
		for i := uint32(1); i <= f.count.Load(); i++ {
			e, err := f.readEntry(i)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
	}
	return out
}

func TestIndexManyKeysAndSlotCollisions(t *testing.T) {
	// 7 hash slots for ~1500 entries: every slot chain mixes hundreds of keys.
	s := openStore(t, indexConfig(t.TempDir(), 7, 100000))
	const n = 500
	uniq := make([]string, n)
	for i := range n {
		m := keyedMsg("Orders", fmt.Sprintf("body-%d", i), fmt.Sprintf("order-%d", i), "common", fmt.Sprintf("group-%d", i%10))
		put(t, s, m)
		uniq[i] = m.UniqKey()
	}
	// A message of another topic with the same key must not be returned.
	put(t, s, keyedMsg("Other", "other-topic", "order-7", "common"))

	for _, i := range []int{0, 1, 7, 250, 499} {
		if got := byKey(t, s, "Orders", fmt.Sprintf("order-%d", i)); !slices.Equal(got, []string{fmt.Sprintf("body-%d", i)}) {
			t.Errorf("order-%d: got %v", i, got)
		}
		if got := queryBodies(t, s, IndexQuery{Topic: "Orders", Key: uniq[i], UniqKey: true, MaxNum: 32, EndTimestamp: math.MaxInt64}); !slices.Equal(got, []string{fmt.Sprintf("body-%d", i)}) {
			t.Errorf("uniq key of %d: got %v", i, got)
		}
		// A plain key query also finds a UNIQ_KEY (both are index keys), but a
		// unique-key query does not find a KEYS key.
		if got := byKey(t, s, "Orders", uniq[i]); len(got) != 1 {
			t.Errorf("uniq key as a key of %d: got %v", i, got)
		}
	}
	if got := queryBodies(t, s, IndexQuery{Topic: "Orders", Key: "order-3", UniqKey: true, MaxNum: 32, EndTimestamp: math.MaxInt64}); len(got) != 0 {
		t.Errorf("unique-key query for a KEYS key: %v", got)
	}
	// group-3: exactly the 50 messages i%10 == 3, oldest first.
	got := byKey(t, s, "Orders", "group-3")
	var want []string
	for i := 3; i < n; i += 10 {
		want = append(want, fmt.Sprintf("body-%d", i))
	}
	if !slices.Equal(got, want) {
		t.Errorf("group-3: got %d %v, want %d", len(got), got, len(want))
	}
	// common: capped at 64, the newest 64 in commitlog order; MaxNum 5 gives the newest 5.
	got = byKey(t, s, "Orders", "common")
	want = nil
	for i := n - 64; i < n; i++ {
		want = append(want, fmt.Sprintf("body-%d", i))
	}
	if !slices.Equal(got, want) {
		t.Errorf("common: got %d messages %v..., want the newest 64", len(got), got[:min(3, len(got))])
	}
	got = queryBodies(t, s, IndexQuery{Topic: "Orders", Key: "common", MaxNum: 5, EndTimestamp: math.MaxInt64})
	if !slices.Equal(got, want[59:]) {
		t.Errorf("common, MaxNum 5: %v", got)
	}
	if got := byKey(t, s, "Other", "order-7"); !slices.Equal(got, []string{"other-topic"}) {
		t.Errorf("other topic: %v", got)
	}
	for _, k := range []string{"order-500", "nope", "group-10"} {
		if got := byKey(t, s, "Orders", k); len(got) != 0 {
			t.Errorf("%s: %v, want nothing", k, got)
		}
	}
	if _, err := s.Query(IndexQuery{Topic: "NoSuchTopic", Key: "order-1", MaxNum: 1, EndTimestamp: 1}); err != nil {
		t.Errorf("unknown topic: %v", err)
	}
}

func TestIndexFullHashCollision(t *testing.T) {
	// Found by hashing "key-0", "key-1", ... under topic Coll until two hashes were equal
	// (the birthday bound of a 32-bit hash is ~77k keys).
	a, b := "key-543689", "key-1171674"
	if keyHash("Coll", a) != keyHash("Coll", b) {
		t.Fatalf("%q and %q do not collide: %#x %#x", a, b, keyHash("Coll", a), keyHash("Coll", b))
	}
	s := openStore(t, indexConfig(t.TempDir(), 1000, 1000))
	put(t, s, keyedMsg("Coll", "with-a", a))
	put(t, s, keyedMsg("Coll", "with-b", b))
	put(t, s, keyedMsg("Coll", "with-both", a, b))
	if got := byKey(t, s, "Coll", a); !slices.Equal(got, []string{"with-a", "with-both"}) {
		t.Errorf("key %q: %v", a, got)
	}
	if got := byKey(t, s, "Coll", b); !slices.Equal(got, []string{"with-b", "with-both"}) {
		t.Errorf("key %q: %v", b, got)
	}
	// The chain holds all four entries with that hash; the record check filters them.
	if n := entriesFor(t, s, "Coll", a); n != 4 {
		t.Errorf("%d entries with the colliding hash, want 4", n)
	}
}

func TestIndexTimeRangeAcrossFiles(t *testing.T) {
	// 3 entries per message (UNIQ_KEY + 2 keys), 10 entries per file: many files, each
	// covering a few minutes of store time.
	s := openStore(t, indexConfig(t.TempDir(), 3, 10))
	t0 := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	const n = 60
	for i := range n {
		m := keyedMsg("Timed", fmt.Sprintf("m%02d", i), "tick", fmt.Sprintf("k%d", i%2))
		m.StoreTimestamp = t0 + int64(i)*60_000 + 500 // one a minute, half a second in
		put(t, s, m)
	}
	if files := len(s.index.fileList()); files < n*3/10 {
		t.Fatalf("%d index files, want at least %d", files, n*3/10)
	}
	ms := func(i int) int64 { return t0 + int64(i)*60_000 + 500 }
	bodies := func(from, to int, step int) []string {
		var out []string
		for i := from; i <= to; i += step {
			out = append(out, fmt.Sprintf("m%02d", i))
		}
		return out
	}
	cases := []struct {
		name       string
		key        string
		begin, end int64
		want       []string
	}{
		{"all", "tick", 0, math.MaxInt64, bodies(0, n-1, 1)[n-MaxQueryMaxNum+4:]},
		{"inclusive bounds", "tick", ms(10), ms(20), bodies(10, 20, 1)},
		{"one ms inside each end", "tick", ms(10) + 1, ms(20) - 1, bodies(11, 19, 1)},
		{"same second, ms before the store time", "tick", ms(30) - 400, ms(30) - 1, nil},
		{"exactly one", "tick", ms(42), ms(42), bodies(42, 42, 1)},
		{"before everything", "tick", 0, t0, nil},
		{"after everything", "tick", ms(n-1) + 1, math.MaxInt64, nil},
		{"odd key in range", "k1", ms(5), ms(15), bodies(5, 15, 2)},
		{"first file only", "k0", ms(0), ms(2), bodies(0, 2, 2)},
	}
	for _, c := range cases {
		got := queryBodies(t, s, IndexQuery{Topic: "Timed", Key: c.key, MaxNum: MaxQueryMaxNum, BeginTimestamp: c.begin, EndTimestamp: c.end})
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	// The result carries the newest index update.
	r, err := s.Query(IndexQuery{Topic: "Timed", Key: "tick", MaxNum: 1, EndTimestamp: math.MaxInt64})
	if err != nil || r.IndexLastUpdateTimestamp != ms(n-1) || r.IndexLastUpdatePhyOffset != r.Messages[0].CommitLogOffset {
		t.Errorf("last update %d/%d (%v), want %d and the newest message's offset", r.IndexLastUpdateTimestamp, r.IndexLastUpdatePhyOffset, err, ms(n-1))
	}
}

func TestIndexRollOverAndRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := indexConfig(dir, 5, 16)
	s := openStore(t, cfg)
	const n = 100
	keys := make([]string, n)
	var batchKeys []string
	for i := range n {
		keys[i] = fmt.Sprintf("roll-%d", i)
		if i%10 == 9 {
			// A batch whose entries straddle file boundaries.
			batch := []*message.MessageExt{keyedMsg("Roll", fmt.Sprintf("b%d-a", i), keys[i], "batch"), keyedMsg("Roll", fmt.Sprintf("b%d-b", i), keys[i]+"-b", "batch")}
			if _, err := s.PutMessages(context.Background(), batch, nil); err != nil {
				t.Fatal(err)
			}
			batchKeys = append(batchKeys, keys[i]+"-b")
			continue
		}
		put(t, s, keyedMsg("Roll", fmt.Sprintf("m%d", i), keys[i]))
	}
	check := func(s *Store, when string) {
		t.Helper()
		for i, k := range keys {
			want := fmt.Sprintf("m%d", i)
			if i%10 == 9 {
				want = fmt.Sprintf("b%d-a", i)
			}
			if got := byKey(t, s, "Roll", k); !slices.Equal(got, []string{want}) {
				t.Fatalf("%s: %s: got %v, want [%s]", when, k, got, want)
			}
		}
		for _, k := range batchKeys {
			if got := byKey(t, s, "Roll", k); len(got) != 1 {
				t.Fatalf("%s: %s: %v", when, k, got)
			}
		}
		if got := byKey(t, s, "Roll", "batch"); len(got) != 20 {
			t.Fatalf("%s: batch key: %d messages, want 20", when, len(got))
		}
	}
	check(s, "live")
	files := s.index.fileList()
	// UNIQ_KEY + key per message (3 for the batch key ones): 90*2 + 20*3 = 240 entries,
	// 15 full files; the last is sealed when the next entry needs room.
	if len(files) != 15 || files[14].count.Load() != 16 || files[14].sealed.Load() {
		t.Fatalf("%d index files, want 15 with the last full and not sealed yet", len(files))
	}
	for _, f := range files[:len(files)-1] {
		if !f.sealed.Load() || f.mem.Load() != nil || f.count.Load() != 16 {
			t.Fatalf("file %s: sealed %v, memory table %v, count %d", f.path, f.sealed.Load(), f.mem.Load() != nil, f.count.Load())
		}
	}
	before := len(allEntries(t, s))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	check(s2, "after restart")
	if after := len(allEntries(t, s2)); after != before {
		t.Fatalf("%d entries after a clean restart, %d before: nothing should be indexed twice", after, before)
	}
	// New messages after the restart are indexed too.
	put(t, s2, keyedMsg("Roll", "late", "roll-late"))
	if got := byKey(t, s2, "Roll", "roll-late"); !slices.Equal(got, []string{"late"}) {
		t.Fatalf("after restart: %v", got)
	}
}

// indexFixture puts n messages (UNIQ_KEY + keys k<i> and "all") with no background
// checkpoints, then checkpoints so that the index header covers them all.
func indexFixture(t *testing.T, slots, entries, n int) (Config, *Store, []PutResult) {
	t.Helper()
	cfg := indexConfig(t.TempDir(), slots, entries)
	cfg.FlushInterval = time.Hour
	cfg.FlushConsumeQueueInterval = time.Hour
	s := openStore(t, cfg)
	var rs []PutResult
	for i := range n {
		rs = append(rs, put(t, s, keyedMsg("Crash", fmt.Sprintf("c%03d-%s", i, strings.Repeat("x", i%50)), fmt.Sprintf("k%d", i), "all")))
	}
	return cfg, s, rs
}

func TestIndexCrashCutDropsEntriesPastTheCut(t *testing.T) {
	for _, entries := range []int{8, 100000} {
		t.Run(fmt.Sprintf("entriesPerFile=%d", entries), func(t *testing.T) {
			const n, lost = 40, 5
			cfg, s, rs := indexFixture(t, 4, entries, n)
			if err := s.checkpoint(); err != nil { // the index header now covers all 40
				t.Fatal(err)
			}
			dir := snapshotDir(t, cfg.Dir)
			// The commitlog loses its last 5 records (a power failure after the index
			// header reached the disk).
			cut := rs[n-lost].CommitLogOffset
			last := rs[n-1]
			end := last.CommitLogOffset + int64(last.MsgSize)
			writeFile(t, filepath.Join(dir, "commitlog", fileName(0)), cut, make([]byte, end-cut))

			c := cfg
			c.Dir = dir
			s2 := openStore(t, c)
			if s2.MaxPhyOffset() != cut {
				t.Fatalf("recovered to %d, want the cut %d", s2.MaxPhyOffset(), cut)
			}
			for _, e := range allEntries(t, s2) {
				if e.phy >= cut {
					t.Fatalf("an index entry points at %d, at or after the cut %d", e.phy, cut)
				}
			}
			if got := s2.index.covered.Load(); got != cut {
				t.Fatalf("index covers %d, want %d", got, cut)
			}
			for i := range n {
				got := byKey(t, s2, "Crash", fmt.Sprintf("k%d", i))
				if i < n-lost && len(got) != 1 || i >= n-lost && len(got) != 0 {
					t.Fatalf("k%d: %v", i, got)
				}
			}
			if got := byKey(t, s2, "Crash", "all"); len(got) != n-lost {
				t.Fatalf("all: %d, want %d", len(got), n-lost)
			}
			// A new message at the cut reuses a lost key: exactly one entry, one result.
			r := put(t, s2, keyedMsg("Crash", "reborn", fmt.Sprintf("k%d", n-lost)))
			if r.CommitLogOffset != cut {
				t.Fatalf("new message at %d, want the cut %d", r.CommitLogOffset, cut)
			}
			if got := byKey(t, s2, "Crash", fmt.Sprintf("k%d", n-lost)); !slices.Equal(got, []string{"reborn"}) {
				t.Fatalf("reused key: %v", got)
			}
			if e := entriesFor(t, s2, "Crash", fmt.Sprintf("k%d", n-lost)); e != 1 {
				t.Fatalf("%d entries for the reused key, want 1", e)
			}
			// A restart after that keeps exactly this.
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
			s3 := openStore(t, c)
			if got := byKey(t, s3, "Crash", "all"); len(got) != n-lost {
				t.Fatalf("after restart, all: %d", len(got))
			}
			if e := entriesFor(t, s3, "Crash", fmt.Sprintf("k%d", n-lost)); e != 1 {
				t.Fatalf("after restart %d entries for the reused key, want 1", e)
			}
		})
	}
}

func TestIndexRecoveryRepairs(t *testing.T) {
	const n = 30
	type damage func(t *testing.T, s *Store, dir string)
	newestFile := func(t *testing.T, dir string) string {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(dir, "index"))
		if err != nil || len(ents) == 0 {
			t.Fatalf("index dir: %v %d", err, len(ents))
		}
		return filepath.Join(dir, "index", ents[len(ents)-1].Name())
	}
	scenarios := []struct {
		name       string
		checkpoint bool // header written after all puts
		damage     damage
	}{
		{"kill -9 before any index flush (entries past the header count ignored)", false, func(t *testing.T, s *Store, dir string) {}},
		{"kill -9 after the index flush", true, func(t *testing.T, s *Store, dir string) {}},
		{"index directory lost", true, func(t *testing.T, s *Store, dir string) {
			os.RemoveAll(filepath.Join(dir, "index"))
		}},
		{"newest index file header garbage", true, func(t *testing.T, s *Store, dir string) {
			writeFile(t, newestFile(t, dir), 10, []byte("garbage!"))
		}},
		{"oldest index file header garbage", true, func(t *testing.T, s *Store, dir string) {
			ents, _ := os.ReadDir(filepath.Join(dir, "index"))
			writeFile(t, filepath.Join(dir, "index", ents[0].Name()), 0, []byte("XXXX"))
		}},
		{"broken chain link in the writable file", true, func(t *testing.T, s *Store, dir string) {
			f := s.index.fileList()[len(s.index.fileList())-1]
			at := f.entryOffset(f.count.Load()-2) + 16 // prev of the third-last entry
			writeFile(t, newestFile(t, dir), at, []byte{0x7F, 0, 0, 0})
		}},
		{"entry offsets out of order", true, func(t *testing.T, s *Store, dir string) {
			f := s.index.fileList()[len(s.index.fileList())-1]
			writeFile(t, newestFile(t, dir), f.entryOffset(f.count.Load())+4, []byte{0, 0, 0, 0, 0, 0, 0, 0})
		}},
		{"newest index file truncated", true, func(t *testing.T, s *Store, dir string) {
			os.Truncate(newestFile(t, dir), indexHeaderSize+3*indexEntrySize)
		}},
		{"stray file in the index directory", true, func(t *testing.T, s *Store, dir string) {
			os.WriteFile(filepath.Join(dir, "index", "notes.txt"), []byte("hi"), 0o644)
		}},
	}
	for _, entries := range []int{10, 100000} {
		for _, sc := range scenarios {
			t.Run(fmt.Sprintf("%s/entriesPerFile=%d", sc.name, entries), func(t *testing.T) {
				cfg, s, _ := indexFixture(t, 3, entries, n)
				if sc.checkpoint {
					if err := s.checkpoint(); err != nil {
						t.Fatal(err)
					}
				}
				dir := snapshotDir(t, cfg.Dir)
				sc.damage(t, s, dir)
				c := cfg
				c.Dir = dir
				s2 := openStore(t, c)
				for i := range n {
					if got := byKey(t, s2, "Crash", fmt.Sprintf("k%d", i)); len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprintf("c%03d-", i)) {
						t.Fatalf("k%d: %v", i, got)
					}
					// Nothing is indexed twice, even a record whose entries straddle two
					// files and which recovery indexed again.
					if e := entriesFor(t, s2, "Crash", fmt.Sprintf("k%d", i)); e != 1 {
						t.Fatalf("k%d has %d entries, want 1", i, e)
					}
				}
				if got := byKey(t, s2, "Crash", "all"); len(got) != n {
					t.Fatalf("all: %d messages, want %d", len(got), n)
				}
				if e := entriesFor(t, s2, "Crash", "all"); e != n {
					t.Fatalf("all has %d entries, want %d", e, n)
				}
				put(t, s2, keyedMsg("Crash", "after", "after-repair"))
				if got := byKey(t, s2, "Crash", "after-repair"); len(got) != 1 {
					t.Fatalf("after repair: %v", got)
				}
			})
		}
	}
}

func TestIndexFollowsRetention(t *testing.T) {
	dir := t.TempDir()
	cfg := indexConfig(dir, 7, 8)
	cfg.CommitLogSegmentSize = MinCommitLogSegmentSize
	s := openStore(t, cfg)
	var rs []PutResult
	for i := range 40 {
		rs = append(rs, put(t, s, keyedMsg("Ret", fmt.Sprintf("%02d%s", i, strings.Repeat("r", 600)), fmt.Sprintf("ret-%d", i))))
	}
	filesBefore := len(s.index.fileList())
	ageSegments(t, s, 3)
	if n, err := s.DeleteExpiredFiles(time.Now().Add(-time.Hour), 0); err != nil || n != 3 {
		t.Fatalf("deleted %d segments, %v", n, err)
	}
	minPhy := s.MinPhyOffset()
	files := s.index.fileList()
	if len(files) >= filesBefore {
		t.Fatalf("%d index files before retention, %d after: none deleted", filesBefore, len(files))
	}
	if files[0].minPhy.Load() >= minPhy {
		t.Fatalf("the oldest kept index file starts at %d, after the commitlog min %d: deleted too much", files[0].minPhy.Load(), minPhy)
	}
	for i, r := range rs {
		got := byKey(t, s, "Ret", fmt.Sprintf("ret-%d", i))
		if (r.CommitLogOffset < minPhy) != (len(got) == 0) {
			t.Fatalf("ret-%d at %d (commitlog min %d): %v", i, r.CommitLogOffset, minPhy, got)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	if got := byKey(t, s2, "Ret", "ret-39"); len(got) != 1 {
		t.Fatalf("after restart: %v", got)
	}
}

func TestIndexSkipsRolledBackAndDisabled(t *testing.T) {
	s := openStore(t, indexConfig(t.TempDir(), 100, 100))
	half := keyedMsg(message.TransHalfTopic, "half", "tx-1")
	half.SysFlag = message.WithTransactionType(0, message.SysFlagTransactionPrepared)
	put(t, s, half)
	rb := keyedMsg("Tx", "rolled back", "tx-1")
	rb.SysFlag = message.WithTransactionType(0, message.SysFlagTransactionRollback)
	put(t, s, rb)
	commit := keyedMsg("Tx", "committed", "tx-1")
	commit.SysFlag = message.WithTransactionType(0, message.SysFlagTransactionCommit)
	put(t, s, commit)
	if got := byKey(t, s, "Tx", "tx-1"); !slices.Equal(got, []string{"committed"}) {
		t.Errorf("Tx/tx-1: %v", got)
	}
	if got := byKey(t, s, message.TransHalfTopic, "tx-1"); !slices.Equal(got, []string{"half"}) {
		t.Errorf("half topic: %v", got)
	}

	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Index.Disable = true
	off := openStore(t, cfg)
	put(t, off, keyedMsg("T", "b", "k"))
	if _, err := off.Query(IndexQuery{Topic: "T", Key: "k", MaxNum: 1, EndTimestamp: 1}); !errors.Is(err, ErrIndexDisabled) {
		t.Errorf("disabled index: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "index")); !os.IsNotExist(err) {
		t.Errorf("disabled index created its directory: %v", err)
	}
	// Turning it on later indexes what was written meanwhile.
	if err := off.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Index.Disable = false
	on := openStore(t, cfg)
	if got := byKey(t, on, "T", "k"); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after enabling: %v", got)
	}
}

func TestIndexQueryValidation(t *testing.T) {
	s := openStore(t, indexConfig(t.TempDir(), 10, 10))
	cases := []struct {
		q     IndexQuery
		field string
	}{
		{IndexQuery{Topic: "", Key: "k", MaxNum: 1}, "topic"},
		{IndexQuery{Topic: "bad topic", Key: "k", MaxNum: 1}, "topic"},
		{IndexQuery{Topic: "T", Key: "", MaxNum: 1}, "key"},
		{IndexQuery{Topic: "T", Key: "a b", MaxNum: 1}, "key"},
		{IndexQuery{Topic: "T", Key: "k", MaxNum: 0}, "maxNum"},
		{IndexQuery{Topic: "T", Key: "k", MaxNum: 1, BeginTimestamp: 10, EndTimestamp: 9}, "endTimestamp"},
	}
	for _, c := range cases {
		_, err := s.Query(c.q)
		var ie *InvalidArgumentError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("Query(%+v) = %v, want an InvalidArgumentError for %s", c.q, err, c.field)
		}
	}
	for _, c := range []Config{
		{Dir: "x", Index: IndexConfig{HashSlots: -1}},
		{Dir: "x", Index: IndexConfig{Entries: MaxIndexEntries + 1}},
	} {
		var ce *config.Error
		if err := c.Validate(); !errors.As(err, &ce) || !strings.HasPrefix(ce.Field, "Index.") {
			t.Errorf("Validate(%+v) = %v", c.Index, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(IndexQuery{Topic: "T", Key: "k", MaxNum: 1}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestIndexConcurrentPutsAndQueries(t *testing.T) {
	cfg := indexConfig(t.TempDir(), 64, 200) // rolls over during the test
	s := openStore(t, cfg)
	const writers, perWriter = 4, 150
	var acked sync.Map // key -> body
	var done atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				key, body := fmt.Sprintf("w%d-%d", w, i), fmt.Sprintf("body-w%d-%d", w, i)
				if _, err := s.PutMessage(context.Background(), keyedMsg("Conc", body, key, fmt.Sprintf("writer-%d", w)), 0); err != nil {
					errs <- err
					return
				}
				acked.Store(key, body)
			}
		}()
	}
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for !done.Load() {
				var failed error
				acked.Range(func(k, v any) bool {
					r, err := s.Query(IndexQuery{Topic: "Conc", Key: k.(string), MaxNum: 4, EndTimestamp: math.MaxInt64})
					if err != nil {
						failed = err
						return false
					}
					if len(r.Messages) != 1 || string(r.Messages[0].Body) != v.(string) {
						failed = fmt.Errorf("acknowledged key %s: %d messages", k, len(r.Messages))
						return false
					}
					return true
				})
				if failed != nil {
					errs <- failed
					return
				}
			}
		}()
	}
	wg.Wait()
	done.Store(true)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		if got := byKey(t, s, "Conc", fmt.Sprintf("writer-%d", w)); len(got) != MaxQueryMaxNum {
			t.Fatalf("writer-%d: %d", w, len(got))
		}
	}
}

func TestIndexFileNames(t *testing.T) {
	base := time.Date(2024, 1, 2, 3, 4, 5, 6e6, time.UTC).UnixMilli()
	name := indexFileName(base)
	if name != "20240102030405006" {
		t.Fatalf("name %q", name)
	}
	if got, ok := parseIndexFileName(name); !ok || got != base {
		t.Fatalf("parse %q = %d %v", name, got, ok)
	}
	for _, bad := range []string{"", "2024010203040500", "2024010203040500x", "20241302030405006", "checkpoint"} {
		if _, ok := parseIndexFileName(bad); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	for _, c := range []struct {
		base, ts int64
		want     int32
	}{{1000, 1000, 0}, {1000, 1999, 0}, {1000, 2000, 1}, {1000, 999, -1}, {1000, 0, -1}, {1000, -1, -2}, {0, math.MaxInt64, math.MaxInt32}} {
		if got := timeDelta(c.base, c.ts); got != c.want {
			t.Errorf("timeDelta(%d, %d) = %d, want %d", c.base, c.ts, got, c.want)
		}
	}
}

func TestIndexTailSpills(t *testing.T) {
	cfg := indexConfig(t.TempDir(), 1000, 100000)
	cfg.CommitLogSegmentSize = 1 << 20        // room for the big batch
	cfg.FlushConsumeQueueInterval = time.Hour // only the tail filling up writes entries
	s := openStore(t, cfg)
	const singles, batch = 1500, 1500
	for i := range singles {
		put(t, s, keyedMsg("Tail", fmt.Sprintf("s%d", i), fmt.Sprintf("s-%d", i)))
	}
	msgs := make([]*message.MessageExt, batch) // 4500 entries in one put: more than a tail
	for i := range msgs {
		msgs[i] = keyedMsg("Tail", fmt.Sprintf("b%d", i), fmt.Sprintf("b-%d", i), "in-batch")
	}
	if _, err := s.PutMessages(context.Background(), msgs, nil); err != nil {
		t.Fatal(err)
	}
	f := s.index.fileList()[0]
	if want := uint32(singles*2 + batch*3); f.count.Load() != want {
		t.Fatalf("%d entries, want %d", f.count.Load(), want)
	}
	fi, err := os.Stat(f.path)
	if err != nil || fi.Size() <= f.entryOffset(indexTailEntries+1) {
		t.Fatalf("index file has %d bytes: the tail was not spilled (%v)", fi.Size(), err)
	}
	check := func(s *Store, when string) {
		t.Helper()
		for _, i := range []int{0, 1, 749, singles - 1} {
			if got := byKey(t, s, "Tail", fmt.Sprintf("s-%d", i)); !slices.Equal(got, []string{fmt.Sprintf("s%d", i)}) {
				t.Fatalf("%s: s-%d: %v", when, i, got)
			}
		}
		// Record 1365 of the batch straddles two chunks (entries 7096..7098).
		for _, i := range []int{0, 700, 1364, 1365, 1366, batch - 1} {
			if got := byKey(t, s, "Tail", fmt.Sprintf("b-%d", i)); !slices.Equal(got, []string{fmt.Sprintf("b%d", i)}) {
				t.Fatalf("%s: b-%d: %v", when, i, got)
			}
		}
		if got := byKey(t, s, "Tail", "in-batch"); len(got) != MaxQueryMaxNum || got[len(got)-1] != fmt.Sprintf("b%d", batch-1) {
			t.Fatalf("%s: in-batch: %d, last %v", when, len(got), got[len(got)-1:])
		}
	}
	check(s, "live")
	// A kill -9 image: the header still says 0 entries (never flushed); recovery indexes
	// everything again, once.
	killed := snapshotDir(t, cfg.Dir)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{cfg.Dir, killed} {
		c := cfg
		c.Dir = dir
		s2 := openStore(t, c)
		check(s2, dir)
		if n := len(allEntries(t, s2)); n != singles*2+batch*3 {
			t.Fatalf("%s: %d entries after reopening, want %d", dir, n, singles*2+batch*3)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
