package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/outbox"
)

// addConsoleOutboxFlags adds the flags of the console's outbox page.
func addConsoleOutboxFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.String("outbox-dialect", "", "adds the outbox page (backlog, dead rows, re-drive) for a transactional outbox in this database: postgres, mysql (MariaDB) or sqlite; its DSN comes from $SLUICE_OUTBOX_DSN or --outbox-dsn")
	f.String("outbox-dsn", "", "the outbox database: a PostgreSQL URL, a MySQL DSN or an SQLite file (prefer $SLUICE_OUTBOX_DSN: flags show in process lists)")
	f.StringSlice("outbox-table", []string{outbox.DefaultTable}, "outbox table(s) shown with --outbox-dialect (repeatable)")
}

// consoleOutboxes opens the database of the outbox flags (none without --outbox-dialect),
// checks it answers, and returns its outboxes and the database's close.
func consoleOutboxes(ctx context.Context, cmd *cobra.Command) ([]*outbox.Outbox, func() error, error) {
	f := cmd.Flags()
	name, _ := f.GetString("outbox-dialect")
	if name == "" {
		return nil, func() error { return nil }, nil
	}
	d, err := outbox.ParseDialect(name)
	if err != nil {
		return nil, nil, fmt.Errorf("--outbox-dialect: %w", err)
	}
	dsn, _ := f.GetString("outbox-dsn")
	if dsn == "" {
		dsn = os.Getenv("SLUICE_OUTBOX_DSN")
	}
	if dsn == "" {
		return nil, nil, fmt.Errorf("--outbox-dialect needs the database: $SLUICE_OUTBOX_DSN or --outbox-dsn")
	}
	if d == outbox.SQLite && !strings.HasPrefix(dsn, "file:") {
		if _, err := os.Stat(dsn); err != nil {
			return nil, nil, fmt.Errorf("sqlite database %s: %w", dsn, err)
		}
		dsn = outbox.SQLiteDSN(dsn)
	}
	db, err := sql.Open(d.Driver(), dsn)
	if err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("outbox %s database does not answer: %w", d, err)
	}
	tables, _ := f.GetStringSlice("outbox-table")
	var obs []*outbox.Outbox
	for _, t := range tables {
		ob, err := outbox.New(outbox.Config{DB: db, Dialect: d, Table: t})
		if err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("--outbox-table: %w", err)
		}
		obs = append(obs, ob)
	}
	return obs, db.Close, nil
}
