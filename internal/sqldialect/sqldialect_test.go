package sqldialect

import "testing"

func TestParseAndString(t *testing.T) {
	for in, want := range map[string]Dialect{"postgres": Postgres, "PGX": Postgres, "postgresql": Postgres,
		"mysql": MySQL, "MariaDB": MySQL, "sqlite": SQLite, "sqlite3": SQLite} {
		d, ok := Parse(in)
		if !ok || d != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, d, ok, want)
		}
		if !d.Valid() {
			t.Errorf("%v not valid", d)
		}
	}
	if d, ok := Parse("oracle"); ok || d.Valid() {
		t.Errorf("Parse(oracle) = %v, %v", d, ok)
	}
	if got := Dialect(9).String(); got != "Dialect(9)" {
		t.Errorf("String = %q", got)
	}
	for d, drv := range map[Dialect]string{Postgres: "pgx", MySQL: "mysql", SQLite: "sqlite", 0: ""} {
		if d.Driver() != drv {
			t.Errorf("%v.Driver() = %q", d, d.Driver())
		}
	}
}

func TestRebind(t *testing.T) {
	q := "UPDATE t SET a = ? WHERE b = ? AND c IN (?, ?)"
	if got := Postgres.Rebind(q); got != "UPDATE t SET a = $1 WHERE b = $2 AND c IN ($3, $4)" {
		t.Errorf("Postgres: %q", got)
	}
	if got := MySQL.Rebind(q); got != q {
		t.Errorf("MySQL: %q", got)
	}
	if Postgres.Placeholder(3) != "$3" || SQLite.Placeholder(3) != "?" {
		t.Error("Placeholder")
	}
}

func TestValidTable(t *testing.T) {
	for _, ok := range []string{"sluice_outbox", "_x", "A9"} {
		if v, r := ValidTable(ok); !v {
			t.Errorf("%q refused: %s", ok, r)
		}
	}
	for _, bad := range []string{"", "9a", "a-b", "a b", "x;drop", string(make([]byte, 64))} {
		if v, _ := ValidTable(bad); v {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestSQLiteDSN(t *testing.T) {
	if got := SQLiteDSN("/tmp/a?b#c%d.db"); got != "file:/tmp/a%3fb%23c%25d.db?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)" {
		t.Errorf("%q", got)
	}
}
