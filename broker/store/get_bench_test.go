package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicemq/sluice/internal/testkit"
)

// BenchmarkGetMessageInterleaved pulls 32 messages of 1 KiB per call from one queue of a
// topic whose queues were written round-robin (queues=8: the layout a producer sending to
// every queue in turn leaves, each queue's records 8 records apart in the commitlog):
// the read pattern of a push consumer draining a backlog. queues=1 is the contiguous case.
// reuse=true reads into one buffer with GetMessageAppend, as the broker's pull handler
// does with its pooled buffers.
//
//	go test -run '^$' -bench GetMessageInterleaved ./broker/store
func BenchmarkGetMessageInterleaved(b *testing.B) {
	for _, queues := range []int32{1, 8, 32} {
		b.Run(fmt.Sprintf("queues=%d", queues), func(b *testing.B) {
			s := benchStore(b, AsyncFlush)
			const perQueue = 4000
			for i := int32(0); i < perQueue*queues; i++ {
				if _, err := s.PutMessage(context.Background(), newMsg("Bench", i%queues, benchBody, "TagA"), 0); err != nil {
					b.Fatal(err)
				}
			}
			for _, reuse := range []bool{false, true} {
				b.Run(fmt.Sprintf("reuse=%t", reuse), func(b *testing.B) {
					b.ReportAllocs()
					defer testkit.ReportCPU(b)()
					var buf []byte
					off := int64(0)
					for b.Loop() {
						r, err := s.GetMessageAppend(buf, "Bench", 0, off, 32, 0, nil)
						if err != nil || r.MessageCount != 32 {
							b.Fatalf("%v %d", err, r.MessageCount)
						}
						if reuse {
							buf = r.Body[:0]
						}
						b.SetBytes(int64(len(r.Body)))
						off = r.NextBeginOffset % (perQueue - 32)
					}
				})
			}
		})
	}
}
