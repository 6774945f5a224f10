// Package sqltest gives tests SQL databases to talk to: SQLite (modernc.org/sqlite, a file
// in the test's temporary directory) always, and a real PostgreSQL or MySQL/MariaDB when
// SLUICE_POSTGRES_DSN or SLUICE_MYSQL_DSN is set (.ci/provision sets both).
//
// [Each] runs a subtest once per available database ("sqlite", "postgres", "mysql"). The
// servers may be shared by parallel test runs: every subtest gets table names of its own
// ([Target.Name]) and drops them in its cleanup; nothing here drops a schema or a database.
//
// Only tests import this package, so the drivers stay out of every non-test build.
package sqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite"

	"github.com/sluicemq/sluice/inbox"
)

// Environment variables naming real servers.
const (
	EnvPostgres = "SLUICE_POSTGRES_DSN" // e.g. postgres://u:p@127.0.0.1:5432/db?sslmode=disable
	EnvMySQL    = "SLUICE_MYSQL_DSN"    // e.g. u:p@tcp(127.0.0.1:3306)/db
)

// Target is one database a subtest runs against.
type Target struct {
	// Dialect is the database's inbox dialect (its String() is the subtest name).
	Dialect inbox.Dialect
	// DB is open to the database, closed in the subtest's cleanup.
	DB *sql.DB
	// DSN is the data source name DB was opened with (for child processes).
	DSN string
	// Driver is the database/sql driver name ("pgx", "mysql", "sqlite").
	Driver string

	t      testing.TB
	prefix string
	mu     sync.Mutex
	tables []string
}

// Each runs fn as a subtest against SQLite and, when their variables are set, PostgreSQL
// and MySQL/MariaDB. A database that was asked for but does not answer fails the subtest;
// one that was not asked for is logged as skipped.
func Each(t *testing.T, fn func(t *testing.T, tg *Target)) {
	t.Helper()
	for _, d := range []inbox.Dialect{inbox.SQLite, inbox.Postgres, inbox.MySQL} {
		t.Run(d.String(), func(t *testing.T) {
			tg := Open(t, d)
			fn(t, tg)
		})
	}
}

// Open returns a target of dialect d, or skips t (naming the variable) when d's server is
// not configured. SQLite is always available.
func Open(t testing.TB, d inbox.Dialect) *Target {
	t.Helper()
	var driver, dsn string
	switch d {
	case inbox.SQLite:
		driver, dsn = "sqlite", inbox.SQLiteDSN(filepath.Join(t.TempDir(), "test.db"))
	case inbox.Postgres:
		driver, dsn = "pgx", os.Getenv(EnvPostgres)
		if dsn == "" {
			t.Skipf("sqltest: %s not set (a PostgreSQL DSN); skipping the PostgreSQL run", EnvPostgres)
		}
	case inbox.MySQL:
		driver, dsn = "mysql", os.Getenv(EnvMySQL)
		if dsn == "" {
			t.Skipf("sqltest: %s not set (a MySQL/MariaDB DSN); skipping the MySQL run", EnvMySQL)
		}
	default:
		t.Fatalf("sqltest: dialect %v", d)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("sqltest: open %s: %v", d, err)
	}
	if d == inbox.SQLite {
		// One database file; a few connections so WAL readers do not wait for writers.
		db.SetMaxOpenConns(4)
	} else {
		db.SetMaxOpenConns(40)
		db.SetMaxIdleConns(40)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		t.Fatalf("sqltest: %s does not answer: %v", d, err)
	}
	tg := &Target{Dialect: d, DB: db, DSN: dsn, Driver: driver, t: t, prefix: "t" + randHex(5)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tg.mu.Lock()
		tables := tg.tables
		tg.mu.Unlock()
		for _, tb := range tables {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+tb); err != nil {
				t.Errorf("sqltest: drop %s: %v", tb, err)
			}
		}
		_ = db.Close()
	})
	return tg
}

// Name returns a table name unique to this target and test ("t<random>_<suffix>", lower
// case) and registers it to be dropped in the test's cleanup.
func (tg *Target) Name(suffix string) string {
	n := strings.ToLower(tg.prefix + "_" + suffix)
	tg.mu.Lock()
	tg.tables = append(tg.tables, n)
	tg.mu.Unlock()
	return n
}

// P returns the n-th (1-based) placeholder of the dialect: "$n" for PostgreSQL, "?" else.
func (tg *Target) P(n int) string { return Placeholder(tg.Dialect, n) }

// Placeholder returns the n-th (1-based) placeholder of dialect d.
func Placeholder(d inbox.Dialect, n int) string {
	if d == inbox.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// EffectsTable creates a table "<name>(k VARCHAR(1024) NOT NULL)" (VARBINARY in MySQL, so
// keys compare byte for byte) to record business effects (one row per effect, so doubles
// show as several rows) and returns its name.
func (tg *Target) EffectsTable(suffix string) string {
	tg.t.Helper()
	name := tg.Name(suffix)
	typ := "VARCHAR(1024)"
	if tg.Dialect == inbox.MySQL {
		typ = "VARBINARY(1024)"
	}
	if _, err := tg.DB.Exec("CREATE TABLE " + name + " (k " + typ + " NOT NULL)"); err != nil {
		tg.t.Fatalf("sqltest: create %s: %v", name, err)
	}
	return name
}

// Counts returns the rows of an effects table per k.
func (tg *Target) Counts(table string) map[string]int {
	tg.t.Helper()
	return Counts(tg.t, tg.DB, table)
}

// Counts returns the rows of the effects table table in db per k.
func Counts(t testing.TB, db *sql.DB, table string) map[string]int {
	t.Helper()
	rows, err := db.Query("SELECT k, COUNT(*) FROM " + table + " GROUP BY k")
	if err != nil {
		t.Fatalf("sqltest: count %s: %v", table, err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatalf("sqltest: count %s: %v", table, err)
		}
		m[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("sqltest: count %s: %v", table, err)
	}
	return m
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
