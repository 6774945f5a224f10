package producer

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// bodyListener decides by the message body:
//
//	"commit", "rollback"   at once
//	"unknown-then-commit"  unknown at once, commit when checked
//	"panic-then-commit"    ExecuteLocalTransaction panics, commit when checked
//	"late-commit"          unknown at once, commit when checked
//	"unknown-forever"      unknown, also when checked
//	"check-panics"         unknown at once, CheckLocalTransaction panics
//	"bad-state"            returns LocalTransactionState(42)
//
// It counts calls per body and can hold CheckLocalTransaction calls on a gate.
type bodyListener struct {
	mu       sync.Mutex
	executed map[string]int
	checks   map[string]int

	gate    chan struct{} // non-nil: checks wait for it to be closed
	running atomic.Int32  // checks running now
	maxRun  atomic.Int32  // most checks seen running at once
}

func newBodyListener() *bodyListener {
	return &bodyListener{executed: map[string]int{}, checks: map[string]int{}}
}

func (l *bodyListener) ExecuteLocalTransaction(_ context.Context, m *message.Message) LocalTransactionState {
	l.mu.Lock()
	l.executed[string(m.Body)]++
	l.mu.Unlock()
	switch string(m.Body) {
	case "commit":
		return CommitMessage
	case "rollback":
		return RollbackMessage
	case "panic-then-commit":
		panic("local transaction blew up")
	case "bad-state":
		return LocalTransactionState(42)
	}
	return Unknown
}

func (l *bodyListener) CheckLocalTransaction(ctx context.Context, m *message.MessageExt) LocalTransactionState {
	n := l.running.Add(1)
	defer l.running.Add(-1)
	for {
		cur := l.maxRun.Load()
		if n <= cur || l.maxRun.CompareAndSwap(cur, n) {
			break
		}
	}
	if l.gate != nil {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return Unknown
		}
	}
	l.mu.Lock()
	l.checks[string(m.Body)]++
	l.mu.Unlock()
	switch string(m.Body) {
	case "unknown-then-commit", "panic-then-commit", "late-commit", "commit":
		return CommitMessage
	case "rollback":
		return RollbackMessage
	case "check-panics":
		panic("check blew up")
	}
	return Unknown
}

func (l *bodyListener) count(m map[string]int, body string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return m[body]
}

func newTxnProducer(t *testing.T, cfg Config, l TransactionListener, opts ...TransactionOption) *TransactionProducer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	tp, err := NewTransactionProducer(cfg, l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			t.Errorf("transaction producer shutdown: %v", err)
		}
	})
	return tp
}

func TestNewTransactionProducerErrors(t *testing.T) {
	cfg := Config{NamesrvAddrs: []string{"127.0.0.1:9876"}, Logger: quiet}
	if _, err := NewTransactionProducer(cfg, nil); err == nil || !strings.Contains(err.Error(), "listener") {
		t.Fatalf("nil listener: %v", err)
	}
	l := newBodyListener()
	for _, c := range []struct {
		opt  TransactionOption
		want string
	}{
		{WithCheckWorkers(0), "WithCheckWorkers 0"},
		{WithCheckWorkers(MaxCheckWorkers + 1), "WithCheckWorkers 257"},
		{WithCheckBacklog(0), "WithCheckBacklog 0"},
		{WithCheckBacklog(MaxCheckBacklog + 1), "WithCheckBacklog 65537"},
	} {
		if _, err := NewTransactionProducer(cfg, l, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want error naming %q, got %v", c.want, err)
		}
	}
	if _, err := NewTransactionProducer(Config{}, l); err == nil || !strings.Contains(err.Error(), "NamesrvAddrs") {
		t.Fatalf("config error: %v", err)
	}
}

func TestTransactionProducerLifecycle(t *testing.T) {
	tp, err := NewTransactionProducer(Config{NamesrvAddrs: []string{deadAddr(t)}, Logger: quiet}, newBodyListener())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.SendMessageInTransaction(context.Background(), message.NewMessage("T", []byte("commit"))); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("before Start: %v", err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := tp.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Shutdown: %v", err)
	}
	if _, err := tp.SendMessageInTransaction(context.Background(), message.NewMessage("T", []byte("commit"))); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Shutdown: %v", err)
	}
}

