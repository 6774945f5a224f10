package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
)

// TestConsoleOutboxFlags: `sluice console --outbox-dialect sqlite --outbox-dsn FILE` serves
// the outbox page with the table's backlog and its dead row; a bad dialect or a missing
// database is refused before serving.
func TestConsoleOutboxFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shop.db")
	db, err := sql.Open("sqlite", outbox.SQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	ob, err := outbox.New(outbox.Config{DB: db, Dialect: outbox.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Add(ctx, tx, message.NewMessage("Orders", []byte("a")).SetKeys("order-dead-1"), message.NewMessage("Orders", []byte("b")).SetKeys("order-2")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(ob, outbox.RelayConfig{MaxAttempts: 1, Send: func(_ context.Context, m *message.Message) (*message.SendResult, error) {
		return nil, errors.New("topic Orders refused")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}

	c := startBackground(t, "console", "--namesrv", "127.0.0.1:9", "--listen", "127.0.0.1:0", "--log-level", "error",
		"--outbox-dialect", "sqlite", "--outbox-dsn", path)
	url := c.waitLine(t, consoleLine)[1]
	code, body := get(t, url+"outbox")
	if code != 200 || !strings.Contains(body, "order-dead-1") || !strings.Contains(body, "topic Orders refused") || !strings.Contains(body, `<td class="r dead">2</td>`) {
		t.Errorf("console outbox page: %d %.3000s", code, body)
	}
	if err := c.stop(t); err != nil {
		t.Errorf("console: %v", err)
	}

	if _, err := run(t, "console", "--namesrv", "127.0.0.1:9", "--listen", "127.0.0.1:0", "--outbox-dialect", "oracle", "--outbox-dsn", path); err == nil || !strings.Contains(err.Error(), "--outbox-dialect") {
		t.Errorf("an unknown dialect: %v", err)
	}
	t.Setenv("SLUICE_OUTBOX_DSN", "")
	if _, err := run(t, "console", "--namesrv", "127.0.0.1:9", "--listen", "127.0.0.1:0", "--outbox-dialect", "sqlite"); err == nil || !strings.Contains(err.Error(), "SLUICE_OUTBOX_DSN") {
		t.Errorf("no outbox database: %v", err)
	}
	if _, err := run(t, "console", "--namesrv", "127.0.0.1:9", "--listen", "127.0.0.1:0", "--outbox-dialect", "sqlite", "--outbox-dsn", filepath.Join(t.TempDir(), "none.db")); err == nil || !strings.Contains(err.Error(), "none.db") {
		t.Errorf("a missing sqlite file: %v", err)
	}
}
