package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
)

// TestClaimWalksPendingIndexPostgres: a table analyzed while every row was pending, then
// relayed with Retention (the sent rows stay, StateSent) — the statistics still say
// "every row is pending". The claim must walk the pending rows' index (<table>_pending)
// and not the primary key, which would read every sent row before the first pending one
// (the drain of a large backlog slowed down as it went). And it claims the pending rows.
func TestClaimWalksPendingIndexPostgres(t *testing.T) {
	tg := sqltest.Open(t, outbox.Postgres)
	ob := newOutbox(t, tg)
	table := ob.Table()
	ctx := context.Background()
	const n, sent = 6000, 5500
	msgs := make([]*message.Message, 0, n)
	for i := 0; i < n; i++ {
		msgs = append(msgs, message.NewMessage("Orders", []byte("x")).SetKeys("o-"+strconv.Itoa(i)).SetShardingKey("k-"+strconv.Itoa(i%50)))
	}
	addAll(t, tg.DB, ob, msgs)
	if _, err := tg.DB.ExecContext(ctx, "ANALYZE "+table); err != nil {
		t.Fatal(err)
	}
	// The first rows relayed and kept, as a relay with Retention records them.
	if _, err := tg.DB.ExecContext(ctx, "UPDATE "+table+" SET state = 1, sent_at = 1 WHERE id IN (SELECT id FROM "+table+" ORDER BY id LIMIT $1)", sent); err != nil {
		t.Fatal(err)
	}

	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	// The claim's own planner settings (Relay.claim).
	if _, err := tx.ExecContext(ctx, `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)`); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	now := int64(1) << 50
	if err := tx.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+outbox.ClaimQuery(outbox.Postgres, table), now, now, now, now, 500).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc []struct{ Plan planNode }
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	walk := doc[0].Plan.outerScan()
	if walk == nil || walk.Index != table+"_pending" {
		t.Fatalf("the claim walks %+v, want an index scan of %s_pending; plan:\n%s", walk, table, plan)
	}
	_ = tx.Rollback()

	var got []int
	r := newRelay(t, ob, func(_ context.Context, m *message.Message) (*message.SendResult, error) {
		k, _ := strconv.Atoi(m.Keys()[0][2:])
		got = append(got, k)
		return &message.SendResult{Status: message.SendOK}, nil
	}, func(c *outbox.RelayConfig) { c.Concurrency = 1; c.BatchSize = 1000; c.Retention = 1 << 40 })
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != n-sent {
		t.Fatalf("the claim sent %d rows, want the %d pending ones", len(got), n-sent)
	}
	for _, k := range got {
		if k < sent {
			t.Fatalf("row of order o-%d sent again: it was sent (state 1)", k)
		}
	}
}

// planNode is the part of PostgreSQL's EXPLAIN (FORMAT JSON) a test reads.
type planNode struct {
	Type  string     `json:"Node Type"`
	Index string     `json:"Index Name"`
	Rel   string     `json:"Relation Name"`
	Plans []planNode `json:"Plans"`
}

// outerScan returns the first scan reached through the outer (first) child of each node:
// the walk that feeds Limit and LockRows.
func (p *planNode) outerScan() *planNode {
	for n := p; n != nil; {
		switch n.Type {
		case "Index Scan", "Index Only Scan", "Seq Scan", "Bitmap Heap Scan":
			return n
		}
		if len(n.Plans) == 0 {
			return nil
		}
		n = &n.Plans[0]
	}
	return nil
}

// TestClaimReadsNoWholeTableMySQL: on MySQL/MariaDB every table of the claim's statement
// is read through an index, and the walk through (state, id). MariaDB 10.11 turned the
// head check's NOT EXISTS into a set of blocked ids built by reading the whole table
// (EXPLAIN type ALL) on each claim, so a claim cost every row of the table; and with most
// rows sent and kept (Retention) it walked the primary key through them.
func TestClaimReadsNoWholeTableMySQL(t *testing.T) {
	tg := sqltest.Open(t, outbox.MySQL)
	ob := newOutbox(t, tg)
	table := ob.Table()
	ctx := context.Background()
	const n = 2000
	msgs := make([]*message.Message, 0, n)
	for i := 0; i < n; i++ {
		msgs = append(msgs, message.NewMessage("Orders", []byte("x")).SetKeys("o-"+strconv.Itoa(i)).SetShardingKey("k-"+strconv.Itoa(i%100)))
	}
	addAll(t, tg.DB, ob, msgs)
	if _, err := tg.DB.ExecContext(ctx, "UPDATE "+table+" SET state = 1, sent_at = 1 WHERE id <= (SELECT m FROM (SELECT MIN(id) + ? AS m FROM "+table+") x)", n*9/10); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.DB.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}
	now := int64(1) << 50
	rows, err := tg.DB.QueryContext(ctx, "EXPLAIN "+outbox.ClaimQuery(outbox.MySQL, table), now, now, now, now, 500)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	typeCol, keyCol := -1, -1
	for i, c := range cols {
		switch c {
		case "type":
			typeCol = i
		case "key":
			keyCol = i
		}
	}
	if typeCol < 0 || keyCol < 0 {
		t.Fatalf("EXPLAIN columns %v: no type or key", cols)
	}
	seen := 0
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		seen++
		if seen == 1 && vals[keyCol].String != table+"_state" {
			t.Errorf("the claim walks %q, want %s_state: EXPLAIN row %v", vals[keyCol].String, table, vals)
		}
		if vals[typeCol].String == "ALL" {
			t.Errorf("the claim reads a whole table: EXPLAIN row %v", vals)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen < 2 {
		t.Fatalf("EXPLAIN gave %d rows, want the walk and its subqueries", seen)
	}
}

// addAll adds msgs in one transaction.
func addAll(t *testing.T, db *sql.DB, ob *outbox.Outbox, msgs []*message.Message) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Add(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}
