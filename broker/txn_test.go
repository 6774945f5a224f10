package broker

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// sendHalf sends a half message as the official Go client does (TRAN_MSG, PGROUP, sysFlag 4).
func sendHalf(t *testing.T, c *remoting.Client, addr, topic, body, uniq string, extra map[string]string) *remoting.RemotingCommand {
	t.Helper()
	props := map[string]string{"TRAN_MSG": "true", "PGROUP": "tx-group", "UNIQ_KEY": uniq}
	for k, v := range extra {
		props[k] = v
	}
	ext := map[string]string{"producerGroup": "tx-group", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "0", "sysFlag": "4", "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10), "flag": "0",
		"properties": message.MarshalProperties(props)}
	r := invoke(t, c, addr, remoting.NewRequest(remoting.SendMessage, ext, []byte(body)))
	if r.ResponseCode() != remoting.Success {
		t.Fatalf("half send: %d %s", r.Code, r.Remark)
	}
	return r
}

// endTxn sends END_TRANSACTION for a half-message send response.
func endTxn(t *testing.T, c *remoting.Client, addr string, sendResp *remoting.RemotingCommand, decision int) *remoting.RemotingCommand {
	t.Helper()
	_, phy, err := message.ParseOffsetMsgID(sendResp.ExtFields["msgId"])
	if err != nil {
		t.Fatal(err)
	}
	req := remoting.NewRequest(remoting.EndTransaction, map[string]string{"producerGroup": "tx-group",
		"tranStateTableOffset": sendResp.ExtFields["queueOffset"], "commitLogOffset": strconv.FormatInt(phy, 10),
		"commitOrRollback": strconv.Itoa(decision), "fromTransactionCheck": "false", "msgId": "x"}, nil)
	if decision == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if _, err := c.InvokeSync(ctx, addr, req); err == nil {
			t.Fatal("an unknown decision must get no response")
		}
		return nil
	}
	return invoke(t, c, addr, req)
}

func bodies(t *testing.T, c *remoting.Client, addr, topic string) []string {
	t.Helper()
	r := pull(t, c, addr, "g", topic, 0, 0, "*", 0)
	ms, _ := message.DecodeRecords(r.Body, message.DecodeOptions{})
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}

func TestTransactionCommitRollbackFirstDecisionWins(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Tx", 1)
	commit := sendHalf(t, c, b.Addr(), "Tx", "commit-me", "U1", nil)
	rollback := sendHalf(t, c, b.Addr(), "Tx", "roll-me-back", "U2", nil)
	if got := bodies(t, c, b.Addr(), "Tx"); len(got) != 0 {
		t.Fatalf("half messages visible before commit: %v", got)
	}
	if r := pull(t, c, b.Addr(), "g", message.TransHalfTopic, 0, 0, "*", 0); r.ResponseCode() != remoting.NoPermission {
		t.Fatalf("the half topic must not be consumable: %d", r.Code)
	}
	endTxn(t, c, b.Addr(), commit, 0) // unknown: nothing happens
	if r := endTxn(t, c, b.Addr(), commit, txnCommit); r.ResponseCode() != remoting.Success {
		t.Fatalf("commit: %d %s", r.Code, r.Remark)
	}
	if r := endTxn(t, c, b.Addr(), rollback, txnRollback); r.ResponseCode() != remoting.Success {
		t.Fatalf("rollback: %d %s", r.Code, r.Remark)
	}
	// Later, different decisions are refused: the first one wins.
	if r := endTxn(t, c, b.Addr(), rollback, txnCommit); r.ResponseCode() == remoting.Success {
		t.Fatal("a commit after a recorded rollback was accepted")
	}
	if r := endTxn(t, c, b.Addr(), commit, txnCommit); r.ResponseCode() != remoting.Success {
		t.Fatalf("the same decision again must be acknowledged: %d %s", r.Code, r.Remark)
	}
	if r := endTxn(t, c, b.Addr(), commit, txnRollback); r.ResponseCode() != remoting.TransactionFailed || !strings.Contains(r.Remark, "commit") {
		t.Fatalf("a rollback after a commit: %d %s", r.Code, r.Remark)
	}
	got := bodies(t, c, b.Addr(), "Tx")
	if len(got) != 1 || got[0] != "commit-me" {
		t.Fatalf("delivered %v, want exactly [commit-me]", got)
	}
	r := pull(t, c, b.Addr(), "g", "Tx", 0, 0, "*", 0)
	m, _ := message.DecodeRecords(r.Body, message.DecodeOptions{})
	if message.TransactionType(m[0].SysFlag) != message.SysFlagTransactionCommit || m[0].MsgID != "U1" || m[0].Property(message.PropertyRealTopic) != "" {
		t.Fatalf("committed message %+v", m[0])
	}
	// A delayed transactional message is refused.
	ext := map[string]string{"producerGroup": "tx-group", "topic": "Tx", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "0", "sysFlag": "4", "bornTimestamp": "1", "flag": "0",
		"properties": message.MarshalProperties(map[string]string{"TRAN_MSG": "true", "PGROUP": "tx-group", "DELAY": "2"})}
	if r := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.SendMessage, ext, []byte("x"))); r.ResponseCode() != remoting.MessageIllegal {
		t.Fatalf("delayed half message: %d", r.Code)
	}

	// Decisions survive a restart.
	dir := b.cfg.StorePathRootDir
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, nil)
	if r := endTxn(t, c, b2.Addr(), rollback, txnCommit); r.ResponseCode() == remoting.Success {
		t.Fatal("after a restart, a commit after the recorded rollback was accepted")
	}
}

