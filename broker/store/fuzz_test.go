package store

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicemq/sluice/message"
)

// FuzzRecovery overwrites bytes of a commitlog at a fuzzed position (a torn or garbled
// write, since the last checkpoint) and checks the recovery invariants: Open succeeds,
// every served record is valid, records wholly before the damage are all served unchanged
// at their queue offsets, and puts work afterwards.
func FuzzRecovery(f *testing.F) {
	f.Add(uint16(0), []byte{0xFF})
	f.Add(uint16(500), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint16(3000), bytes.Repeat([]byte{0xAB}, 64))
	f.Add(uint16(7000), []byte("garbage"))
	f.Add(uint16(9999), []byte{0xDA, 0xA3, 0x20, 0xA7})
	f.Fuzz(func(t *testing.T, at uint16, data []byte) {
		if len(data) == 0 || len(data) > 4096 {
			return
		}
		cfg := testConfig(t.TempDir())
		s, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var rs []PutResult
		var msgs []*message.MessageExt
		for i := range 40 {
			m := newMsg("F", int32(i%2), fmt.Sprintf("fuzz-%02d-%s", i, bytes.Repeat([]byte{'x'}, i*7)), "T")
			msgs = append(msgs, m)
			rs = append(rs, put(t, s, m))
		}
		end := s.MaxPhyOffset()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		off := int64(at) % (end + 512)
		seg := filepath.Join(cfg.Dir, "commitlog", fileName(0))
		fh, err := os.OpenFile(seg, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := min(int64(len(data)), cfg.CommitLogSegmentSize-off)
		if _, err := fh.WriteAt(data[:n], off); err != nil {
			t.Fatal(err)
		}
		fh.Close()

		s2, err := Open(cfg)
		if err != nil {
			t.Fatalf("Open after damage at %d: %v", off, err)
		}
		defer s2.Close()
		served := map[int32][]*message.MessageExt{}
		for q := int32(0); q < 2; q++ {
			for o := int64(0); o < s2.MaxOffset("F", q); {
				r, err := s2.GetMessage("F", q, o, 32, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				ms, err := message.DecodeRecords(r.Body, message.DecodeOptions{CheckCRC: true})
				if err != nil {
					t.Fatalf("served an invalid record: %v", err)
				}
				served[q] = append(served[q], ms...)
				if r.NextBeginOffset <= o {
					t.Fatalf("no progress at %d: %v", o, r.Status)
				}
				o = r.NextBeginOffset
			}
		}
		for i, r := range rs {
			if r.CommitLogOffset+int64(r.MsgSize) > off {
				break
			}
			q := msgs[i].QueueID
			if int64(len(served[q])) <= r.QueueOffset || string(served[q][r.QueueOffset].Body) != string(msgs[i].Body) {
				t.Fatalf("record %d before the damage at %d is not served", i, off)
			}
		}
		if s2.MaxPhyOffset() > end {
			t.Fatalf("recovered data end %d beyond the written end %d", s2.MaxPhyOffset(), end)
		}
		put(t, s2, newMsg("F", 0, "after", ""))
	})
}
