//go:build linux

package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// mappingRSS returns the resident size in bytes of the mapping starting at addr, from
// /proc/self/smaps.
func mappingRSS(t *testing.T, addr uintptr) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	prefix := fmt.Sprintf("%x-", addr)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, prefix) {
			found = true
			continue
		}
		if found && strings.HasPrefix(line, "Rss:") {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "Rss:"), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %x in /proc/self/smaps", addr)
	return 0
}

// mappedCommitLog opens a commitlog of segSize-byte segments in a temporary directory
// (closed when the test ends) and writes rec at the segment-local offset off of its first
// segment, through the writer's mapping (the test fails otherwise).
func mappedCommitLog(t *testing.T, segSize, off int64, rec string) (*commitLog, *segment) {
	t.Helper()
	cl, err := openCommitLog(t.TempDir(), segSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.close() })
	seg, _, err := cl.reserve(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.write(seg, []byte(rec), off, false); err != nil {
		t.Fatal(err)
	}
	if cl.wmap.seg != seg {
		t.Fatal("the segment was not mapped")
	}
	return cl, seg
}

// prefaulterIdle reports whether cl's prefaulter has faulted in all it was asked to; it
// skips the test on a kernel without MADV_POPULATE_WRITE (before Linux 5.14), the only
// skip of these tests (this file builds on Linux only, where the prefaulter exists).
func prefaulterIdle(t *testing.T, cl *commitLog) func() bool {
	return func() bool {
		if cl.pre.off.Load() {
			t.Skip("this kernel has no MADV_POPULATE_WRITE")
		}
		cl.pre.mu.Lock()
		defer cl.pre.mu.Unlock()
		return cl.pre.done >= min(cl.pre.want.Load(), int64(len(cl.pre.data)))
	}
}

// TestWriterMapReleasesPages writes 64 MiB in 8 KiB pieces through the writer's mapping of
// one segment: every byte reads back with pread, and the mapping's resident size stays near
// releaseEvery (plus the prefaulted pages ahead) instead of growing with the data. A 64 KiB write goes around the mapping
// (pwrite) and reads back too.
func TestWriterMapReleasesPages(t *testing.T) {
	const segSize, total = 80 << 20, 64 << 20
	cl, err := openCommitLog(t.TempDir(), segSize)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	seg, pos, err := cl.reserve(total + 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 8<<10) // below directWriteMin: through the mapping
	for off := int64(0); off < total; off += int64(len(chunk)) {
		for i := range chunk {
			chunk[i] = byte(off>>13) + byte(i)
		}
		if err := cl.write(seg, chunk, pos-seg.start+off, false); err != nil {
			t.Fatal(err)
		}
	}
	if cl.wmap.seg != seg || cl.wmap.data == nil {
		t.Fatal("the segment was not written through a mapping")
	}
	rss := mappingRSS(t, uintptr(unsafe.Pointer(&cl.wmap.data[0])))
	if limit := int64(2*releaseEvery + prefaultAhead); rss > limit {
		t.Errorf("mapping resident size %d bytes after writing %d: want at most %d (pages behind the writer released)", rss, total, limit)
	}
	big := bytes.Repeat([]byte("big write "), 64<<10/10)
	if err := cl.write(seg, big, pos-seg.start+total, false); err != nil {
		t.Fatal(err)
	}
	cl.writePos.Store(pos + total + int64(len(big)))
	back := make([]byte, len(big))
	if err := cl.readAt(back, pos+total); err != nil || !bytes.Equal(back, big) {
		t.Fatalf("a %d-byte write does not read back: %v", len(big), err)
	}
	got := make([]byte, len(chunk))
	for off := int64(0); off < total; off += int64(len(chunk)) {
		if err := cl.readAt(got, pos+off); err != nil {
			t.Fatal(err)
		}
		for i := range chunk {
			chunk[i] = byte(off>>13) + byte(i)
		}
		if !bytes.Equal(got, chunk) {
			t.Fatalf("pread at %d does not return what was written through the mapping", off)
		}
	}
}

