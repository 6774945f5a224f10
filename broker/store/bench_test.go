package store

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

func benchStore(b *testing.B, ft FlushDiskType) *Store {
	b.Helper()
	s, err := Open(Config{
		Dir:                  b.TempDir(),
		CommitLogSegmentSize: 64 << 20,
		ConsumeQueueEntries:  100000,
		FlushDiskType:        ft,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

var benchBody = strings.Repeat("b", 1024)

// BenchmarkPutMessage stores 1 KiB messages: serially and from 16 goroutines per CPU (where
// SYNC_FLUSH group commit shares fsyncs; the puts/fsync metric shows by how much), under
// both flush types.
func BenchmarkPutMessage(b *testing.B) {
	for _, ft := range []FlushDiskType{AsyncFlush, SyncFlush} {
		b.Run(ft.String(), func(b *testing.B) {
			s := benchStore(b, ft)
			m := newMsg("Bench", 0, benchBody, "TagA")
			tags := message.TagHashCode("TagA")
			b.SetBytes(int64(len(benchBody)))
			b.ReportAllocs()
			defer testkit.ReportCPU(b)()
			for b.Loop() {
				m.StoreTimestamp = 0
				if _, err := s.PutMessage(context.Background(), m, tags); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(ft.String()+"/parallel", func(b *testing.B) {
			s := benchStore(b, ft)
			tags := message.TagHashCode("TagA")
			b.SetBytes(int64(len(benchBody)))
			b.ReportAllocs()
			start := s.flusher.passes.Load()
			defer testkit.ReportCPU(b)()
			b.SetParallelism(16) // 16 putters per CPU: group commit shares fsyncs among them
			b.RunParallel(func(pb *testing.PB) {
				m := newMsg("Bench", 0, benchBody, "TagA")
				for pb.Next() {
					m.StoreTimestamp = 0
					if _, err := s.PutMessage(context.Background(), m, tags); err != nil {
						b.Fatal(err)
					}
				}
			})
			if ft == SyncFlush {
				b.ReportMetric(float64(b.N)/float64(max(1, s.flusher.passes.Load()-start)), "puts/fsync")
			}
		})
	}
}

// BenchmarkPutMessages stores batches of 64 messages of 1 KiB (one append of ~70 KB each),
// as SEND_BATCH_MESSAGE does; bytes/s count bodies.
func BenchmarkPutMessages(b *testing.B) {
	s := benchStore(b, AsyncFlush)
	msgs := make([]*message.MessageExt, 64)
	for i := range msgs {
		msgs[i] = newMsg("Bench", 0, benchBody, "TagA")
	}
	b.SetBytes(int64(len(msgs) * len(benchBody)))
	b.ReportAllocs()
	defer testkit.ReportCPU(b)()
	for b.Loop() {
		for _, m := range msgs {
			m.StoreTimestamp = 0
		}
		if _, err := s.PutMessages(context.Background(), msgs, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutGroup stores groups of 1 KiB messages over 8 queues, as the broker stores
// a burst of single sends read together from one connection; ns/op and B/s are per
// message, so the figures compare with BenchmarkPutMessage/ASYNC_FLUSH.
func BenchmarkPutGroup(b *testing.B) {
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("group=%d", n), func(b *testing.B) {
			s := benchStore(b, AsyncFlush)
			msgs := make([]*message.MessageExt, n)
			codes := make([]int64, n)
			for i := range msgs {
				msgs[i] = newMsg("Bench", int32(i%8), benchBody, "TagA")
				codes[i] = message.TagHashCode("TagA")
			}
			res, errs := make([]PutResult, n), make([]error, n)
			b.SetBytes(int64(len(benchBody)))
			b.ReportAllocs()
			defer testkit.ReportCPU(b)()
			for i := 0; i < b.N; i += n {
				for _, m := range msgs {
					m.StoreTimestamp = 0
				}
				s.PutGroup(context.Background(), msgs, codes, res, errs)
				if errs[0] != nil {
					b.Fatal(errs[0])
				}
			}
		})
	}
}

// BenchmarkGetMessage pulls 32 messages of 1 KiB per call from a queue of 10000.
func BenchmarkGetMessage(b *testing.B) {
	s := benchStore(b, AsyncFlush)
	const n = 10000
	msgs := make([]*message.MessageExt, 100)
	for i := 0; i < n; i += len(msgs) {
		for k := range msgs {
			msgs[k] = newMsg("Bench", 1, benchBody, fmt.Sprintf("Tag%d", k%4))
		}
		if _, err := s.PutMessages(context.Background(), msgs, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("all", func(b *testing.B) {
		b.ReportAllocs()
		defer testkit.ReportCPU(b)()
		off := int64(0)
		for b.Loop() {
			r, err := s.GetMessage("Bench", 1, off, 32, 0, nil)
			if err != nil || r.MessageCount != 32 {
				b.Fatalf("%v %d", err, r.MessageCount)
			}
			b.SetBytes(int64(len(r.Body)))
			off = r.NextBeginOffset % (n - 32)
		}
	})
	b.Run("tagFilter", func(b *testing.B) {
		f := newTagFilter("Tag1")
		b.ReportAllocs()
		off := int64(0)
		for b.Loop() {
			r, err := s.GetMessage("Bench", 1, off, 32, 0, f)
			if err != nil || r.MessageCount == 0 {
				b.Fatalf("%v %d", err, r.MessageCount)
			}
			off = r.NextBeginOffset % (n - 200)
		}
	})
}

// BenchmarkConsumeQueueRead reads 32 consume-queue entries (one pread of 640 bytes) per
// call from a queue of 10000: the index lookup a pull does before it reads any record.
func BenchmarkConsumeQueueRead(b *testing.B) {
	s := benchStore(b, AsyncFlush)
	const n = 10000
	msgs := make([]*message.MessageExt, 100)
	for i := 0; i < n; i += len(msgs) {
		for k := range msgs {
			msgs[k] = newMsg("Bench", 0, "x", "TagA")
		}
		if _, err := s.PutMessages(context.Background(), msgs, nil); err != nil {
			b.Fatal(err)
		}
	}
	cq := s.queueFor("Bench", 0, false)
	buf := make([]byte, 32*cqEntrySize)
	b.SetBytes(32 * cqEntrySize)
	b.ReportAllocs()
	defer testkit.ReportCPU(b)()
	off := int64(0)
	for b.Loop() {
		got, err := cq.readEntriesInto(buf, off, 32)
		if err != nil || len(got) != 32*cqEntrySize {
			b.Fatalf("read %d bytes at %d: %v", len(got), off, err)
		}
		off = (off + 32) % (n - 32)
	}
}

// BenchmarkConsumeQueueWrite appends one 20-byte consume-queue entry per operation, as
// every put does: through the writer's mapping of the file (mapped) and with one pwrite
// each (pwrite, where mapping fails or outside Linux).
func BenchmarkConsumeQueueWrite(b *testing.B) {
	for _, mode := range []struct {
		name string
		maps int
	}{{"mapped", defaultMappedCQFiles}, {"pwrite", 0}} {
		b.Run(mode.name, func(b *testing.B) {
			const perFile = 1 << 20 // 20 MiB files
			cq := newConsumeQueue(filepath.Join(b.TempDir(), "B", "0"), "B", 0, perFile, newFDCache(8), newCQMaps(mode.maps))
			b.Cleanup(cq.close)
			var e [cqEntrySize]byte
			b.SetBytes(cqEntrySize)
			b.ReportAllocs()
			defer testkit.ReportCPU(b)()
			idx := int64(0)
			for b.Loop() {
				putEntry(e[:], cqEntry{phy: idx * 1100, size: 1100, tags: 7})
				if err := cq.write(idx, e[:]); err != nil {
					b.Fatal(err)
				}
				idx++
				cq.max.Store(idx)
			}
		})
	}
}
