package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// newInbox creates an inbox with its own table on tg.
func newInbox(t *testing.T, tg *sqltest.Target, group string, mod ...func(*inbox.Config)) *inbox.Inbox {
	t.Helper()
	cfg := inbox.Config{DB: tg.DB, Dialect: tg.Dialect, Group: group, Table: tg.Name("inbox"), Logger: testkit.Logger(t)}
	for _, f := range mod {
		f(&cfg)
	}
	ib, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.CreateTable(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := ib.CreateTable(context.Background()); err != nil { // idempotent
		t.Fatalf("second CreateTable: %v", err)
	}
	return ib
}

// recordEffect returns a handler that inserts one effects row per message (key = StableKey)
// through tx, and counts its calls.
func recordEffect(tg *sqltest.Target, table string, calls *int, mu *sync.Mutex) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		if mu != nil {
			mu.Lock()
			*calls++
			mu.Unlock()
		}
		for _, m := range msgs {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (k) VALUES ("+tg.P(1)+")", middleware.StableKey(m)); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestInboxOnce(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ib := newInbox(t, tg, "g1")
		eff := tg.EffectsTable("eff")
		var calls int
		var mu sync.Mutex
		var seenKey string
		h := recordEffect(tg, eff, &calls, &mu)
		f := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
			seenKey = middleware.IdempotencyKey(ctx)
			return h(ctx, tx, msgs)
		})
		m := testkit.NewExt("Pay", "paid", "order-1", "10")
		if res, err, reasons := testkit.Call(f, m); res != message.ConsumeSuccess || err != nil || len(reasons) != 0 {
			t.Fatalf("first: %v %v %v", res, err, reasons)
		}
		if seenKey != "order-1" {
			t.Fatalf("IdempotencyKey in handler %q", seenKey)
		}
		for i := 0; i < 3; i++ {
			res, err, reasons := testkit.Call(f, m)
			if res != message.ConsumeSuccess || err != nil || !testkit.HasReason(reasons, middleware.ReasonDuplicate) {
				t.Fatalf("duplicate %d: %v %v %v", i, res, err, reasons)
			}
		}
		if calls != 1 {
			t.Fatalf("handler ran %d times", calls)
		}
		if c := tg.Counts(eff); c["order-1"] != 1 || len(c) != 1 {
			t.Fatalf("effects %v", c)
		}
		ok, at, err := ib.Processed(context.Background(), "order-1")
		if err != nil || !ok || time.Since(at) > time.Minute {
			t.Fatalf("Processed: %v %v %v", ok, at, err)
		}
		// Another group applies the message once more (its own rows).
		ib2, err := inbox.New(inbox.Config{DB: tg.DB, Dialect: tg.Dialect, Group: "g2", Table: ib.Table()})
		if err != nil {
			t.Fatal(err)
		}
		f2 := ib2.Consume(h)
		if res, err := f2(context.Background(), []*message.MessageExt{m}); res != message.ConsumeSuccess || err != nil {
			t.Fatalf("group 2: %v %v", res, err)
		}
		if c := tg.Counts(eff); c["order-1"] != 2 {
			t.Fatalf("effects after group 2 %v", c)
		}
	})
}

func TestInboxFailureAndPanicRollBack(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ib := newInbox(t, tg, "g")
		eff := tg.EffectsTable("eff")
		write := recordEffect(tg, eff, nil, nil)
		boom := errors.New("downstream refused")
		mode := "error"
		f := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
			if err := write(ctx, tx, msgs); err != nil { // the effect is written, then the handler fails
				return err
			}
			switch mode {
			case "error":
				return boom
			case "panic":
				panic("handler bug")
			}
			return nil
		})
		m := testkit.NewExt("Pay", "paid", "order-2", "10")
		res, err, _ := testkit.Call(f, m)
		if res != message.ReconsumeLater || !errors.Is(err, boom) {
			t.Fatalf("error: %v %v", res, err)
		}
		mode = "panic"
		res, err, reasons := testkit.Call(f, m)
		var pe *middleware.PanicError
		if res != message.ReconsumeLater || !errors.As(err, &pe) || !testkit.HasReason(reasons, middleware.ReasonPanic) {
			t.Fatalf("panic: %v %v %v", res, err, reasons)
		}
		if c := tg.Counts(eff); len(c) != 0 {
			t.Fatalf("effects of rolled back runs: %v", c)
		}
		if ok, _, err := ib.Processed(context.Background(), "order-2"); ok || err != nil {
			t.Fatalf("row after rollback: %v %v", ok, err)
		}
		mode = "ok"
		if res, err, _ := testkit.Call(f, m); res != message.ConsumeSuccess || err != nil {
			t.Fatalf("redelivery: %v %v", res, err)
		}
		if c := tg.Counts(eff); c["order-2"] != 1 {
			t.Fatalf("effects %v", c)
		}
	})
}

