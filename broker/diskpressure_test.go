package broker

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// diskPressureBroker starts a broker with tiny commitlog segments, sends `delayed`
// messages with delay level 18 (2 h: still waiting), fills topic P (one queue) with 36
// messages of 8 KiB (several segments) and commits group g at offset 5 and group h at
// the end.
func diskPressureBroker(t *testing.T, policy string, delayed int) (*Broker, *remoting.Client, *testkit.LogCapture) {
	return diskPressureBrokerWith(t, policy, delayed, nil)
}

// diskPressureBrokerWith is diskPressureBroker that calls first, when set, before the
// messages are sent.
func diskPressureBrokerWith(t *testing.T, policy string, delayed int, first func(*Broker, *remoting.Client)) (*Broker, *remoting.Client, *testkit.LogCapture) {
	t.Helper()
	logs, log := testkit.CaptureLogs(t)
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.MaxMessageSize = 16 << 10
		c.MappedFileSizeCommitLog = 96 << 10
		c.DiskPressurePolicy = policy
		c.Logger = log
	})
	c := newClient(t)
	createTopic(t, c, b.Addr(), "P", 1)
	if first != nil {
		first(b, c)
	}
	for range delayed {
		if r := sendV1(t, c, b.Addr(), "P", 0, []byte("later"), map[string]string{"DELAY": "18"}); r.ResponseCode() != remoting.Success {
			t.Fatal(r.Remark)
		}
	}
	body := make([]byte, 8<<10)
	for range 36 {
		if r := sendV1(t, c, b.Addr(), "P", 0, body, nil); r.ResponseCode() != remoting.Success {
			t.Fatal(r.Remark)
		}
	}
	b.offsets.commit("g", "P", 0, 5)
	b.offsets.commit("h", "P", 0, 36)
	return b, c, logs
}

// deleteOldest (Apache RocketMQ's behaviour): a disk almost full deletes the oldest files
// although group g has not consumed them, and says so: one error line per group and
// queue with the count, and Stats().UnconsumedDeleted; two delayed messages not yet due
// count under the schedule service. Group h had consumed everything: no line for it.
func TestDiskPressureDeleteOldestIsLoud(t *testing.T) {
	b, _, logs := diskPressureBroker(t, DiskPressureDeleteOldest, 2)
	if n := b.cleanOnce(time.Now(), 99); n == 0 {
		t.Fatal("a disk at 99% deleted nothing")
	}
	lost := b.store.MinOffset("P", 0) - 5
	if lost <= 0 {
		t.Fatalf("min offset %d: nothing unconsumed was deleted", lost+5)
	}
	if got := b.Stats().UnconsumedDeleted; got != lost+2 {
		t.Fatalf("Stats().UnconsumedDeleted = %d, want %d (group g) + 2 (delayed)", got, lost)
	}
	lines := logs.Find("retention deleted unconsumed messages")
	if len(lines) != 2 || lines[0].Attrs["group"] != scheduleReader || lines[0].Attrs["topic"] != "SCHEDULE_TOPIC_XXXX" ||
		lines[0].Attrs["queueId"] != "17" || lines[0].Attrs["count"] != "2" ||
		lines[1].Attrs["group"] != "g" || lines[1].Attrs["topic"] != "P" || lines[1].Attrs["queueId"] != "0" ||
		lines[1].Attrs["count"] != strconv.FormatInt(lost, 10) {
		t.Fatalf("logged %v, want a line for the 2 delayed messages and one for g/P/0 with count %d", lines, lost)
	}
}