// TestTransactionRefusedBeforeNetwork: a delayed transactional message (and other bad
// messages) fail with a *message.ValidationError and no request reaches a server.
func TestTransactionRefusedBeforeNetwork(t *testing.T) {
	b := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(4, [2]string{"broker-a", b.Addr()})})
	l := newBodyListener()
	tp := newTxnProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, Group: "pg"}, l)

	delayed := message.NewMessage("T", []byte("commit")).SetDelayLevel(3)
	_, err := tp.SendMessageInTransaction(context.Background(), delayed)
	var ve *message.ValidationError
	if !errors.As(err, &ve) || ve.Field != "delay level" || !strings.Contains(ve.Reason, "delay level 3") {
		t.Fatalf("delayed transactional message: %v", err)
	}
	if delayed.Property(message.PropertyTransactionPrepared) != "" {
		t.Fatal("a refused message must not be marked as a half message")
	}
	for name, m := range map[string]*message.Message{
		"nil":          nil,
		"empty body":   message.NewMessage("T", nil),
		"system topic": message.NewMessage(message.TransHalfTopic, []byte("x")),
	} {
		if _, err := tp.SendMessageInTransaction(context.Background(), m); !errors.As(err, &ve) {
			t.Errorf("%s: want *message.ValidationError, got %v", name, err)
		}
	}
	if n := len(ns.Requests(remoting.GetRouteInfoByTopic)) + len(b.Requests(remoting.SendMessageV2)) + len(b.Requests(remoting.EndTransaction)); n != 0 {
		t.Fatalf("%d requests reached the servers", n)
	}
	if l.count(l.executed, "commit") != 0 {
		t.Fatal("the local transaction ran for a refused message")
	}
}

