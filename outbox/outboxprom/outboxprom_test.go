package outboxprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
	"github.com/sluicemq/sluice/outbox/outboxprom"
)

func TestCollector(t *testing.T) {
	tg := sqltest.Open(t, outbox.SQLite)
	table := tg.Name("outbox")
	tg.Name("outbox_keys")
	ob, err := outbox.New(outbox.Config{DB: tg.DB, Dialect: outbox.SQLite, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*message.Message
	for _, b := range []string{"ok1", "bad", "ok2", "later"} {
		msgs = append(msgs, message.NewMessage("T", []byte(b)))
	}
	if err := ob.Add(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(ob, outbox.RelayConfig{BatchSize: 3, MaxAttempts: 1, Logger: testkit.Logger(t),
		Send: func(_ context.Context, m *message.Message) (*message.SendResult, error) {
			if string(m.Body) == "bad" {
				return nil, errors.New("refused")
			}
			return &message.SendResult{Status: message.SendOK}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunOnce(ctx); err != nil { // ok1, bad, ok2; "later" stays
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(outboxprom.NewCollector(ob, r))
	want := `
# HELP sluice_outbox_backlog Unsent rows of the outbox table (pending, leased or backing off).
# TYPE sluice_outbox_backlog gauge
sluice_outbox_backlog{table="` + table + `"} 1
# HELP sluice_outbox_dead_rows Dead rows of the outbox table, waiting for a re-drive.
# TYPE sluice_outbox_dead_rows gauge
sluice_outbox_dead_rows{table="` + table + `"} 1
# HELP sluice_outbox_dead_total Rows the relays of this process made dead.
# TYPE sluice_outbox_dead_total counter
sluice_outbox_dead_total{table="` + table + `"} 1
# HELP sluice_outbox_send_failures_total Failed send attempts of the relays of this process.
# TYPE sluice_outbox_send_failures_total counter
sluice_outbox_send_failures_total{table="` + table + `"} 1
# HELP sluice_outbox_sent_total Rows the relays of this process sent and recorded.
# TYPE sluice_outbox_sent_total counter
sluice_outbox_sent_total{table="` + table + `"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), outboxprom.MetricBacklog, outboxprom.MetricDeadRows,
		outboxprom.MetricDead, outboxprom.MetricSendFailures, outboxprom.MetricSent); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == outboxprom.MetricOldestAge && mf.GetMetric()[0].GetGauge().GetValue() < 0 {
			t.Fatalf("oldest age %v", mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// A table that cannot be read fails the scrape.
	if _, err := tg.DB.Exec("DROP TABLE " + table); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err == nil {
		t.Fatal("scrape of a missing table did not fail")
	}
}
