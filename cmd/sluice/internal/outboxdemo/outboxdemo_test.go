package outboxdemo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/cmd/sluice/internal/outboxdemo"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/outbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func check(t *testing.T, out *bytes.Buffer, tl outboxdemo.Tally, err error) {
	t.Helper()
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	// 40 orders: 8 declined (every 5th), 1 cut off by the crash (order 20, itself a 5th: counted as the crash).
	if !tl.OK() || tl.Placed != 40 || tl.Crashed != 1 || tl.Declined != 7 || tl.Committed != 32 || tl.Shipped != 32 {
		t.Fatalf("tally %+v", tl)
	}
	if !strings.Contains(out.String(), "crashed inside order 20") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestRunSluice(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	db := sqltest.Open(t, outbox.SQLite)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tl, err := outboxdemo.Run(ctx, outboxdemo.Options{NamesrvAddr: b.NamesrvAddr(), DB: db.DB, Dialect: db.Dialect, Out: &out, Logger: testkit.Quiet()})
	check(t, &out, tl, err)
}

func TestRunKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db := sqltest.Open(t, outbox.SQLite)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	tl, err := outboxdemo.Run(ctx, outboxdemo.Options{KafkaBrokers: c.ListenAddrs(), DB: db.DB, Dialect: db.Dialect, Out: &out, Logger: testkit.Quiet()})
	check(t, &out, tl, err)
}

func TestOptionsRequired(t *testing.T) {
	if _, err := outboxdemo.Run(context.Background(), outboxdemo.Options{}); err == nil {
		t.Fatal("empty options accepted")
	}
	db := sqltest.Open(t, outbox.SQLite)
	if _, err := outboxdemo.Run(context.Background(), outboxdemo.Options{DB: db.DB, Dialect: db.Dialect}); err == nil {
		t.Fatal("options without a broker accepted")
	}
}
