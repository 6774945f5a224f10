package quickstart

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx" for --postgres
	_ "modernc.org/sqlite"             // driver "sqlite": the embedded default

	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// The inbox part of the quickstart: group ledger_service books every PaySuccess payment
// into a ledger table through the transactional inbox. Its first consumer is a separate
// process that crashes in the middle of a batch (its transaction is never committed or
// rolled back: the process is gone); a second consumer takes over.
const (
	qsLedgerGroup = "ledger_service"
	qsInboxBatch  = 4 // ConsumeMessageBatchMaxSize of ledger_service
	// qsCrashExit is the crashing consumer process's exit status.
	qsCrashExit = 3
	// qsChildEnv and the variables after it configure the crashing consumer process.
	qsChildEnv       = "SLUICE_QS_INBOX_CHILD" // "1"
	qsChildNamesrv   = "SLUICE_QS_INBOX_NAMESRV"
	qsChildDialect   = "SLUICE_QS_INBOX_DIALECT"
	qsChildDSN       = "SLUICE_QS_INBOX_DSN"
	qsChildInbox     = "SLUICE_QS_INBOX_TABLE"
	qsChildLedger    = "SLUICE_QS_INBOX_LEDGER"
	qsChildMaxLife   = 30 * time.Second // the child exits on its own after this
	qsChildNoBatch2  = 3 * time.Second  // no second batch by then: crash anyway
	qsMainArgsEnvVar = "SLUICE_MAIN_ARGS"
)

// RunInboxChild is the hidden "sluice quickstart inbox-child": the crashing
// ledger_service consumer process that Run starts (this executable with the arguments
// "quickstart inbox-child"), configured by the SLUICE_QS_INBOX_* environment. Started
// otherwise it refuses.
func RunInboxChild(ctx context.Context) error {
	if os.Getenv(qsChildEnv) != "1" {
		return errors.New("inbox-child is started by sluice quickstart only")
	}
	return runQSInboxChild(ctx)
}

// qsBook is the effect: one ledger row for the payment in m, written through tx. It
// returns the order id.
func qsBook(ctx context.Context, tx *sql.Tx, d inbox.Dialect, ledger string, m *message.MessageExt) (string, error) {
	var ev payEvent
	if err := json.Unmarshal(m.Body, &ev); err != nil {
		return "", fmt.Errorf("ledger_service: body of %s: %w", m.MsgID, err)
	}
	q := "INSERT INTO " + ledger + " (message_key, order_id, amount_cents) VALUES (?, ?, ?)"
	if d == inbox.Postgres {
		q = "INSERT INTO " + ledger + " (message_key, order_id, amount_cents) VALUES ($1, $2, $3)"
	}
	_, err := tx.ExecContext(ctx, q, middleware.StableKey(m), ev.OrderID, int64(ev.Amount*100+0.5))
	return ev.OrderID, err
}

// runQSInboxChild consumes as ledger_service, one handler at a time in batches of
// qsInboxBatch: it commits its first batch, then in its second batch books the first
// payment and exits with qsCrashExit before the transaction ends — as a process killed
// mid-batch. Without a second batch within qsChildNoBatch2 it crashes the same way.
func runQSInboxChild(ctx context.Context) error {
	d, err := inbox.ParseDialect(os.Getenv(qsChildDialect))
	if err != nil {
		return err
	}
	db, err := qsOpenDB(d, os.Getenv(qsChildDSN))
	if err != nil {
		return err
	}
	defer db.Close()
	ledger := os.Getenv(qsChildLedger)
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: d, Group: qsLedgerGroup, Table: os.Getenv(qsChildInbox), Logger: discardLogger()})
	if err != nil {
		return err
	}
	pid := os.Getpid()
	var mu sync.Mutex
	batches := 0
	h := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		mu.Lock()
		defer mu.Unlock() // one handler at a time anyway (ConsumeGoroutines 1)
		batches++
		var orders []string
		for i, m := range msgs {
			order, err := qsBook(ctx, tx, d, ledger, m)
			if err != nil {
				return err
			}
			orders = append(orders, order)
			if batches == 2 && i == 0 {
				fmt.Printf("ledger_service process %d: batch 2 %s: booked %s inside the transaction, then CRASH (exit %d) before commit\n",
					pid, qsOrderList(msgs), order, qsCrashExit)
				os.Exit(qsCrashExit)
			}
		}
		fmt.Printf("ledger_service process %d: batch %d %s: booked %s, committing\n", pid, batches, qsOrderList(msgs), strings.Join(orders, ", "))
		return nil
	})
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs: []string{os.Getenv(qsChildNamesrv)}, Group: qsLedgerGroup,
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset, ConsumeMessageBatchMaxSize: qsInboxBatch,
		ConsumeGoroutines: 1, Logger: discardLogger(),
	})
	if err != nil {
		return err
	}
	if err := qsStartConsumer(context.Background(), c, qsTopic, qsTagSuccess, h); err != nil {
		return err
	}
	deadline := time.NewTimer(qsChildNoBatch2)
	defer deadline.Stop()
	select {
	case <-deadline.C:
		fmt.Printf("ledger_service process %d: no second batch within %v: CRASH (exit %d)\n", pid, qsChildNoBatch2, qsCrashExit)
		os.Exit(qsCrashExit)
	case <-ctx.Done():
	}
	return ctx.Err()
}

