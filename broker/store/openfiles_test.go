package store

import (
	"fmt"
	"os"
	"runtime"
	"testing"
)

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("counting open files needs /proc/self/fd: %v", err)
	}
	return len(des)
}

// Writing to many more queues than MaxOpenFiles keeps the process's open files
// bounded by the cap (plus the commitlog, checkpoint and lock files), before and after a
// restart, and every message stays readable: files are opened on demand and the idle ones
// closed.
func TestOpenQueueFilesBounded(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts open files through /proc/self/fd (Linux)")
	}
	const (
		capFiles = 16
		topics   = 50
		queues   = 4 // 200 queues, 200 files: far more than the cap
		perQueue = 3
	)
	cfg := testConfig(t.TempDir())
	cfg.MaxOpenFiles = capFiles
	base := openFDs(t)
	// The store's files outside the cap (which counts consume-queue and key-index
	// files): the lock, the checkpoint and the commitlog segments, a handful; allow 16.
	const own = 16
	check := func(when string, s *Store) {
		t.Helper()
		if n := s.fds.openFiles(); n > capFiles {
			t.Fatalf("%s: %d consume-queue and index files open, cap %d", when, n, capFiles)
		}
		if n := openFDs(t) - base; n > capFiles+own {
			t.Fatalf("%s: %d more open files than before the store (cap %d + %d own files)", when, n, capFiles, own)
		}
	}
	readAll := func(s *Store) {
		t.Helper()
		for tp := range topics {
			for q := range int32(queues) {
				topic := fmt.Sprintf("T%d", tp)
				got := bodies(t, s, topic, q)
				if len(got) != perQueue {
					t.Fatalf("%s/%d: read %d messages, want %d", topic, q, len(got), perQueue)
				}
				for i, b := range got {
					if want := fmt.Sprintf("%s.%d-%d", topic, q, i); b != want {
						t.Fatalf("%s/%d: message %d is %q, want %q", topic, q, i, b, want)
					}
				}
			}
		}
	}

	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range perQueue {
		for tp := range topics {
			for q := range int32(queues) {
				topic := fmt.Sprintf("T%d", tp)
				put(t, s, newMsg(topic, q, fmt.Sprintf("%s.%d-%d", topic, q, i), ""))
			}
		}
	}
	check("after writing 200 queues", s)
	readAll(s)
	check("after reading them", s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t) - base; n > 0 {
		t.Fatalf("%d files left open after Close", n)
	}

	s2 := openStore(t, cfg)
	check("after a restart", s2)
	readAll(s2)
	check("after reading them again", s2)
	t.Logf("200 queues, cap %d: %d consume-queue files open, %d process files above the baseline", capFiles, s2.fds.openFiles(), openFDs(t)-base)
}
