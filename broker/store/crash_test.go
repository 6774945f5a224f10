package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
)

// snapshotDir copies the store files of src (commitlog, consume queues, checkpoint) to a new
// directory while the store is running: what the disk holds if the process is killed now.
func snapshotDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(path string, fi os.FileInfo, err error) error {
		rel, _ := filepath.Rel(src, path)
		if rel == "lock" || strings.HasSuffix(rel, ".tmp") {
			return nil // not store state; a checkpoint's temp file may vanish (renamed) under the walk
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// crashFixture is a running store with known contents in two queues of topic "C".
type crashFixture struct {
	cfg     Config
	s       *Store
	results []PutResult // in commitlog order
	msgs    []*message.MessageExt
}

const crashTopic = "C"

// newCrashFixture puts n messages; after checkpointAt of them (0 = never) it writes a
// checkpoint, so that the damage done by a scenario lies after the checkpoint, as a crash
// leaves it.
func newCrashFixture(t *testing.T, checkpointAt int, n int) *crashFixture {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.ConsumeQueueEntries = 64
	cfg.FlushInterval = time.Hour // no background activity while the test snapshots
	cfg.FlushConsumeQueueInterval = time.Hour
	f := &crashFixture{cfg: cfg, s: openStore(t, cfg)}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		q := int32(i % 2)
		m := newMsg(crashTopic, q, fmt.Sprintf("%04d-%s", i, strings.Repeat("b", 100+rng.IntN(600))), fmt.Sprintf("Tag%d", i%3))
		f.msgs = append(f.msgs, m)
		f.results = append(f.results, put(t, f.s, m))
		if i+1 == checkpointAt {
			if err := f.s.checkpoint(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

func (f *crashFixture) end(i int) int64 {
	return f.results[i].CommitLogOffset + int64(f.results[i].MsgSize)
}

// verify opens dir and checks that exactly the first `survivors` messages are there,
// consistent in both consume queues, that the commitlog is zero after cut, and that puts
// continue at the cut.
func (f *crashFixture) verify(t *testing.T, dir string, survivors int, cut int64) {
	t.Helper()
	cfg := f.cfg
	cfg.Dir = dir
	s := openStore(t, cfg)
	check := func(s *Store) {
		t.Helper()
		if got := s.MaxPhyOffset(); got != cut {
			t.Fatalf("MaxPhyOffset = %d, want cut %d", got, cut)
		}
		for q := int32(0); q < 2; q++ {
			var want []int
			for i := 0; i < survivors; i++ {
				if f.msgs[i].QueueID == q {
					want = append(want, i)
				}
			}
			if got := s.MaxOffset(crashTopic, q); got != int64(len(want)) {
				t.Fatalf("queue %d: MaxOffset %d, want %d", q, got, len(want))
			}
			var got []*message.MessageExt
			for off := int64(0); off < int64(len(want)); {
				r, err := s.GetMessage(crashTopic, q, off, 32, 0, nil)
				if err != nil || r.Status != Found {
					t.Fatalf("queue %d offset %d: %v %v", q, off, r.Status, err)
				}
				ms, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
				if err != nil {
					t.Fatalf("served record does not decode: %v", err)
				}
				got = append(got, ms...)
				off = r.NextBeginOffset
			}
			for k, i := range want {
				m := got[k]
				if m.QueueOffset != int64(k) || m.CommitLogOffset != f.results[i].CommitLogOffset || string(m.Body) != string(f.msgs[i].Body) || m.Tag() != f.msgs[i].Tag() {
					t.Fatalf("queue %d offset %d: got message at %d %q, want message %d", q, k, m.CommitLogOffset, m.Body[:4], i)
				}
			}
			// Tag filtering works on rebuilt entries (tags codes recomputed from TAGS).
			r, err := s.GetMessage(crashTopic, q, 0, 32, 0, newTagFilter("Tag1"))
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range r.Records {
				m, _, _ := message.DecodeRecord(rec, message.DecodeOptions{SkipBody: true})
				if m.Tag() != "Tag1" {
					t.Fatalf("tag filter served %q", m.Tag())
				}
			}
		}
		// Every byte after the cut in its segment is zero.
		seg := s.cl.segmentFor(cut)
		if seg == nil {
			segs := s.cl.segments()
			if len(segs) > 0 && segs[len(segs)-1].end() != cut {
				t.Fatalf("no segment holds the cut %d", cut)
			}
			return
		}
		rest := make([]byte, seg.end()-cut)
		if _, err := seg.f.ReadAt(rest, cut-seg.start); err != nil {
			t.Fatal(err)
		}
		if i := bytes.IndexFunc(rest, func(r rune) bool { return r != 0 }); i >= 0 {
			t.Fatalf("byte %d after the cut is not zero", cut+int64(i))
		}
		for _, other := range s.cl.segments() {
			if other.start > seg.start {
				t.Fatalf("segment %d after the cut was kept", other.start)
			}
		}
	}
	check(s)
	// Puts continue at the cut, in both queues, at the next queue offsets.
	for q := int32(0); q < 2; q++ {
		m := newMsg(crashTopic, q, "after-crash", "")
		r := put(t, s, m)
		segOff := cut % cfg.CommitLogSegmentSize
		if q == 0 && segOff+int64(r.MsgSize)+8 <= cfg.CommitLogSegmentSize && r.CommitLogOffset != cut {
			t.Fatalf("first put after recovery at %d, want the cut %d", r.CommitLogOffset, cut)
		}
		if got := s.MaxOffset(crashTopic, q); got != r.QueueOffset+1 {
			t.Fatalf("queue %d: new message at %d, max %d", q, r.QueueOffset, got)
		}
		rr, err := s.GetMessage(crashTopic, q, r.QueueOffset, 1, 0, nil)
		if err != nil || rr.MessageCount != 1 {
			t.Fatalf("new message unreadable: %v %v", rr.Status, err)
		}
	}
	cut = s.MaxPhyOffset()
	survivors += 2
	f.msgs = append(f.msgs[:survivors-2:survivors-2], newMsg(crashTopic, 0, "after-crash", ""), newMsg(crashTopic, 1, "after-crash", ""))
	// A clean restart keeps everything.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	if s2.MaxPhyOffset() != cut || s2.MaxOffset(crashTopic, 0)+s2.MaxOffset(crashTopic, 1) != int64(survivors) {
		t.Fatalf("after clean restart: phy %d (want %d), %d messages (want %d)", s2.MaxPhyOffset(), cut,
			s2.MaxOffset(crashTopic, 0)+s2.MaxOffset(crashTopic, 1), survivors)
	}
}

func writeFile(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCrashRecovery(t *testing.T) {
	const n = 240 // about 100 KiB: two 64 KiB segments
	type damage func(t *testing.T, f *crashFixture, dir string) (survivors int, cut int64)
	seg := func(f *crashFixture, off int64) (string, int64) {
		size := f.cfg.CommitLogSegmentSize
		return filepath.Join("commitlog", fileName(off-off%size)), off % size
	}
	zero := func(t *testing.T, f *crashFixture, dir string, from, to int64) {
		name, local := seg(f, from)
		writeFile(t, filepath.Join(dir, name), local, make([]byte, to-from))
	}
	last := n - 1
	scenarios := []struct {
		name   string
		damage damage
	}{
		{"nothing (kill -9 with everything in the page cache)", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			return n, f.end(last)
		}},
		{"partial last record (second half never written)", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			r := f.results[last]
			zero(t, f, dir, r.CommitLogOffset+int64(r.MsgSize)/2, f.end(last))
			return last, r.CommitLogOffset
		}},
		{"only the size field of the last record written", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			r := f.results[last]
			zero(t, f, dir, r.CommitLogOffset+4, f.end(last))
			return last, r.CommitLogOffset
		}},
		{"zero-filled properties tail of the last record", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			zero(t, f, dir, f.end(last)-10, f.end(last))
			return last, f.results[last].CommitLogOffset
		}},
		{"garbage after the last good record", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			name, local := seg(f, f.end(last))
			garbage := bytes.Repeat([]byte{0xDE, 0xAD, 0xBE, 0xEF}, 300)
			writeFile(t, filepath.Join(dir, name), local, garbage)
			return n, f.end(last)
		}},
		{"a valid-looking record header with garbage after the last record", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			// A copy of an earlier record: valid CRC, but PHYSICALOFFSET says it belongs elsewhere.
			rec, err := os.ReadFile(filepath.Join(dir, "commitlog", fileName(0)))
			if err != nil {
				t.Fatal(err)
			}
			name, local := seg(f, f.end(last))
			writeFile(t, filepath.Join(dir, name), local, rec[:f.results[0].MsgSize])
			return n, f.end(last)
		}},
		{"flipped body byte in the last record", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			name, local := seg(f, f.results[last].CommitLogOffset+bodyPos+1)
			writeFile(t, filepath.Join(dir, name), local, []byte{'#'})
			return last, f.results[last].CommitLogOffset
		}},
		{"flipped body byte in a middle record", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			k := n - 40
			name, local := seg(f, f.results[k].CommitLogOffset+bodyPos+3)
			writeFile(t, filepath.Join(dir, name), local, []byte{'#'})
			return k, f.results[k].CommitLogOffset
		}},
		{"consume queue ahead of the commitlog (last records lost)", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			k := n - 3
			zero(t, f, dir, f.results[k].CommitLogOffset, f.end(last))
			return k, f.results[k].CommitLogOffset
		}},
		{"consume queue behind the commitlog (entries lost)", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			max := f.s.MaxOffset(crashTopic, 0)
			start := (max - 5) - (max-5)%64
			path := filepath.Join(dir, "consumequeue", crashTopic, "0", fileName(start*cqEntrySize))
			writeFile(t, path, (max-5-start)*cqEntrySize, make([]byte, 5*cqEntrySize))
			return n, f.end(last)
		}},
		{"torn consume-queue entry and a hole", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			max := f.s.MaxOffset(crashTopic, 1)
			idx := max - 3
			start := idx - idx%64
			path := filepath.Join(dir, "consumequeue", crashTopic, "1", fileName(start*cqEntrySize))
			writeFile(t, path, (idx-start)*cqEntrySize+8, []byte{0xFF, 0xFF}) // a garbage size
			return n, f.end(last)
		}},
		{"checkpoint missing", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			os.Remove(filepath.Join(dir, checkpointFile))
			return n, f.end(last)
		}},
		{"checkpoint corrupt", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			os.WriteFile(filepath.Join(dir, checkpointFile), []byte("not a checkpoint at all, really not"), 0o644)
			return n, f.end(last)
		}},
		{"consume queue files inconsistent", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			qdir := filepath.Join(dir, "consumequeue", crashTopic, "0")
			os.WriteFile(filepath.Join(qdir, fileName(64*cqEntrySize*5)), make([]byte, 33), 0o644) // bad size, gap
			return n, f.end(last)
		}},
		{"consume queue directory lost", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			// Without a checkpoint saying otherwise, a lost queue is rebuilt from the start.
			os.RemoveAll(filepath.Join(dir, "consumequeue", crashTopic))
			os.Remove(filepath.Join(dir, checkpointFile))
			return n, f.end(last)
		}},
		{"last segment file lost (filler without a next segment)", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			size := f.cfg.CommitLogSegmentSize
			lastSeg := f.results[last].CommitLogOffset - f.results[last].CommitLogOffset%size
			if lastSeg == 0 {
				t.Fatal("fixture has one segment only")
			}
			os.Remove(filepath.Join(dir, "commitlog", fileName(lastSeg)))
			k := 0
			for k < n && f.results[k].CommitLogOffset < lastSeg {
				k++
			}
			return k, f.end(k - 1)
		}},
		{"last segment file created but empty", func(t *testing.T, f *crashFixture, dir string) (int, int64) {
			size := f.cfg.CommitLogSegmentSize
			next := (f.end(last)/size + 1) * size
			os.WriteFile(filepath.Join(dir, "commitlog", fileName(next)), nil, 0o644)
			return n, f.end(last)
		}},
	}
	for _, cpAt := range []int{0, n * 2 / 3} {
		for _, sc := range scenarios {
			t.Run(fmt.Sprintf("%s/checkpointAfter=%d", sc.name, cpAt), func(t *testing.T) {
				f := newCrashFixture(t, cpAt, n)
				dir := snapshotDir(t, f.cfg.Dir)
				survivors, cut := sc.damage(t, f, dir)
				f.verify(t, dir, survivors, cut)
			})
		}
	}
}

