package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
)

// ageSegments sets the modification time of the first n commitlog segments to 2 h ago.
func ageSegments(t *testing.T, s *Store, n int) {
	t.Helper()
	old := time.Now().Add(-2 * time.Hour)
	for _, seg := range s.cl.segments()[:n] {
		if err := os.Chtimes(seg.path, old, old); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDeleteExpiredFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.CommitLogSegmentSize = MinCommitLogSegmentSize
	cfg.ConsumeQueueEntries = 4
	s := openStore(t, cfg)
	var rs []PutResult
	for i := range 40 {
		rs = append(rs, put(t, s, newMsg("Ret", int32(i%2), fmt.Sprintf("%02d%s", i, strings.Repeat("r", 600)), "")))
	}
	nsegs := len(s.cl.segments())
	if nsegs < 5 {
		t.Fatalf("only %d segments", nsegs)
	}
	cutoff := time.Now().Add(-time.Hour)

	if n, err := s.DeleteExpiredFiles(cutoff, 0); err != nil || n != 0 {
		t.Fatalf("nothing expired: deleted %d, %v", n, err)
	}
	ageSegments(t, s, 3)
	if n, err := s.DeleteExpiredFiles(cutoff, 2); err != nil || n != 2 {
		t.Fatalf("maxFiles 2: deleted %d, %v", n, err)
	}
	if n, err := s.DeleteExpiredFiles(cutoff, 0); err != nil || n != 1 {
		t.Fatalf("third expired segment: deleted %d, %v", n, err)
	}
	minPhy := 3 * int64(MinCommitLogSegmentSize)
	if s.MinPhyOffset() != minPhy {
		t.Fatalf("MinPhyOffset %d, want %d", s.MinPhyOffset(), minPhy)
	}
	for i := int64(0); i < 3; i++ {
		if _, err := os.Stat(filepath.Join(dir, "commitlog", fileName(i*MinCommitLogSegmentSize))); !os.IsNotExist(err) {
			t.Fatalf("segment %d still on disk", i)
		}
	}
	// Each queue's min offset is its first message in segment 3.
	check := func(s *Store) {
		t.Helper()
		for q := int32(0); q < 2; q++ {
			want := int64(-1)
			var first PutResult
			for i, r := range rs {
				if int32(i%2) == q && r.CommitLogOffset >= minPhy {
					want, first = r.QueueOffset, r
					break
				}
			}
			if got := s.MinOffset("Ret", q); got != want {
				t.Fatalf("queue %d: MinOffset %d, want %d", q, got, want)
			}
			r, err := s.GetMessage("Ret", q, 0, 32, 0, nil)
			if err != nil || r.Status != OffsetTooSmall || r.NextBeginOffset != want {
				t.Fatalf("queue %d from 0: %v next %d %v", q, r.Status, r.NextBeginOffset, err)
			}
			if got := pullAll(t, s, "Ret", q, want); len(got) != int(s.MaxOffset("Ret", q)-want) || got[0].CommitLogOffset != first.CommitLogOffset {
				t.Fatalf("queue %d from min: %d messages", q, len(got))
			}
			if ts, err := s.EarliestMessageTime("Ret", q); err != nil || ts != first.StoreTimestamp {
				t.Fatalf("EarliestMessageTime %d %v", ts, err)
			}
			if off := s.OffsetByTimestamp("Ret", q, 0); off != want {
				t.Fatalf("OffsetByTimestamp(0) = %d, want %d", off, want)
			}
			// Consume-queue files wholly below the min offset are gone.
			files, _ := os.ReadDir(filepath.Join(dir, "consumequeue", "Ret", fmt.Sprint(q)))
			firstFile := (want - want%4) * cqEntrySize
			if len(files) == 0 || files[0].Name() != fileName(firstFile) {
				t.Fatalf("queue %d files start at %v, want %s", q, files[0].Name(), fileName(firstFile))
			}
		}
		if _, _, err := s.LookMessageByOffset(rs[0].CommitLogOffset); !errors.Is(err, ErrNotFound) {
			t.Fatalf("look at a deleted offset: %v", err)
		}
	}
	check(s)
	// The segment being written is never deleted.
	ageSegments(t, s, len(s.cl.segments()))
	n, err := s.DeleteExpiredFiles(cutoff, 100)
	if err != nil || len(s.cl.segments()) != 1 || n != nsegs-4 {
		t.Fatalf("deleted %d (%v), %d segments left", n, err, len(s.cl.segments()))
	}
	minPhy = s.MinPhyOffset()
	// Restart: the same min offsets, from the files.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	check(s2)
	// Puts continue.
	r := put(t, s2, newMsg("Ret", 0, "after", ""))
	if r.QueueOffset != int64(20) {
		t.Fatalf("queue offset after retention %d", r.QueueOffset)
	}
}

func TestDeleteExpiredFilesRebuildWithoutCheckpoint(t *testing.T) {
	// Segments deleted, then the consume queues and checkpoint lost: the rebuild starts at the
	// first remaining record's queue offset.
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.CommitLogSegmentSize = MinCommitLogSegmentSize
	cfg.ConsumeQueueEntries = 8
	s := openStore(t, cfg)
	var rs []PutResult
	for i := range 20 {
		rs = append(rs, put(t, s, newMsg("RB", 0, fmt.Sprintf("%02d%s", i, strings.Repeat("r", 600)), "")))
	}
	ageSegments(t, s, 2)
	if n, err := s.DeleteExpiredFiles(time.Now().Add(-time.Hour), 0); err != nil || n != 2 {
		t.Fatalf("deleted %d %v", n, err)
	}
	wantMin := s.MinOffset("RB", 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, "consumequeue"))
	os.Remove(filepath.Join(dir, checkpointFile))
	s2 := openStore(t, cfg)
	if s2.MinOffset("RB", 0) != wantMin || s2.MaxOffset("RB", 0) != 20 {
		t.Fatalf("rebuilt min %d max %d, want %d and 20", s2.MinOffset("RB", 0), s2.MaxOffset("RB", 0), wantMin)
	}
	got := pullAll(t, s2, "RB", 0, wantMin)
	if len(got) != int(20-wantMin) {
		t.Fatalf("rebuilt queue: %d messages", len(got))
	}
	if m := got[0]; m.QueueOffset != wantMin || m.CommitLogOffset != rs[wantMin].CommitLogOffset {
		t.Fatalf("first rebuilt message %d at %d", m.QueueOffset, m.CommitLogOffset)
	}
}