// TestInboxBatch: one transaction per batch; the handler gets only the messages not done
// before; a failing batch rolls back every message of it.
func TestInboxBatch(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ib := newInbox(t, tg, "g")
		eff := tg.EffectsTable("eff")
		write := recordEffect(tg, eff, nil, nil)
		var got [][]string
		fail := false
		f := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
			var ks []string
			for _, m := range msgs {
				ks = append(ks, middleware.StableKey(m))
			}
			got = append(got, ks)
			if err := write(ctx, tx, msgs); err != nil {
				return err
			}
			if fail {
				return errors.New("fail the batch")
			}
			if middleware.IdempotencyKey(ctx) != "" && len(msgs) > 1 {
				return errors.New("an idempotency key in ctx for a batch")
			}
			return nil
		})
		a, b, c := testkit.NewExt("T", "x", "a", "1"), testkit.NewExt("T", "x", "b", "2"), testkit.NewExt("T", "x", "c", "3")
		if res, err := f(context.Background(), []*message.MessageExt{b}); res != message.ConsumeSuccess || err != nil {
			t.Fatal(res, err)
		}
		fail = true
		if res, err := f(context.Background(), []*message.MessageExt{c, a, b}); res != message.ReconsumeLater || err == nil {
			t.Fatalf("failing batch: %v %v", res, err)
		}
		fail = false
		res, err, reasons := testkit.Call(f, c, a, b, a) // a twice in one batch: one effect
		if res != message.ConsumeSuccess || err != nil {
			t.Fatal(res, err)
		}
		if n := strings.Count(strings.Join(toStrings(reasons), ","), string(middleware.ReasonDuplicate)); n != 2 {
			t.Fatalf("duplicates noted %d (%v), want 2 (b, second a)", n, reasons)
		}
		// Handler calls: [b], [c a] (rolled back), [c a] — delivery order, duplicates left out.
		want := "[b] [c a] [c a]"
		if s := fmtCalls(got); s != want {
			t.Fatalf("handler calls %s, want %s", s, want)
		}
		if cnt := tg.Counts(eff); cnt["a"] != 1 || cnt["b"] != 1 || cnt["c"] != 1 || len(cnt) != 3 {
			t.Fatalf("effects %v", cnt)
		}
		// All duplicates: the handler is not called, the batch is acknowledged.
		if res, err := f(context.Background(), []*message.MessageExt{a, b, c}); res != message.ConsumeSuccess || err != nil || len(got) != 3 {
			t.Fatalf("all duplicates: %v %v, calls %d", res, err, len(got))
		}
	})
}

func toStrings(rs []middleware.Reason) []string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return s
}

func fmtCalls(calls [][]string) string {
	var parts []string
	for _, c := range calls {
		parts = append(parts, "["+strings.Join(c, " ")+"]")
	}
	return strings.Join(parts, " ")
}

// TestInboxConcurrentCopies: 16 copies of one message delivered at once (a rebalance, a
// retry racing the original): the database serialises the inserts, one effect commits.
func TestInboxConcurrentCopies(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ib := newInbox(t, tg, "g")
		eff := tg.EffectsTable("eff")
		var calls int
		var mu sync.Mutex
		h := recordEffect(tg, eff, &calls, &mu)
		f := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
			if err := h(ctx, tx, msgs); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond) // hold the row lock a moment: the copies meet it
			return nil
		})
		for round := 0; round < 3; round++ {
			key := "k" + string(rune('a'+round))
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					m := testkit.NewExt("T", "x", key, "1")
					// A copy that lost a deadlock or busy wait is redelivered, as the consumer would.
					for try := 0; try < 20; try++ {
						res, err := f(context.Background(), []*message.MessageExt{m})
						if res == message.ConsumeSuccess && err == nil {
							return
						}
						if try == 19 {
							errs <- err
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("copy never acknowledged: %v", err)
			}
		}
		cnt := tg.Counts(eff)
		for _, k := range []string{"ka", "kb", "kc"} {
			if cnt[k] != 1 {
				t.Fatalf("effects %v", cnt)
			}
		}
	})
}