// TestTransactionWire checks the half send and END_TRANSACTION against a fake broker:
// headers, the decision codes, rollback on a non-OK store status, a panicking or
// misbehaving listener, and a refused END_TRANSACTION.
func TestTransactionWire(t *testing.T) {
	var endCode atomic.Int32 // response code for END_TRANSACTION
	var sendCode atomic.Int32
	hs := brokerHandlers(func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		return storeOK(remoting.ResponseCode(sendCode.Load()))(req)
	})
	hs[remoting.EndTransaction] = func(*remoting.RemotingCommand) *remoting.RemotingCommand {
		return remoting.NewResponse(remoting.ResponseCode(endCode.Load()), "The producer group wrong")
	}
	b := fakeremote.Start(t, hs)
	ns := newNamesrv(t, map[string]string{"T": routeJSON(2, [2]string{"broker-a", b.Addr()})})
	l := newBodyListener()
	tp := newTxnProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, Group: "pg"}, l)

	ends := func() []*remoting.RemotingCommand { return b.Requests(remoting.EndTransaction) }
	send := func(body string) (*TransactionSendResult, *remoting.RemotingCommand, *remoting.RemotingCommand) {
		t.Helper()
		before := len(ends())
		msg := message.NewMessage("T", []byte(body))
		r, err := tp.SendMessageInTransaction(context.Background(), msg)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		testkit.WaitFor(t, 5*time.Second, func() bool { return len(ends()) == before+1 }, func() string { return body + ": END_TRANSACTION" })
		sends := b.Requests(remoting.SendMessageV2)
		return r, sends[len(sends)-1], ends()[before]
	}

	r, half, end := send("commit")
	if r.Status != message.SendOK || r.State != CommitMessage || r.EndTransactionErr != nil || r.QueueOffset != 7 {
		t.Fatalf("commit result %+v", r)
	}
	props := message.UnmarshalProperties(half.ExtFields["i"])
	if half.ExtFields["f"] != "4" || props[message.PropertyTransactionPrepared] != "true" || props[message.PropertyProducerGroup] != "pg" {
		t.Fatalf("half message header: sysFlag %q properties %v", half.ExtFields["f"], props)
	}
	want := map[string]string{"producerGroup": "pg", "tranStateTableOffset": "7", "commitLogOffset": "16", "commitOrRollback": "8",
		"fromTransactionCheck": "false", "msgId": r.MsgID, "transactionId": r.MsgID, "bname": "broker-a"}
	for k, v := range want {
		if end.ExtFields[k] != v {
			t.Errorf("END_TRANSACTION %s = %q, want %q", k, end.ExtFields[k], v)
		}
	}
	if end.IsOneway() {
		t.Error("a commit should wait for the broker's answer")
	}

	r, _, end = send("rollback")
	if r.State != RollbackMessage || end.ExtFields["commitOrRollback"] != "12" || r.EndTransactionErr != nil {
		t.Fatalf("rollback: %+v, commitOrRollback %q", r, end.ExtFields["commitOrRollback"])
	}

	r, _, end = send("unknown-forever")
	if r.State != Unknown || end.ExtFields["commitOrRollback"] != "0" || !end.IsOneway() || r.EndTransactionErr != nil {
		t.Fatalf("unknown: %+v, commitOrRollback %q oneway %v", r, end.ExtFields["commitOrRollback"], end.IsOneway())
	}

	r, _, end = send("panic-then-commit")
	if r.State != Unknown || end.ExtFields["commitOrRollback"] != "0" || !strings.Contains(end.Remark, "executeLocalTransactionBranch exception: local transaction blew up") {
		t.Fatalf("panicking listener: %+v, commitOrRollback %q remark %q", r, end.ExtFields["commitOrRollback"], end.Remark)
	}

	r, _, end = send("bad-state")
	if r.State != Unknown || end.ExtFields["commitOrRollback"] != "0" {
		t.Fatalf("out-of-range state: %+v", r)
	}

	// Stored, but not SEND_OK: rolled back without running the local transaction.
	sendCode.Store(int32(remoting.FlushDiskTimeout))
	r, _, end = send("commit")
	if r.Status != message.SendFlushDiskTimeout || r.State != RollbackMessage || end.ExtFields["commitOrRollback"] != "12" {
		t.Fatalf("flush disk timeout: %+v, commitOrRollback %q", r, end.ExtFields["commitOrRollback"])
	}
	if n := l.count(l.executed, "commit"); n != 1 {
		t.Fatalf("local transaction ran %d times, want 1 (not for the FLUSH_DISK_TIMEOUT send)", n)
	}
	sendCode.Store(0)

	// The broker refuses the decision: the send still succeeded, the result says why.
	endCode.Store(int32(remoting.SystemError))
	r, _, _ = send("commit")
	var re *remoting.ResponseError
	if !errors.As(r.EndTransactionErr, &re) || re.Code != remoting.SystemError || !strings.Contains(re.Remark, "producer group wrong") {
		t.Fatalf("refused END_TRANSACTION: %v", r.EndTransactionErr)
	}
	endCode.Store(0)

	// A half message the broker refuses: an error, no local transaction, no decision,
	// and msg is not left marked as a half message.
	sendCode.Store(int32(remoting.MessageIllegal))
	before := len(ends())
	msg := message.NewMessage("T", []byte("rollback"))
	if _, err := tp.SendMessageInTransaction(context.Background(), msg); err == nil {
		t.Fatal("a refused half message must fail")
	}
	var se *SendError
	if _, err := tp.SendMessageInTransaction(context.Background(), message.NewMessage("T", []byte("x"))); !errors.As(err, &se) || !errors.As(err, &re) || re.Code != remoting.MessageIllegal {
		t.Fatalf("refused half message: %v", err)
	}
	if len(ends()) != before || msg.Property(message.PropertyTransactionPrepared) != "" || l.count(l.executed, "rollback") != 1 {
		t.Fatalf("after a refused half message: %d ends (want %d), TRAN_MSG %q", len(ends()), before, msg.Property(message.PropertyTransactionPrepared))
	}
}

// checkRequest builds a CHECK_TRANSACTION_STATE as a broker sends it.
func checkRequest(t *testing.T, group, body string, halfOffset, phyOffset int64) *remoting.RemotingCommand {
	t.Helper()
	m := &message.MessageExt{
		Message:         message.Message{Topic: "T", Body: []byte(body)},
		QueueOffset:     halfOffset,
		CommitLogOffset: phyOffset,
		BornHost:        netip.MustParseAddrPort("127.0.0.1:5000"),
		StoreHost:       netip.MustParseAddrPort("127.0.0.1:10911"),
	}
	uniq := "UNIQ" + strconv.FormatInt(halfOffset, 10)
	m.SetProperty(message.PropertyProducerGroup, group)
	m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, uniq)
	rec, err := message.EncodeRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	return remoting.NewRequest(remoting.CheckTransactionState, map[string]string{
		"tranStateTableOffset": strconv.FormatInt(halfOffset, 10),
		"commitLogOffset":      strconv.FormatInt(phyOffset, 10),
		"msgId":                uniq,
		"transactionId":        uniq,
		"offsetMsgId":          "7F00000100002A9F" + "000000000000002A",
	}, rec)
}

