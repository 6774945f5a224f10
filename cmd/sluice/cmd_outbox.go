package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver "mysql" for --dialect mysql
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx" for --dialect postgres
	"github.com/spf13/cobra"
	_ "modernc.org/sqlite" // driver "sqlite" for --dialect sqlite

	"github.com/sluicemq/sluice/outbox"
)

// newOutboxAdminCmd is "sluice admin outbox": the backlog and dead rows of a
// transactional outbox table (package outbox), and their re-drive.
func newOutboxAdminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Show a transactional outbox's backlog and dead rows, and re-drive dead rows",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	pf := cmd.PersistentFlags()
	pf.String("dsn", "", "the database holding the outbox: a PostgreSQL URL, a MySQL DSN or an SQLite file; default $SLUICE_OUTBOX_DSN (prefer it: flags show in process lists)")
	pf.String("dialect", "postgres", "the database's dialect: postgres, mysql (MariaDB) or sqlite")
	pf.String("table", outbox.DefaultTable, "the outbox table")
	cmd.AddCommand(newOutboxListCmd(), newOutboxRedriveCmd())
	return cmd
}

// withOutbox opens the database of --dsn/--dialect, checks it answers, and runs f.
func withOutbox(cmd *cobra.Command, f func(ctx context.Context, ob *outbox.Outbox) error) error {
	dsn, _ := cmd.Flags().GetString("dsn")
	if dsn == "" {
		dsn = os.Getenv("SLUICE_OUTBOX_DSN")
	}
	if dsn == "" {
		return fmt.Errorf("--dsn (or $SLUICE_OUTBOX_DSN) is required")
	}
	name, _ := cmd.Flags().GetString("dialect")
	d, err := outbox.ParseDialect(name)
	if err != nil {
		return err
	}
	table, _ := cmd.Flags().GetString("table")
	if d == outbox.SQLite && !strings.HasPrefix(dsn, "file:") {
		if _, err := os.Stat(dsn); err != nil {
			return fmt.Errorf("sqlite database %s: %w", dsn, err)
		}
		dsn = outbox.SQLiteDSN(dsn)
	}
	db, err := sql.Open(d.Driver(), dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("%s database does not answer: %w", d, err)
	}
	ob, err := outbox.New(outbox.Config{DB: db, Dialect: d, Table: table})
	if err != nil {
		return err
	}
	return f(ctx, ob)
}

func newOutboxListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Print the outbox's row counts, the age of its oldest unsent row, and its dead (or pending) rows",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stateName, _ := cmd.Flags().GetString("state")
			limit, _ := cmd.Flags().GetInt("limit")
			asJSON, err := jsonOutput(cmd) // -o json, or --json
			if err != nil {
				return err
			}
			state := map[string]int{"pending": outbox.StatePending, "sent": outbox.StateSent, "dead": outbox.StateDead}
			s, ok := state[stateName]
			if !ok {
				return fmt.Errorf("--state %q: want dead, pending or sent", stateName)
			}
			return withOutbox(cmd, func(ctx context.Context, ob *outbox.Outbox) error {
				st, err := ob.Stats(ctx)
				if err != nil {
					return err
				}
				rows, err := ob.List(ctx, s, 0, limit)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				age := st.OldestPendingAge(time.Now())
				if asJSON {
					return json.NewEncoder(out).Encode(map[string]any{"table": ob.Table(), "pending": st.Pending, "sent": st.Sent,
						"dead": st.Dead, "oldest_pending_age_ms": age.Milliseconds(), "rows": rows})
				}
				fmt.Fprintf(out, "outbox %s: %d pending (oldest %v), %d dead, %d sent kept\n", ob.Table(), st.Pending, age.Round(time.Millisecond), st.Dead, st.Sent)
				if len(rows) == 0 {
					fmt.Fprintf(out, "no %s rows\n", stateName)
					return nil
				}
				w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tTOPIC\tORDER KEY\tMESSAGE KEY\tATTEMPTS\tCREATED\tLAST ERROR")
				for _, r := range rows {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Topic, r.OrderKey, r.MessageKey, r.Attempts,
						r.CreatedAt.UTC().Format(time.RFC3339), strings.ReplaceAll(r.LastError, "\n", " "))
				}
				return w.Flush()
			})
		},
	}
	cmd.Flags().String("state", "dead", "which rows to list: dead, pending or sent")
	cmd.Flags().Int("limit", 100, fmt.Sprintf("the most rows to list (1..%d)", outbox.MaxList))
	cmd.Flags().Bool("json", false, "print JSON (the same as -o json)")
	return cmd
}

func newOutboxRedriveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "redrive [id...]",
		Short: "Make dead outbox rows pending again (attempts reset): the given ids, or every dead row with --all",
		RunE: func(cmd *cobra.Command, args []string) error {
			all, _ := cmd.Flags().GetBool("all")
			if all == (len(args) > 0) {
				return fmt.Errorf("give the ids of dead rows, or --all (not both)")
			}
			ids := make([]int64, 0, len(args))
			for _, a := range args {
				id, err := strconv.ParseInt(a, 10, 64)
				if err != nil || id <= 0 {
					return fmt.Errorf("row id %q: want a positive integer", a)
				}
				ids = append(ids, id)
			}
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withOutbox(cmd, func(ctx context.Context, ob *outbox.Outbox) error {
				n, err := ob.Redrive(ctx, ids...)
				if err != nil {
					return err
				}
				if asJSON {
					if err := printJSON(cmd, struct {
						Table     string `json:"table"`
						Redriven  int64  `json:"redriven"`
						Requested int    `json:"requested"` // ids given; 0 with --all
					}{ob.Table(), n, len(ids)}); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "re-drove %d dead rows of %s\n", n, ob.Table())
				}
				if len(ids) > 0 && n < int64(len(ids)) {
					return fmt.Errorf("%d of the %d ids were not dead rows", int64(len(ids))-n, len(ids))
				}
				return nil
			})
		},
	}
	cmd.Flags().Bool("all", false, "re-drive every dead row")
	return cmd
}
