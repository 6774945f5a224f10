//go:build linux

package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/sluicemq/sluice/internal/testkit"
)

// mappedFilesUnder counts this process's memory mappings of files under dir, from
// /proc/self/maps.
func mappedFilesUnder(t *testing.T, dir string) int {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), dir+"/") {
			n++
		}
	}
	return n
}

// TestCQMappingsBounded writes to more queues than the store may keep mapped: the mapped
// files never exceed the cap (counted by the store and in /proc/self/maps), files are
// mapped and unmapped as queues take turns (a file mapped after cqMapAfterWrites pwrites
// evicts the least recently written one), nothing faults, every message reads back
// (pread sees what went through the mappings) and survives a restart, and Close leaves
// no mapping behind.
func TestCQMappingsBounded(t *testing.T) {
	const (
		capMaps = 4
		queues  = 12
		rounds  = 200 // > cqMapAfterWrites: queues get mapped in turn
	)
	cfg := testConfig(t.TempDir())
	cfg.ConsumeQueueEntries = 1024 // 20 KiB files: one per queue, past cqReleaseEvery
	cqDir := filepath.Join(cfg.Dir, "consumequeue")
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	setMappedCQFiles(s, capMaps)
	putQueues(t, s, "M", queues, rounds, func(round int) {
		if n := s.cqMaps.mapped(); n > capMaps {
			t.Fatalf("round %d: %d consume-queue files mapped, cap %d", round, n, capMaps)
		}
		if round%25 == 0 {
			if n := mappedFilesUnder(t, cqDir); n > capMaps {
				t.Fatalf("round %d: /proc/self/maps shows %d consume-queue mappings, cap %d", round, n, capMaps)
			}
		}
	})
	s.cqMaps.mu.Lock()
	made, faults, mapped := s.cqMaps.maps, s.cqMaps.faults, s.cqMaps.lru.Len()
	s.cqMaps.mu.Unlock()
	if mapped != capMaps || made <= capMaps || faults != 0 {
		t.Fatalf("%d files mapped now, %d mappings made, %d faults: want the cap in use, evictions (more than %d made) and no fault", mapped, made, faults, capMaps)
	}
	t.Logf("%d queues, cap %d: %d mappings made over %d puts", queues, capMaps, made, queues*rounds)
	checkQueues(t, s, "M", queues, rounds)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := mappedFilesUnder(t, cfg.Dir); n != 0 {
		t.Fatalf("%d mappings of store files left after Close", n)
	}
	s2 := openStore(t, cfg)
	checkQueues(t, s2, "M", queues, rounds)
}

// newTestQueue returns a consume queue of perFile entries per file in a fresh directory
// under root, with its own fd cache and mappings (cap 4).
func newTestQueue(t *testing.T, root string, perFile int64) *consumeQueue {
	t.Helper()
	cq := newConsumeQueue(filepath.Join(root, "T", "0"), "T", 0, perFile, newFDCache(8), newCQMaps(4))
	t.Cleanup(cq.close)
	return cq
}

// writeTestEntries writes entries [from, to) of cq, one write each, entry i pointing at
// commitlog offset 1000*i + 1.
func writeTestEntries(t *testing.T, cq *consumeQueue, from, to int64) error {
	t.Helper()
	for i := from; i < to; i++ {
		var e [cqEntrySize]byte
		putEntry(e[:], cqEntry{phy: 1000*i + 1, size: 100, tags: i})
		if err := cq.write(i, e[:]); err != nil {
			return err
		}
	}
	cq.max.Store(to)
	return nil
}

// checkTestEntries reads entries [from, to) of cq back with pread.
func checkTestEntries(t *testing.T, cq *consumeQueue, from, to int64) {
	t.Helper()
	for i := from; i < to; i++ {
		e, err := cq.entryAt(i)
		if err != nil || e.phy != 1000*i+1 || e.size != 100 || e.tags != i {
			t.Fatalf("entry %d reads back as %+v, %v", i, e, err)
		}
	}
}