// TestCrashAfterSyncFlushAck writes with SYNC_FLUSH, snapshots the files after every ack and
// checks that each snapshot recovers every acknowledged message.
func TestCrashAfterSyncFlushAck(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	s := openStore(t, cfg)
	for i := range 5 {
		put(t, s, newMsg("S", 0, fmt.Sprintf("acked-%d", i), ""))
		dir := snapshotDir(t, cfg.Dir)
		c := cfg
		c.Dir = dir
		s2, err := Open(c)
		if err != nil {
			t.Fatal(err)
		}
		got := bodies(t, s2, "S", 0)
		s2.Close()
		if len(got) != i+1 || got[i] != fmt.Sprintf("acked-%d", i) {
			t.Fatalf("after ack %d the snapshot holds %v", i, got)
		}
	}
}

func TestPutAfterRecoveryRollsCleanly(t *testing.T) {
	// Cut exactly where a filler was: the next put must roll again with a fresh filler.
	cfg := testConfig(t.TempDir())
	cfg.CommitLogSegmentSize = MinCommitLogSegmentSize
	cfg.FlushConsumeQueueInterval = time.Hour
	s := openStore(t, cfg)
	var rs []PutResult
	for i := range 12 {
		rs = append(rs, put(t, s, newMsg("F", 0, fmt.Sprintf("%02d%s", i, strings.Repeat("f", 900)), "")))
	}
	dir := snapshotDir(t, cfg.Dir)
	// Drop the second segment: recovery cuts at the first segment's filler.
	os.Remove(filepath.Join(dir, "commitlog", fileName(MinCommitLogSegmentSize)))
	for _, name := range []string{fileName(2 * MinCommitLogSegmentSize), fileName(3 * MinCommitLogSegmentSize)} {
		os.Remove(filepath.Join(dir, "commitlog", name))
	}
	c := cfg
	c.Dir = dir
	s2 := openStore(t, c)
	k := 0
	for k < len(rs) && rs[k].CommitLogOffset < MinCommitLogSegmentSize {
		k++
	}
	if got := s2.MaxOffset("F", 0); got != int64(k) {
		t.Fatalf("max offset %d, want %d", got, k)
	}
	for i := range 10 {
		r := put(t, s2, newMsg("F", 0, fmt.Sprintf("n%d%s", i, strings.Repeat("n", 900)), ""))
		if r.QueueOffset != int64(k+i) {
			t.Fatalf("queue offset %d", r.QueueOffset)
		}
	}
	if got := len(bodies(t, s2, "F", 0)); got != k+10 {
		t.Fatalf("%d readable, want %d", got, k+10)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3 := openStore(t, c)
	if got := len(bodies(t, s3, "F", 0)); got != k+10 {
		t.Fatalf("after restart %d readable, want %d", got, k+10)
	}
	_ = context.Background
}
