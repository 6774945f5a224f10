package store

import (
	"fmt"
	"testing"
)

// setMappedCQFiles sets how many consume-queue files s may keep mapped.
func setMappedCQFiles(s *Store, n int) {
	s.cqMaps.mu.Lock()
	s.cqMaps.max = n
	s.cqMaps.mu.Unlock()
}

// putQueues writes rounds messages to each of queues queues of topic, round-robin, with
// the body "<topic>.<queue>-<round>", calling each after every round.
func putQueues(t *testing.T, s *Store, topic string, queues, rounds int, each func(round int)) {
	t.Helper()
	for r := range rounds {
		for q := range int32(queues) {
			put(t, s, newMsg(topic, q, fmt.Sprintf("%s.%d-%d", topic, q, r), ""))
		}
		if each != nil {
			each(r)
		}
	}
}

// checkQueues reads every queue written by putQueues back.
func checkQueues(t *testing.T, s *Store, topic string, queues, rounds int) {
	t.Helper()
	for q := range int32(queues) {
		got := bodies(t, s, topic, q)
		if len(got) != rounds {
			t.Fatalf("%s/%d: read %d messages, want %d", topic, q, len(got), rounds)
		}
		for r, b := range got {
			if want := fmt.Sprintf("%s.%d-%d", topic, q, r); b != want {
				t.Fatalf("%s/%d: message %d is %q, want %q", topic, q, r, b, want)
			}
		}
	}
}

// TestCQPwriteFallback: with no consume-queue file mapped (as where mapping fails or
// outside Linux), entries are written with pwrite, read back, and survive a restart.
func TestCQPwriteFallback(t *testing.T) {
	cfg := testConfig(t.TempDir())
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	setMappedCQFiles(s, 0)
	const queues, rounds = 3, 150 // 150 entries: past the first 64-entry file
	putQueues(t, s, "P", queues, rounds, nil)
	if n := s.cqMaps.mapped(); n != 0 {
		t.Fatalf("%d consume-queue files mapped with a cap of 0", n)
	}
	checkQueues(t, s, "P", queues, rounds)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	checkQueues(t, s2, "P", queues, rounds)
}