// checkingProducer is a client registered as a producer of tx-group that answers
// CHECK_TRANSACTION_STATE with END_TRANSACTION according to decide.
type checkingProducer struct {
	mu     sync.Mutex
	checks map[string]int // UNIQ_KEY -> checks received
	at     map[string][]time.Time
}

func newCheckingProducer(t *testing.T, addr string, decide func(uniq string, n int) int) (*remoting.Client, *checkingProducer) {
	c := newClient(t)
	p := &checkingProducer{checks: map[string]int{}, at: map[string][]time.Time{}}
	c.RegisterHandler(remoting.CheckTransactionState, func(ctx context.Context, from string, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		m, _, err := message.DecodeRecord(req.Body, message.DecodeOptions{})
		if err != nil || m.Property(message.PropertyProducerGroup) != "tx-group" || m.Topic != "Tx" {
			return nil
		}
		uniq := req.ExtFields["msgId"]
		p.mu.Lock()
		p.checks[uniq]++
		p.at[uniq] = append(p.at[uniq], time.Now())
		n := p.checks[uniq]
		p.mu.Unlock()
		end := remoting.NewRequest(remoting.EndTransaction, map[string]string{"producerGroup": "tx-group",
			"tranStateTableOffset": req.ExtFields["tranStateTableOffset"], "commitLogOffset": req.ExtFields["commitLogOffset"],
			"commitOrRollback": strconv.Itoa(decide(uniq, n)), "fromTransactionCheck": "true", "msgId": uniq}, nil)
		_ = c.InvokeOneway(ctx, from, end)
		return nil
	})
	hb, _ := json.Marshal(wire.HeartbeatData{ClientID: "tx-producer", ProducerDataSet: []wire.ProducerData{{GroupName: "tx-group"}}})
	if r := invoke(t, c, addr, remoting.NewRequest(remoting.HeartBeat, nil, hb)); r.ResponseCode() != remoting.Success {
		t.Fatal(r.Remark)
	}
	return c, p
}

func (p *checkingProducer) count(uniq string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checks[uniq]
}

