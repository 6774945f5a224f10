package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/sqldialect"
)

// Dialect is the SQL dialect of the database holding the inbox table. The inbox needs no
// driver of its own: the program opens a *sql.DB with the driver it likes and names the
// dialect here. It is the dialect type package outbox uses too (outbox.Dialect).
type Dialect = sqldialect.Dialect

// Supported dialects.
const (
	// Postgres: PostgreSQL 9.5 or later (INSERT ... ON CONFLICT DO NOTHING), for example
	// through github.com/jackc/pgx/v5/stdlib (driver name "pgx").
	Postgres = sqldialect.Postgres
	// MySQL: MySQL 5.7+/8 or MariaDB 10.3+ with InnoDB (INSERT IGNORE), for example through
	// github.com/go-sql-driver/mysql (driver name "mysql").
	MySQL = sqldialect.MySQL
	// SQLite: SQLite 3.24 or later (INSERT OR IGNORE), for example through modernc.org/sqlite
	// (driver name "sqlite", pure Go). Open the database with [SQLiteDSN] so concurrent
	// transactions wait for the write lock instead of failing with SQLITE_BUSY.
	SQLite = sqldialect.SQLite
)

// ParseDialect returns the dialect named s: "postgres" (or "postgresql", "pgx"), "mysql"
// (or "mariadb"), "sqlite" (or "sqlite3").
func ParseDialect(s string) (Dialect, error) {
	if d, ok := sqldialect.Parse(s); ok {
		return d, nil
	}
	return 0, &config.Error{Package: "inbox", Field: "Dialect", Reason: fmt.Sprintf("%q is not postgres, mysql or sqlite", s)}
}

// DefaultTable is the inbox table's default name.
const DefaultTable = "sluice_inbox"

// Column sizes of the inbox table.
const (
	// MaxGroupLen is the longest consumer group, in bytes (the column is 255 bytes wide;
	// RocketMQ limits group names to 255 characters).
	MaxGroupLen = 255
	// MaxKeyLen is the longest message key stored as is, in bytes; a longer key (or one
	// with a NUL byte or invalid UTF-8, or one starting with "sha256:") is stored as
	// "sha256:" followed by the 64 lowercase hex digits of its SHA-256 (see [RowKey]).
	MaxKeyLen = 255
)

func validateTable(t string) error {
	if ok, reason := sqldialect.ValidTable(t); !ok {
		return &config.Error{Package: "inbox", Field: "Table", Reason: reason}
	}
	return nil
}

// DDL returns the statements that create the inbox table named table ("" for
// [DefaultTable]) and its index in dialect d; each is idempotent (IF NOT EXISTS). The
// table:
//
//	consumer_group  text, at most 255 bytes   the consumer group (Config.Group)
//	message_key     text, at most 255 bytes   the message's stable key (see RowKey)
//	processed_at    64-bit integer            when the row was inserted, Unix milliseconds
//	PRIMARY KEY (consumer_group, message_key), an index on processed_at for the sweeper
//
// In MySQL/MariaDB both key columns are VARBINARY, so keys compare byte for byte (a
// case-insensitive collation would take "Order-1" and "order-1" for one key). The table
// name must be 1..63 characters of [A-Za-z0-9_] not starting with a digit; it is used
// unquoted, so in PostgreSQL it is folded to lower case.
func DDL(d Dialect, table string) ([]string, error) {
	if table == "" {
		table = DefaultTable
	}
	if err := validateTable(table); err != nil {
		return nil, err
	}
	switch d {
	case Postgres:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer_group VARCHAR(255) NOT NULL,
	message_key    VARCHAR(255) NOT NULL,
	processed_at   BIGINT       NOT NULL,
	PRIMARY KEY (consumer_group, message_key)
)`,
			`CREATE INDEX IF NOT EXISTS ` + table + `_processed_at ON ` + table + ` (processed_at)`,
		}, nil
	case MySQL:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer_group VARBINARY(255) NOT NULL,
	message_key    VARBINARY(255) NOT NULL,
	processed_at   BIGINT         NOT NULL,
	PRIMARY KEY (consumer_group, message_key),
	INDEX ` + table + `_processed_at (processed_at)
) ENGINE=InnoDB`,
		}, nil
	case SQLite:
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + table + ` (
	consumer_group TEXT    NOT NULL,
	message_key    TEXT    NOT NULL,
	processed_at   INTEGER NOT NULL,
	PRIMARY KEY (consumer_group, message_key)
)`,
			`CREATE INDEX IF NOT EXISTS ` + table + `_processed_at ON ` + table + ` (processed_at)`,
		}, nil
	}
	return nil, &config.Error{Package: "inbox", Field: "Dialect", Reason: fmt.Sprintf("%v is not Postgres, MySQL or SQLite", d)}
}

