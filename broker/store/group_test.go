package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/message"
)

// putGroup calls PutGroup with fresh result slices.
func putGroup(s *Store, msgs []*message.MessageExt) ([]PutResult, []error) {
	codes := make([]int64, len(msgs))
	for i, m := range msgs {
		if m != nil {
			codes[i] = message.TagHashCode(m.Tag())
		}
	}
	res, errs := make([]PutResult, len(msgs)), make([]error, len(msgs))
	s.PutGroup(context.Background(), msgs, codes, res, errs)
	return res, errs
}

// A group of messages for several queues, some of which cannot be stored: each bad one
// gets its own error, the others are stored as PutMessage would store them, one after
// another in the commitlog, with consecutive queue offsets per queue.
func TestPutGroupStoresEachMessage(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxMessageSize = 1000
	s := openStore(t, cfg)
	put(t, s, newMsg("A", 0, "before", "")) // queue A/0 starts at 1
	nul := newMsg("A", 0, "nul", "")
	nul.Properties["P"] = "a\x00b"
	msgs := []*message.MessageExt{
		newMsg("A", 0, "a1", "t1"),
		newMsg("B", 3, "b1", ""),
		newMsg("A", 0, strings.Repeat("x", 1001), ""), // body over MaxMessageSize
		newMsg("A", 1, "a1-1", ""),
		nil,
		newMsg("../bad", 0, "bad topic", ""),
		newMsg("A", 0, "a2", "t2"),
		nul,
		newMsg("A", -1, "bad queue", ""),
		newMsg("B", 3, "b2", ""),
	}
	res, errs := putGroup(s, msgs)

	var tooLarge *MessageTooLargeError
	var iae *InvalidArgumentError
	for i, want := range []struct {
		ok    bool
		field string // the InvalidArgumentError's field, "" for too large
	}{{true, ""}, {true, ""}, {false, ""}, {true, ""}, {false, "msgs"}, {false, "topic"}, {true, ""}, {false, "properties"}, {false, "queueId"}, {true, ""}} {
		switch {
		case want.ok && errs[i] != nil:
			t.Fatalf("message %d: %v", i, errs[i])
		case !want.ok && want.field == "" && !errors.As(errs[i], &tooLarge):
			t.Fatalf("message %d: got %v, want a MessageTooLargeError", i, errs[i])
		case !want.ok && want.field != "" && (!errors.As(errs[i], &iae) || iae.Field != want.field):
			t.Fatalf("message %d: got %v, want an InvalidArgumentError for %s", i, errs[i], want.field)
		}
	}
	stored := []int{0, 1, 3, 6, 9}
	wantQueueOffsets := []int64{1, 0, 0, 2, 1}
	for j, i := range stored {
		r := res[i]
		if r.Status != PutOK || r.Count != 1 || r.QueueOffset != wantQueueOffsets[j] || r.CommitLogOffset != msgs[i].CommitLogOffset ||
			len(r.OffsetMsgIDs) != 1 || r.OffsetMsgIDs[0] != message.OffsetMsgID(msgs[i].StoreHost, r.CommitLogOffset) || r.MsgSize != msgs[i].StoreSize {
			t.Fatalf("message %d: result %+v", i, r)
		}
		if j > 0 { // one run: each record right after the previous one
			prev := res[stored[j-1]]
			if r.CommitLogOffset != prev.CommitLogOffset+int64(prev.MsgSize) {
				t.Fatalf("message %d at %d, the previous one ends at %d", i, r.CommitLogOffset, prev.CommitLogOffset+int64(prev.MsgSize))
			}
		}
		m, _, err := s.LookMessageByOffset(r.CommitLogOffset)
		if err != nil || string(m.Body) != string(msgs[i].Body) || m.QueueOffset != r.QueueOffset {
			t.Fatalf("message %d read back: %v %q", i, err, m.Body)
		}
	}
	if got := bodies(t, s, "A", 0); strings.Join(got, ",") != "before,a1,a2" {
		t.Fatalf("queue A/0: %v", got)
	}
	if got := bodies(t, s, "B", 3); strings.Join(got, ",") != "b1,b2" {
		t.Fatalf("queue B/3: %v", got)
	}
	if got := bodies(t, s, "A", 1); strings.Join(got, ",") != "a1-1" {
		t.Fatalf("queue A/1: %v", got)
	}
	last := res[9]
	if s.MaxPhyOffset() != last.CommitLogOffset+int64(last.MsgSize) {
		t.Fatalf("MaxPhyOffset %d", s.MaxPhyOffset())
	}
	// What a later PutMessage gets follows the group.
	if r := put(t, s, newMsg("A", 0, "after", "")); r.QueueOffset != 3 || r.CommitLogOffset != s.MaxPhyOffset()-int64(r.MsgSize) {
		t.Fatalf("put after the group: %+v", r)
	}
}

