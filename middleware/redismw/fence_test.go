package redismw

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// TestDedupFencingToken: every acquisition of a key's lock gets a larger token, also after
// the fence key is gone; a holder whose lock expired mid-handler has a lower token than
// its successor, and FencedSet refuses its late write.
func TestDedupFencingToken(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		d := newDeduper(t, tg.Client, tg.NS, nil)
		var tokens []int64
		var keys []string
		fail := true
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			tok, ok := FencingToken(ctx)
			if !ok {
				t.Error("no fencing token in the handler's context")
			}
			tokens = append(tokens, tok)
			keys = append(keys, middleware.IdempotencyKey(ctx))
			if fail {
				return message.ReconsumeLater, nil
			}
			return message.ConsumeSuccess, nil
		}, d.Middleware())
		m := testkit.NewExt("T", "x", "fence-1", "1")
		for i := 0; i < 3; i++ {
			_, _, _ = testkit.Call(h, m)
		}
		tg.Client.Del(ctx, d.FenceKey("fence-1")) // lost fence key (a Redis restart without persistence)
		fail = false
		if res, err, _ := testkit.Call(h, m); res != message.ConsumeSuccess || err != nil {
			t.Fatal(res, err)
		}
		if len(tokens) != 4 {
			t.Fatalf("tokens %v", tokens)
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("tokens do not grow: %v", tokens)
			}
		}
		for _, k := range keys {
			if k != "fence-1" {
				t.Fatalf("IdempotencyKey %q", k)
			}
		}
		if _, ok := FencingToken(ctx); ok {
			t.Fatal("a token outside Dedup")
		}

		// A paused holder: A takes the lock, its lock "expires" (deleted, as the expiry would),
		// B takes over and writes; A's late write is refused.
		effect := "sluice:fx:" + tg.NS + ":acct-7"
		aHolds, aGo := make(chan int64), make(chan struct{})
		aDone := make(chan error, 1)
		ha := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			tok, _ := FencingToken(ctx)
			aHolds <- tok
			<-aGo // paused past the lock expiry
			return message.ConsumeSuccess, FencedSet(context.WithoutCancel(ctx), tg.Client, effect, "balance=110 by A", tok, time.Minute)
		}, d.Middleware())
		m2 := testkit.NewExt("T", "x", "acct-7", "1")
		go func() { _, err := ha(ctx, []*message.MessageExt{m2}); aDone <- err }()
		aTok := <-aHolds
		tg.Client.Del(ctx, d.LockKey("acct-7"))
		var bTok int64
		hb := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			bTok, _ = FencingToken(ctx)
			return message.ConsumeSuccess, FencedSet(ctx, tg.Client, effect, "balance=110 by B", bTok, time.Minute)
		}, d.Middleware())
		if res, err := hb(ctx, []*message.MessageExt{m2}); res != message.ConsumeSuccess || err != nil {
			t.Fatalf("successor: %v %v", res, err)
		}
		close(aGo)
		errA := <-aDone
		if bTok <= aTok || !errors.Is(errA, ErrStaleToken) {
			t.Fatalf("tokens A %d B %d; A's late write: %v", aTok, bTok, errA)
		}
		if v := tg.Client.HGet(ctx, effect, "v").Val(); v != "balance=110 by B" {
			t.Fatalf("effect %q", v)
		}
		if err := FencedSet(ctx, tg.Client, effect, "x", 0, 0); err == nil {
			t.Fatal("FencedSet with token 0")
		}
	})
}

// TestFencingRecipeSQL runs the SQL recipe of FencingToken's doc against a real
// PostgreSQL (and MySQL and SQLite, with their upsert spellings): the stale holder's
// conditional UPDATE affects no row.
func TestFencingRecipeSQL(t *testing.T) {
	sqltest.Each(t, func(t *testing.T, db *sqltest.Target) {
		ctx := context.Background()
		tbl := db.Name("accounts")
		if _, err := db.DB.ExecContext(ctx, "CREATE TABLE "+tbl+" (id VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL, last_token BIGINT NOT NULL DEFAULT 0)"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.DB.ExecContext(ctx, "INSERT INTO "+tbl+" (id, balance) VALUES ('acct-7', 100)"); err != nil {
			t.Fatal(err)
		}
		update := "UPDATE " + tbl + " SET balance = " + db.P(1) + ", last_token = " + db.P(2) + " WHERE id = " + db.P(3) + " AND last_token < " + db.P(4)
		if db.Dialect == inbox.Postgres {
			update = "UPDATE " + tbl + " SET balance = $1, last_token = $2 WHERE id = $3 AND last_token < $2"
		}
		write := func(balance, token int64) int64 {
			t.Helper()
			args := []any{balance, token, "acct-7", token}
			if db.Dialect == inbox.Postgres {
				args = args[:3]
			}
			res, err := db.DB.ExecContext(ctx, update, args...)
			if err != nil {
				t.Fatal(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		const stale, successor = 1796135063206367, 1796135063906367
		if n := write(110, successor); n != 1 {
			t.Fatalf("successor's write affected %d rows", n)
		}
		if n := write(120, stale); n != 0 {
			t.Fatalf("stale write affected %d rows", n)
		}
		var bal int64
		if err := db.DB.QueryRowContext(ctx, "SELECT balance FROM "+tbl+" WHERE id = 'acct-7'").Scan(&bal); err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		if bal != 110 {
			t.Fatalf("balance %d", bal)
		}
	})
}

// A positive TTL under a millisecond still expires the value (rounded up to 1 ms) instead
// of becoming "no expiry" through ttl.Milliseconds() == 0.
func TestFencedSetSubMillisecondTTL(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		key := tg.NS + ":fenced-sub-ms"
		if err := FencedSet(ctx, tg.Client, key, "v", 1, 500*time.Microsecond); err != nil {
			t.Fatal(err)
		}
		if d := tg.Client.PTTL(ctx, key).Val(); d == -1 {
			t.Fatalf("FencedSet with a 500µs TTL left the key without expiry (PTTL %v)", d)
		}
	})
}
