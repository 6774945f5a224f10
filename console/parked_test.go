package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/retrytask"
)

// sendVia is the producer's raw send, bound after the env starts it.
var sendVia atomicSend

type atomicSend struct{ v atomic.Value }

func (a *atomicSend) Store(f middleware.SendFunc) { a.v.Store(f) }
func (a *atomicSend) Load() middleware.SendFunc   { return a.v.Load().(middleware.SendFunc) }

// TestParkedSends lists parked records (pending, dead) and resends them from the page:
// the message reaches the broker and the record leaves Redis.
func TestParkedSends(t *testing.T) {
	rc := redistest.New(t)
	ns := redistest.NS(t)
	var task *retrytask.Task
	e := newEnv(t, func(c *console.Config) {
		// The task's Send is bound below, once the producer exists (the env builds it).
		var err error
		task, err = retrytask.New(retrytask.Config{Client: rc, Namespace: ns, Logger: testkit.Quiet(),
			Send: func(ctx context.Context, m *message.Message) (*message.SendResult, error) {
				return sendVia.Load()(ctx, m)
			}})
		if err != nil {
			t.Fatal(err)
		}
		c.Parked = task
	}, broker.Config{})
	testkit.ShutdownOnCleanup(t, task.Shutdown)
	sendVia.Store(e.producer(t).SendFunc())
	if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Orders", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Orders"); err != nil {
		t.Fatal(err)
	}

	keys := redismw.NewParkKeys(ns)
	push := func(list, key string) *redismw.ParkedRecord {
		m := message.NewMessage("Orders", []byte("parked "+key)).SetKeys(key)
		r := redismw.NewParkedRecord(m, errors.New("broker down"), time.Now(), nil)
		b, _ := json.Marshal(r)
		if err := rc.RPush(context.Background(), list, b).Err(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	pending := push(keys.Pending, "p-1")
	dead := push(keys.Dead, "d-1")
	// Two more waiting records: resending one record must not send them.
	push(keys.Pending, "p-2")
	push(keys.Pending, "p-3")

	_, body, _ := do(t, "GET", e.base+"/parked?state=pending", nil, nil)
	if !strings.Contains(body, pending.ID) || !strings.Contains(body, `id="count-dead">1<`) {
		t.Fatalf("pending page: %.2000s", body)
	}
	tok := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)[1]
	for _, c := range []struct {
		state string
		r     *redismw.ParkedRecord
		key   string
	}{{retrytask.StatePending, pending, "p-1"}, {retrytask.StateDead, dead, "d-1"}} {
		code, body, _ := do(t, "POST", e.base+"/parked/resend", url.Values{"csrf": {tok}, "state": {c.state}, "index": {"0"}, "id": {c.r.ID}}, nil)
		if code != http.StatusOK || !strings.Contains(body, "Record "+c.r.ID+": sent. No other record was resent.") {
			t.Fatalf("resend %s: %d %.2000s", c.state, code, body)
		}
		msgs, err := e.a.FindMessages(ctx(t), "Orders", c.key, time.Now().Add(-time.Minute), time.Now().Add(time.Minute))
		if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "parked "+c.key {
			t.Fatalf("the resent %s message: %v %v", c.state, msgs, err)
		}
	}
	for _, key := range []string{"p-2", "p-3"} {
		if msgs, err := e.a.FindMessages(ctx(t), "Orders", key, time.Now().Add(-time.Minute), time.Now().Add(time.Minute)); err != nil || len(msgs) != 0 {
			t.Fatalf("%s was sent by another record's resend: %v %v", key, msgs, err)
		}
	}
	counts, err := task.Counts(ctx(t))
	if err != nil || counts.Scheduled != 2 || counts.Pending != 0 || counts.Dead != 0 {
		t.Fatalf("left in Redis: %+v %v (want the two other records scheduled)", counts, err)
	}
	// A stale row (the record is gone) is refused, not sent twice.
	if code, _, _ := do(t, "POST", e.base+"/parked/resend", url.Values{"csrf": {tok}, "state": {"dead"}, "index": {"0"}, "id": {dead.ID}}, nil); code != http.StatusConflict {
		t.Fatalf("stale resend: %d", code)
	}
}
