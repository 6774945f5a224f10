package inbox_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicemq/sluice/inbox"
	_ "github.com/sluicemq/sluice/internal/sqltest" // registers the "sqlite" driver
)

// SQLiteDSN opens the file at exactly the path given, also when the path holds the
// characters an SQLite URI gives a meaning ('?' query, '#' fragment, '%' escape): two
// directories "run#1" and "run#2" must not share one database file "run".
func TestSQLiteDSNOddPaths(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"run#1", "run#2", "q?a", "pct%41", "sp ace"} {
		p := filepath.Join(dir, name, "inbox.db")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", inbox.SQLiteDSN(p))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(context.Background(), "CREATE TABLE t (name TEXT)"); err != nil {
			db.Close()
			t.Fatalf("%s: create: %v (the database of another path was opened?)", name, err)
		}
		if _, err := db.ExecContext(context.Background(), "INSERT INTO t VALUES (?)", name); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: no database file at %s: %v", name, p, err)
		}
	}
}
