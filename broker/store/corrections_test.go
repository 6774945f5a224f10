package store

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
)

// Every correction recovery makes to a consume queue is logged once with the old and the
// new value: a queue truncated at a commitlog cut below the checkpoint, and a queue whose
// files were inconsistent and were rebuilt from the commitlog.
func TestRecoveryCorrectionsAreLogged(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cut := putN(t, s, "Cut", 0, 10, "c")[7].CommitLogOffset // messages 7..9 will be lost
	putN(t, s, "Rebuilt", 0, 5, "r")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Zero the commitlog from message 7 on (everything after it too: the scan stops at the
	// first invalid record), below the checkpoint the clean close wrote.
	f, err := os.OpenFile(filepath.Join(dir, "commitlog", fileName(0)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, fi.Size()-cut), cut); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// A consume-queue file whose name is not a multiple of 20 makes the queue inconsistent.
	if err := os.WriteFile(filepath.Join(dir, "consumequeue", "Rebuilt", "0", fileName(7)), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	logs, log := testkit.CaptureLogs(t)
	cfg.Logger = log
	s2 := openStore(t, cfg)
	truncated := logs.Find("consume queue truncated at the commitlog cut")
	if len(truncated) != 1 || truncated[0].Attrs["topic"] != "Cut" || truncated[0].Attrs["oldMaxOffset"] != "10" ||
		truncated[0].Attrs["newMaxOffset"] != "7" {
		t.Fatalf("truncation logged as %v", truncated)
	}
	if got := s2.MaxOffset("Cut", 0); got != 7 {
		t.Fatalf("Cut max offset %d after the cut, want 7", got)
	}
	// The rebuilt queue lost its records too (they were after the cut): what it holds
	// now is logged, with the reason it was rebuilt.
	unreadable := logs.Find("consume queue unreadable")
	rebuilt := logs.Find("consume queue rebuilt from the commitlog")
	if len(unreadable) != 1 || len(rebuilt) != 1 || rebuilt[0].Attrs["topic"] != "Rebuilt" ||
		rebuilt[0].Attrs["newMaxOffset"] != strconv.FormatInt(s2.MaxOffset("Rebuilt", 0), 10) {
		t.Fatalf("rebuild logged as %v / %v", unreadable, rebuilt)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}

	// Nothing left to correct: a restart logs no correction.
	logs.Reset()
	openStore(t, cfg)
	for _, msg := range []string{"truncated", "rebuilt", "unreadable", "tail dropped"} {
		if got := logs.Find(msg); len(got) != 0 {
			t.Fatalf("second start logged %v", got)
		}
	}
}