// TestWriterMapFaultFallsBackToPwrite: when the file cannot back a mapped page (here it
// was cut short behind the writer's back), the write does not crash the process: it is
// redone with pwrite (which reports the file system's own error, see
// TestMappedWritesOnFullDisk; here it succeeds), the bytes read back, and the rest of the
// segment is written with pwrite.
func TestWriterMapFaultFallsBackToPwrite(t *testing.T) {
	cl, seg := mappedCommitLog(t, 1<<20, 0, "first")
	if err := seg.f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("after the fault "), 256)
	if err := cl.write(seg, data, 512<<10, false); err != nil {
		t.Fatalf("write past the end of a cut file: %v, want the pwrite fallback to succeed", err)
	}
	if cl.wmap.faults != 1 || cl.wmap.seg != nil || cl.wmap.failed != seg {
		t.Fatalf("after the fault: %d faults, mapped %v, failed %v; want 1 fault and the segment unmapped for good", cl.wmap.faults, cl.wmap.seg != nil, cl.wmap.failed == seg)
	}
	if err := cl.write(seg, []byte("next"), 600<<10, false); err != nil || cl.wmap.seg != nil {
		t.Fatalf("next write: %v, mapped again: %v", err, cl.wmap.seg != nil)
	}
	cl.writePos.Store(seg.start + 600<<10 + 4)
	back := make([]byte, len(data))
	if err := cl.readAt(back, seg.start+512<<10); err != nil || !bytes.Equal(back, data) {
		t.Fatalf("the bytes of the faulted write do not read back: %v", err)
	}
}

// TestSyncFlushWritesWithPwrite: a SYNC_FLUSH store writes its commitlog with pwrite (no
// writer mapping: each group commit would clean the page being filled and the next copy
// fault on it again); an ASYNC_FLUSH store writes small records through the mapping.
func TestSyncFlushWritesWithPwrite(t *testing.T) {
	for _, ft := range []FlushDiskType{SyncFlush, AsyncFlush} {
		s, err := Open(Config{Dir: t.TempDir(), CommitLogSegmentSize: 1 << 20, FlushDiskType: ft})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if _, err := s.PutMessage(context.Background(), newMsg("T", 0, fmt.Sprint("body ", i), "A"), 0); err != nil {
				t.Fatal(err)
			}
		}
		mapped := s.cl.wmap.data != nil
		if got, err := s.GetMessage("T", 0, 0, 32, 1<<20, nil); err != nil || len(got.Records) != 10 {
			t.Fatalf("%v: read back %d messages: %v", ft, len(got.Records), err)
		}
		s.Close()
		if mapped != (ft == AsyncFlush) {
			t.Errorf("%v: writer mapping in use %v", ft, mapped)
		}
	}
}

// TestPrefaulterMapsPagesAhead: after a write through the writer's mapping, the
// prefaulter's goroutine faults in the pages after it (the mapping's resident size grows
// to cover prefaultAhead bytes beyond the write without the writer touching them), stops
// at the end of the segment, and closing the commitlog stops it.
func TestPrefaulterMapsPagesAhead(t *testing.T) {
	const segSize = 8 << 20
	cl, seg := mappedCommitLog(t, segSize, 0, "first record")
	addr := uintptr(unsafe.Pointer(&cl.wmap.data[0]))
	want := int64(prefaultAhead)
	testkit.WaitFor(t, 10*time.Second, prefaulterIdle(t, cl), "the mapping's pages ahead of the writer to be faulted in")
	if rss := mappingRSS(t, addr); rss < want {
		t.Fatalf("mapping resident size %d once the prefaulter is idle, want at least %d", rss, want)
	}
	// Near the segment's end the prefaulter faults in the pages from the writer to the
	// end of the mapping (not those between: the writer is past them), and stops there.
	rss0 := mappingRSS(t, addr)
	end := int64(segSize - 64<<10)
	if err := cl.write(seg, []byte("near the end"), end, false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return mappingRSS(t, addr) >= rss0+segSize-end },
		"the pages up to the segment's end to be faulted in")
	if rss := mappingRSS(t, addr); rss > rss0+segSize-end {
		t.Fatalf("mapping resident size %d, want %d: %d before and the %d bytes from the writer to the segment's end", rss, rss0+segSize-end, rss0, segSize-end)
	}
	if err := cl.close(); err != nil {
		t.Fatal(err)
	}
	if cl.pre.started {
		t.Fatal("the prefaulter still runs after close")
	}
}