func TestDeleteExpiredFilesUnderReaders(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.CommitLogSegmentSize = MinCommitLogSegmentSize
	cfg.ConsumeQueueEntries = 4
	s := openStore(t, cfg)
	for i := range 60 {
		put(t, s, newMsg("RR", 0, fmt.Sprintf("%02d%s", i, strings.Repeat("r", 600)), ""))
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := int64(0); ; off = (off + 1) % 60 {
				select {
				case <-stop:
					return
				default:
				}
				r, err := s.GetMessage("RR", 0, off, 8, 0, nil)
				if err != nil {
					errs <- err
					return
				}
				if _, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 6 {
		ageSegments(t, s, len(s.cl.segments())-1)
		if _, err := s.DeleteExpiredFiles(time.Now().Add(-time.Hour), 1); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("reader during retention: %v", err)
	}
}

// pullAll pulls topic/queueID from offset until there is nothing more and checks that the
// queue offsets are consecutive.
func pullAll(t *testing.T, s *Store, topic string, queueID int32, from int64) []*message.MessageExt {
	t.Helper()
	var out []*message.MessageExt
	for off := from; off < s.MaxOffset(topic, queueID); {
		r, err := s.GetMessage(topic, queueID, off, 32, 0, nil)
		if err != nil || r.Status != Found {
			t.Fatalf("pull %s/%d at %d: %v %v", topic, queueID, off, r.Status, err)
		}
		ms, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
		if err != nil {
			t.Fatal(err)
		}
		for k, m := range ms {
			if m.QueueOffset != off+int64(k) {
				t.Fatalf("record at %d says queue offset %d", off+int64(k), m.QueueOffset)
			}
		}
		out = append(out, ms...)
		off = r.NextBeginOffset
	}
	return out
}