// TestCQMappingReleasesPages writes 20,000 entries (400 KB) one by one through the mapping
// of one consume-queue file: they read back with pread, and the mapping's resident size
// stays near cqReleaseEvery instead of growing with the entries.
func TestCQMappingReleasesPages(t *testing.T) {
	cq := newTestQueue(t, t.TempDir(), 100000)
	const n = 20000
	if err := writeTestEntries(t, cq, 0, n); err != nil {
		t.Fatal(err)
	}
	f := cq.fileList()[0]
	cq.maps.mu.Lock()
	data := f.m.data
	cq.maps.mu.Unlock()
	if data == nil {
		t.Fatal("the file was not written through a mapping")
	}
	if rss := mappingRSS(t, uintptr(unsafe.Pointer(&data[0]))); rss > 2*cqReleaseEvery {
		t.Errorf("mapping resident size %d bytes after %d entries (%d bytes): want at most %d (pages behind the writer released)",
			rss, n, n*cqEntrySize, 2*cqReleaseEvery)
	}
	checkTestEntries(t, cq, 0, n)
}

// TestCQMapFaultFallsBackToPwrite: when the file cannot back a mapped page (here it was
// cut short behind the writer's back), the write does not crash the process: it is
// redone with pwrite, the entry reads back, and the file is not mapped again.
func TestCQMapFaultFallsBackToPwrite(t *testing.T) {
	cq := newTestQueue(t, t.TempDir(), 4096)
	if err := writeTestEntries(t, cq, 0, 1); err != nil {
		t.Fatal(err)
	}
	f := cq.fileList()[0]
	if err := os.Truncate(f.path, 0); err != nil {
		t.Fatal(err)
	}
	if err := writeTestEntries(t, cq, 1000, 1002); err != nil {
		t.Fatalf("write into a cut file: %v, want the pwrite fallback to succeed", err)
	}
	cq.maps.mu.Lock()
	faults, mapped, never := cq.maps.faults, f.m.data != nil, f.m.never
	cq.maps.mu.Unlock()
	if faults != 1 || mapped || !never {
		t.Fatalf("after the fault: %d faults, mapped %v, pwrite only %v; want 1 fault and the file unmapped for good", faults, mapped, never)
	}
	checkTestEntries(t, cq, 1000, 1002)
}

// TestMappedWritesOnFullDisk: on a full file system, a write through a mapping (commitlog
// segment or consume-queue file) to a page the file system cannot back faults; the store
// turns that into the file system's ENOSPC (ErrDiskFull from PutMessage), not a crash.
func TestMappedWritesOnFullDisk(t *testing.T) {
	t.Run("consume queue", func(t *testing.T) {
		dir := testkit.MountTmpfs(t, "1m")
		cq := newTestQueue(t, dir, 4096) // 80 KiB file, sparse
		if err := writeTestEntries(t, cq, 0, 1); err != nil {
			t.Fatal(err)
		}
		testkit.FillDisk(t, dir)
		err := writeTestEntries(t, cq, 1000, 1001) // a page not backed yet
		cq.maps.mu.Lock()
		faults := cq.maps.faults
		cq.maps.mu.Unlock()
		if !errors.Is(err, syscall.ENOSPC) || faults != 1 {
			t.Fatalf("write to an unbacked page on a full disk: %v after %d faults, want ENOSPC after 1", err, faults)
		}
		checkTestEntries(t, cq, 0, 1)
	})
	t.Run("store", func(t *testing.T) {
		dir := testkit.MountTmpfs(t, "2m")
		cfg := testConfig(filepath.Join(dir, "store"))
		s := openStore(t, cfg)
		put(t, s, newMsg("F", 0, "before", ""))
		testkit.FillDisk(t, dir)
		body := string(bytes.Repeat([]byte("x"), 1024))
		var err error
		for i := 0; i < 64 && err == nil; i++ { // 64 KiB: past the pages already backed
			_, err = s.PutMessage(context.Background(), newMsg("F", 0, body, ""), 0)
		}
		if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("puts on a full disk end with %v, want ErrDiskFull wrapping ENOSPC", err)
		}
		s.putMu.Lock()
		faults := s.cl.wmap.faults
		s.putMu.Unlock()
		if faults == 0 {
			t.Fatal("no write went through the commitlog mapping: the test did not reach the fault path")
		}
		if got := bodies(t, s, "F", 0); len(got) == 0 || got[0] != "before" {
			t.Fatalf("after the failed puts the queue holds %d messages (first %q), want the stored ones readable", len(got), got)
		}
	})
}