// TestPrefaulterStartsAtTheWriter: when the writer's position jumps ahead of what the
// prefaulter faulted in (records of directWriteMin bytes or more go around the mapping
// with pwrite, so the prefaulter hears nothing of them), the prefaulter goes on from the
// writer's position, not from where it stopped: it faults in prefaultAhead bytes ahead
// of the writer, not every page the big writes already filled. Before, the mapping's
// resident size grew by the whole jump (here 40 MiB) and the pages behind the writer
// stayed resident until the writer had copied releaseEvery more bytes.
func TestPrefaulterStartsAtTheWriter(t *testing.T) {
	const segSize, jump = 64 << 20, 40 << 20
	const off int64 = 0
	cl, seg := mappedCommitLog(t, segSize, off, "first record")
	idle := prefaulterIdle(t, cl)
	testkit.WaitFor(t, 10*time.Second, idle, "the prefaulter to fault in the pages ahead of the first record")
	// The big records between off and off+jump went around the mapping.
	big := make([]byte, 4<<20)
	for at := off + 64; at < off+jump; at += int64(len(big)) {
		if err := cl.write(seg, big[:min(int64(len(big)), off+jump-at)], at, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.write(seg, []byte("after the big records"), off+jump, false); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, idle, "the prefaulter to fault in the pages ahead of the last record")
	addr := uintptr(unsafe.Pointer(&cl.wmap.data[0]))
	if rss, limit := mappingRSS(t, addr), int64(prefaultAhead+2*prefaultStep); rss > limit {
		t.Fatalf("mapping resident size %d bytes after a %d-byte jump of the writer: want at most %d (prefaultAhead ahead of the writer)", rss, jump, limit)
	}
}

// TestPrefaulterStopsAtItsWindow: the prefaulter faults in no more than prefaultAhead
// bytes beyond the writer (rounded up to a page): its last step of a window is cut at
// the window's end, so that the space a full disk still takes (docs/guarantees.md: "at most
// 4 MiB ahead of the last write") is that. Before, the last step went on for a whole
// prefaultStep (256 KiB) past it.
func TestPrefaulterStopsAtItsWindow(t *testing.T) {
	const off = 100 // not on a page: the window ends 100 bytes into a page
	cl, _ := mappedCommitLog(t, 16<<20, off, "first record")
	testkit.WaitFor(t, 10*time.Second, prefaulterIdle(t, cl), "the prefaulter to fault in its window")
	addr := uintptr(unsafe.Pointer(&cl.wmap.data[0]))
	if rss, limit := mappingRSS(t, addr), int64(prefaultAhead)+2*pageSize; rss > limit {
		t.Fatalf("mapping resident size %d bytes after one write at offset %d: want at most %d (prefaultAhead beyond the write, rounded up to a page)", rss, off, limit)
	}
}

// TestPutGroupWritesRunsWithPwrite: a PutGroup run of several records goes with pwrite
// (the writer's mapping stays unused, so the prefaulter does not zero-fill the pages the
// runs write); a group of one right after it too; a group of one after a group of one is
// copied through the mapping, as PutMessage's record is.
func TestPutGroupWritesRunsWithPwrite(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	group := func(n int) {
		t.Helper()
		var msgs []*message.MessageExt
		for i := range n {
			msgs = append(msgs, newMsg("T", int32(i%2), fmt.Sprint("body ", i), "A"))
		}
		res, errs := putGroup(s, msgs)
		for i := range msgs {
			if errs[i] != nil || res[i].Status != PutOK {
				t.Fatalf("message %d: %v", i, errs[i])
			}
		}
	}
	group(8)
	group(1)
	if s.cl.wmap.data != nil {
		t.Fatal("a run of 8 and a lone send after it went through the writer's mapping")
	}
	group(1)
	if s.cl.wmap.data == nil {
		t.Fatal("a lone send after a lone send did not go through the writer's mapping")
	}
	for q := range int32(2) {
		if got := bodies(t, s, "T", q); len(got) != 4+int(1-q)+int(1-q) {
			t.Fatalf("queue %d holds %v", q, got)
		}
	}
}
