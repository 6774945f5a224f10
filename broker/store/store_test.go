package store

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/message"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPutGetRoundTrip(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	m := newMsg("TopicA", 3, "hello", "TagA")
	m.SetKeys("k1", "k2")
	m.Flag = 7
	m.ReconsumeTimes = 2
	res := put(t, s, m)
	if res.QueueOffset != 0 || res.CommitLogOffset != 0 || res.Count != 1 || len(res.OffsetMsgIDs) != 1 || res.MsgSize != m.StoreSize || res.WroteBytes != int64(m.StoreSize) {
		t.Fatalf("result %+v", res)
	}
	if res.OffsetMsgIDs[0] != message.OffsetMsgID(testStoreHost, 0) || m.OffsetMsgID != res.OffsetMsgIDs[0] || m.MsgID != m.UniqKey() {
		t.Fatalf("ids: result %q, msg offset id %q, msg id %q", res.OffsetMsgIDs[0], m.OffsetMsgID, m.MsgID)
	}
	if res.StoreTimestamp == 0 || m.StoreTimestamp != res.StoreTimestamp || m.CommitLogOffset != 0 || m.QueueOffset != 0 {
		t.Fatalf("assigned fields: %+v", m)
	}
	m2 := newMsg("TopicA", 3, "world", "TagB")
	res2 := put(t, s, m2)
	if res2.QueueOffset != 1 || res2.CommitLogOffset != int64(res.MsgSize) {
		t.Fatalf("second result %+v", res2)
	}
	if got := s.MaxOffset("TopicA", 3); got != 2 {
		t.Fatalf("MaxOffset = %d, want 2", got)
	}
	if got := s.MaxPhyOffset(); got != int64(res.MsgSize)+int64(res2.MsgSize) {
		t.Fatalf("MaxPhyOffset = %d", got)
	}

	r, err := s.GetMessage("TopicA", 3, 0, 32, 0, nil)
	if err != nil || r.Status != Found || r.MessageCount != 2 || r.NextBeginOffset != 2 || r.MinOffset != 0 || r.MaxOffset != 2 {
		t.Fatalf("get %+v %v", r, err)
	}
	if len(r.Body) != int(res.MsgSize+res2.MsgSize) || string(r.Records[0])+string(r.Records[1]) != string(r.Body) {
		t.Fatal("Body is not the records back to back")
	}
	msgs, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
	if err != nil || len(msgs) != 2 {
		t.Fatalf("decode body: %v", err)
	}
	got := msgs[0]
	if string(got.Body) != "hello" || got.Tag() != "TagA" || got.QueueID != 3 || got.Flag != 7 || got.ReconsumeTimes != 2 ||
		got.StoreTimestamp != res.StoreTimestamp || got.UniqKey() != m.UniqKey() || strings.Join(got.Keys(), ",") != "k1,k2" ||
		got.BornHost != testBornHost || got.StoreHost != testStoreHost || got.CommitLogOffset != 0 || got.QueueOffset != 0 {
		t.Fatalf("decoded %+v", got)
	}
	if msgs[1].QueueOffset != 1 || msgs[1].CommitLogOffset != res2.CommitLogOffset || string(msgs[1].Body) != "world" {
		t.Fatalf("decoded second %+v", msgs[1])
	}

	// The raw record equals what message.EncodeRecord gives for the assigned fields.
	want, err := message.EncodeRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(r.Records[0]) {
		t.Fatal("stored record differs from message.EncodeRecord of the updated message")
	}
}

func TestIPv6HostsAndExplicitStoreTimestamp(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	m := newMsg("V6", 0, "six", "")
	m.BornHost = netip.MustParseAddrPort("[2001:db8::1]:40000")
	m.StoreHost = netip.MustParseAddrPort("[2001:db8::2]:10911")
	res := put(t, s, m)
	m2 := newMsg("V6", 0, "explicit", "")
	m2.StoreTimestamp = 1234
	res2 := put(t, s, m2)
	if res2.StoreTimestamp != 1234 {
		t.Fatalf("explicit store timestamp replaced: %d", res2.StoreTimestamp)
	}
	r, err := s.GetMessage("V6", 0, 0, 32, 0, nil)
	if err != nil || r.MessageCount != 2 {
		t.Fatalf("get %+v %v", r, err)
	}
	msgs, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].StoreTimestamp != res.StoreTimestamp || msgs[0].BornHost != m.BornHost || msgs[0].StoreHost != m.StoreHost || msgs[0].SysFlag&message.SysFlagBornHostV6 == 0 {
		t.Fatalf("v6 record %+v (want store time %d)", msgs[0], res.StoreTimestamp)
	}
	if len(res.OffsetMsgIDs[0]) != 56 {
		t.Fatalf("IPv6 offset msg id %q", res.OffsetMsgIDs[0])
	}
	if msgs[1].StoreTimestamp != 1234 {
		t.Fatalf("second store time %d", msgs[1].StoreTimestamp)
	}
	if ts := s.OffsetByTimestamp("V6", 0, res.StoreTimestamp); ts != 0 && ts != 1 {
		t.Fatalf("OffsetByTimestamp on v6 records = %d", ts)
	}
}