// qsOrderList returns "[ORD-1 ORD-2 ...]" of msgs (order ids from the bodies).
func qsOrderList(msgs []*message.MessageExt) string {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		var ev payEvent
		_ = json.Unmarshal(m.Body, &ev)
		ids = append(ids, ev.OrderID)
	}
	return "[" + strings.Join(ids, " ") + "]"
}

// qsOpenDB opens the inbox database: SQLite (a file DSN from inbox.SQLiteDSN) or
// PostgreSQL.
func qsOpenDB(d inbox.Dialect, dsn string) (*sql.DB, error) {
	driver := "sqlite"
	if d == inbox.Postgres {
		driver = "pgx"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	if d == inbox.SQLite {
		db.SetMaxOpenConns(4)
	}
	return db, nil
}

// inboxPart runs the third part: the same PaySuccess payments booked once each into a
// ledger through the inbox, across a consumer crash mid-batch, and a tally that fails the
// run on any payment booked twice or never.
func (r *qsRun) inboxPart(ctx context.Context, stops *[]func(context.Context) error, payments []qsEvent) error {
	out, o := r.out, r.o
	fmt.Fprintf(out, "\n--- exactly once: the same payments booked through a transactional inbox ---\n")
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	inboxTable, ledger := "qs_inbox_"+suffix, "qs_ledger_"+suffix
	d, dsn, where := inbox.SQLite, inbox.SQLiteDSN(filepath.Join(r.dir, "ledger.db")), "embedded SQLite "+filepath.Join(r.dir, "ledger.db")
	if o.postgresDSN != "" {
		d, dsn, where = inbox.Postgres, o.postgresDSN, "PostgreSQL (--postgres), tables dropped at the end"
	}
	db, err := qsOpenDB(d, dsn)
	if err != nil {
		return err
	}
	*stops = append(*stops, func(ctx context.Context) error {
		var errs []error
		if d == inbox.Postgres {
			for _, t := range []string{inboxTable, ledger} {
				if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return errors.Join(append(errs, db.Close())...)
	})
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: d, Group: qsLedgerGroup, Table: inboxTable, Logger: o.log})
	if err != nil {
		return err
	}
	if err := ib.CreateTable(r.deadline); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if _, err := db.ExecContext(r.deadline, "CREATE TABLE "+ledger+" (message_key VARCHAR(255) NOT NULL, order_id VARCHAR(64) NOT NULL, amount_cents BIGINT NOT NULL)"); err != nil {
		return fmt.Errorf("%s: create the ledger: %w", where, err)
	}
	fmt.Fprintf(out, "database: %s; inbox table %s, ledger table %s\n", where, inboxTable, ledger)
	fmt.Fprintf(out, "group %s books each PaySuccess payment (a ledger row) in the same transaction as its inbox row, batches of %d\n", qsLedgerGroup, qsInboxBatch)

	// The crashing consumer process.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cctx, ccancel := context.WithTimeout(r.deadline, qsChildMaxLife)
	defer ccancel()
	child := exec.CommandContext(cctx, exe, "quickstart", "inbox-child")
	child.Env = append(os.Environ(), qsChildEnv+"=1", qsChildNamesrv+"="+r.b.NamesrvAddr(), qsChildDialect+"="+d.String(),
		qsChildDSN+"="+dsn, qsChildInbox+"="+inboxTable, qsChildLedger+"="+ledger,
		qsMainArgsEnvVar+"=quickstart inbox-child") // when exe is this command's test binary
	var childOut, childErr bytes.Buffer
	child.Stdout, child.Stderr = &childOut, &childErr
	if err := child.Start(); err != nil {
		return fmt.Errorf("start the ledger_service consumer process: %w", err)
	}
	fmt.Fprintf(out, "started ledger_service consumer process %d (1 handler)\n", child.Process.Pid)
	err = child.Wait()
	out.Write(childOut.Bytes())
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != qsCrashExit {
		return fmt.Errorf("the ledger_service consumer process was to crash with status %d: %v; stderr: %s", qsCrashExit, err, strings.TrimSpace(childErr.String()))
	}
	booked, err := qsLedgerCounts(r.deadline, db, ledger)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the process died with status %d mid-batch, its transaction unfinished (the database drops it with the connection); %d payment(s) in the ledger so far\n",
		qsCrashExit, len(booked))

	// The restart: a consumer in this process takes over (20 handlers).
	var mu sync.Mutex
	acked, dups := 0, 0
	handler := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		for _, m := range msgs {
			if _, err := qsBook(ctx, tx, d, ledger, m); err != nil {
				return err
			}
		}
		return nil
	})
	if o.noInbox { // test hook: book without the inbox — the crash's redeliveries book twice
		handler = func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return message.ReconsumeLater, err
			}
			for _, m := range msgs {
				if _, err := qsBook(ctx, tx, d, ledger, m); err != nil {
					_ = tx.Rollback()
					return message.ReconsumeLater, err
				}
			}
			if err := tx.Commit(); err != nil {
				return message.ReconsumeLater, err
			}
			return message.ConsumeSuccess, nil
		}
	}
	count := func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			ctx, rep := middleware.WithReport(ctx)
			res, err := next(ctx, msgs)
			if res == message.ConsumeSuccess && err == nil {
				mu.Lock()
				acked += len(msgs)
				for _, x := range rep.Reasons() {
					if x == middleware.ReasonDuplicate {
						dups++
					}
				}
				mu.Unlock()
			}
			return res, err
		}
	}
	c, err := consumer.NewPushConsumer(consumer.Config{
		NamesrvAddrs: r.ns, Group: qsLedgerGroup, ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		ConsumeMessageBatchMaxSize: qsInboxBatch, Middlewares: []middleware.ConsumeMiddleware{middleware.Logging(o.log), count, middleware.Recover()},
		Logger: o.log,
	})
	if err != nil {
		return err
	}
	*stops = append(*stops, c.Shutdown)
	if err := qsStartConsumer(context.Background(), c, qsTopic, qsTagSuccess, handler); err != nil {
		return err
	}
	restarted := time.Now()
	fmt.Fprintf(out, "restarted ledger_service in this process (20 handlers); the broker redelivers what the dead process never acknowledged\n")

	// Every PaySuccess message sent so far: distinct payments plus one duplicate copy.
	want := map[string]string{} // key -> order
	for _, p := range payments {
		want[p.key] = p.order
	}
	messages := len(payments) + 1
	qsWait(r.deadline, func() bool {
		mu.Lock()
		a := acked
		mu.Unlock()
		got, err := qsLedgerCounts(r.deadline, db, ledger)
		return err == nil && a >= messages && len(got) >= len(want)
	})
	got, err := qsLedgerCounts(context.WithoutCancel(ctx), db, ledger)
	if err != nil {
		return err
	}
	mu.Lock()
	a, dp := acked, dups
	mu.Unlock()
	var doubled, lost []string
	for k, order := range want {
		switch n := got[k]; {
		case n == 0:
			lost = append(lost, order)
		case n > 1:
			doubled = append(doubled, fmt.Sprintf("%s booked %d times", order, n))
		}
	}
	sort.Strings(doubled)
	sort.Strings(lost)
	rows := 0
	for _, n := range got {
		rows += n
	}
	fmt.Fprintf(out, "\ninbox tally (%v after the restart): %d PaySuccess message(s) of %d payment(s) (one sent twice); after the crash ledger_service acknowledged %d deliveries, %d skipped by the inbox as already booked; ledger rows %d; doubled %d, lost %d\n",
		time.Since(restarted).Round(10*time.Millisecond), messages, len(want), a, dp, rows, len(doubled), len(lost))
	var problems []string
	if len(doubled) > 0 {
		problems = append(problems, "booked twice: "+strings.Join(doubled, ", "))
	}
	if len(lost) > 0 {
		problems = append(problems, "never booked: "+strings.Join(lost, ", "))
	}
	if len(problems) > 0 {
		return r.failed(ctx, problems)
	}
	fmt.Fprintf(out, "inbox OK: every payment booked exactly once across the crash\n")
	return nil
}

// qsLedgerCounts returns the ledger's rows per message key.
func qsLedgerCounts(ctx context.Context, db *sql.DB, ledger string) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, "SELECT message_key, COUNT(*) FROM "+ledger+" GROUP BY message_key")
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		m[k] = n
	}
	return m, rows.Err()
}
