package outboxpg_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
	"github.com/sluicemq/sluice/outbox/outboxpg"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWakeOnCommit: with a poll interval of an hour, a relay woken by the listener sends a
// committed row at once; a rolled-back Add notifies nobody (pg_notify is transactional).
func TestWakeOnCommit(t *testing.T) {
	tg := sqltest.Open(t, outbox.Postgres)
	channel := tg.Name("wake")
	table := tg.Name("outbox")
	tg.Name("outbox_keys")
	ob, err := outbox.New(outbox.Config{DB: tg.DB, Dialect: outbox.Postgres, Table: table, NotifyChannel: channel})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := outboxpg.Listen(ctx, outboxpg.Config{ConnString: tg.DSN, Channel: channel, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var sent atomic.Int32
	r, err := outbox.NewRelay(ob, outbox.RelayConfig{PollInterval: time.Hour, Wake: l.C(), Logger: testkit.Logger(t),
		Send: func(context.Context, *message.Message) (*message.SendResult, error) {
			sent.Add(1)
			return &message.SendResult{Status: message.SendOK}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, r.Shutdown)
	// The relay's first claim runs at Start; after that it polls only hourly, so rows
	// committed later are sent within the test's deadline only through the wake-up.
	add := func(commit bool) {
		tx, err := tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Add(ctx, tx, message.NewMessage("T", []byte("x"))); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	add(false)
	for i := 1; i <= 3; i++ {
		add(true)
		testkit.WaitFor(t, 10*time.Second, func() bool { return sent.Load() == int32(i) }, "row sent after the wake-up")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
