package quickstart

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/sluicemq/sluice/cmd/sluice/internal/outboxdemo"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/outbox"
)

// outboxPart runs the order service of package outboxdemo against the quickstart's
// broker: orders and their OrderPlaced messages are written in one transaction through the
// transactional outbox, some are declined (rolled back), the service crashes inside one
// transaction, and a relay plus a shipping service behind the inbox tally every committed
// order shipped exactly once and nothing for the others. It uses the same database as the
// inbox part (embedded SQLite, or PostgreSQL with --postgres).
func (r *qsRun) outboxPart(ctx context.Context, stops *[]func(context.Context) error) error {
	out, o := r.out, r.o
	fmt.Fprintf(out, "\n--- nothing lost between the business commit and the broker: a transactional outbox ---\n")
	d, dsn, where := outbox.SQLite, inbox.SQLiteDSN(filepath.Join(r.dir, "orders.db")), "embedded SQLite "+filepath.Join(r.dir, "orders.db")
	if o.postgresDSN != "" {
		d, dsn, where = outbox.Postgres, o.postgresDSN, "PostgreSQL (--postgres), tables dropped at the end"
	}
	db, err := qsOpenDB(d, dsn)
	if err != nil {
		return err
	}
	*stops = append(*stops, func(context.Context) error { return db.Close() })
	fmt.Fprintf(out, "database: %s\n", where)
	_, err = outboxdemo.Run(r.deadline, outboxdemo.Options{
		NamesrvAddr: r.b.NamesrvAddr(),
		DB:          db,
		Dialect:     d,
		Orders:      20,
		Out:         out,
		Logger:      o.log,
	})
	if err != nil {
		return fmt.Errorf("outbox part: %w", err)
	}
	return nil
}
