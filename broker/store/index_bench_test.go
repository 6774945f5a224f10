package store

import (
	"context"
	"math"
	"strconv"
	"testing"

	"github.com/sluicemq/sluice/message"
)

// BenchmarkPutMessageIndex measures the put cost of the key index: 1 KiB messages with a
// UNIQ_KEY and two keys (three index entries each), ASYNC_FLUSH, with the index off and on,
// serially and from 16 goroutines per CPU. Compare the ns/op of "off" and "on".
func BenchmarkPutMessageIndex(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		open := func(b *testing.B) *Store {
			s, err := Open(Config{Dir: b.TempDir(), CommitLogSegmentSize: 64 << 20, ConsumeQueueEntries: 100000,
				Index: IndexConfig{Disable: mode == "off"}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		}
		b.Run("index="+mode, func(b *testing.B) {
			s := open(b)
			m := newMsg("Bench", 0, benchBody, "TagA")
			tags := message.TagHashCode("TagA")
			b.SetBytes(int64(len(benchBody)))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				m.StoreTimestamp = 0
				m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, "7F0000010001000000000000"+strconv.Itoa(i))
				m.SetProperty(message.PropertyKeys, "order-"+strconv.Itoa(i)+" TagA_5d41402abc4b2a76b9719d911017c592")
				if _, err := s.PutMessage(context.Background(), m, tags); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("index="+mode+"/parallel", func(b *testing.B) {
			s := open(b)
			tags := message.TagHashCode("TagA")
			b.SetBytes(int64(len(benchBody)))
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				m := newMsg("Bench", 0, benchBody, "TagA")
				i := 0
				for pb.Next() {
					i++
					m.StoreTimestamp = 0
					m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
					m.SetProperty(message.PropertyKeys, "order-"+strconv.Itoa(i)+" TagA_5d41402abc4b2a76b9719d911017c592")
					if _, err := s.PutMessage(context.Background(), m, tags); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkQueryByKey looks up one key among 100000 indexed messages (default geometry).
func BenchmarkQueryByKey(b *testing.B) {
	s := benchStore(b, AsyncFlush)
	const n = 100000
	msgs := make([]*message.MessageExt, 100)
	for i := 0; i < n; i += len(msgs) {
		for k := range msgs {
			msgs[k] = newMsg("Bench", 0, benchBody, "TagA")
			msgs[k].SetKeys("order-" + strconv.Itoa(i+k))
		}
		if _, err := s.PutMessages(context.Background(), msgs, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i = (i + 7919) % n
		r, err := s.Query(IndexQuery{Topic: "Bench", Key: "order-" + strconv.Itoa(i), MaxNum: 32, EndTimestamp: math.MaxInt64})
		if err != nil || len(r.Messages) != 1 {
			b.Fatalf("order-%d: %v %d", i, err, len(r.Messages))
		}
	}
}