func TestTransactionCheckBack(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.TransactionTimeOut = 100
		c.TransactionCheckInterval = 100
		c.TransactionCheckMax = 3
	})
	sender := newClient(t)
	createTopic(t, sender, b.Addr(), "Tx", 1)
	_, p := newCheckingProducer(t, b.Addr(), func(uniq string, n int) int {
		switch {
		case uniq == "unknown-twice":
			if n >= 3 {
				return txnCommit
			}
			return 0
		case uniq == "never":
			return 0
		case strings.HasPrefix(uniq, "odd"):
			return txnRollback // never asked: odd ones end at once
		}
		return txnCommit // even ones, immune, late
	})
	sendHalf(t, sender, b.Addr(), "Tx", "eventually", "unknown-twice", nil)
	sendHalf(t, sender, b.Addr(), "Tx", "never", "never", nil)
	immune := time.Now()
	sendHalf(t, sender, b.Addr(), "Tx", "immune", "immune", map[string]string{message.PropertyCheckImmunityTimeInSeconds: "2"})
	var pending []string
	for i := 0; i < 10; i++ {
		uniq := "even" + strconv.Itoa(i)
		if i%2 == 1 {
			uniq = "odd" + strconv.Itoa(i)
		}
		r := sendHalf(t, sender, b.Addr(), "Tx", uniq, uniq, nil)
		if i%2 == 1 {
			endTxn(t, sender, b.Addr(), r, txnCommit)
		} else {
			pending = append(pending, uniq)
		}
	}
	testkit.WaitFor(t, 60*time.Second, func() bool {
		for _, body := range bodies(t, sender, b.Addr(), "Tx") {
			if body == "eventually" {
				return true
			}
		}
		return false
	}, "unknown-twice to be committed on its third check")
	testkit.WaitFor(t, 60*time.Second, func() bool {
		return b.store.MaxOffset(message.TransCheckMaxTimeTopic, 0) == 1
	}, "never to be discarded after 3 checks")
	testkit.WaitFor(t, 60*time.Second, func() bool { return p.count("immune") > 0 }, "the immune message to be checked")
	p.mu.Lock()
	firstImmuneCheck := p.at["immune"][0]
	p.mu.Unlock()
	// The broker compares store timestamps in milliseconds (as Java's
	// System.currentTimeMillis), so the immunity holds at that resolution: a check may come
	// up to 1 ms before 2 s of nanosecond wall time have passed.
	if gap := firstImmuneCheck.UnixMilli() - immune.UnixMilli(); gap < 2000 {
		t.Fatalf("a message with 2 s check immunity was checked after %d ms (%v)", gap, firstImmuneCheck.Sub(immune))
	}
	checksOfEventually := p.count("unknown-twice")
	if checksOfEventually != 3 {
		t.Fatalf("unknown-twice was checked %d times, want 3 (two unknowns, then commit)", checksOfEventually)
	}
	for i := 0; i < 10; i++ {
		if i%2 == 1 && p.count("odd"+strconv.Itoa(i)) != 0 {
			t.Fatalf("odd%d was committed at once but still checked", i)
		}
	}
	for _, uniq := range pending {
		if p.count(uniq) == 0 {
			t.Fatalf("%s was never checked", uniq)
		}
	}
	if n := p.count("never"); n != 3 {
		t.Fatalf("never was checked %d times, want transactionCheckMax=3", n)
	}
	// Nothing more is checked for a half message with a decision: let a late half message
	// be checked twice (two more rounds, as it answers unknown... then commit).
	sendHalf(t, sender, b.Addr(), "Tx", "late", "late", nil)
	testkit.WaitFor(t, 10*time.Second, func() bool { return p.count("late") >= 1 && len(bodies(t, sender, b.Addr(), "Tx")) == 13 }, "more check rounds")
	if p.count("unknown-twice") != 3 || p.count("never") != 3 {
		t.Fatal("a half message with a decision was checked again")
	}
	var delivered []string
	for _, body := range bodies(t, sender, b.Addr(), "Tx") {
		delivered = append(delivered, body)
		if body == "never" {
			t.Fatal("a discarded half message was delivered")
		}
	}
	if len(delivered) != 13 { // 5 odd at once, 5 even + eventually + immune + late on check
		t.Fatalf("delivered %v", delivered)
	}
	res, _ := b.store.GetMessage(message.TransCheckMaxTimeTopic, 0, 0, 32, 1<<20, nil)
	ops, _ := message.DecodeRecords(res.Body, message.DecodeOptions{})
	if len(ops) != 1 || string(ops[0].Body) != "never" {
		t.Fatalf("operators' topic holds %v", ops)
	}
}

// TestTransactionCheckNeedsLiveProducer: with no live producer of the group, no check is
// sent and the count does not grow.
func TestTransactionCheckNeedsLiveProducer(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.TransactionTimeOut = 50
		c.TransactionCheckInterval = 3600000 // rounds are driven by the test
		c.TransactionCheckMax = 2
	})
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Tx", 1)
	sendHalf(t, c, b.Addr(), "Tx", "orphan", "orphan", nil)
	now := time.Now()
	for i := 1; i <= 10; i++ { // ten rounds, each a minute later, with nobody to ask
		if err := b.txn.checkOnce(context.Background(), now.Add(time.Duration(i)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	b.txn.mu.Lock()
	n := len(b.txn.checks)
	b.txn.mu.Unlock()
	if n != 0 || b.store.MaxOffset(message.TransCheckMaxTimeTopic, 0) != 0 {
		t.Fatalf("checks counted without a producer: %d entries", n)
	}
	_, p := newCheckingProducer(t, b.Addr(), func(string, int) int { return txnCommit })
	if err := b.txn.checkOnce(context.Background(), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return p.count("orphan") == 1 }, "the check once a producer is live")
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(bodies(t, c, b.Addr(), "Tx")) == 1 }, "the committed orphan")
}

// TestTransactionCheckImmunity10s: a half message with CHECK_IMMUNITY_TIME_IN_SECONDS=10
// is not checked before 10 s, although transactionTimeOut is 100 ms; then it is.
func TestTransactionCheckImmunity10s(t *testing.T) {
	t.Parallel()
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.TransactionTimeOut = 100
		c.TransactionCheckInterval = 100
	})
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Tx", 1)
	_, p := newCheckingProducer(t, b.Addr(), func(string, int) int { return txnCommit })
	sent := time.Now()
	sendHalf(t, c, b.Addr(), "Tx", "immune", "immune10", map[string]string{message.PropertyCheckImmunityTimeInSeconds: "10"})
	sendHalf(t, c, b.Addr(), "Tx", "plain", "plain", nil)
	testkit.WaitFor(t, 5*time.Second, func() bool { return p.count("plain") == 1 }, "the plain half message to be checked")
	if p.count("immune10") != 0 {
		t.Fatal("the immune half message was checked with the plain one")
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return p.count("immune10") == 1 }, "the immune half message to be checked")
	p.mu.Lock()
	first := p.at["immune10"][0]
	p.mu.Unlock()
	if d := first.Sub(sent); d < 10*time.Second {
		t.Fatalf("checked %v after sending, before its 10 s immunity", d)
	}
}
