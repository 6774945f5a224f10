//go:build linux

package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// A group that fails part-way on a full disk (the file system took some of its records
// and refused the rest) is answered as not stored, message by message; when space is
// back, later puts store at the same positions; and a reopened store holds exactly the
// messages acknowledged, not the complete records the failed write left beyond the write
// position (records of the same size line up with them: recovery would take them for
// valid records and dispatch messages whose sender was told they were not stored).
func TestPutGroupOnFullDiskLeavesNoGhosts(t *testing.T) {
	for _, batch := range []bool{false, true} {
		name := "group"
		if batch {
			name = "batch" // PutMessages: the same write path
		}
		t.Run(name, func(t *testing.T) { testNoGhosts(t, batch) })
	}
}

func testNoGhosts(t *testing.T, batch bool) {
	cfg, dir := smallDiskConfig(t)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("p", 1000)
	next := 0
	msg := func(q int32) *message.MessageExt {
		next++
		return newMsg("Ghost", q, fmt.Sprintf("%06d|%s", next, pad), "")
	}
	acked := map[int32][]string{} // the bodies acknowledged, per queue, in queue order
	ack := func(msgs []*message.MessageExt, res []PutResult, errs []error) (failed int) {
		for i, m := range msgs {
			if errs[i] != nil {
				if !errors.Is(errs[i], ErrDiskFull) {
					t.Fatalf("message %d: %v, want ErrDiskFull", i, errs[i])
				}
				failed++
				continue
			}
			if res[i].QueueOffset != int64(len(acked[m.QueueID])) {
				t.Fatalf("queue %d: acknowledged at %d, want %d", m.QueueID, res[i].QueueOffset, len(acked[m.QueueID]))
			}
			acked[m.QueueID] = append(acked[m.QueueID], string(m.Body[:6]))
		}
		return failed
	}
	group := func(n int) int {
		msgs := make([]*message.MessageExt, n)
		for i := range msgs {
			msgs[i] = msg(int32(i % 2))
		}
		res, errs := putGroup(s, msgs)
		return ack(msgs, res, errs)
	}
	// A batch for queue 0 (PutMessages) when batch is set, a group otherwise.
	write := func(n int) int {
		if !batch {
			return group(n)
		}
		msgs := make([]*message.MessageExt, n)
		for i := range msgs {
			msgs[i] = msg(0)
		}
		r, err := s.PutMessages(context.Background(), msgs, nil)
		res, errs := make([]PutResult, n), make([]error, n)
		for i := range msgs {
			res[i], errs[i] = PutResult{QueueOffset: r.QueueOffset + int64(i)}, err
		}
		return ack(msgs, res, errs)
	}
	group(10)
	testkit.FillDisk(t, dir)
	// Leave 32 KiB free: the next group gets part of its records written.
	filler := filepath.Join(dir, "filler")
	fi, err := os.Stat(filler)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filler, fi.Size()-32<<10); err != nil {
		t.Fatal(err)
	}
	failedGroups := 0
	for range 200 { // bounded: the disk holds far less
		if failed := write(48); failed > 0 {
			failedGroups++
			break
		}
	}
	if failedGroups == 0 {
		t.Fatal("no group failed on a full disk")
	}
	// The failed group took the space left: part of it was written.
	if free, err := freeBytes(dir); err != nil || free >= 4096 {
		t.Fatalf("%d bytes still free after the failed group (%v): it was not written part-way", free, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Space is back: one message of the same size lands where the failed group began.
	if failed := group(1); failed != 0 {
		t.Fatal("a put after space came back failed")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	for q := int32(0); q < 2; q++ {
		var got []string
		for _, b := range bodies(t, s, "Ghost", q) {
			got = append(got, b[:6])
		}
		if strings.Join(got, ",") != strings.Join(acked[q], ",") {
			t.Fatalf("queue %d after reopening holds %d messages, %d acknowledged:\n got %v\nwant %v", q, len(got), len(acked[q]), got, acked[q])
		}
	}
}

// A group for two queues whose second queue's entry cannot be written (a new consume
// queue file on a full disk; the commitlog and the first queue's file already have their
// pages) fails as a whole; the first queue's entry, written but not published, must not
// come back either: after a restart that queue would end with an entry pointing at
// whatever record a later put wrote at that commitlog offset (another queue's).
func TestPutGroupFailedQueueWriteLeavesNoGhostEntries(t *testing.T) {
	cfg, dir := smallDiskConfig(t)
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	put(t, s, newMsg("A", 0, "a0", ""))
	testkit.WaitFor(t, 10*time.Second, prefaulterIdle(t, s.cl), "the commitlog segment to be faulted in")
	testkit.FillDisk(t, dir)
	res, errs := putGroup(s, []*message.MessageExt{newMsg("A", 0, "a1-refused", ""), newMsg("B", 0, "b-refused", "")})
	for i, err := range errs {
		if !errors.Is(err, ErrDiskFull) {
			t.Fatalf("message %d on a full disk: %v %+v, want ErrDiskFull", i, err, res[i])
		}
	}
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	put(t, s, newMsg("C", 0, "c0-of-size", "")) // where the refused group began, the size of its first record
	// The checkpoint covers C's entry: recovery trusts the queues below it.
	testkit.WaitFor(t, 10*time.Second, func() bool {
		cp, ok, err := readCheckpoint(cfg.Dir)
		return err == nil && ok && cp.consumeQueueFlushed >= s.MaxPhyOffset()
	}, "a checkpoint past the last put")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, cfg)
	for _, q := range []struct {
		topic string
		want  string
	}{{"A", "a0"}, {"B", ""}, {"C", "c0-of-size"}} {
		if got := strings.Join(bodies(t, s, q.topic, 0), ","); got != q.want || s.MaxOffset(q.topic, 0) != int64(len(bodies(t, s, q.topic, 0))) {
			t.Fatalf("queue %s/0 after reopening holds %q (max offset %d), want %q", q.topic, got, s.MaxOffset(q.topic, 0), q.want)
		}
	}
}

// smallDiskConfig returns a store config in the directory store of a 4 MiB tmpfs
// mounted at dir (it skips without root): 256 KiB segments, messages up to 64 KiB, so
// that writes resume once 2×64 KiB + 1 MiB are free.
func smallDiskConfig(t *testing.T) (cfg Config, dir string) {
	dir = testkit.MountTmpfs(t, "4m")
	cfg = testConfig(filepath.Join(dir, "store"))
	cfg.CommitLogSegmentSize = 256 << 10
	cfg.MaxMessageSize = 64 << 10
	return cfg, dir
}