// A group larger than what is left of the segment is written one run per segment: no
// record spans two segments, every message keeps its order in its queue, and a restart
// recovers them all.
func TestPutGroupAcrossSegments(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.CommitLogSegmentSize = MinCommitLogSegmentSize // 4 KiB: about 7 records of 500 bytes
	cfg.ConsumeQueueEntries = 10
	s := openStore(t, cfg)
	body := strings.Repeat("x", 400)
	var msgs []*message.MessageExt
	for i := range 40 {
		msgs = append(msgs, newMsg("G", int32(i%2), fmt.Sprintf("%03d%s", i, body), ""))
	}
	res, errs := putGroup(s, msgs)
	seg := int64(MinCommitLogSegmentSize)
	segments := map[int64]bool{}
	for i, r := range res {
		if errs[i] != nil {
			t.Fatalf("message %d: %v", i, errs[i])
		}
		if r.CommitLogOffset/seg != (r.CommitLogOffset+int64(r.MsgSize)-1)/seg {
			t.Fatalf("record %d spans two segments: [%d,%d)", i, r.CommitLogOffset, r.CommitLogOffset+int64(r.MsgSize))
		}
		segments[r.CommitLogOffset/seg] = true
		if r.QueueOffset != int64(i/2) {
			t.Fatalf("message %d has queue offset %d", i, r.QueueOffset)
		}
	}
	if len(segments) < 5 {
		t.Fatalf("the group filled only %d segments", len(segments))
	}
	check := func(s *Store) {
		t.Helper()
		for q := range int32(2) {
			got := bodies(t, s, "G", q)
			if len(got) != 20 {
				t.Fatalf("queue %d: %d messages", q, len(got))
			}
			for k, b := range got {
				if want := fmt.Sprintf("%03d", 2*k+int(q)); b[:3] != want {
					t.Fatalf("queue %d message %d: %q, want %s", q, k, b[:3], want)
				}
			}
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check(openStore(t, cfg))
}

// PutGroup fails every message with the store's error once it is closed, and every
// message with a clear error when the slices do not match.
func TestPutGroupErrors(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	msgs := []*message.MessageExt{newMsg("T", 0, "a", ""), newMsg("T", 0, "b", "")}
	errs := make([]error, 2)
	s.PutGroup(context.Background(), msgs, []int64{0}, make([]PutResult, 2), errs)
	var iae *InvalidArgumentError
	for i, err := range errs {
		if !errors.As(err, &iae) || !strings.Contains(err.Error(), "2 messages, 1 tags codes") {
			t.Fatalf("mismatched slices, message %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.PutGroup(ctx, msgs, []int64{0, 0}, make([]PutResult, 2), errs)
	if !errors.Is(errs[0], context.Canceled) || !errors.Is(errs[1], context.Canceled) || s.MaxPhyOffset() != 0 {
		t.Fatalf("canceled: %v %v, max offset %d", errs[0], errs[1], s.MaxPhyOffset())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, errs = putGroup(s, msgs)
	if !errors.Is(errs[0], ErrClosed) || !errors.Is(errs[1], ErrClosed) {
		t.Fatalf("closed store: %v %v", errs[0], errs[1])
	}
}

// Under SYNC_FLUSH PutGroup returns once the records are fsynced: the flushed position
// covers the group when it returns.
func TestPutGroupSyncFlush(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.FlushDiskType = SyncFlush
	s := openStore(t, cfg)
	var msgs []*message.MessageExt
	for i := range 5 {
		msgs = append(msgs, newMsg("S", int32(i%2), fmt.Sprint("m", i), ""))
	}
	res, errs := putGroup(s, msgs)
	for i := range msgs {
		if errs[i] != nil || res[i].Status != PutOK {
			t.Fatalf("message %d: %v %+v", i, errs[i], res[i])
		}
	}
	s.flusher.mu.Lock()
	flushed := s.flusher.flushed
	s.flusher.mu.Unlock()
	if flushed < s.MaxPhyOffset() {
		t.Fatalf("flushed to %d, the group ends at %d", flushed, s.MaxPhyOffset())
	}
}
