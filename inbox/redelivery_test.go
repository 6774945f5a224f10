package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/retrytask"
)

// startBroker starts an ephemeral broker (every delay level 1 s) with topic created, and
// returns its name server address. It stops in t's cleanup.
func startBroker(t testing.TB, topic string, queues int) string {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{MessageDelayLevel: strings.TrimSpace(strings.Repeat("1s ", 18))})
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.CreateTopic(ctx, admin.TopicSpec{Topic: topic, Queues: queues}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitTopicRoute(ctx, topic); err != nil {
		t.Fatal(err)
	}
	return b.NamesrvAddr()
}

func shutdownT(t testing.TB, what string, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f(ctx); err != nil {
		t.Errorf("%s shutdown: %v", what, err)
	}
}

// TestStableKeyAcrossRedeliveries: a message's stable key (KEYS set by middleware.Keys) is
// the same in the handler's context on the first delivery, a consume retry, a dead letter
// re-driven with admin.ResendDLQ, and a send parked by redismw.Park and resent by
// retrytask; the inbox applies each business event once.
func TestStableKeyAcrossRedeliveries(t *testing.T) {
	const topic, group = "IdemKeys", "idem_keys"
	ctx := context.Background()
	ns := startBroker(t, topic, 2)
	db := sqltest.Open(t, inbox.SQLite)
	ib := newInbox(t, db, group)
	eff := db.EffectsTable("eff")
	rdb := redistest.New(t)

	type seen struct {
		ctxKey, stable string
		reconsume      int32
	}
	var mu sync.Mutex
	calls := map[string][]seen{} // by body
	dlqOpen := false             // the "dead" message succeeds only after this is set
	h := ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		m := msgs[0]
		body := string(m.Body)
		mu.Lock()
		calls[body] = append(calls[body], seen{middleware.IdempotencyKey(ctx), middleware.StableKey(m), m.ReconsumeTimes})
		n, open := len(calls[body]), dlqOpen
		mu.Unlock()
		if body == "retried" && n == 1 || body == "dead" && !open {
			return errors.New("not yet")
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+eff+" (k) VALUES (?)", middleware.IdempotencyKey(ctx))
		return err
	})
	c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{ns}, Group: group, ConsumeFromWhere: consumer.ConsumeFromFirstOffset,
		MaxReconsumeTimes: consumer.Retries(1), Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, "*", h); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer shutdownT(t, "consumer", c.Shutdown)

	p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer shutdownT(t, "producer", p.Shutdown)
	parkMW, parker, err := redismw.Park(redismw.ParkConfig{Client: rdb, Namespace: "idem", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer parker.Close()
	down := errors.New("broker unreachable")
	send := middleware.ChainSend(p.SendFunc(), middleware.Keys())
	sendParked := middleware.ChainSend(func(context.Context, *message.Message) (*message.SendResult, error) { return nil, down },
		middleware.Keys(), parkMW)

	want := map[string]string{} // body -> the key Keys gives it
	for _, body := range []string{"plain", "retried", "dead", "parked"} {
		m := message.NewMessage(topic, []byte(body)).SetTag("t")
		want[body] = middleware.ContentKey(m)
		if body == "parked" {
			_, err := sendParked(ctx, m)
			var pe *middleware.ParkedError
			if !errors.As(err, &pe) {
				t.Fatalf("parked send: %v", err)
			}
			continue
		}
		if _, err := send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// Resend the parked one (MinAge 1 ms so the run takes it now).
	task, err := retrytask.New(retrytask.Config{Client: rdb, Namespace: "idem", Send: p.SendFunc(), MinAge: time.Millisecond, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdownT(t, "retrytask", task.Shutdown)
	testkit.WaitFor(t, 10*time.Second, func() bool {
		st, err := task.RunOnce(ctx, retrytask.Shard{})
		return err == nil && st.Sent == 1
	}, "retrytask to resend the parked send")

	// "dead" fails its first delivery and its one retry, then lands in the DLQ.
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{ns}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	testkit.WaitFor(t, 20*time.Second, func() bool {
		l, err := a.ListDLQ(ctx, group, admin.DLQListOptions{})
		return err == nil && len(l) == 1
	}, "the dead message in the DLQ")
	mu.Lock()
	dlqOpen = true
	mu.Unlock()
	if _, err := a.ResendDLQ(ctx, group, admin.DLQResendOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool {
		return len(db.Counts(eff)) == 4
	}, "every message's effect")

	cnt := db.Counts(eff)
	mu.Lock()
	defer mu.Unlock()
	for body, key := range want {
		if cnt[key] != 1 {
			t.Errorf("%s: %d effects for key %s (%v)", body, cnt[key], key, cnt)
		}
		for i, s := range calls[body] {
			if s.ctxKey != key || s.stable != key {
				t.Errorf("%s delivery %d (reconsume %d): IdempotencyKey %q, StableKey %q, want %q", body, i+1, s.reconsume, s.ctxKey, s.stable, key)
			}
		}
	}
	if n := len(calls["retried"]); n != 2 {
		t.Errorf("retried: %d deliveries, want 2", n)
	}
	if n := len(calls["dead"]); n != 3 { // first, one retry, the re-drive
		t.Errorf("dead: %d deliveries, want 3", n)
	}
	t.Logf("keys kept: first delivery, consume retry (reconsume 1), DLQ re-drive, parked resend: %v", want)
}
