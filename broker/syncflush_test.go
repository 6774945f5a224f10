package broker

import (
	"strconv"
	"sync"
	"testing"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestSyncFlushSends: a SYNC_FLUSH broker answers sends through the flusher
// (remoting.Server.HandleAsync): concurrent sends all succeed with their own queue
// offsets, every message is readable, a refused send is answered at once, and the send
// statistics count each stored send once.
func TestSyncFlushSends(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.FlushDiskType = "SYNC_FLUSH" })
	c := newClient(t)
	createTopic(t, c, b.Addr(), "SyncT", 1)
	const n = 64
	var wg sync.WaitGroup
	offsets := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := sendV1(t, c, b.Addr(), "SyncT", 0, []byte("m"+strconv.Itoa(i)), nil)
			if resp.ResponseCode() != remoting.Success {
				t.Errorf("send %d: %d %s", i, resp.Code, resp.Remark)
				return
			}
			offsets[i] = resp.ExtFields["queueOffset"]
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, o := range offsets {
		if o == "" || seen[o] {
			t.Fatalf("send %d: queue offset %q (duplicate or missing) in %v", i, o, offsets)
		}
		seen[o] = true
	}
	resp := pull(t, c, b.Addr(), "g", "SyncT", 0, 0, "*", 0)
	got := 0
	for next := int64(0); resp.ResponseCode() == remoting.Success; {
		msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{CheckCRC: true})
		if err != nil {
			t.Fatal(err)
		}
		got += len(msgs)
		next += int64(len(msgs))
		if got >= n {
			break
		}
		resp = pull(t, c, b.Addr(), "g", "SyncT", 0, next, "*", 0)
	}
	if got != n {
		t.Fatalf("%d messages readable, want %d", got, n)
	}
	if r := sendV1(t, c, b.Addr(), "SyncT", 0, nil, nil); r.ResponseCode() != remoting.MessageIllegal {
		t.Fatalf("empty body: %d %s, want MESSAGE_ILLEGAL", r.Code, r.Remark)
	}
	st := b.StatsSnapshot()
	var counted int64
	for _, ts := range st.Topics {
		if ts.Topic == "SyncT" {
			counted = ts.Messages
		}
	}
	if counted != n || st.SendLatency.Count != n+1 {
		t.Fatalf("stats: %d messages counted for SyncT, %d send latencies; want %d and %d", counted, st.SendLatency.Count, n, n+1)
	}
}
