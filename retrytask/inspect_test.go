package retrytask

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/message"
)

// The inspection API lists pending, scheduled and dead records; DueNow resends a
// scheduled one before its MinAge; Revive gives a dead one another try.
func TestListDueNowRevive(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := context.Background()
		ns := redistest.NS(t)
		clk := newFakeClock()
		rec := newRecorder(clk.Now)
		task := newTask(t, Config{Client: c, Namespace: ns, Send: rec.Send, Clock: clk.Now, MaxAttempts: 2})
		var ids []string
		for i := range 3 {
			ids = append(ids, park(t, c, ns, testMsg(i), clk.Now()).ID)
		}
		if l, err := task.ListPending(ctx, 1, 10); err != nil || len(l) != 2 || l[0].Record.ID != ids[1] || l[0].State != StatePending {
			t.Fatalf("pending %+v %v", l, err)
		}
		runOnce(t, task, Shard{}) // intake: all three scheduled for MinAge later
		l, err := task.ListScheduled(ctx, 0, 10)
		if err != nil || len(l) != 3 || l[2].DueMs != clk.Now().Add(DefaultMinAge).UnixMilli() || l[0].Record.Topic != "Orders" {
			t.Fatalf("scheduled %+v %v", l, err)
		}
		if p, ok, err := task.Find(ctx, ids[0]); err != nil || !ok || p.Record.ID != ids[0] {
			t.Fatalf("find %+v %v %v", p, ok, err)
		}

		// DueNow: only that record is sent by the next run.
		if err := task.DueNow(ctx, ids[1]); err != nil {
			t.Fatal(err)
		}
		if st := runOnce(t, task, Shard{}); st.Sent != 1 || rec.okCount()["1"] != 1 {
			t.Fatalf("after DueNow: %v %v", st, rec.okCount())
		}
		if _, ok, _ := task.Find(ctx, ids[1]); ok {
			t.Fatal("a sent record is still scheduled")
		}
		if err := task.DueNow(ctx, ids[1]); !errors.Is(err, ErrNotFound) {
			t.Fatalf("DueNow of a sent record: %v", err)
		}

		// A record that fails MaxAttempts (2: Park's + one resend) is dead; Revive retries it.
		rec.fail = func(m *message.Message, _ time.Time) error {
			if m.Property("seq") == "0" {
				return errBrokerDown
			}
			return nil
		}
		if err := task.DueNow(ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if st := runOnce(t, task, Shard{}); st.Dead != 1 {
			t.Fatalf("stats %v", st)
		}
		dead, err := task.ListDead(ctx, 0, 10)
		if err != nil || len(dead) != 1 || dead[0].Record.ID != ids[0] || dead[0].Record.Attempts != 2 || dead[0].Record.LastError != errBrokerDown.Error() {
			t.Fatalf("dead %+v %v", dead, err)
		}
		rec.fail = nil
		if err := task.Revive(ctx, dead[0].Raw); err != nil {
			t.Fatal(err)
		}
		if err := task.Revive(ctx, dead[0].Raw); !errors.Is(err, ErrNotFound) {
			t.Fatalf("second revive: %v", err)
		}
		if st := runOnce(t, task, Shard{}); st.Sent != 1 || rec.okCount()["0"] != 1 {
			t.Fatalf("after revive: %v %v", st, rec.okCount())
		}
		if got := counts(t, task); got.Dead != 0 || got.Scheduled != 1 {
			t.Fatalf("counts %+v", got)
		}
		if err := task.Revive(ctx, "not json"); err == nil {
			t.Fatal("an undecodable record revived")
		}
		if _, err := task.ListDead(ctx, -1, 10); err == nil {
			t.Fatal("negative offset accepted")
		}
		if _, err := task.ListScheduled(ctx, 0, MaxList+1); err == nil {
			t.Fatal("n above MaxList accepted")
		}
	})
}
