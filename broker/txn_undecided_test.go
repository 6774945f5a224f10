package broker

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestUndecidedHalfCount: txnService.undecided counts the half messages in [lo, hi)
// without a decision — decisions made out of order, a discard by the check service
// (transactionCheckMax), ranges cut at both ends and below the check service's from —
// while the check loop and decisions run concurrently (-race), and the same after a
// restart, when the decisions come back from the op queue. unconsumedBelow reports them
// under the transaction service.
func TestUndecidedHalfCount(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, dir, func(c *Config) { c.TransactionCheckInterval = 1 }) // the check loop runs all the time
	c := newClient(t)
	createTopic(t, c, b.Addr(), "P", 1)
	const n = 10
	halves := make([]*remoting.RemotingCommand, n)
	for i := range halves {
		halves[i] = sendHalf(t, c, b.Addr(), "P", "h", "U"+string(rune('a'+i)), nil)
	}
	// Decisions out of order, some concurrently, while undecided is read.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if u := b.txn.undecided(0, n); u < 0 || u > n {
				t.Errorf("undecided(0, %d) = %d while deciding", n, u)
				return
			}
		}
	}()
	decide := map[int]int{7: txnRollback, 2: txnCommit, 9: txnRollback, 0: txnCommit, 1: txnRollback}
	for q, d := range decide {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := endTxn(t, c, b.Addr(), halves[q], d); r.ResponseCode() != remoting.Success {
				t.Errorf("decision for %d: %d %s", q, r.Code, r.Remark)
			}
		}()
	}
	// The check service discards half 5 (checked transactionCheckMax times already).
	b.txn.mu.Lock()
	b.txn.checks[5] = b.cfg.TransactionCheckMax
	b.txn.mu.Unlock()
	close(stop)
	wg.Wait()
	if err := b.txn.checkOnce(context.Background(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	undecided := []int64{3, 4, 6, 8}
	check := func(b *Broker, when string) {
		t.Helper()
		count := func(lo, hi int64) int64 {
			var k int64
			for _, q := range undecided {
				if q >= lo && q < hi {
					k++
				}
			}
			return k
		}
		for lo := int64(0); lo <= n; lo++ {
			for hi := lo; hi <= n; hi++ {
				if got, want := b.txn.undecided(lo, hi), count(lo, hi); got != want {
					t.Fatalf("%s: undecided(%d, %d) = %d, want %d", when, lo, hi, got, want)
				}
			}
		}
		losses, err := b.unconsumedBelow(b.store.MaxPhyOffset())
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		for _, l := range losses {
			if l.group == txnReader && l.topic == message.TransHalfTopic {
				got += l.count
			}
		}
		if got != int64(len(undecided)) {
			t.Fatalf("%s: unconsumedBelow(everything) reports %d undecided half messages (%v), want %d", when, got, losses, len(undecided))
		}
	}
	check(b, "running")
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, nil)
	check(b2, "after a restart")
}

// TestDeletedPendingHalvesCountedOnce: with deleteOldest, pending half messages deleted
// for disk space are logged and counted once: a later deletion starts at the half
// queue's new first entry and does not count them again, nor half messages decided
// meanwhile; after a restart, the remaining ones count.
func TestDeletedPendingHalvesCountedOnce(t *testing.T) {
	dir := t.TempDir()
	mod := func(c *Config) {
		c.MaxMessageSize = 16 << 10
		c.MappedFileSizeCommitLog = 96 << 10
		c.DiskPressurePolicy = DiskPressureDeleteOldest
	}
	b := startBroker(t, dir, mod)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "P", 1)
	body := make([]byte, 8<<10)
	fill := func(k int) {
		t.Helper()
		for range k {
			if r := sendV1(t, c, b.Addr(), "P", 0, body, nil); r.ResponseCode() != remoting.Success {
				t.Fatal(r.Remark)
			}
		}
	}
	sendHalf(t, c, b.Addr(), "P", "a", "HA", nil)
	fill(12)
	sendHalf(t, c, b.Addr(), "P", "b", "HB", nil)
	fill(24)
	if n := b.cleanOnce(time.Now(), 99); n == 0 {
		t.Fatal("nothing deleted")
	}
	if got := b.Stats().UnconsumedDeleted; got != 2 {
		t.Fatalf("UnconsumedDeleted %d after deleting both pending halves, want 2", got)
	}
	decided := sendHalf(t, c, b.Addr(), "P", "c", "HC", nil)
	sendHalf(t, c, b.Addr(), "P", "d", "HD", nil) // stays pending
	if r := endTxn(t, c, b.Addr(), decided, txnRollback); r.ResponseCode() != remoting.Success {
		t.Fatal(r.Remark)
	}
	fill(24)
	if n := b.cleanOnce(time.Now(), 99); n == 0 {
		t.Fatal("nothing deleted the second time")
	}
	if got := b.Stats().UnconsumedDeleted; got != 3 {
		t.Fatalf("UnconsumedDeleted %d after the second deletion, want 3 (HA, HB once, HD; not the rolled-back HC)", got)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, mod)
	if u := b2.txn.undecided(b2.store.MinOffset(message.TransHalfTopic, 0), b2.store.MaxOffset(message.TransHalfTopic, 0)); u != 0 {
		t.Fatalf("after a restart %d undecided half messages are left, want 0 (all were deleted or decided)", u)
	}
}

// TestCommitInFlightIsUndecided: a commit claims its half message before it writes the
// committed message, and the write can fail (a full disk: store.ErrDiskFull), which
// leaves the half message waiting again. While the write is in flight the half message
// still counts as undecided (retention must not delete it), and the check service does
// not move its scan start past it: after the failed write it is checked again and still
// counts.
func TestCommitInFlightIsUndecided(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "P", 1)
	half := sendHalf(t, c, b.Addr(), "P", "h", "HX", nil)
	var during int64 = -1
	b.txn.commit = func(ctx context.Context, _ *message.MessageExt) error {
		if err := b.txn.checkOnce(ctx, time.Now()); err != nil { // the check loop's turn
			return err
		}
		during = b.txn.undecided(0, 1)
		return store.ErrDiskFull
	}
	// The handler runs on this goroutine: the replaced commit and during need no sync.
	_, phy, err := message.ParseOffsetMsgID(half.ExtFields["msgId"])
	if err != nil {
		t.Fatal(err)
	}
	req := remoting.NewRequest(remoting.EndTransaction, map[string]string{"producerGroup": "tx-group",
		"tranStateTableOffset": half.ExtFields["queueOffset"], "commitLogOffset": strconv.FormatInt(phy, 10),
		"commitOrRollback": strconv.Itoa(txnCommit), "fromTransactionCheck": "false", "msgId": "x"}, nil)
	if r := b.handleEndTransaction(context.Background(), nil, req); r == nil || r.ResponseCode() == remoting.Success {
		t.Fatalf("the commit succeeded though its write failed: %v", r)
	}
	if during != 1 {
		t.Fatalf("undecided while the commit was being written = %d, want 1", during)
	}
	if err := b.txn.checkOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if u := b.txn.undecided(0, 1); u != 1 {
		t.Fatalf("undecided after the commit's write failed = %d, want 1 (from = %d)", u, b.txn.from)
	}
}