func TestSegmentRollOver(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.CommitLogSegmentSize = MinCommitLogSegmentSize // 4 KiB: about 7 records of 500 bytes each
	cfg.ConsumeQueueEntries = 10
	s := openStore(t, cfg)
	body := strings.Repeat("x", 400)
	var results []PutResult
	for i := range 60 {
		results = append(results, put(t, s, newMsg("Roll", 1, fmt.Sprintf("%03d%s", i, body), "")))
	}
	seg := int64(MinCommitLogSegmentSize)
	rolled := 0
	for i, r := range results {
		if r.CommitLogOffset/seg != (r.CommitLogOffset+int64(r.MsgSize)-1)/seg {
			t.Fatalf("record %d spans two segments: [%d,%d)", i, r.CommitLogOffset, r.CommitLogOffset+int64(r.MsgSize))
		}
		if r.CommitLogOffset%seg == 0 && i > 0 {
			rolled++
			// The previous segment ends with a blank filler.
			prev := results[i-1]
			fillerAt := prev.CommitLogOffset + int64(prev.MsgSize)
			f := filepath.Join(dir, "commitlog", fileName(r.CommitLogOffset-seg))
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			local := fillerAt % seg
			if got := int64(int32(be32(b[local:]))); got != seg-local || be32(b[local+4:]) != message.BlankMagicCode {
				t.Fatalf("no blank filler at %d: size %d magic %#x", fillerAt, got, be32(b[local+4:]))
			}
		}
		if r.QueueOffset != int64(i) {
			t.Fatalf("queue offset %d for message %d", r.QueueOffset, i)
		}
	}
	if rolled < 5 {
		t.Fatalf("only %d roll-overs", rolled)
	}
	files, _ := os.ReadDir(filepath.Join(dir, "commitlog"))
	for _, f := range files {
		fi, _ := f.Info()
		if fi.Size() != seg {
			t.Fatalf("segment %s has size %d, want %d", f.Name(), fi.Size(), seg)
		}
	}
	if len(files) != rolled+1 {
		t.Fatalf("%d segment files for %d roll-overs", len(files), rolled)
	}
	cqFiles, _ := os.ReadDir(filepath.Join(dir, "consumequeue", "Roll", "1"))
	if len(cqFiles) != 6 || cqFiles[1].Name() != fileName(10*cqEntrySize) {
		t.Fatalf("consume queue files %v", cqFiles)
	}
	check := func(s *Store) {
		t.Helper()
		got := bodies(t, s, "Roll", 1)
		if len(got) != 60 {
			t.Fatalf("read %d messages, want 60", len(got))
		}
		for i, b := range got {
			if b[:3] != fmt.Sprintf("%03d", i) {
				t.Fatalf("message %d has body %q", i, b[:3])
			}
		}
		for _, r := range results {
			m, _, err := s.LookMessageByOffset(r.CommitLogOffset)
			if err != nil || m.QueueOffset != r.QueueOffset {
				t.Fatalf("LookMessageByOffset(%d): %v", r.CommitLogOffset, err)
			}
		}
	}
	check(s)
	// A pull stops at the end of a consume-queue file (10 entries here).
	r, err := s.GetMessage("Roll", 1, 5, 32, 1<<20, nil)
	if err != nil || r.MessageCount != 5 || r.NextBeginOffset != 10 {
		t.Fatalf("pull across consume-queue file end: %d messages next %d err %v", r.MessageCount, r.NextBeginOffset, err)
	}
	// Restart: the blank fillers are skipped by recovery.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	check(s2)
	last := results[len(results)-1]
	if s2.MaxPhyOffset() != last.CommitLogOffset+int64(last.MsgSize) {
		t.Fatalf("MaxPhyOffset after restart %d", s2.MaxPhyOffset())
	}
	if r := put(t, s2, newMsg("Roll", 1, "after", "")); r.QueueOffset != 60 {
		t.Fatalf("queue offset after restart %d", r.QueueOffset)
	}
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// tagFilter matches messages whose tag is in tags, first by tags code, then by the TAGS
// property of the record (as the broker's tag filter does).
type tagFilter struct {
	tags        map[string]bool
	recordCalls int
}

func newTagFilter(tags ...string) *tagFilter {
	f := &tagFilter{tags: map[string]bool{}}
	for _, t := range tags {
		f.tags[t] = true
	}
	return f
}

func (f *tagFilter) MatchTagsCode(code int64) bool {
	for t := range f.tags {
		if message.TagHashCode(t) == code {
			return true
		}
	}
	return false
}

func (f *tagFilter) MatchRecord(rec []byte) bool {
	f.recordCalls++
	m, _, err := message.DecodeRecord(rec, message.DecodeOptions{SkipBody: true})
	return err == nil && f.tags[m.Tag()]
}

// recordFilter rejects every record after matching all tags codes.
type recordFilter struct{}

func (recordFilter) MatchTagsCode(int64) bool { return true }
func (recordFilter) MatchRecord([]byte) bool  { return false }

func TestGetMessageStatuses(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.ConsumeQueueEntries = 10
	s := openStore(t, cfg)
	for i := range 6 {
		tag := "TagA"
		if i%2 == 1 {
			tag = "TagB"
		}
		put(t, s, newMsg("T", 0, fmt.Sprintf("m%d", i), tag))
	}
	// A half message: stored in the commitlog, not in a consume queue (docs/protocol.md §4.2).
	half := newMsg("Half", 0, "half", "")
	half.SysFlag = message.WithTransactionType(0, message.SysFlagTransactionPrepared)
	hres := put(t, s, half)
	if hres.QueueOffset != 0 || s.MaxOffset("Half", 0) != 0 {
		t.Fatalf("half message got queue offset %d, max %d", hres.QueueOffset, s.MaxOffset("Half", 0))
	}

	tests := []struct {
		name      string
		topic     string
		queueID   int32
		offset    int64
		maxNums   int
		filter    Filter
		status    GetStatus
		next      int64
		count     int
		minO, max int64
	}{
		{"no consume queue, offset 0", "Nope", 0, 0, 32, nil, NoMatchedLogicQueue, 0, 0, 0, 0},
		{"no consume queue, offset 5", "Nope", 0, 5, 32, nil, NoMatchedLogicQueue, 0, 0, 0, 0},
		{"other queue id", "T", 1, 0, 32, nil, NoMatchedLogicQueue, 0, 0, 0, 0},
		{"half message topic has no queue", "Half", 0, 0, 32, nil, NoMatchedLogicQueue, 0, 0, 0, 0},
		{"offset == max", "T", 0, 6, 32, nil, OffsetOverflowOne, 6, 0, 0, 6},
		{"offset > max", "T", 0, 9, 32, nil, OffsetOverflowBadly, 6, 0, 0, 6},
		{"found all", "T", 0, 0, 32, nil, Found, 6, 6, 0, 6},
		{"found from 2", "T", 0, 2, 32, nil, Found, 6, 4, 0, 6},
		{"maxMsgNums 2", "T", 0, 1, 2, nil, Found, 3, 2, 0, 6},
		{"maxMsgNums 0 means 1", "T", 0, 0, 0, nil, Found, 1, 1, 0, 6},
		{"tag filter", "T", 0, 0, 32, newTagFilter("TagB"), Found, 6, 3, 0, 6},
		{"tag filter, last entry", "T", 0, 5, 32, newTagFilter("TagB"), Found, 6, 1, 0, 6},
		{"no tag matches", "T", 0, 0, 32, newTagFilter("TagC"), NoMatchedMessage, 6, 0, 0, 6},
		{"tag filter, none from 5", "T", 0, 5, 32, newTagFilter("TagA"), NoMatchedMessage, 6, 0, 0, 6},
		{"record filter rejects", "T", 0, 0, 32, recordFilter{}, NoMatchedMessage, 6, 0, 0, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.GetMessage(tc.topic, tc.queueID, tc.offset, tc.maxNums, 0, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tc.status || r.NextBeginOffset != tc.next || r.MessageCount != tc.count || r.MinOffset != tc.minO || r.MaxOffset != tc.max {
				t.Fatalf("got %v next=%d count=%d min=%d max=%d; want %v next=%d count=%d min=%d max=%d",
					r.Status, r.NextBeginOffset, r.MessageCount, r.MinOffset, r.MaxOffset, tc.status, tc.next, tc.count, tc.minO, tc.max)
			}
			if len(r.Records) != r.MessageCount {
				t.Fatalf("%d records for count %d", len(r.Records), r.MessageCount)
			}
			for i, rec := range r.Records {
				m, _, err := message.DecodeRecord(rec, message.DecodeOptions{CheckCRC: true})
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				if f, ok := tc.filter.(*tagFilter); ok && !f.tags[m.Tag()] {
					t.Fatalf("filter let tag %q through", m.Tag())
				}
			}
		})
	}

	t.Run("maxBytes caps but returns at least one", func(t *testing.T) {
		r, err := s.GetMessage("T", 0, 0, 32, 1, nil)
		if err != nil || r.Status != Found || r.MessageCount != 1 || r.NextBeginOffset != 1 {
			t.Fatalf("got %+v %v", r, err)
		}
		two := len(r.Body) * 2
		r, err = s.GetMessage("T", 0, 0, 32, two, nil)
		if err != nil || r.MessageCount != 2 || r.NextBeginOffset != 2 {
			t.Fatalf("maxBytes for two records: %d messages next %d", r.MessageCount, r.NextBeginOffset)
		}
	})

	t.Run("OFFSET_FOUND_NULL", func(t *testing.T) {
		// Retention deleting a consume-queue file under a reader: white-box, drop the
		// queue's first file from its list as a deletion would.
		for i := 6; i < 14; i++ {
			put(t, s, newMsg("T", 0, fmt.Sprintf("m%d", i), "TagA"))
		}
		cq := s.queueFor("T", 0, false)
		files := cq.fileList()
		rest := append([]*cqFile(nil), files[1:]...)
		cq.files.Store(&rest)
		defer cq.files.Store(&files)
		r, err := s.GetMessage("T", 0, 3, 32, 0, nil)
		if err != nil || r.Status != OffsetFoundNull || r.NextBeginOffset != 10 {
			t.Fatalf("got %v next %d err %v; want OFFSET_FOUND_NULL next 10", r.Status, r.NextBeginOffset, err)
		}
	})

	t.Run("MESSAGE_WAS_REMOVING", func(t *testing.T) {
		// Entries whose commitlog data is gone (white-box: an entry pointing past the data).
		cq := s.queueFor("T", 0, false)
		before := cq.max.Load()
		s.putMu.Lock()
		var e [cqEntrySize]byte
		putEntry(e[:], cqEntry{phy: s.cl.writePos.Load() + 1000, size: 200, tags: 0})
		err := cq.write(before, e[:])
		cq.max.Store(before + 1)
		s.putMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.GetMessage("T", 0, before, 32, 0, nil)
		if err != nil || r.Status != MessageWasRemoving || r.NextBeginOffset != before+1 || r.MessageCount != 0 {
			t.Fatalf("got %v next %d count %d err %v", r.Status, r.NextBeginOffset, r.MessageCount, err)
		}
	})
}

func TestStatusNames(t *testing.T) {
	want := map[GetStatus]string{Found: "FOUND", NoMatchedMessage: "NO_MATCHED_MESSAGE", NoMatchedLogicQueue: "NO_MATCHED_LOGIC_QUEUE",
		NoMessageInQueue: "NO_MESSAGE_IN_QUEUE", OffsetTooSmall: "OFFSET_TOO_SMALL", OffsetOverflowOne: "OFFSET_OVERFLOW_ONE",
		OffsetOverflowBadly: "OFFSET_OVERFLOW_BADLY", OffsetFoundNull: "OFFSET_FOUND_NULL", MessageWasRemoving: "MESSAGE_WAS_REMOVING"}
	for st, name := range want {
		if st.String() != name {
			t.Errorf("%d.String() = %q, want %q", int(st), st.String(), name)
		}
	}
	if PutOK.String() != "PUT_OK" || PutFlushDiskTimeout.String() != "FLUSH_DISK_TIMEOUT" {
		t.Error("PutStatus names")
	}
	if AsyncFlush.String() != "ASYNC_FLUSH" || SyncFlush.String() != "SYNC_FLUSH" {
		t.Error("FlushDiskType names")
	}
	for in, want := range map[string]FlushDiskType{"ASYNC_FLUSH": AsyncFlush, "SYNC_FLUSH": SyncFlush, "sync_flush": SyncFlush} {
		got, err := ParseFlushDiskType(in)
		if err != nil || got != want {
			t.Errorf("ParseFlushDiskType(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseFlushDiskType("SOMETIMES"); err == nil || !strings.Contains(err.Error(), "SYNC_FLUSH") {
		t.Errorf("ParseFlushDiskType(bad) error %v", err)
	}
	var ft FlushDiskType
	if err := ft.UnmarshalText([]byte("SYNC_FLUSH")); err != nil || ft != SyncFlush {
		t.Error("UnmarshalText")
	}
}

func TestOffsetTooSmallAndNoMessageInQueue(t *testing.T) {
	// A consume queue rebuilt from a commitlog whose first record of that queue is at queue
	// offset 3 starts at 3 (padding before), as after retention deleted older segments.
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.ConsumeQueueEntries = 10
	s := openStore(t, cfg)
	putN(t, s, "Q", 0, 3, "old")
	firstKept := s.MaxPhyOffset()
	putN(t, s, "Q", 0, 4, "new")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Lose the consume queue and the checkpoint: recovery rebuilds from the commitlog.
	// Cut the first three records out by rewriting the commitlog to start mid-way is not
	// possible with fixed names, so instead overwrite the rebuild start: a checkpoint at
	// firstKept with the queue directory gone makes recovery dispatch only later records.
	if err := os.RemoveAll(filepath.Join(dir, "consumequeue", "Q")); err != nil {
		t.Fatal(err)
	}
	if err := writeCheckpoint(dir, checkpoint{commitLogFlushed: firstKept, consumeQueueFlushed: firstKept}); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	if mn, mx := s2.MinOffset("Q", 0), s2.MaxOffset("Q", 0); mn != 3 || mx != 7 {
		t.Fatalf("min %d max %d, want 3 and 7", mn, mx)
	}
	r, err := s2.GetMessage("Q", 0, 1, 32, 0, nil)
	if err != nil || r.Status != OffsetTooSmall || r.NextBeginOffset != 3 {
		t.Fatalf("got %v next %d err %v", r.Status, r.NextBeginOffset, err)
	}
	r, err = s2.GetMessage("Q", 0, 3, 32, 0, nil)
	if err != nil || r.Status != Found || r.MessageCount != 4 || r.NextBeginOffset != 7 {
		t.Fatalf("got %v next %d count %d err %v", r.Status, r.NextBeginOffset, r.MessageCount, err)
	}
	if m, _, _ := message.DecodeRecord(r.Records[0], message.DecodeOptions{}); string(m.Body) != "new-0" || m.QueueOffset != 3 {
		t.Fatalf("first message %q at %d", m.Body, m.QueueOffset)
	}
	if ts := s2.OffsetByTimestamp("Q", 0, 0); ts != 3 {
		t.Fatalf("OffsetByTimestamp before everything = %d, want min 3", ts)
	}

	// NO_MESSAGE_IN_QUEUE: a queue whose only record was torn away keeps its (empty) consume queue.
	put(t, s2, newMsg("Empty", 0, "doomed", ""))
	pos := s2.queueFor("Empty", 0, false)
	e, _ := pos.entryAt(0)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	corruptAt(t, dir, cfg.CommitLogSegmentSize, e.phy+bodyPos+2, []byte{'X'}) // a body byte
	s3 := openStore(t, cfg)
	r, err = s3.GetMessage("Empty", 0, 0, 32, 0, nil)
	if err != nil || r.Status != NoMessageInQueue || r.NextBeginOffset != 0 {
		t.Fatalf("got %v next %d err %v", r.Status, r.NextBeginOffset, err)
	}
	if got := len(bodies(t, s3, "Q", 0)); got != 0 {
		// bodies pulls from 0: OFFSET_TOO_SMALL stops it.
		t.Fatalf("pull from 0 of a queue starting at 3 returned %d", got)
	}
}

// bodyPos is where the body starts in a record with IPv4 hosts.
var bodyPos = int64(message.RecordSize(0, 0, 0, 0) - 3)

// corruptAt overwrites commitlog bytes at the absolute offset off.
func corruptAt(t *testing.T, dir string, segSize int64, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "commitlog", fileName(off-off%segSize)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off%segSize); err != nil {
		t.Fatal(err)
	}
}

func TestBatchPut(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	put(t, s, newMsg("B", 2, "single", ""))
	var msgs []*message.MessageExt
	for i := range 5 {
		msgs = append(msgs, newMsg("B", 2, fmt.Sprintf("batch-%d", i), "TagX"))
	}
	res, err := s.PutMessages(context.Background(), msgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 5 || res.QueueOffset != 1 || len(res.OffsetMsgIDs) != 5 || res.MsgSize != msgs[0].StoreSize {
		t.Fatalf("batch result %+v", res)
	}
	var total int64
	seen := map[string]bool{}
	for i, m := range msgs {
		if m.QueueOffset != int64(1+i) || m.CommitLogOffset != res.CommitLogOffset+total {
			t.Fatalf("message %d at queue offset %d commitlog %d", i, m.QueueOffset, m.CommitLogOffset)
		}
		if seen[res.OffsetMsgIDs[i]] || res.OffsetMsgIDs[i] != message.OffsetMsgID(testStoreHost, m.CommitLogOffset) {
			t.Fatalf("offset msg id %d %q", i, res.OffsetMsgIDs[i])
		}
		seen[res.OffsetMsgIDs[i]] = true
		total += int64(m.StoreSize)
	}
	if res.WroteBytes != total {
		t.Fatalf("WroteBytes %d, want %d", res.WroteBytes, total)
	}
	r, err := s.GetMessage("B", 2, 1, 32, 0, newTagFilter("TagX"))
	if err != nil || r.MessageCount != 5 {
		t.Fatalf("get batch: %+v %v", r, err)
	}
	for i, rec := range r.Records {
		m, _, _ := message.DecodeRecord(rec, message.DecodeOptions{CheckCRC: true})
		if string(m.Body) != fmt.Sprintf("batch-%d", i) || m.QueueOffset != int64(1+i) {
			t.Fatalf("record %d: %q at %d", i, m.Body, m.QueueOffset)
		}
	}

	// Errors: typed, nothing stored.
	before := s.MaxPhyOffset()
	_, err = s.PutMessages(context.Background(), []*message.MessageExt{newMsg("B", 2, "a", ""), newMsg("C", 2, "b", "")}, nil)
	var iae *InvalidArgumentError
	if !errors.As(err, &iae) || iae.Field != "msgs" {
		t.Fatalf("mixed topics: %v", err)
	}
	_, err = s.PutMessages(context.Background(), []*message.MessageExt{newMsg("B", 2, "a", ""), newMsg("B", 3, "b", "")}, nil)
	if !errors.As(err, &iae) {
		t.Fatalf("mixed queues: %v", err)
	}
	_, err = s.PutMessages(context.Background(), nil, nil)
	if !errors.As(err, &iae) {
		t.Fatalf("empty batch: %v", err)
	}
	_, err = s.PutMessages(context.Background(), []*message.MessageExt{newMsg("B", 2, "a", "")}, []int64{1, 2})
	if !errors.As(err, &iae) || iae.Field != "tagsCodes" {
		t.Fatalf("tags codes mismatch: %v", err)
	}
	// A batch larger than a segment (64 KiB here).
	var big []*message.MessageExt
	for range 20 {
		big = append(big, newMsg("B", 2, strings.Repeat("z", 4000), ""))
	}
	_, err = s.PutMessages(context.Background(), big, nil)
	var tooLarge *MessageTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.What != "record" || tooLarge.Limit != 64<<10-8 || !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("oversized batch: %v", err)
	}
	if s.MaxPhyOffset() != before {
		t.Fatal("a rejected batch was written")
	}
}

func TestPutErrors(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.MaxMessageSize = 1000
	s := openStore(t, cfg)
	_, err := s.PutMessage(context.Background(), newMsg("T", 0, strings.Repeat("a", 1001), ""), 0)
	var tooLarge *MessageTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Size != 1001 || tooLarge.Limit != 1000 || tooLarge.What != "body" || !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if !strings.Contains(err.Error(), "1000") {
		t.Fatalf("error does not name the limit: %v", err)
	}
	put(t, s, newMsg("T", 0, strings.Repeat("a", 1000), "")) // exactly the limit is fine

	var iae *InvalidArgumentError
	for _, topic := range []string{"", "../escape", "a/b", strings.Repeat("t", 128)} {
		if _, err := s.PutMessage(context.Background(), newMsg(topic, 0, "x", ""), 0); !errors.As(err, &iae) || iae.Field != "topic" {
			t.Fatalf("topic %q: %v", topic, err)
		}
	}
	if _, err := s.PutMessage(context.Background(), newMsg("T", -1, "x", ""), 0); !errors.As(err, &iae) || iae.Field != "queueId" {
		t.Fatalf("negative queue id: %v", err)
	}
	if _, err := s.PutMessage(context.Background(), nil, 0); !errors.As(err, &iae) {
		t.Fatalf("nil message: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := s.MaxPhyOffset()
	if _, err := s.PutMessage(ctx, newMsg("T", 0, "x", ""), 0); !errors.Is(err, context.Canceled) || s.MaxPhyOffset() != before {
		t.Fatalf("canceled ctx: %v", err)
	}
	m := newMsg("T", 0, "x", "")
	m.Properties["P"] = strings.Repeat("p", 40000)
	var ve *message.ValidationError
	if _, err := s.PutMessage(context.Background(), m, 0); !errors.As(err, &ve) || ve.Field != "properties" {
		t.Fatalf("huge properties: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{},
		{Dir: "x", CommitLogSegmentSize: 100},
		{Dir: "x", CommitLogSegmentSize: 1 << 31},
		{Dir: "x", ConsumeQueueEntries: -1},
		{Dir: "x", FlushDiskType: 7},
		{Dir: "x", FlushInterval: -1},
		{Dir: "x", FlushConsumeQueueInterval: -1},
		{Dir: "x", SyncFlushTimeout: -1},
		{Dir: "x", MaxMessageSize: -1},
	}
	for _, c := range bad {
		err := c.Validate()
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field == "" {
			t.Errorf("Validate(%+v) = %v, want *config.Error", c, err)
		}
		if _, err := Open(c); err == nil {
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
	c := Config{Dir: "x"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.setDefaults()
	if c.CommitLogSegmentSize != 1<<30 || c.ConsumeQueueEntries != 300000 || c.FlushDiskType != AsyncFlush || c.FlushInterval != 500*time.Millisecond ||
		c.SyncFlushTimeout != 5*time.Second || c.MaxMessageSize != 4<<20 || c.Logger == nil || c.RecoverTagsCode == nil {
		t.Fatalf("defaults %+v", c)
	}
}

func TestCloseAndLock(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(testConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(testConfig(dir)); err == nil {
		t.Fatal("second Open of the same dir succeeded")
	}
	put(t, s, newMsg("T", 0, "x", ""))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.PutMessage(context.Background(), newMsg("T", 0, "x", ""), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	if _, err := s.GetMessage("T", 0, 0, 1, 0, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	if _, _, err := s.LookMessageByOffset(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("look after close: %v", err)
	}
	if err := s.DeleteTopic("T"); !errors.Is(err, ErrClosed) {
		t.Fatalf("delete after close: %v", err)
	}
	// The lock is released: the directory opens again.
	s2 := openStore(t, testConfig(dir))
	if s2.MaxOffset("T", 0) != 1 {
		t.Fatal("data lost over Close/Open")
	}
}

func TestTransactionTypesAndLook(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	put(t, s, newMsg("Tx", 0, "normal", ""))
	prepared := newMsg("Tx", 0, "prepared", "")
	prepared.SysFlag = message.WithTransactionType(0, message.SysFlagTransactionPrepared)
	pres := put(t, s, prepared)
	rollback := newMsg("Tx", 0, "rollback", "")
	rollback.SysFlag = message.WithTransactionType(0, message.SysFlagTransactionRollback)
	put(t, s, rollback)
	commit := newMsg("Tx", 0, "commit", "")
	commit.SysFlag = message.WithTransactionType(0, message.SysFlagTransactionCommit)
	commit.PreparedTransactionOffset = pres.CommitLogOffset
	cres := put(t, s, commit)
	if pres.QueueOffset != 0 || prepared.QueueOffset != 0 || cres.QueueOffset != 1 || s.MaxOffset("Tx", 0) != 2 {
		t.Fatalf("queue offsets: prepared %d commit %d max %d", pres.QueueOffset, cres.QueueOffset, s.MaxOffset("Tx", 0))
	}
	if got := bodies(t, s, "Tx", 0); strings.Join(got, ",") != "normal,commit" {
		t.Fatalf("consumable: %v", got)
	}
	m, rec, err := s.LookMessageByOffset(pres.CommitLogOffset)
	if err != nil || string(m.Body) != "prepared" || message.TransactionType(m.SysFlag) != message.SysFlagTransactionPrepared || len(rec) != int(pres.MsgSize) {
		t.Fatalf("look prepared: %+v %v", m, err)
	}
	m, _, err = s.LookMessageByOffset(cres.CommitLogOffset)
	if err != nil || m.PreparedTransactionOffset != pres.CommitLogOffset {
		t.Fatalf("look commit: %+v %v", m, err)
	}
	// A body that contains a fake record header with a huge size: looked up by its offset,
	// it is rejected without allocating the size it claims.
	fake := newMsg("Fake", 0, "", "")
	fake.Body = append([]byte{0x7F, 0xFF, 0xFF, 0xFF}, 0xDA, 0xA3, 0x20, 0xA7)
	fres := put(t, s, fake)
	if _, _, err := s.LookMessageByOffset(fres.CommitLogOffset + bodyPos); !errors.Is(err, ErrNotFound) {
		t.Fatalf("fake header inside a body: %v", err)
	}
	for _, off := range []int64{-1, 1, pres.CommitLogOffset + 10, s.MaxPhyOffset(), s.MaxPhyOffset() + 100, 1 << 40} {
		if _, _, err := s.LookMessageByOffset(off); !errors.Is(err, ErrNotFound) {
			t.Fatalf("LookMessageByOffset(%d) = %v, want ErrNotFound", off, err)
		}
	}
	// Rebuilt after restart without a checkpoint: the same two entries.
	dir := s.cfg.Dir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, checkpointFile))
	s2 := openStore(t, testConfig(dir))
	if got := bodies(t, s2, "Tx", 0); strings.Join(got, ",") != "normal,commit" {
		t.Fatalf("consumable after rebuild: %v", got)
	}
}

func TestOffsetByTimestampAndEarliest(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	if got := s.OffsetByTimestamp("TS", 0, 100); got != 0 {
		t.Fatalf("no queue: %d", got)
	}
	if _, err := s.EarliestMessageTime("TS", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("EarliestMessageTime of no queue: %v", err)
	}
	times := []int64{1000, 2000, 2000, 3000, 5000, 5000, 9000}
	for i, ts := range times {
		m := newMsg("TS", 0, fmt.Sprint(i), "")
		m.StoreTimestamp = ts
		put(t, s, m)
	}
	cases := map[int64]int64{
		0:     0, // before everything: min
		1000:  0,
		1400:  0, // nearer 1000
		1500:  0, // tie: the earlier
		1600:  1, // nearer 2000
		2000:  1, // first of equal times
		2999:  3,
		3000:  3,
		4500:  4,
		5000:  4,
		8000:  6,
		9000:  6,
		99999: 6, // after everything: the last offset
	}
	for ts, want := range cases {
		if got := s.OffsetByTimestamp("TS", 0, ts); got != want {
			t.Errorf("OffsetByTimestamp(%d) = %d, want %d", ts, got, want)
		}
	}
	if got, err := s.EarliestMessageTime("TS", 0); err != nil || got != 1000 {
		t.Fatalf("EarliestMessageTime = %d, %v", got, err)
	}
}

func TestOnDispatchAndTopics(t *testing.T) {
	s := openStore(t, testConfig(t.TempDir()))
	type ev struct {
		topic   string
		queueID int32
		off     int64
		tags    int64
	}
	var mu sync.Mutex
	var evs []ev
	s.OnDispatch(func(topic string, queueID int32, off int64, tags int64) {
		mu.Lock()
		evs = append(evs, ev{topic, queueID, off, tags})
		mu.Unlock()
	})
	put(t, s, newMsg("H", 1, "a", "T1"))
	half := newMsg("H", 1, "half", "")
	half.SysFlag = message.SysFlagTransactionPrepared
	put(t, s, half)
	if _, err := s.PutMessages(context.Background(), []*message.MessageExt{newMsg("H", 2, "b", "T2"), newMsg("H", 2, "c", "T3")}, nil); err != nil {
		t.Fatal(err)
	}
	put(t, s, newMsg("G", 0, "d", ""))
	want := []ev{{"H", 1, 0, message.TagHashCode("T1")}, {"H", 2, 0, message.TagHashCode("T2")}, {"H", 2, 1, message.TagHashCode("T3")}, {"G", 0, 0, 0}}
	mu.Lock()
	got := fmt.Sprint(evs)
	mu.Unlock()
	if got != fmt.Sprint(want) {
		t.Fatalf("hooks saw %v, want %v", got, want)
	}
	topics := s.Topics()
	ids := topics["H"]
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if len(topics) != 2 || fmt.Sprint(ids) != "[1 2]" || fmt.Sprint(topics["G"]) != "[0]" {
		t.Fatalf("Topics() = %v", topics)
	}
}

func TestDeleteTopic(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	s := openStore(t, cfg)
	putN(t, s, "Gone", 0, 5, "g")
	putN(t, s, "Gone", 1, 2, "g")
	putN(t, s, "Kept", 0, 3, "k")
	if err := s.DeleteTopic("Gone"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTopic("NeverExisted"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Topics()["Gone"]; ok {
		t.Fatal("deleted topic still listed")
	}
	if _, err := os.Stat(filepath.Join(dir, "consumequeue", "Gone")); !os.IsNotExist(err) {
		t.Fatalf("consume queue dir still there: %v", err)
	}
	if r, _ := s.GetMessage("Gone", 0, 0, 32, 0, nil); r.Status != NoMatchedLogicQueue {
		t.Fatalf("get deleted: %v", r.Status)
	}
	// Recovery does not resurrect it; a new put starts at 0.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	if _, ok := s2.Topics()["Gone"]; ok {
		t.Fatal("deleted topic came back after restart")
	}
	if r := put(t, s2, newMsg("Gone", 0, "again", "")); r.QueueOffset != 0 {
		t.Fatalf("recreated queue offset %d", r.QueueOffset)
	}
	if got := bodies(t, s2, "Kept", 0); len(got) != 3 {
		t.Fatalf("kept topic: %v", got)
	}
}

func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	for round := range 3 {
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for q := int32(0); q < 3; q++ {
			if got := s.MaxOffset("R", q); got != int64(round*10) {
				t.Fatalf("round %d queue %d: max %d", round, q, got)
			}
			for i, r := range putN(t, s, "R", q, 10, fmt.Sprintf("r%d", round)) {
				if r.QueueOffset != int64(round*10+i) {
					t.Fatalf("queue offset %d", r.QueueOffset)
				}
			}
			got := bodies(t, s, "R", q)
			if len(got) != (round+1)*10 || got[round*10] != fmt.Sprintf("r%d-0", round) {
				t.Fatalf("round %d: %d bodies", round, len(got))
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
