package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
)

func newOutbox(t testing.TB, tg *sqltest.Target, mod ...func(*outbox.Config)) *outbox.Outbox {
	t.Helper()
	table := tg.Name("outbox")
	tg.Name("outbox_keys") // dropped in cleanup too
	cfg := outbox.Config{DB: tg.DB, Dialect: tg.Dialect, Table: table}
	for _, f := range mod {
		f(&cfg)
	}
	ob, err := outbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.CreateTable(ctx); err != nil {
		t.Fatalf("second CreateTable: %v", err)
	}
	return ob
}

// addTx adds msgs in one transaction and commits (or rolls back when rollback is set).
func addTx(t testing.TB, db *sql.DB, ob *outbox.Outbox, rollback bool, msgs ...*message.Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Add(ctx, tx, msgs...); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if rollback {
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// recorder is a SendFunc that records what it was given and fails when fail says so.
type recorder struct {
	mu   sync.Mutex
	got  []*message.Message
	fail func(m *message.Message, n int) error // n: how often this body was offered before
	seen map[string]int
}

func (r *recorder) send(_ context.Context, m *message.Message) (*message.SendResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]int{}
	}
	n := r.seen[string(m.Body)]
	r.seen[string(m.Body)]++
	if r.fail != nil {
		if err := r.fail(m, n); err != nil {
			return nil, err
		}
	}
	r.got = append(r.got, m.Clone())
	return &message.SendResult{Status: message.SendOK, MsgID: m.UniqKey()}, nil
}

func (r *recorder) bodies() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.got))
	for i, m := range r.got {
		out[i] = string(m.Body)
	}
	return out
}

