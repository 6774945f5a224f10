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

// TestAdminOutbox: list shows the counts and the dead row (with its error), redrive makes
// it pending again, and a database that is not there is an error.
func TestAdminOutbox(t *testing.T) {
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
	if err := ob.Add(ctx, tx, message.NewMessage("Orders", []byte("a")).SetKeys("order-1"), message.NewMessage("Orders", []byte("b")).SetKeys("order-2")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(ob, outbox.RelayConfig{MaxAttempts: 1, Send: func(_ context.Context, m *message.Message) (*message.SendResult, error) {
		if string(m.Body) == "a" {
			return nil, errors.New("topic Orders refused")
		}
		return &message.SendResult{Status: message.SendOK}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "admin", "outbox", "list", "--dialect", "sqlite", "--dsn", path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "0 pending") || !strings.Contains(out, "1 dead") || !strings.Contains(out, "order-1") || !strings.Contains(out, "topic Orders refused") {
		t.Fatalf("list:\n%s", out)
	}
	if _, err := run(t, "admin", "outbox", "redrive", "--dialect", "sqlite", "--dsn", path); err == nil {
		t.Fatal("redrive without ids or --all accepted")
	}
	out, err = run(t, "admin", "outbox", "redrive", "--dialect", "sqlite", "--dsn", path, "--all", "-o", "json")
	if err != nil || !strings.Contains(out, `"redriven": 1`) {
		t.Fatalf("redrive: %v\n%s", err, out)
	}
	out, err = run(t, "admin", "outbox", "list", "--dialect", "sqlite", "--dsn", path, "--state", "pending", "--json")
	if err != nil || !strings.Contains(out, `"pending":1`) || !strings.Contains(out, `"dead":0`) {
		t.Fatalf("list after redrive: %v\n%s", err, out)
	}
	if out2, err := run(t, "admin", "outbox", "list", "--dialect", "sqlite", "--dsn", path, "--state", "pending", "-o", "json"); err != nil || !strings.Contains(out2, `"pending":1`) || !strings.Contains(out2, `"MessageKey":"order-1"`) {
		t.Fatalf("list -o json: %v\n%s", err, out2)
	}
	if _, err := run(t, "admin", "outbox", "list", "--dialect", "sqlite", "--dsn", filepath.Join(t.TempDir(), "missing.db")); err == nil {
		t.Fatal("a missing database is not an error")
	}
	if _, err := run(t, "admin", "outbox", "list", "--dialect", "oracle", "--dsn", path); err == nil {
		t.Fatal("an unknown dialect is not an error")
	}
}