// TestTransactionChecksBounded: checks run on at most WithCheckWorkers workers, at most
// WithCheckBacklog wait, the rest are dropped; each answered check sends END_TRANSACTION
// with fromTransactionCheck=true to the address the check came from; checks for another
// group and malformed ones are ignored; a panicking check answers unknown.
func TestTransactionChecksBounded(t *testing.T) {
	b := fakeremote.Start(t, fakeremote.Handlers{remoting.EndTransaction: ok})
	l := newBodyListener()
	l.gate = make(chan struct{})
	tp := newTxnProducer(t, Config{NamesrvAddrs: []string{deadAddr(t)}, Group: "pg"}, l, WithCheckWorkers(2), WithCheckBacklog(3))
	addr := b.Addr()

	bodies := []string{"commit", "rollback", "unknown-forever", "check-panics", "unknown-then-commit"}
	for i, body := range bodies {
		tp.onCheck(context.Background(), addr, checkRequest(t, "pg", body, int64(100+i), int64(1000+i)))
		if i == 1 { // both workers busy before the backlog fills, so exactly 3 wait
			testkit.WaitFor(t, 5*time.Second, func() bool { return l.running.Load() == 2 }, func() string { return "2 checks running" })
		}
	}
	for i := 0; i < 4; i++ { // backlog (3) full: dropped
		tp.onCheck(context.Background(), addr, checkRequest(t, "pg", "commit", int64(200+i), int64(2000+i)))
	}
	if n := tp.CheckStats().Dropped; n != 4 {
		t.Fatalf("dropped %d checks, want 4", n)
	}
	tp.onCheck(context.Background(), addr, checkRequest(t, "other-group", "commit", 300, 3000))
	bad := checkRequest(t, "pg", "commit", 301, 3001)
	delete(bad.ExtFields, "commitLogOffset")
	tp.onCheck(context.Background(), addr, bad)
	garbled := checkRequest(t, "pg", "commit", 302, 3002)
	garbled.Body = garbled.Body[:10]
	tp.onCheck(context.Background(), addr, garbled)

	close(l.gate)
	ends := func() []*remoting.RemotingCommand { return b.Requests(remoting.EndTransaction) }
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(ends()) == len(bodies) }, func() string {
		return "END_TRANSACTION for every accepted check, got " + strconv.Itoa(len(ends()))
	})
	if m := l.maxRun.Load(); m > 2 {
		t.Fatalf("%d checks ran at once, WithCheckWorkers(2)", m)
	}
	wantCode := map[string]string{"100": "8", "101": "12", "102": "0", "103": "0", "104": "8"}
	for _, e := range ends() {
		off := e.ExtFields["tranStateTableOffset"]
		code, ok := wantCode[off]
		if !ok {
			t.Fatalf("END_TRANSACTION for an ignored or dropped check: %v", e.ExtFields)
		}
		delete(wantCode, off)
		phy, _ := strconv.Atoi(off)
		if e.ExtFields["commitOrRollback"] != code || e.ExtFields["fromTransactionCheck"] != "true" || e.ExtFields["producerGroup"] != "pg" ||
			e.ExtFields["commitLogOffset"] != strconv.Itoa(phy+900) || e.ExtFields["msgId"] != "UNIQ"+off ||
			e.ExtFields["transactionId"] != "UNIQ"+off || !e.IsOneway() {
			t.Errorf("END_TRANSACTION for check %s: %v (oneway %v), want commitOrRollback %s", off, e.ExtFields, e.IsOneway(), code)
		}
	}
	// Nothing more arrives for the ignored checks: one more accepted check is answered,
	// and it is the only new END_TRANSACTION.
	tp.onCheck(context.Background(), addr, checkRequest(t, "pg", "rollback", 400, 4000))
	testkit.WaitFor(t, 5*time.Second, func() bool { return len(ends()) == len(bodies)+1 }, func() string { return "the last check's answer" })
	if last := ends()[len(bodies)]; last.ExtFields["tranStateTableOffset"] != "400" {
		t.Fatalf("unexpected END_TRANSACTION %v", last.ExtFields)
	}
	// The other group's and the malformed checks are not counted; the dropped ones are.
	if st, want := tp.CheckStats(), (CheckStats{Received: 10, Answered: 6, Dropped: 4}); st != want {
		t.Errorf("CheckStats %+v, want %+v", st, want)
	}
}

