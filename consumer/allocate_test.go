package consumer

import (
	"fmt"
	"testing"

	"github.com/sluicemq/sluice/message"
)

func queues(n int) []message.MessageQueue {
	var out []message.MessageQueue
	for i := 0; i < n; i++ {
		// Two brokers, interleaved and out of order, to check the sort.
		b := "broker-a"
		if i%2 == 1 {
			b = "broker-b"
		}
		out = append([]message.MessageQueue{{Topic: "T", BrokerName: b, QueueID: i / 2}}, out...)
	}
	return out
}

func ids(qs []message.MessageQueue) string {
	s := ""
	for _, q := range qs {
		s += fmt.Sprintf("%c%d ", q.BrokerName[len(q.BrokerName)-1], q.QueueID)
	}
	return s
}

func TestAllocateByAveragely(t *testing.T) {
	// Sorted queues for 8: a0 a1 a2 a3 b0 b1 b2 b3.
	cases := []struct {
		name   string
		mqs    int
		cids   []string
		me     string
		expect string
	}{
		{"alone takes all", 8, []string{"c1"}, "c1", "a0 a1 a2 a3 b0 b1 b2 b3 "},
		{"two even first", 8, []string{"c2", "c1"}, "c1", "a0 a1 a2 a3 "},
		{"two even second", 8, []string{"c2", "c1"}, "c2", "b0 b1 b2 b3 "},
		{"three uneven 0", 8, []string{"c1", "c2", "c3"}, "c1", "a0 a1 a2 "},
		{"three uneven 1", 8, []string{"c1", "c2", "c3"}, "c2", "a3 b0 b1 "},
		{"three uneven 2", 8, []string{"c1", "c2", "c3"}, "c3", "b2 b3 "},
		{"more consumers than queues 0", 2, []string{"c1", "c2", "c3"}, "c1", "a0 "},
		{"more consumers than queues 1", 2, []string{"c1", "c2", "c3"}, "c2", "b0 "},
		{"more consumers than queues 2 idle", 2, []string{"c1", "c2", "c3"}, "c3", ""},
		{"unknown client", 8, []string{"c1", "c2"}, "c9", ""},
		{"no consumers", 8, nil, "c1", ""},
		{"no queues", 0, []string{"c1"}, "c1", ""},
		{"string sort of ids", 3, []string{"10.0.0.1@9", "10.0.0.1@10"}, "10.0.0.1@10", "a0 a1 "},
		{"string sort of ids other", 3, []string{"10.0.0.1@9", "10.0.0.1@10"}, "10.0.0.1@9", "b0 "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ids(AllocateByAveragely(tc.me, queues(tc.mqs), tc.cids))
			if got != tc.expect {
				t.Fatalf("got %q, want %q", got, tc.expect)
			}
		})
	}
}

// Every queue goes to exactly one consumer for all group sizes.
func TestAllocateByAveragelyPartition(t *testing.T) {
	for n := 0; n <= 17; n++ {
		for m := 1; m <= 9; m++ {
			var cids []string
			for i := 0; i < m; i++ {
				cids = append(cids, fmt.Sprintf("cid-%d", i))
			}
			seen := map[message.MessageQueue]int{}
			for _, c := range cids {
				for _, q := range AllocateByAveragely(c, queues(n), cids) {
					seen[q]++
				}
			}
			if len(seen) != n {
				t.Fatalf("%d queues, %d consumers: %d allocated", n, m, len(seen))
			}
			for q, k := range seen {
				if k != 1 {
					t.Fatalf("%d queues, %d consumers: %v allocated %d times", n, m, q, k)
				}
			}
		}
	}
}