func TestInboxKeys(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ib := newInbox(t, tg, "g")
		eff := tg.EffectsTable("eff")
		f := ib.Consume(recordEffect(tg, eff, nil, nil))
		// Keys differing only in case are two keys (byte comparison, also in MySQL).
		for _, k := range []string{"Order-1", "order-1"} {
			if res, err := f(context.Background(), []*message.MessageExt{testkit.NewExt("T", "x", k, "1")}); res != message.ConsumeSuccess || err != nil {
				t.Fatal(res, err)
			}
		}
		if c := tg.Counts(eff); c["Order-1"] != 1 || c["order-1"] != 1 {
			t.Fatalf("effects %v", c)
		}
		// A long key is stored hashed; its copies are still duplicates.
		long := strings.Repeat("x", 300)
		for i := 0; i < 2; i++ {
			if res, err := f(context.Background(), []*message.MessageExt{testkit.NewExt("T", "x", long, "1")}); res != message.ConsumeSuccess || err != nil {
				t.Fatal(res, err)
			}
		}
		if ok, _, err := ib.Processed(context.Background(), long); !ok || err != nil {
			t.Fatalf("long key: %v %v", ok, err)
		}
		if rk := inbox.RowKey(long); !strings.HasPrefix(rk, "sha256:") || len(rk) != 71 {
			t.Fatalf("RowKey %q", rk)
		}
		// No KEYS: the unique id (UNIQ_KEY) is the key.
		m := testkit.NewExt("T", "x", "", "1")
		m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, m.MsgID)
		for i := 0; i < 2; i++ {
			if res, err := f(context.Background(), []*message.MessageExt{m}); res != message.ConsumeSuccess || err != nil {
				t.Fatal(res, err)
			}
		}
		if c := tg.Counts(eff); c[m.MsgID] != 1 {
			t.Fatalf("effects by unique id %v", c)
		}
		// Neither: refused, nothing written.
		bare := &message.MessageExt{Message: message.Message{Topic: "T", Body: []byte("x")}}
		if res, err := f(context.Background(), []*message.MessageExt{bare}); res != message.ReconsumeLater || !errors.Is(err, inbox.ErrNoKey) {
			t.Fatalf("no key: %v %v", res, err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	db := &sql.DB{} // never used: validation fails or New does not touch it
	cases := []struct {
		cfg   inbox.Config
		field string
	}{
		{inbox.Config{Dialect: inbox.SQLite, Group: "g"}, "DB"},
		{inbox.Config{DB: db, Group: "g"}, "Dialect"},
		{inbox.Config{DB: db, Dialect: inbox.MySQL}, "Group"},
		{inbox.Config{DB: db, Dialect: inbox.MySQL, Group: strings.Repeat("g", 256)}, "Group"},
		{inbox.Config{DB: db, Dialect: inbox.MySQL, Group: "g", Table: "x; DROP TABLE y"}, "Table"},
		{inbox.Config{DB: db, Dialect: inbox.MySQL, Group: "g", Table: "1abc"}, "Table"},
	}
	for _, c := range cases {
		_, err := inbox.New(c.cfg)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%+v: %v, want a ConfigError for %s", c.cfg, err, c.field)
		}
	}
	if _, err := inbox.New(inbox.Config{DB: db, Dialect: inbox.Postgres, Group: "g"}); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.DDL(inbox.Dialect(9), ""); err == nil {
		t.Fatal("DDL of an unknown dialect")
	}
	for _, d := range []inbox.Dialect{inbox.Postgres, inbox.MySQL, inbox.SQLite} {
		if s, err := inbox.DDLText(d, ""); err != nil || !strings.Contains(s, "CREATE TABLE IF NOT EXISTS sluice_inbox") || !strings.HasSuffix(s, ";\n") {
			t.Fatalf("DDLText(%v) = %q %v", d, s, err)
		}
	}
	var ce *config.Error
	if _, err := inbox.DDLText(inbox.Dialect(9), ""); !errors.As(err, &ce) || ce.Field != "Dialect" {
		t.Fatalf("DDLText of an unknown dialect: %v", err)
	}
	for in, want := range map[string]inbox.Dialect{"postgresql": inbox.Postgres, "MariaDB": inbox.MySQL, "sqlite3": inbox.SQLite} {
		if d, err := inbox.ParseDialect(in); d != want || err != nil {
			t.Errorf("ParseDialect(%q) = %v %v", in, d, err)
		}
	}
	if _, err := inbox.ParseDialect("oracle"); err == nil {
		t.Error("ParseDialect(oracle)")
	}
}

