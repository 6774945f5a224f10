package failover

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// txnBook is the local transactions' database of the transaction campaign: the decision
// of each transaction (commit unless its number is 2 mod 3) is recorded when
// ExecuteLocalTransaction runs, which then waits for the gate of its round before
// answering it, so that the master can be killed between the two; CheckLocalTransaction
// answers from the book.
type txnBook struct {
	mu      sync.Mutex
	gate    chan struct{}
	decided map[string]producer.LocalTransactionState
	checks  map[string]int
	checkAt map[string]time.Time // first check
	seen    map[string][]checkSeen
}

// checkSeen is what a check of a transaction said about its half message: the broker
// re-puts a half message each time it checks it, so each check names a new record.
type checkSeen struct {
	at                           time.Time
	queueOffset, commitLogOffset int64
	offsetMsgID, checkTimes      string
}

func newTxnBook() *txnBook {
	return &txnBook{decided: map[string]producer.LocalTransactionState{}, checks: map[string]int{}, checkAt: map[string]time.Time{},
		seen: map[string][]checkSeen{}}
}

func txnDecision(id string) producer.LocalTransactionState {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "t"))
	if n%3 == 2 {
		return producer.RollbackMessage
	}
	return producer.CommitMessage
}

func (b *txnBook) ExecuteLocalTransaction(ctx context.Context, m *message.Message) producer.LocalTransactionState {
	id := string(m.Body)
	s := txnDecision(id)
	b.mu.Lock()
	b.decided[id] = s
	gate := b.gate
	b.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
	}
	return s
}

func (b *txnBook) CheckLocalTransaction(_ context.Context, m *message.MessageExt) producer.LocalTransactionState {
	id := string(m.Body)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks[id]++
	b.seen[id] = append(b.seen[id], checkSeen{at: time.Now(), queueOffset: m.QueueOffset, commitLogOffset: m.CommitLogOffset,
		offsetMsgID: m.OffsetMsgID, checkTimes: m.Property(message.PropertyTransactionCheckTimes)})
	if _, ok := b.checkAt[id]; !ok {
		b.checkAt[id] = time.Now()
	}
	if s, ok := b.decided[id]; ok {
		return s
	}
	return producer.Unknown
}

// txnRec is one transaction of the campaign.
type txnRec struct {
	id      string
	uniqKey string // the half message's UNIQ_KEY (END_TRANSACTION's msgId)
	broker  string
	state   producer.LocalTransactionState
	endErr  error
	sendErr error
	round   int
}