// DDLText is [DDL] as one SQL text, statements separated by ";\n", for migration tools
// that want the SQL of the inbox table (table "" for [DefaultTable]). It replaces the
// former package variables PostgresDDL, MySQLDDL and SQLiteDDL: DDLText(Postgres, "").
func DDLText(d Dialect, table string) (string, error) {
	s, err := DDL(d, table)
	if err != nil {
		return "", err
	}
	return strings.Join(s, ";\n") + ";\n", nil
}

// CreateTable creates the inbox table [DefaultTable] and its index in db if they do not
// exist (the statements of [DDL]). Use [Inbox.CreateTable] for a table of another name.
func CreateTable(ctx context.Context, db *sql.DB, d Dialect) error {
	return createTable(ctx, db, d, DefaultTable)
}

func createTable(ctx context.Context, db *sql.DB, d Dialect, table string) error {
	if db == nil {
		return &config.Error{Package: "inbox", Field: "DB", Reason: "nil"}
	}
	stmts, err := DDL(d, table)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("inbox: create table %s: %w", table, err)
		}
	}
	return nil
}

// SQLiteDSN returns a modernc.org/sqlite data source name for the database file path that
// suits the inbox: transactions take the write lock when they begin (_txlock=immediate)
// and wait up to 10 s for it (busy_timeout), WAL journal, foreign keys on. Without these,
// two consumer goroutines that both begin a transaction and then write fail with
// SQLITE_BUSY instead of taking turns. The characters of path that an SQLite URI gives a
// meaning ('%', '?', '#') are escaped, so the file opened is exactly path.
func SQLiteDSN(path string) string { return sqldialect.SQLiteDSN(path) }

// insertSQL returns the statement that inserts one inbox row and affects 0 rows when the
// (group, key) row already exists.
func insertSQL(d Dialect, table string) string {
	switch d {
	case Postgres:
		return `INSERT INTO ` + table + ` (consumer_group, message_key, processed_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
	case MySQL:
		// Keys and groups are checked against the column widths before, so IGNORE only
		// turns the duplicate-key error into "0 rows".
		return `INSERT IGNORE INTO ` + table + ` (consumer_group, message_key, processed_at) VALUES (?, ?, ?)`
	default:
		return `INSERT OR IGNORE INTO ` + table + ` (consumer_group, message_key, processed_at) VALUES (?, ?, ?)`
	}
}

// insertManySQL returns one INSERT of rows (group, key, now) for every key, that skips
// existing rows and returns the keys it inserted (PostgreSQL and SQLite 3.35+ only), and
// its arguments.
func insertManySQL(d Dialect, table, group string, keys []string, now int64) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, 3*len(keys))
	if d == Postgres {
		b.WriteString("INSERT INTO " + table + " (consumer_group, message_key, processed_at) VALUES ")
	} else {
		b.WriteString("INSERT OR IGNORE INTO " + table + " (consumer_group, message_key, processed_at) VALUES ")
	}
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		if d == Postgres {
			fmt.Fprintf(&b, "($%d, $%d, $%d)", 3*i+1, 3*i+2, 3*i+3)
		} else {
			b.WriteString("(?, ?, ?)")
		}
		args = append(args, group, k, now)
	}
	if d == Postgres {
		b.WriteString(" ON CONFLICT DO NOTHING")
	}
	b.WriteString(" RETURNING message_key")
	return b.String(), args
}

// existsSQL returns the statement that reads one row's processed_at.
func existsSQL(d Dialect, table string) string {
	if d == Postgres {
		return `SELECT processed_at FROM ` + table + ` WHERE consumer_group = $1 AND message_key = $2`
	}
	return `SELECT processed_at FROM ` + table + ` WHERE consumer_group = ? AND message_key = ?`
}

// sweepSQL returns the statement that deletes at most n rows older than a cutoff
// (arguments: cutoff ms, n).
func sweepSQL(d Dialect, table string) string {
	switch d {
	case Postgres:
		return `DELETE FROM ` + table + ` WHERE ctid IN (SELECT ctid FROM ` + table + ` WHERE processed_at < $1 LIMIT $2)`
	case MySQL:
		return `DELETE FROM ` + table + ` WHERE processed_at < ? LIMIT ?`
	default:
		return `DELETE FROM ` + table + ` WHERE rowid IN (SELECT rowid FROM ` + table + ` WHERE processed_at < ? LIMIT ?)`
	}
}