// refuseWrites (the default): a disk almost full deletes only files every group has
// consumed and refuses new sends with a clear answer while the rest is unconsumed; no
// message is deleted unread. Once g consumed more, the files below it go; once the disk
// is below the mark, sends are accepted again.
func TestDiskPressureRefuseWritesKeepsUnconsumed(t *testing.T) {
	b, c, logs := diskPressureBroker(t, "", 0) // the default
	if b.cfg.DiskPressurePolicy != DiskPressureRefuseWrites {
		t.Fatalf("default diskPressurePolicy %q", b.cfg.DiskPressurePolicy)
	}
	if n := b.cleanOnce(time.Now(), 99); n != 0 || b.store.MinOffset("P", 0) != 0 {
		t.Fatalf("deleted %d files (min offset %d) although g had consumed only 5 messages", n, b.store.MinOffset("P", 0))
	}
	if !b.Stats().RefusingWrites {
		t.Fatal("not refusing writes")
	}
	r := sendV1(t, c, b.Addr(), "P", 0, []byte("x"), nil)
	if r.ResponseCode() != remoting.ServiceNotAvailable || !strings.Contains(r.Remark, "diskPressurePolicy=refuseWrites") {
		t.Fatalf("send while refusing: %d %q", r.Code, r.Remark)
	}
	if len(logs.Find("disk full: refusing new messages")) != 1 {
		t.Fatalf("the refusal was not logged once: %v", logs.Records())
	}

	b.offsets.commit("g", "P", 0, 20)
	if n := b.cleanOnce(time.Now(), 99); n == 0 {
		t.Fatal("files g had consumed were not deleted")
	}
	if m := b.store.MinOffset("P", 0); m == 0 || m > 20 {
		t.Fatalf("min offset %d after g consumed 20", m)
	}
	if !b.Stats().RefusingWrites {
		t.Fatal("stopped refusing while unconsumed files still fill the disk")
	}
	st := b.Stats()
	if st.UnconsumedDeleted != 0 || st.WritesRefused != 1 || len(logs.Find("retention deleted unconsumed")) != 0 {
		t.Fatalf("stats %+v", st)
	}

	b.cleanOnce(time.Now(), 50)
	if b.Stats().RefusingWrites {
		t.Fatal("still refusing below the mark")
	}
	if r := sendV1(t, c, b.Addr(), "P", 0, []byte("x"), nil); r.ResponseCode() != remoting.Success {
		t.Fatalf("send after the pressure: %d %q", r.Code, r.Remark)
	}
}

// The refusal names the group queues whose unconsumed messages keep the files (group g,
// not h, which consumed everything), in the send answer and in the log, so an operator
// knows whose consumption or offset reset frees the disk.
func TestDiskPressureRefusalNamesTheGroups(t *testing.T) {
	b, c, logs := diskPressureBroker(t, DiskPressureRefuseWrites, 0)
	b.cleanOnce(time.Now(), 99)
	r := sendV1(t, c, b.Addr(), "P", 0, []byte("x"), nil)
	if r.ResponseCode() != remoting.ServiceNotAvailable || !strings.Contains(r.Remark, "group g topic P queue 0: ") ||
		strings.Contains(r.Remark, "group h") {
		t.Fatalf("send while refusing: %d %q, want the remark to name group g (topic P queue 0) and not h", r.Code, r.Remark)
	}
	lines := logs.Find("disk full: refusing new messages")
	if len(lines) != 1 || !strings.Contains(lines[0].Attrs["heldBy"], "group g topic P queue 0: ") {
		t.Fatalf("refusal logged as %v, want heldBy naming group g", lines)
	}
	many := []unconsumedLoss{{"a", "T", 0, 1}, {"b", "T", 1, 9}, {"c", "T", 2, 5}, {"d", "T", 3, 7}, {"e", "T", 4, 2}}
	if got, want := describeHolders(many), "group b topic T queue 1: 9, group d topic T queue 3: 7, group c topic T queue 2: 5, and 2 more"; got != want {
		t.Fatalf("describeHolders = %q, want %q", got, want)
	}
}