// Keys PostgreSQL's text type cannot hold (a NUL byte, invalid UTF-8) are stored hashed, so
// such a message runs once on every dialect instead of failing its insert on every
// delivery until it reaches the DLQ.
func TestInboxKeysPostgresCannotStore(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ib := newInbox(t, tg, "g")
		var mu sync.Mutex
		calls := map[string]int{}
		f := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				calls[middleware.StableKey(m)]++
			}
			return nil
		})
		keys := []string{"nul\x00key", "bad\xffutf8"}
		for _, k := range keys {
			for i := 0; i < 2; i++ {
				if res, err := f(context.Background(), []*message.MessageExt{testkit.NewExt("T", "x", k, "1")}); res != message.ConsumeSuccess || err != nil {
					t.Fatalf("key %q delivery %d: %v %v", k, i+1, res, err)
				}
			}
			if calls[k] != 1 {
				t.Fatalf("key %q: handler ran %d times, want 1", k, calls[k])
			}
			if ok, _, err := ib.Processed(context.Background(), k); !ok || err != nil {
				t.Fatalf("Processed(%q): %v %v", k, ok, err)
			}
			if rk := inbox.RowKey(k); !strings.HasPrefix(rk, "sha256:") || len(rk) != 71 {
				t.Fatalf("RowKey(%q) = %q, want hashed", k, rk)
			}
		}
		// In one batch too (the multi-row INSERT of PostgreSQL and SQLite).
		batch := []*message.MessageExt{testkit.NewExt("T", "x", "b\x00one", "1"), testkit.NewExt("T", "x", "b\xfetwo", "2"), testkit.NewExt("T", "x", "plain", "3")}
		for i := 0; i < 2; i++ {
			if res, err := f(context.Background(), batch); res != message.ConsumeSuccess || err != nil {
				t.Fatalf("batch delivery %d: %v %v", i+1, res, err)
			}
		}
		for _, m := range batch {
			if k := middleware.StableKey(m); calls[k] != 1 {
				t.Fatalf("batch key %q: handler ran %d times, want 1", k, calls[k])
			}
		}
	})
}

// TestInboxLiteralHashedKeyDoesNotCollide (issue 26, finding 7): a literal key
// "sha256:<hex>" was stored as is, the same row key as the hashed form of a long (or NUL)
// key: the second message was counted as a duplicate and its effect never applied. A
// key that starts with "sha256:" is now hashed too, so the two encodings are disjoint.
func TestInboxLiteralHashedKeyDoesNotCollide(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, tg *sqltest.Target) {
		ib := newInbox(t, tg, "g")
		var mu sync.Mutex
		calls := map[string]int{}
		f := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				calls[middleware.StableKey(m)]++
			}
			return nil
		})
		long := strings.Repeat("L", 300)
		forged := inbox.RowKey(long) // "sha256:<64 hex>", 71 bytes: once stored as is
		if forged == inbox.RowKey(forged) {
			t.Fatalf("RowKey(%q) is itself", forged)
		}
		for _, k := range []string{long, forged, "nul\x00", inbox.RowKey("nul\x00")} {
			if res, err := f(context.Background(), []*message.MessageExt{testkit.NewExt("T", "x", k, "1")}); res != message.ConsumeSuccess || err != nil {
				t.Fatalf("key %q: %v %v", k, res, err)
			}
			if calls[k] != 1 {
				t.Fatalf("key %q: handler ran %d times, want 1 (taken for a duplicate of another key)", k, calls[k])
			}
		}
	})
}