// TestTransactionShutdownCancelsChecks: Shutdown with a short deadline cancels the
// context of a check that is still running and returns the deadline error; no
// goroutine is left (goleak in TestMain).
func TestTransactionShutdownCancelsChecks(t *testing.T) {
	b := fakeremote.Start(t, fakeremote.Handlers{remoting.EndTransaction: ok})
	l := newBodyListener()
	l.gate = make(chan struct{}) // never opened: the check waits for its context
	tp, err := NewTransactionProducer(Config{NamesrvAddrs: []string{deadAddr(t)}, Group: "pg", Logger: quiet}, l)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	tp.onCheck(context.Background(), b.Addr(), checkRequest(t, "pg", "commit", 1, 2))
	testkit.WaitFor(t, 5*time.Second, func() bool { return l.running.Load() == 1 }, func() string { return "the check running" })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := tp.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a check running: %v", err)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return l.running.Load() == 0 }, func() string { return "the check to see its context cancelled" })
	// A check arriving after Shutdown is ignored.
	tp.onCheck(context.Background(), b.Addr(), checkRequest(t, "pg", "commit", 3, 4))
	if len(tp.checks) != 0 {
		t.Fatal("a check was queued after Shutdown")
	}
}

// TestTransactionAgainstBroker: against the real broker with short check settings,
// commit, rollback, unknown-then-commit-on-check, a panicking local transaction
// committed on check, and unknown forever (discarded after transactionCheckMax checks):
// exactly the committed messages are delivered, each once; the discarded one lands in
// TRANS_CHECK_MAX_TIME_TOPIC; decided messages are not checked again.
func TestTransactionAgainstBroker(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{TransactionTimeOut: 200, TransactionCheckInterval: 200, TransactionCheckMax: 2})
	ns := testbroker.Namesrv(b)
	createTopic(t, ns, "TxT", 2)
	col := poll(t, b.Addr(), "TxT", 2, "case")
	l := newBodyListener()
	tp := newTxnProducer(t, Config{NamesrvAddrs: ns, Group: "tx_pg"}, l)

	cases := []string{"commit", "rollback", "unknown-then-commit", "panic-then-commit", "unknown-forever"}
	wantState := map[string]LocalTransactionState{"commit": CommitMessage, "rollback": RollbackMessage,
		"unknown-then-commit": Unknown, "panic-then-commit": Unknown, "unknown-forever": Unknown}
	for _, c := range cases {
		msg := message.NewMessage("TxT", []byte(c))
		msg.SetProperty("case", c)
		r, err := tp.SendMessageInTransaction(context.Background(), msg)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		if r.Status != message.SendOK || r.State != wantState[c] || r.EndTransactionErr != nil || r.MsgID != msg.UniqKey() {
			t.Fatalf("%s: result %+v", c, r)
		}
	}
	committed := []string{"commit", "panic-then-commit", "unknown-then-commit"}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return col.count() == len(committed) && maxOffsets(t, b.Addr(), message.TransCheckMaxTimeTopic, 1)[0] == 1
	}, func() string {
		return "committed deliveries and the check-max discard; delivered " + strconv.Itoa(col.count())
	})
	for _, c := range committed {
		if d := col.get(c); len(d) != 1 || string(d[0].msg.Body) != c {
			t.Fatalf("%s delivered %d times", c, len(d))
		}
	}
	for _, c := range []string{"rollback", "unknown-forever"} {
		if d := col.get(c); len(d) != 0 {
			t.Fatalf("%s delivered", c)
		}
	}
	if n := l.count(l.checks, "unknown-forever"); n != 2 {
		t.Fatalf("unknown-forever checked %d times, want transactionCheckMax 2", n)
	}
	// A later half message, committed only when checked, proves that the check service
	// scanned the half queue again after all the decisions above: by the time it is
	// delivered, nothing decided was checked again.
	late := message.NewMessage("TxT", []byte("late-commit"))
	late.SetProperty("case", "late-commit")
	if r, err := tp.SendMessageInTransaction(context.Background(), late); err != nil || r.State != Unknown {
		t.Fatalf("late-commit: %+v %v", r, err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return len(col.get("late-commit")) == 1 }, func() string { return "late-commit delivered" })
	committed = append(committed, "late-commit")
	for c, want := range map[string]int{"commit": 0, "rollback": 0, "unknown-then-commit": 1, "panic-then-commit": 1, "unknown-forever": 2, "late-commit": 1} {
		if n := l.count(l.checks, c); n != want {
			t.Errorf("%s checked %d times, want %d", c, n, want)
		}
	}
	if col.count() != len(committed) {
		t.Fatalf("%d deliveries, want %d", col.count(), len(committed))
	}
	for _, c := range cases {
		if n := l.count(l.executed, c); n != 1 {
			t.Errorf("%s: local transaction ran %d times", c, n)
		}
	}
}
