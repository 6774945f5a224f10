// Package sqldialect is the SQL dialect layer the transactional inbox and outbox share:
// which database a *sql.DB talks to, how its placeholders are written, which table names
// are accepted, and the SQLite data source name both need. It imports database/sql's
// world only through strings: no driver is linked here, the program brings its own.
package sqldialect

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Dialect is the SQL dialect of a database. The inbox and outbox re-export it as
// inbox.Dialect and outbox.Dialect (the same type).
type Dialect int

// Supported dialects.
const (
	// Postgres: PostgreSQL 9.5 or later (INSERT ... ON CONFLICT), for example through
	// github.com/jackc/pgx/v5/stdlib (driver name "pgx").
	Postgres Dialect = iota + 1
	// MySQL: MySQL 5.7+/8 or MariaDB 10.3+ with InnoDB, for example through
	// github.com/go-sql-driver/mysql (driver name "mysql").
	MySQL
	// SQLite: SQLite 3.24 or later, for example through modernc.org/sqlite (driver name
	// "sqlite", pure Go). Open the database with [SQLiteDSN].
	SQLite
)

// String returns "postgres", "mysql" or "sqlite".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Valid reports whether d is one of Postgres, MySQL, SQLite.
func (d Dialect) Valid() bool { return d >= Postgres && d <= SQLite }

// Parse returns the dialect named s: "postgres" (or "postgresql", "pgx"), "mysql" (or
// "mariadb"), "sqlite" (or "sqlite3"); ok is false for anything else.
func Parse(s string) (d Dialect, ok bool) {
	switch strings.ToLower(s) {
	case "postgres", "postgresql", "pgx":
		return Postgres, true
	case "mysql", "mariadb":
		return MySQL, true
	case "sqlite", "sqlite3":
		return SQLite, true
	}
	return 0, false
}

// Driver returns the database/sql driver name the tests and tools of this module use for
// d: "pgx", "mysql" or "sqlite".
func (d Dialect) Driver() string {
	switch d {
	case Postgres:
		return "pgx"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return ""
}

// Placeholder returns the n-th (1-based) bind placeholder of d: "$n" for PostgreSQL, "?"
// for the others.
func (d Dialect) Placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// Rebind rewrites a statement written with "?" placeholders into d's placeholders
// ("$1", "$2", ... for PostgreSQL). The statements it is given are this module's own:
// they hold no "?" inside string literals.
func (d Dialect) Rebind(q string) string {
	if d != Postgres || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 8)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// MaxTableLen is the longest table name [ValidTable] accepts (PostgreSQL's identifier
// limit is 63 bytes; a few bytes are left for the index names derived from it).
const MaxTableLen = 63

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidTable reports whether t is 1..63 characters of [A-Za-z0-9_] not starting with a
// digit: a name the packages may use unquoted in every dialect. The reason names the rule.
func ValidTable(t string) (ok bool, reason string) {
	if !tableName.MatchString(t) {
		return false, fmt.Sprintf("%q: want 1..63 characters of [A-Za-z0-9_], not starting with a digit", t)
	}
	return true, ""
}

// sqliteURIPath escapes what an SQLite URI filename would otherwise read as an escape
// (%), the query (?) or the fragment (#).
var sqliteURIPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// SQLiteDSN returns a modernc.org/sqlite data source name for the database file path:
// transactions take the write lock when they begin (_txlock=immediate) and wait up to
// 10 s for it (busy_timeout), WAL journal, foreign keys on. Without these, two goroutines
// that both begin a transaction and then write fail with SQLITE_BUSY instead of taking
// turns. The characters of path that an SQLite URI gives a meaning ('%', '?', '#') are
// escaped, so the file opened is exactly path.
func SQLiteDSN(path string) string {
	return "file:" + sqliteURIPath.Replace(path) + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)"
}