// Transactions whose END_TRANSACTION was lost with the master: per round, a producer of
// the group stores perRound half messages (spread over both masters) and decides them;
// before the decisions are sent, broker-a's master is killed and the deciding producer
// shuts down (it "dies"). Another producer of the group stays up. When the master is
// back, its check-back must reach that producer's listener, the committed transactions
// must be delivered once and the rolled-back never.
func TestFailoverTransactionCheck(t *testing.T) {
	kills := campaignKills(t)
	const topic, group, pgroup, perRound = "TxnFailover", "txn-failover", "txn-failover-producers", 24
	// Check half messages every 5 s (default 60 s) older than transactionTimeOut (6 s).
	// The brokers' output (warnings: the transaction logger writes each check's answer
	// there) goes to a file, kept when the test fails.
	blog := brokerLog(t)
	c := featureCluster(t, topic, peers.RocketMQClusterOptions{BrokerConf: map[string]string{"transactionCheckInterval": "5000"}, Log: blog}, false)
	ctx := context.Background()
	l := newLedger(t, group)
	cons := startConsumer(t, c.NamesrvAddr, group, topic, l, testkit.Quiet())
	testkit.ShutdownOnCleanup(t, cons.Shutdown)

	// The producers' warnings (a check answer that could not be sent, a check dropped)
	// are counted, to tell a lost answer from one the broker ignored.
	warns := &lineLog{}
	plog := slog.New(slog.NewTextHandler(warns, &slog.HandlerOptions{Level: slog.LevelWarn}))
	book := newTxnBook()
	book.gate = make(chan struct{})
	close(book.gate)
	newTP := func() *producer.TransactionProducer {
		tp, err := producer.NewTransactionProducer(producer.Config{NamesrvAddrs: []string{c.NamesrvAddr}, Group: pgroup, Logger: plog}, book)
		if err != nil {
			t.Fatal(err)
		}
		if err := tp.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return tp
	}
	// The survivor: it sends one committed transaction (so it knows the topic's brokers
	// and heartbeats to them as a member of the group) and then only answers checks.
	// A SYNC_MASTER answers a half message SLAVE_NOT_AVAILABLE until its slave has
	// connected, and the producer then rolls the transaction back without running it:
	// wait for broker-a's replication first, and record the state the producer reports
	// (a run recorded t0 as committed although the producer had rolled it back, and
	// counted it as a committed transaction never stored).
	survivor := newTP()
	testkit.ShutdownOnCleanup(t, survivor.Shutdown)
	waitReplicating(t, survivor.Producer(), topic)
	res0, err := survivor.SendMessageInTransaction(testkit.Context(t, 60*time.Second), message.NewMessage(topic, []byte("t0")).SetKeys("t0"))
	if err != nil || res0.EndTransactionErr != nil {
		t.Fatalf("survivor's first transaction: %+v %v", res0, err)
	}

	var cstats producer.CheckStats // the deciding producers' checks, added up
	var rmu sync.Mutex
	recs := []txnRec{{id: "t0", state: res0.State, broker: res0.Queue.BrokerName, uniqKey: res0.MsgID}}
	down := outage(t)
	var outs []outageRec
	next := 1
	for k := 0; k < kills; k++ {
		// A restarted SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave is back
		// (the half message is then rolled back at once): start the round after that.
		waitReplicating(t, survivor.Producer(), topic)
		tp := newTP()
		gate := make(chan struct{})
		book.mu.Lock()
		book.gate = gate
		book.mu.Unlock()
		var wg sync.WaitGroup
		var finished sync.WaitGroup
		var ids []string
		for j := 0; j < perRound; j++ {
			id := fmt.Sprintf("t%d", next)
			next++
			ids = append(ids, id)
			wg.Add(1)
			finished.Add(1)
			go func() {
				defer wg.Done()
				defer finished.Done()
				sctx, cancel := context.WithTimeout(ctx, 120*time.Second)
				defer cancel()
				res, err := tp.SendMessageInTransaction(sctx, message.NewMessage(topic, []byte(id)).SetKeys(id))
				r := txnRec{id: id, round: k, sendErr: err}
				if err == nil {
					r.broker, r.state, r.endErr, r.uniqKey = res.Queue.BrokerName, res.State, res.EndTransactionErr, res.MsgID
				}
				rmu.Lock()
				recs = append(recs, r)
				rmu.Unlock()
			}()
		}
		// Every half message of the round is stored and decided (or its send failed)
		// before the kill.
		testkit.WaitFor(t, 180*time.Second, func() bool {
			book.mu.Lock()
			defer book.mu.Unlock()
			rmu.Lock()
			defer rmu.Unlock()
			returned := map[string]bool{}
			for _, r := range recs {
				returned[r.id] = true
			}
			for _, id := range ids {
				if _, ok := book.decided[id]; !ok && !returned[id] {
					return false
				}
			}
			return true
		}, "round ", k+1, ": half messages stored and decided")
		o := killMaster(t, c, down, func() {
			close(gate) // decisions go out now, to a dead master for broker-a's halves
			done := make(chan struct{})
			go func() { finished.Wait(); close(done) }()
			testkit.WaitFor(t, 120*time.Second, func() bool {
				select {
				case <-done:
					return true
				default:
					return false
				}
			}, "round ", k+1, ": transactions answered")
			// The deciding producer dies with its decisions for broker-a undelivered.
			if err := tp.Shutdown(testkit.Context(t, 30*time.Second)); err != nil {
				t.Logf("round %d: producer shutdown: %v", k+1, err)
			}
			st := tp.CheckStats()
			cstats.Received += st.Received
			cstats.Answered += st.Answered
			cstats.AnswerFailed += st.AnswerFailed
			cstats.Dropped += st.Dropped
		}, nil)
		wg.Wait()
		outs = append(outs, o)
		t.Logf("kill %d/%d: %s down %v", k+1, kills, o.what, o.back.Sub(o.kill).Round(100*time.Millisecond))
	}

	rmu.Lock()
	all := slices.Clone(recs)
	rmu.Unlock()
	var lostEnd, committed []txnRec
	sendFailed := 0
	for _, r := range all {
		switch {
		case r.sendErr != nil:
			sendFailed++
		case r.endErr != nil:
			lostEnd = append(lostEnd, r)
		}
		if r.sendErr == nil && r.state == producer.CommitMessage {
			committed = append(committed, r)
		}
	}
	resolved := func() bool {
		book.mu.Lock()
		defer book.mu.Unlock()
		for _, r := range lostEnd {
			if book.checks[r.id] == 0 {
				return false
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, r := range committed {
			if l.deliveries[r.id] == 0 {
				return false
			}
		}
		return true
	}
	ok := testkit.Eventually(300*time.Second, resolved)
	// Whatever else would be delivered (a rolled-back transaction, a second copy) has
	// had its chance once deliveries stop for 15 s.
	testkit.Settle(120*time.Second, 15*time.Second, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.delivered)
	}, nil)

	eff := l.effects()
	book.mu.Lock()
	l.mu.Lock()
	var checkDelay []time.Duration
	checkedLost, unchecked, committedDelivered, committedMissing, rolledBackDelivered, doubled, redelivered, checkedDecided := 0, 0, 0, 0, 0, 0, 0, 0
	for _, r := range lostEnd {
		if book.checks[r.id] > 0 {
			checkedLost++
			back := outs[r.round].back
			checkDelay = append(checkDelay, book.checkAt[r.id].Sub(back))
		} else {
			unchecked++
		}
	}
	for _, r := range all {
		if r.sendErr != nil {
			continue
		}
		if r.endErr == nil && book.checks[r.id] > 0 {
			checkedDecided++
		}
		switch {
		case r.state == producer.CommitMessage && l.deliveries[r.id] > 0:
			committedDelivered++
		case r.state == producer.CommitMessage:
			committedMissing++
		case l.deliveries[r.id] > 0:
			rolledBackDelivered++
		}
		if eff[r.id] > 1 {
			doubled++
		}
		if l.deliveries[r.id] > 1 {
			redelivered++
		}
	}
	totalChecks := 0
	for _, n := range book.checks {
		totalChecks += n
	}
	l.mu.Unlock()
	book.mu.Unlock()
	byRound := make([]string, len(outs))
	for k := range outs {
		onA, lost := 0, 0
		for _, r := range all {
			if r.round == k && r.id != "t0" && r.broker == "broker-a" {
				onA++
				if r.endErr != nil {
					lost++
				}
			}
		}
		byRound[k] = fmt.Sprintf("%d/%d", lost, onA)
	}
	t.Logf("per round, decisions lost / half messages on broker-a: %v; committed transactions stored more than once in the topic (a commit per answered check): %d", byRound, l.storedTwice())
	p50, mx := percentiles(checkDelay)
	var gaps []time.Duration
	for _, o := range outs {
		gaps = append(gaps, o.back.Sub(o.kill))
	}
	d50, dmx := percentiles(gaps)
	t.Logf("FIGURES Apache RocketMQ 4.9.7, 2 × (SYNC_MASTER + SLAVE), transactions | kill -9 master broker-a before END_TRANSACTION, deciding producer shut down | kills %d (down p50 %v max %v) | transactions %d, half message not stored %d | decision lost with the master %d: check-back reached the surviving producer's listener for %d, never for %d; first check %v (p50) / %v (max) after the master was back | checks of transactions whose decision had arrived %d; checks in all %d | committed %d: delivered %d, missing %d | rolled back delivered %d | effects doubled %d (deliveries repeated %d) | load average %s",
		len(outs), d50.Round(100*time.Millisecond), dmx.Round(100*time.Millisecond), len(all), sendFailed, len(lostEnd), checkedLost, unchecked,
		p50.Round(100*time.Millisecond), mx.Round(100*time.Millisecond), checkedDecided, totalChecks,
		len(committed), committedDelivered, committedMissing, rolledBackDelivered, doubled, redelivered, loadAverage())
	t.Logf("producer warnings about checks: %d answers not sent, %d checks dropped; first: %v",
		warns.count("answering a transaction check failed"), warns.count("check dropped"), warns.first("transaction check", 5))
	t.Logf("checks received / answered / answers not sent / dropped: survivor %+v, deciding producers %+v",
		survivor.CheckStats(), cstats)
	_, commitsRead := grepFile(blog.Name(), "the producer commit the message", 0)
	_, rollbacksRead := grepFile(blog.Name(), "the producer rollback the message", 0)
	t.Logf("brokers' output: answers to checks read: %d commit, %d rollback", commitsRead, rollbacksRead)
	// Each COMMIT answer the broker read should have stored one copy: per lost committed
	// decision, the commits read against the copies delivered.
	readOf := commitsReadByKey(blog.Name())
	copies := l.copies()
	read, stored, short := 0, 0, 0
	var shortEx []string
	for _, r := range lostEnd {
		if r.state != producer.CommitMessage {
			continue
		}
		read += readOf[r.uniqKey]
		stored += copies[r.id]
		if copies[r.id] < readOf[r.uniqKey] {
			short++
			if len(shortEx) < 5 {
				shortEx = append(shortEx, fmt.Sprintf("%s: %d read, %d stored", r.id, readOf[r.uniqKey], copies[r.id]))
			}
		}
	}
	t.Logf("lost committed decisions: %d COMMIT answers read by broker-a, %d copies stored and delivered; decisions with fewer copies than commits read: %d %v",
		read, stored, short, shortEx)
	offGaps, gapEx := l.offsetGaps()
	t.Logf("queue offsets never delivered between delivered ones: %d %v", offGaps, gapEx)
	var halves map[string][]halfRec
	if committedMissing != 0 || os.Getenv("SLUICE_FAILOVER_KEEP_LOGS") == "1" {
		// broker-a's half queue: how many records each lost decision left.
		hctx, cancel := context.WithTimeout(ctx, 120*time.Second)
		var herr error
		halves, herr = halfQueue(hctx, c.NamesrvAddr, "broker-a")
		cancel()
		deliveries := func(id string) int {
			l.mu.Lock()
			defer l.mu.Unlock()
			return l.deliveries[id]
		}
		perTxn := map[int]int{}
		shown := 0
		for _, r := range lostEnd {
			hs := halves[r.uniqKey]
			perTxn[len(hs)]++
			if shown < 6 && r.state == producer.CommitMessage {
				shown++
				book.mu.Lock()
				n := book.checks[r.id]
				book.mu.Unlock()
				t.Logf("lost decision %s (%s, delivered %d, checks %d): half records %s; answers read %s; stored %s", r.id, r.uniqKey, deliveries(r.id), n,
					describeHalves(hs), answersRead(blog.Name(), r.uniqKey), storedCopies(ctx, c.NamesrvAddr, topic, r.id))
			}
		}
		t.Logf("broker-a's half queue: %d transactions; lost decisions by half records: %v; error: %v", len(halves), perTxn, herr)
	}
	if committedMissing != 0 {
		adm, err := admin.New(admin.Config{NamesrvAddrs: []string{c.NamesrvAddr}, Logger: testkit.Quiet()})
		if err == nil {
			defer func() { _ = adm.Close() }()
			shown := 0
			for _, r := range all {
				if r.sendErr != nil || r.state != producer.CommitMessage || shown >= 10 {
					continue
				}
				l.mu.Lock()
				n := l.deliveries[r.id]
				l.mu.Unlock()
				if n > 0 {
					continue
				}
				shown++
				fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				ms, ferr := adm.FindMessages(fctx, topic, r.id, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
				cancel()
				var where []string
				for _, m := range ms {
					where = append(where, fmt.Sprintf("%s/%d@%d stored %s", m.BrokerName, m.QueueID, m.QueueOffset, time.UnixMilli(m.StoreTimestamp).Format("15:04:05.000")))
				}
				book.mu.Lock()
				checks := book.checks[r.id]
				book.mu.Unlock()
				t.Logf("committed but not delivered: %s (UNIQ_KEY %s) round %d broker %s END error %v checks %d; in the topic: %v %v", r.id, r.uniqKey, r.round+1, r.broker, r.endErr, checks, where, ferr)
				t.Logf("  half records: %s", describeHalves(halves[r.uniqKey]))
				diagnoseTxn(t, c, adm, book, blog, r)
			}
			octx, cancel := context.WithTimeout(ctx, 20*time.Second)
			offs, oerr := adm.ConsumerOffsets(octx, group, topic)
			cancel()
			t.Logf("consumer offsets: %+v %v", offs, oerr)
		}
	}
	if !ok || unchecked != 0 || committedMissing != 0 {
		t.Errorf("not resolved within 300 s: %d decisions lost with the master never checked, %d committed transactions not delivered", unchecked, committedMissing)
	}
	if len(lostEnd) == 0 {
		t.Errorf("no decision was lost with the master: the campaign tested nothing")
	}
	if rolledBackDelivered != 0 {
		t.Errorf("%d rolled-back transactions delivered", rolledBackDelivered)
	}
	if doubled != 0 {
		t.Errorf("%d effects applied twice despite the inbox", doubled)
	}
}

// lineLog keeps the lines written to it (a slog text handler's records).
type lineLog struct {
	mu    sync.Mutex
	lines []string
}

func (w *lineLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines = append(w.lines, string(p))
	return len(p), nil
}

// count returns how many lines contain s.
func (w *lineLog) count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.lines {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// first returns up to n lines containing s.
func (w *lineLog) first(s string, n int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, l := range w.lines {
		if strings.Contains(l, s) && len(out) < n {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// brokerLog returns a file receiving the cluster's output; it is removed after a test
// that passed and kept (its path logged) after one that failed, or always with
// SLUICE_FAILOVER_KEEP_LOGS=1.
func brokerLog(t *testing.T) *os.File {
	t.Helper()
	f, err := os.CreateTemp("", "sluice-failover-brokers-*.log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Close()
		if t.Failed() || os.Getenv("SLUICE_FAILOVER_KEEP_LOGS") == "1" {
			t.Logf("brokers' output kept in %s", f.Name())
			return
		}
		_ = os.Remove(f.Name())
	})
	return f
}

// grepFile returns up to max lines of path containing s, and how many there were.
func grepFile(path, s string, max int) ([]string, int) {
	f, err := os.Open(path)
	if err != nil {
		return []string{err.Error()}, 0
	}
	defer func() { _ = f.Close() }()
	var out []string
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			n++
			if len(out) < max {
				out = append(out, sc.Text())
			}
		}
	}
	return out, n
}

// diagnoseTxn logs what the broker knows of a committed transaction that was never
// stored: the last checks' records as the broker has them now (VIEW_MESSAGE_BY_ID), its
// output naming the transaction's UNIQ_KEY (each answer received), and the broker's
// answer to a synchronous END_TRANSACTION commit carrying the last check's offsets —
// the answer a one-way END_TRANSACTION never hears.
func diagnoseTxn(t *testing.T, c *peers.RocketMQCluster, adm *admin.Admin, book *txnBook, blog *os.File, r txnRec) {
	t.Helper()
	book.mu.Lock()
	seen := slices.Clone(book.seen[r.id])
	book.mu.Unlock()
	if n := len(seen); n > 3 {
		seen = seen[n-3:]
	}
	for _, s := range seen {
		vctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := adm.ViewMessage(vctx, s.offsetMsgID)
		cancel()
		stored := fmt.Sprint(err)
		if err == nil {
			stored = fmt.Sprintf("topic %s queue offset %d commitlog offset %d PGROUP %s check times %s", m.Topic, m.QueueOffset, m.CommitLogOffset,
				m.Property(message.PropertyProducerGroup), m.Property(message.PropertyTransactionCheckTimes))
		}
		t.Logf("  check at %s: queue offset %d commitlog offset %d (%s) check times %s; the broker has there: %s",
			s.at.Format("15:04:05.000"), s.queueOffset, s.commitLogOffset, s.offsetMsgID, s.checkTimes, stored)
	}
	if r.uniqKey != "" {
		lines, n := grepFile(blog.Name(), r.uniqKey, 2)
		t.Logf("  brokers' output lines naming %s: %d; answers read: %s; first: %q", r.uniqKey, n, answersRead(blog.Name(), r.uniqKey), lines)
	}
	if len(seen) == 0 {
		return
	}
	last := seen[len(seen)-1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	addr, err := c.MasterAddr(ctx, r.broker)
	if err != nil || addr == "" {
		t.Logf("  no master address for %s: %v", r.broker, err)
		return
	}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		t.Logf("  remoting client: %v", err)
		return
	}
	defer func() { _ = rc.Close() }()
	req := remoting.NewRequest(remoting.EndTransaction, wire.EndTransactionHeader{ProducerGroup: "txn-failover-producers",
		TranStateTableOffset: last.queueOffset, CommitLogOffset: last.commitLogOffset, CommitOrRollback: message.SysFlagTransactionCommit,
		FromTransactionCheck: true, MsgID: r.uniqKey, TransactionID: r.uniqKey}.Ext(), nil)
	resp, err := rc.InvokeSync(ctx, addr, req)
	if err != nil {
		t.Logf("  synchronous END_TRANSACTION to %s: %v", addr, err)
		return
	}
	t.Logf("  synchronous END_TRANSACTION commit with the last check's offsets to %s: code %d remark %q", addr, resp.Code, resp.Remark)
}

// answersRead lists the answers to checks of the transaction with UNIQ_KEY uniqKey that
// the brokers logged reading (their transaction logger's warning for each), as
// "HH:MM:SS.mmm decision q<tranStateTableOffset> c<commitLogOffset>".
func answersRead(path, uniqKey string) string {
	lines, _ := grepFile(path, "msgId='"+uniqKey+"'", 100)
	field := func(l, k string) string {
		i := strings.Index(l, k+"=")
		if i < 0 {
			return "?"
		}
		v := l[i+len(k)+1:]
		if j := strings.IndexAny(v, ",}"); j >= 0 {
			v = v[:j]
		}
		return v
	}
	var b strings.Builder
	for _, l := range lines {
		d := "rollback"
		if strings.Contains(l, "producer commit") {
			d = "commit"
		}
		ts, _, _ := strings.Cut(l, " ")
		fmt.Fprintf(&b, "[%s %s q%s c%s] ", ts, d, field(l, "tranStateTableOffset"), field(l, "commitLogOffset"))
	}
	return b.String()
}

// storedCopies lists the copies of a transaction's message in topic (found by key) as
// "HH:MM:SS.mmm from c<commitlog offset of the half record committed>".
func storedCopies(ctx context.Context, namesrv, topic, key string) string {
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{namesrv}, Logger: testkit.Quiet()})
	if err != nil {
		return err.Error()
	}
	defer func() { _ = adm.Close() }()
	fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ms, err := adm.FindMessages(fctx, topic, key, time.Time{}, time.Time{})
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "[%s from c%d] ", time.UnixMilli(m.StoreTimestamp).Format("15:04:05.000"), m.PreparedTransactionOffset)
	}
	if err != nil {
		b.WriteString(err.Error())
	}
	return b.String()
}