func newRelay(t testing.TB, ob *outbox.Outbox, send func(context.Context, *message.Message) (*message.SendResult, error), mod ...func(*outbox.RelayConfig)) *outbox.Relay {
	t.Helper()
	cfg := outbox.RelayConfig{Send: send, BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, Logger: testkit.Logger(t)}
	for _, f := range mod {
		f(&cfg)
	}
	r, err := outbox.NewRelay(ob, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// drain runs RunOnce until two claims in a row (testkit.PollInterval apart, so backoffs
// of 1-2 ms pass) find nothing due.
func drain(t testing.TB, r *outbox.Relay) {
	t.Helper()
	ctx := context.Background()
	empty := 0
	testkit.WaitFor(t, 60*time.Second, func() bool {
		for {
			n, err := r.RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			empty = 0
		}
		empty++
		return empty >= 2
	}, "the relay drained the table")
}

func stats(t testing.TB, ob *outbox.Outbox) outbox.Stats {
	t.Helper()
	st, err := ob.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestAddValidation(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ob := newOutbox(t, tg)
		ctx := context.Background()
		tx, err := tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		cases := []struct {
			msg   *message.Message
			field string
		}{
			{message.NewMessage("bad topic", []byte("x")), "topic"},
			{message.NewMessage("", []byte("x")), "topic"},
			{message.NewMessage("RMQ_SYS_TRANS_HALF_TOPIC", []byte("x")), "topic"},
			{message.NewMessage("T", nil), "body"},
			{message.NewMessage("T", make([]byte, message.DefaultMaxMessageSize+1)), "body"},
			{message.NewMessage("T", []byte("x")).SetProperty("a", "b\x01c"), "properties"},
			{message.NewMessage("T", []byte("x")).SetTag("*"), "tag"},
			{message.NewMessage("T", []byte("x")).SetProperty(message.PropertyTransactionPrepared, "true"), "properties"},
			{nil, "message"},
		}
		for i, c := range cases {
			err := ob.Add(ctx, tx, message.NewMessage("T", []byte("ok")), c.msg)
			var ae *outbox.AddError
			var ve *message.ValidationError
			if !errors.As(err, &ae) || ae.Index != 1 || !errors.As(err, &ve) || ve.Field != c.field {
				t.Errorf("case %d: err %v; want an AddError at index 1 on field %s", i, err, c.field)
			}
		}
		if err := ob.Add(ctx, nil, message.NewMessage("T", []byte("x"))); !errors.Is(err, outbox.ErrNoTx) {
			t.Errorf("nil tx: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if st := stats(t, ob); st.Pending != 0 {
			t.Fatalf("refused Adds wrote %d rows", st.Pending)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	db := sqltest.Open(t, outbox.SQLite)
	for _, c := range []struct {
		cfg   outbox.Config
		field string
	}{
		{outbox.Config{Dialect: outbox.SQLite}, "DB"},
		{outbox.Config{DB: db.DB}, "Dialect"},
		{outbox.Config{DB: db.DB, Dialect: outbox.SQLite, Table: "x-y"}, "Table"},
		{outbox.Config{DB: db.DB, Dialect: outbox.SQLite, Table: strings.Repeat("a", 60)}, "Table"},
		{outbox.Config{DB: db.DB, Dialect: outbox.SQLite, NotifyChannel: "c"}, "NotifyChannel"},
	} {
		_, err := outbox.New(c.cfg)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%+v: %v; want a ConfigError on %s", c.cfg, err, c.field)
		}
	}
	ob := newOutbox(t, db)
	for _, c := range []struct {
		cfg   outbox.RelayConfig
		field string
	}{
		{outbox.RelayConfig{}, "Send"},
		{outbox.RelayConfig{Send: (&recorder{}).send, BatchSize: outbox.MaxBatchSize + 1}, "BatchSize"},
		{outbox.RelayConfig{Send: (&recorder{}).send, Lease: time.Millisecond}, "Lease"},
		{outbox.RelayConfig{Send: (&recorder{}).send, MaxAttempts: -1}, "MaxAttempts"},
		{outbox.RelayConfig{Send: (&recorder{}).send, BackoffBase: time.Minute, BackoffMax: time.Second}, "BackoffBase"},
	} {
		_, err := outbox.NewRelay(ob, c.cfg)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%+v: %v; want a ConfigError on %s", c.field, err, c.field)
		}
	}
	if _, err := outbox.ParseDialect("oracle"); err == nil {
		t.Error("ParseDialect(oracle) accepted")
	}
}

// TestSendsCommittedOnly: rows of a rolled-back transaction are never sent; committed rows
// are sent once each, with their stable key: the caller's first KEYS entry, or a UNIQ_KEY
// generated at Add (and KEYS set to it) that a re-send after a failure carries again.
func TestSendsCommittedOnly(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ob := newOutbox(t, tg)
		keyed := message.NewMessage("Orders", []byte("keyed")).SetKeys("order-1", "other")
		bare := message.NewMessage("Orders", []byte("bare")).SetTag("created")
		addTx(t, tg.DB, ob, false, keyed, bare)
		addTx(t, tg.DB, ob, true, message.NewMessage("Orders", []byte("rolled-back")))
		if bare.UniqKey() != "" || bare.Property(message.PropertyKeys) != "" {
			t.Fatal("Add modified the caller's message")
		}
		var firstUniq string
		rec := &recorder{fail: func(m *message.Message, n int) error {
			if string(m.Body) == "bare" && n == 0 {
				firstUniq = m.UniqKey()
				return errors.New("broker busy")
			}
			return nil
		}}
		r := newRelay(t, ob, rec.send)
		drain(t, r)
		got := map[string]*message.Message{}
		for _, m := range rec.got {
			if got[string(m.Body)] != nil {
				t.Errorf("%s sent twice", m.Body)
			}
			got[string(m.Body)] = m
		}
		if len(got) != 2 || got["rolled-back"] != nil {
			t.Fatalf("sent %v; want keyed and bare", rec.bodies())
		}
		if k := got["keyed"].Keys(); len(k) != 2 || k[0] != "order-1" || got["keyed"].UniqKey() == "" {
			t.Errorf("keyed: keys %v uniq %q", k, got["keyed"].UniqKey())
		}
		b := got["bare"]
		if b.UniqKey() == "" || b.UniqKey() != firstUniq || b.Property(message.PropertyKeys) != b.UniqKey() || b.Tag() != "created" {
			t.Errorf("bare: uniq %q (first attempt %q) keys %q tag %q", b.UniqKey(), firstUniq, b.Property(message.PropertyKeys), b.Tag())
		}
		if c := r.Counters(); c.Sent != 2 || c.Failed != 1 {
			t.Errorf("counters %+v", c)
		}
		if st := stats(t, ob); st.Pending != 0 || st.Sent != 0 || st.Dead != 0 {
			t.Errorf("stats after drain %+v (sent rows are deleted without Retention)", st)
		}
	})
}

// TestOrderPerKey: a row waits while an earlier row of its key is unsent (failing and
// backing off, then dead); rows of other keys go on; a re-drive sends the dead row and
// then the rows behind it, in order.
func TestOrderPerKey(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ob := newOutbox(t, tg)
		var msgs []*message.Message
		for i := 0; i < 4; i++ {
			for _, k := range []string{"A", "B"} {
				msgs = append(msgs, message.NewMessage("Orders", []byte(fmt.Sprintf("%s%d", k, i))).SetShardingKey(k))
			}
		}
		msgs = append(msgs, message.NewMessage("Orders", []byte("free")))
		addTx(t, tg.DB, ob, false, msgs...)
		broken := true
		var mu sync.Mutex
		rec := &recorder{fail: func(m *message.Message, n int) error {
			mu.Lock()
			defer mu.Unlock()
			if string(m.Body) == "A1" && broken {
				return errors.New("A1 refused")
			}
			return nil
		}}
		r := newRelay(t, ob, rec.send, func(c *outbox.RelayConfig) { c.MaxAttempts = 3; c.BatchSize = 3 })
		drain(t, r)
		got := strings.Join(rec.bodies(), ",")
		if !strings.Contains(got, "A0") || strings.Contains(got, "A2") || strings.Contains(got, "A3") {
			t.Fatalf("sent %s: A2 and A3 must wait behind A1", got)
		}
		for _, b := range []string{"B0", "B1", "B2", "B3", "free"} {
			if !strings.Contains(got, b) {
				t.Fatalf("sent %s: %s missing (other keys go on)", got, b)
			}
		}
		if strings.Index(got, "B0") > strings.Index(got, "B1") || strings.Index(got, "B2") > strings.Index(got, "B3") {
			t.Fatalf("B out of order: %s", got)
		}
		st := stats(t, ob)
		if st.Dead != 1 || st.Pending != 2 {
			t.Fatalf("stats %+v; want 1 dead (A1) and 2 pending (A2, A3)", st)
		}
		dead, err := ob.Dead(context.Background(), 0, 10)
		if err != nil || len(dead) != 1 || dead[0].Attempts != 3 || !strings.Contains(dead[0].LastError, "A1 refused") || dead[0].OrderKey != "A" {
			t.Fatalf("dead rows %+v, %v", dead, err)
		}
		mu.Lock()
		broken = false
		mu.Unlock()
		if n, err := ob.Redrive(context.Background(), dead[0].ID); n != 1 || err != nil {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		drain(t, r)
		got = strings.Join(rec.bodies(), ",")
		if !strings.HasSuffix(got, "A1,A2,A3") {
			t.Fatalf("after redrive sent %s; want A1,A2,A3 last", got)
		}
		if st := stats(t, ob); st != (outbox.Stats{}) {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestPermanentErrorDeadAtOnce: a send error with Permanent() true makes the row dead
// without more attempts; RedriveAll brings it back.
func TestPermanentErrorDeadAtOnce(t *testing.T) {
	tg := sqltest.Open(t, outbox.SQLite)
	ob := newOutbox(t, tg)
	addTx(t, tg.DB, ob, false, message.NewMessage("T", []byte("x")))
	perm := true
	rec := &recorder{fail: func(*message.Message, int) error {
		if perm {
			return permanent{}
		}
		return nil
	}}
	r := newRelay(t, ob, rec.send)
	drain(t, r)
	if st := stats(t, ob); st.Dead != 1 || r.Counters().Dead != 1 || r.Counters().Failed != 1 {
		t.Fatalf("stats %+v counters %+v", st, r.Counters())
	}
	perm = false
	if n, err := ob.Redrive(context.Background()); n != 1 || err != nil {
		t.Fatalf("redrive all: %d %v", n, err)
	}
	drain(t, r)
	if len(rec.got) != 1 {
		t.Fatalf("sent %d", len(rec.got))
	}
}

type permanent struct{}

func (permanent) Error() string   { return "topic not allowed" }
func (permanent) Permanent() bool { return true }

// TestLeaseFencing: a relay whose lease expired (by the other relay's clock) loses its
// claim: the second relay takes the rows, and the first one's outcome is not recorded
// (counted as fenced).
func TestLeaseFencing(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ob := newOutbox(t, tg)
		addTx(t, tg.DB, ob, false, message.NewMessage("T", []byte("a")).SetShardingKey("k"), message.NewMessage("T", []byte("b")).SetShardingKey("k"))
		release := make(chan struct{})
		inSend := make(chan struct{}, 4)
		slow := func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
			inSend <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &message.SendResult{Status: message.SendOK}, nil
		}
		r1 := newRelay(t, ob, slow, func(c *outbox.RelayConfig) { c.Lease = time.Minute; c.Concurrency = 1 })
		rec := &recorder{}
		later := func() time.Time { return time.Now().Add(2 * time.Minute) } // past r1's lease
		r2 := newRelay(t, ob, rec.send, func(c *outbox.RelayConfig) { c.Now = later })
		done := make(chan error, 1)
		go func() { _, err := r1.RunOnce(context.Background()); done <- err }()
		<-inSend // r1 is sending "a"
		// While r1's lease holds, a relay with the same clock finds nothing.
		r3 := newRelay(t, ob, rec.send)
		if n, err := r3.RunOnce(context.Background()); n != 0 || err != nil {
			t.Fatalf("r3 claimed %d rows under r1's lease (%v)", n, err)
		}
		drain(t, r2)
		if got := strings.Join(rec.bodies(), ","); got != "a,b" {
			t.Fatalf("r2 sent %q; want a,b", got)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if c := r1.Counters(); c.Fenced != 2 || c.Sent != 0 {
			t.Fatalf("r1 counters %+v; want 2 fenced (a sent, b released: both already taken by r2)", c)
		}
		if st := stats(t, ob); st != (outbox.Stats{}) {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestRetention: with Retention, sent rows are kept (StateSent) and Clean deletes them
// once they are older than Retention.
func TestRetention(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ob := newOutbox(t, tg)
		addTx(t, tg.DB, ob, false, message.NewMessage("T", []byte("a")), message.NewMessage("T", []byte("b")).SetShardingKey("k"))
		now := time.Now()
		clock := func() time.Time { return now }
		rec := &recorder{}
		r := newRelay(t, ob, rec.send, func(c *outbox.RelayConfig) { c.Retention = time.Hour; c.Now = clock })
		drain(t, r)
		if st := stats(t, ob); st.Sent != 2 || st.Pending != 0 {
			t.Fatalf("stats %+v", st)
		}
		if n, err := r.Clean(context.Background()); err != nil || n != 0 {
			t.Fatalf("clean before retention: %d %v", n, err)
		}
		now = now.Add(2 * time.Hour)
		want := int64(3) // 2 sent rows and the key-lock row of "k" (SQLite serialises writers: no key rows)
		if tg.Dialect == outbox.SQLite {
			want = 2
		}
		if n, err := r.Clean(context.Background()); err != nil || n != want {
			t.Fatalf("clean after retention: %d %v; want %d", n, err, want)
		}
		if st := stats(t, ob); st != (outbox.Stats{}) {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestRelaysShareWork: three started relays and four writers at once; every committed row
// is sent exactly once (the sends here never fail, so no lease expires), no row is being
// sent by two relays at the same moment, and per key the rows go out in id order (the
// order each writer added them). Shutdown leaves no goroutine (goleak in TestMain).
func TestRelaysShareWork(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ob := newOutbox(t, tg)
		const writers, perWriter = 4, 60
		var mu sync.Mutex
		inFlight := map[string]bool{}
		sent := map[string]int{}
		lastSeq := map[string]int{}
		var overlaps, outOfOrder int
		send := func(_ context.Context, m *message.Message) (*message.SendResult, error) {
			b := string(m.Body)
			mu.Lock()
			if inFlight[b] {
				overlaps++
			}
			inFlight[b] = true
			mu.Unlock()
			time.Sleep(100 * time.Microsecond) // a send takes a moment
			mu.Lock()
			delete(inFlight, b)
			sent[b]++
			var w, seq int
			fmt.Sscanf(b, "w%d-%d", &w, &seq)
			if k := m.ShardingKey(); k != "" && seq < lastSeq[k] {
				outOfOrder++
			} else if k != "" {
				lastSeq[k] = seq
			}
			mu.Unlock()
			return &message.SendResult{Status: message.SendOK}, nil
		}
		wake := make(chan struct{}, 1)
		var relays []*outbox.Relay
		for i := 0; i < 3; i++ {
			r := newRelay(t, ob, send, func(c *outbox.RelayConfig) { c.BatchSize = 16; c.Wake = wake; c.PollInterval = 20 * time.Millisecond })
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			relays = append(relays, r)
		}
		var wg sync.WaitGroup
		for w := 0; w < writers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perWriter; i++ {
					key := fmt.Sprintf("w%d", w)
					if i%3 == 0 {
						key = "" // unordered rows in between
					}
					addTx(t, tg.DB, ob, false, message.NewMessage("T", []byte(fmt.Sprintf("w%d-%d", w, i+1))).SetShardingKey(key))
					select {
					case wake <- struct{}{}:
					default:
					}
				}
			}()
		}
		wg.Wait()
		testkit.WaitFor(t, 60*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(sent) == writers*perWriter
		}, "every row sent")
		for _, r := range relays {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := r.Shutdown(ctx); err != nil {
				t.Error(err)
			}
			cancel()
			if err := r.Start(context.Background()); !errors.Is(err, outbox.ErrRelayClosed) {
				t.Errorf("Start after Shutdown: %v", err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		doubled := 0
		for _, n := range sent {
			if n > 1 {
				doubled++
			}
		}
		var share []uint64
		for _, r := range relays {
			share = append(share, r.Counters().Sent)
		}
		t.Logf("%s: %d rows by 3 relays %v; overlapping sends %d, doubled %d, out of order %d", tg.Dialect, len(sent), share, overlaps, doubled, outOfOrder)
		if overlaps != 0 || doubled != 0 || outOfOrder != 0 {
			t.Fatalf("overlapping %d, doubled %d, out of order %d", overlaps, doubled, outOfOrder)
		}
		if st := stats(t, ob); st.Pending != 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// TestShutdownReleasesClaims: Shutdown while a send hangs cancels it when ctx ends and
// releases the batch's rows, so another relay sends them at once (not after the lease).
func TestShutdownReleasesClaims(t *testing.T) {
	tg := sqltest.Open(t, outbox.SQLite)
	ob := newOutbox(t, tg)
	addTx(t, tg.DB, ob, false, message.NewMessage("T", []byte("a")).SetShardingKey("k"), message.NewMessage("T", []byte("b")).SetShardingKey("k"))
	entered := make(chan struct{}, 1)
	hang := func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	r := newRelay(t, ob, hang, func(c *outbox.RelayConfig) { c.Lease = time.Hour; c.SendTimeout = time.Hour })
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); !errors.Is(err, outbox.ErrRelayStarted) {
		t.Fatalf("second Start: %v", err)
	}
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	rec := &recorder{}
	drain(t, newRelay(t, ob, rec.send))
	if got := strings.Join(rec.bodies(), ","); got != "a,b" {
		t.Fatalf("after shutdown another relay sent %q; want a,b", got)
	}
}

// TestLargeAddAndByteBound: one Add of 1,200 messages (three INSERT statements) commits as
// one; a relay with MaxBatchBytes below two bodies claims one row at a time and still
// drains them in id order.
func TestLargeAddAndByteBound(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ob := newOutbox(t, tg)
		var msgs []*message.Message
		for i := 0; i < 1200; i++ {
			msgs = append(msgs, message.NewMessage("T", []byte(fmt.Sprintf("%04d", i))).SetShardingKey("one-key"))
		}
		addTx(t, tg.DB, ob, false, msgs...)
		if st := stats(t, ob); st.Pending != 1200 {
			t.Fatalf("pending %d", st.Pending)
		}
		rec := &recorder{}
		r := newRelay(t, ob, rec.send, func(c *outbox.RelayConfig) { c.BatchSize = 500 })
		drain(t, r)
		got := rec.bodies()
		if len(got) != 1200 {
			t.Fatalf("sent %d", len(got))
		}
		for i, b := range got {
			if b != fmt.Sprintf("%04d", i) {
				t.Fatalf("row %d sent as %s: out of order", i, b)
			}
		}
		addTx(t, tg.DB, ob, false, message.NewMessage("T", make([]byte, 600)), message.NewMessage("T", make([]byte, 600)))
		small := newRelay(t, ob, rec.send, func(c *outbox.RelayConfig) { c.MaxBatchBytes = 1000 })
		if n, err := small.RunOnce(context.Background()); n != 1 || err != nil {
			t.Fatalf("claim under a 1000-byte bound took %d rows (%v); want 1", n, err)
		}
	})
}
