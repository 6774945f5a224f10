package consumer

import (
	"testing"

	"github.com/sluicemq/sluice/message"
)

func msgsAt(offsets ...int64) []*message.MessageExt {
	out := make([]*message.MessageExt, len(offsets))
	for i, o := range offsets {
		out[i] = &message.MessageExt{QueueOffset: o, Message: message.Message{Body: make([]byte, 10)}}
	}
	return out
}

func TestProcessQueueOutOfOrderCompletion(t *testing.T) {
	pq := newProcessQueue(message.MessageQueue{Topic: "T"}, 100)
	if got := pq.commitOffset(); got != 100 {
		t.Fatalf("start: %d", got)
	}
	// Pulled 100..104; the broker says the next pull starts at 106 (105 was filtered).
	batch := msgsAt(100, 101, 102, 103, 104)
	pq.put(batch, 106)
	if n, b := pq.load(); n != 5 || b != 50 {
		t.Fatalf("load %d %d", n, b)
	}
	steps := []struct {
		finish int64
		want   int64
	}{
		{103, 100}, // 100 still running
		{101, 100},
		{100, 102}, // 101 done too: lowest unfinished is 102
		{104, 102},
		{102, 106}, // all done: the filtered 105 is passed as well
	}
	for _, s := range steps {
		if got := pq.remove(msgsAt(s.finish)); got != s.want {
			t.Fatalf("after finishing %d: commit %d, want %d", s.finish, got, s.want)
		}
	}
	if n, b := pq.load(); n != 0 || b != 0 {
		t.Fatalf("load after all done %d %d", n, b)
	}
	// Nothing found: high moves on, never back.
	pq.advance(110)
	pq.advance(90)
	if got := pq.commitOffset(); got != 110 {
		t.Fatalf("advance: %d", got)
	}
	// Duplicates, replays and offsets at/above next are ignored.
	pq.put(msgsAt(110, 111, 111, 105, 113), 113)
	if n, _ := pq.load(); n != 2 {
		t.Fatalf("in flight %d, want 2", n)
	}
	if got := pq.remove(msgsAt(111)); got != 110 {
		t.Fatalf("commit %d", got)
	}
	// Removing something unknown changes nothing.
	if got := pq.remove(msgsAt(999)); got != 110 {
		t.Fatalf("commit %d", got)
	}
	if got := pq.remove(msgsAt(110)); got != 113 {
		t.Fatalf("commit %d", got)
	}
}

func TestProcessQueueMonotonic(t *testing.T) {
	pq := newProcessQueue(message.MessageQueue{Topic: "T"}, 0)
	last := int64(0)
	next := int64(0)
	// Pull batches of 4, finish them in reverse order, interleaved with new pulls.
	var pending []*message.MessageExt
	for round := 0; round < 50; round++ {
		b := msgsAt(next, next+1, next+2, next+3)
		next += 4
		pq.put(b, next)
		pending = append(pending, b...)
		for i := 0; i < 3 && len(pending) > 0; i++ {
			m := pending[len(pending)-1]
			pending = pending[:len(pending)-1]
			c := pq.remove([]*message.MessageExt{m})
			if c < last {
				t.Fatalf("commit offset went back from %d to %d", last, c)
			}
			for _, p := range pending {
				if c > p.QueueOffset {
					t.Fatalf("commit offset %d passes unfinished %d", c, p.QueueOffset)
				}
			}
			last = c
		}
	}
}