// A half message still waiting for its transaction decision is unconsumed: deleting it
// loses the transaction (no check-back finds it, a commit fails). With refuseWrites the
// oldest file is kept, the refusal names the transaction service; once the transaction
// is rolled back the file goes. With deleteOldest the loss is logged and counted under
// the transaction service. Every consumer group has read everything.
func TestDiskPressureKeepsPendingHalfMessages(t *testing.T) {
	for _, policy := range []string{DiskPressureRefuseWrites, DiskPressureDeleteOldest} {
		t.Run(policy, func(t *testing.T) {
			var half *remoting.RemotingCommand
			b, c, logs := diskPressureBrokerWith(t, policy, 0, func(b *Broker, c *remoting.Client) {
				half = sendHalf(t, c, b.Addr(), "P", "pending", "HALF1", nil)
			})
			b.offsets.commit("g", "P", 0, 36) // every group consumed everything
			n := b.cleanOnce(time.Now(), 99)
			if policy == DiskPressureDeleteOldest {
				lines := logs.Find("retention deleted unconsumed messages")
				if n == 0 || len(lines) != 1 || lines[0].Attrs["group"] != txnReader || lines[0].Attrs["topic"] != message.TransHalfTopic ||
					lines[0].Attrs["count"] != "1" || b.Stats().UnconsumedDeleted != 1 {
					t.Fatalf("deleted %d files, logged %v, UnconsumedDeleted %d: want the pending half message logged and counted", n, lines, b.Stats().UnconsumedDeleted)
				}
				return
			}
			if n != 0 || !b.Stats().RefusingWrites {
				t.Fatalf("deleted %d files (refusing %v) while a half message in the oldest one has no decision", n, b.Stats().RefusingWrites)
			}
			r := sendV1(t, c, b.Addr(), "P", 0, []byte("x"), nil)
			if r.ResponseCode() != remoting.ServiceNotAvailable || !strings.Contains(r.Remark, txnReader) {
				t.Fatalf("send while refusing: %d %q, want the transaction service named", r.Code, r.Remark)
			}
			if r := endTxn(t, c, b.Addr(), half, txnRollback); r.ResponseCode() != remoting.Success {
				t.Fatalf("rollback: %d %s", r.Code, r.Remark)
			}
			if n := b.cleanOnce(time.Now(), 99); n == 0 {
				t.Fatal("the oldest file was kept after the transaction was rolled back")
			}
		})
	}
}

// The transaction service forgets the decisions of half messages retention deleted: its
// record of decisions is bounded by the half messages kept, not by the broker's uptime.
// A half message sent afterwards is decided and counted as before.
func TestTxnDecisionsForgottenWithTheirHalfMessages(t *testing.T) {
	b, c, _ := diskPressureBrokerWith(t, DiskPressureRefuseWrites, 0, func(b *Broker, c *remoting.Client) {
		for i := range 5 {
			half := sendHalf(t, c, b.Addr(), "P", "decided", "OLD"+strconv.Itoa(i), nil)
			if r := endTxn(t, c, b.Addr(), half, txnRollback); r.ResponseCode() != remoting.Success {
				t.Fatalf("rollback: %d %s", r.Code, r.Remark)
			}
		}
	})
	b.offsets.commit("g", "P", 0, 36) // every group consumed everything
	if n := b.cleanOnce(time.Now(), 99); n == 0 || b.store.MinOffset(message.TransHalfTopic, 0) != 5 {
		t.Fatalf("deleted %d files, half queue min offset %d: want the decided half messages gone", n, b.store.MinOffset(message.TransHalfTopic, 0))
	}
	if err := b.txn.checkOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	b.txn.mu.Lock()
	kept := len(b.txn.done)
	b.txn.mu.Unlock()
	if kept != 0 {
		t.Fatalf("%d decisions kept for half messages retention deleted", kept)
	}
	half := sendHalf(t, c, b.Addr(), "P", "new", "NEW", nil)
	if got := b.txn.undecided(0, 6); got != 1 {
		t.Fatalf("undecided after the trim: %d, want the new half message", got)
	}
	if r := endTxn(t, c, b.Addr(), half, txnRollback); r.ResponseCode() != remoting.Success {
		t.Fatalf("rollback after the trim: %d %s", r.Code, r.Remark)
	}
	if got := b.txn.undecided(0, 6); got != 0 {
		t.Fatalf("undecided after the new rollback: %d", got)
	}
}