// commitsReadByKey counts, per UNIQ_KEY, the COMMIT answers to checks the brokers logged
// reading.
func commitsReadByKey(path string) map[string]int {
	n := map[string]int{}
	f, err := os.Open(path)
	if err != nil {
		return n
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, "the producer commit the message") {
			continue
		}
		if _, v, ok := strings.Cut(l, "msgId='"); ok {
			if k, _, ok := strings.Cut(v, "'"); ok {
				n[k]++
			}
		}
	}
	return n
}

// halfRec is one record of a transaction in broker-a's half queue.
type halfRec struct {
	queueOffset, commitLogOffset int64
	checkTimes                   string
	stored                       time.Time
}

// halfQueue reads queue 0 of broker's half topic (RMQ_SYS_TRANS_HALF_TOPIC) and returns
// its records per UNIQ_KEY. (The op topic, RMQ_SYS_TRANS_OP_HALF_TOPIC, cannot be read
// so: a 4.9.7 broker has no topic config for it and answers a pull TOPIC_NOT_EXIST.)
func halfQueue(ctx context.Context, namesrv, broker string) (map[string][]halfRec, error) {
	pc, err := consumer.NewPullConsumer(consumer.PullConfig{NamesrvAddrs: []string{namesrv}, Group: "txn-failover-diagnosis", Logger: testkit.Quiet()})
	if err != nil {
		return nil, err
	}
	if err := pc.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = pc.Shutdown(context.Background()) }()
	read := func(topic string, each func(m *message.MessageExt)) error {
		off := int64(0)
		for i := 0; i < 10000; i++ {
			res, err := pc.Pull(ctx, consumer.PullRequest{Queue: message.MessageQueue{Topic: topic, BrokerName: broker, QueueID: 0}, Offset: off})
			if err != nil {
				return fmt.Errorf("%s from %d: %w", topic, off, err)
			}
			for _, m := range res.Messages {
				each(m)
			}
			if res.Status != consumer.PullFound && res.Status != consumer.PullNoMatchedMsg || res.NextBeginOffset <= off {
				return nil
			}
			off = res.NextBeginOffset
		}
		return nil
	}
	halves := map[string][]halfRec{}
	if err := read("RMQ_SYS_TRANS_HALF_TOPIC", func(m *message.MessageExt) {
		k := m.UniqKey()
		halves[k] = append(halves[k], halfRec{queueOffset: m.QueueOffset, commitLogOffset: m.CommitLogOffset,
			checkTimes: m.Property(message.PropertyTransactionCheckTimes), stored: time.UnixMilli(m.StoreTimestamp)})
	}); err != nil {
		return nil, err
	}
	return halves, nil
}

// describeHalves prints a transaction's half records: queue offset, commitlog offset,
// check times and when stored.
func describeHalves(recs []halfRec) string {
	var b strings.Builder
	for _, h := range recs {
		fmt.Fprintf(&b, "[q%d c%d times=%s %s] ", h.queueOffset, h.commitLogOffset, h.checkTimes, h.stored.Format("15:04:05.000"))
	}
	return b.String()
}
