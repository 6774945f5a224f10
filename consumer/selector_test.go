package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// newSQLEnv starts a broker (embedded name server) with enablePropertyFilter set as
// given.
func newSQLEnv(t *testing.T, enablePropertyFilter bool) *env {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{EnablePropertyFilter: enablePropertyFilter})
	ns := testbroker.Namesrv(b)
	a, err := admin.New(admin.Config{NamesrvAddrs: ns, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return &env{t: t, broker: b, namesrv: ns, admin: a}
}

// sendPoints sends p1..p20 to topic: property amount = 10*i, vip=true on even i, tag
// "gold" on multiples of 5, and one more message "special" (tag "special", amount 1).
// It returns the next offset of every queue written.
func sendPoints(t *testing.T, e *env, topic string) map[message.MessageQueue]int64 {
	t.Helper()
	p := e.producer()
	ends := map[message.MessageQueue]int64{}
	send := func(m *message.Message) {
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			t.Fatalf("send %s: %v", m.Body, err)
		}
		ends[r.Queue] = max(ends[r.Queue], r.QueueOffset+1)
	}
	for i := 1; i <= 20; i++ {
		m := message.NewMessage(topic, []byte("p"+strconv.Itoa(i)))
		m.SetProperty("amount", strconv.Itoa(i*10))
		if i%2 == 0 {
			m.SetProperty("vip", "true")
		}
		if i%5 == 0 {
			m.SetTag("gold")
		}
		send(m)
	}
	send(message.NewMessage(topic, []byte("special")).SetTag("special").SetProperty("amount", "1"))
	return ends
}

func TestSubscribeSQLValidation(t *testing.T) {
	c, err := NewPushConsumer(Config{NamesrvAddrs: []string{"127.0.0.1:9876"}, Group: "g", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, c)
	h := newCollector().handler("x")

	err = c.SubscribeSQL("T", "a > 5 AND", h)
	var se *SQLSyntaxError
	if !errors.As(err, &se) || se.Pos != 9 || !strings.Contains(err.Error(), "byte 9") || !strings.Contains(err.Error(), "SubscribeSQL expression") {
		t.Fatalf("malformed expression: %v", err)
	}
	err = c.SubscribeSQL("T", "a IN (1, 2)", h)
	if !errors.As(err, &se) || se.Reason == "" {
		t.Fatalf("IN with numbers (RocketMQ allows strings only): %v", err)
	}
	if err := c.SubscribeSQL("T", "  ", h); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty expression: %v", err)
	}
	var ve *message.ValidationError
	if err := c.SubscribeSQL("bad topic!", "a > 1", h); !errors.As(err, &ve) {
		t.Fatalf("bad topic: %v", err)
	}
	if err := c.SubscribeSQL("%RETRY%g", "a > 1", h); !errors.As(err, &ve) {
		t.Fatalf("retry topic: %v", err)
	}
	if err := c.SubscribeSQL("T", "a > 1", nil); err == nil || !strings.Contains(err.Error(), "handler is nil") {
		t.Fatalf("nil handler: %v", err)
	}
	if err := c.SubscribeSQL("T", "a > 1", h); err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("T", "*", h); err == nil || !strings.Contains(err.Error(), "already subscribed") {
		t.Fatalf("tag subscription of a SQL-subscribed topic: %v", err)
	}
	if err := c.SubscribeSQL("T", "a > 2", h); err == nil || !strings.Contains(err.Error(), "already subscribed") {
		t.Fatalf("second SQL subscription: %v", err)
	}
	var sd []string
	for _, d := range c.heartbeatData().ConsumerDataSet[0].SubscriptionDataSet {
		sd = append(sd, fmt.Sprintf("%s/%s/%s/%d/%d", d.Topic, d.ExpressionType, d.SubString, len(d.TagsSet), len(d.CodeSet)))
	}
	if got := strings.Join(sd, " "); got != "%RETRY%g/TAG/*/0/0 T/SQL92/a > 1/0/0" {
		t.Fatalf("heartbeat subscriptions %q", got)
	}
}

// TestSQL92PushConsumer: a SQL92 subscription receives exactly the matching messages,
// each once, on a broker with enablePropertyFilter=true.
func TestSQL92PushConsumer(t *testing.T) {
	e := newSQLEnv(t, true)
	e.createTopic("Points", 2)
	ends := sendPoints(t, e, "Points")

	c := e.consumer("cg-sql", ConsumeFromFirstOffset)
	col := newCollector()
	if err := c.SubscribeSQL("Points", "(amount >= 150 AND vip = 'true') OR TAGS = 'special' OR (TAGS IN ('gold') AND amount < 60)", col.handler("c")); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() bool { return committedAtLeast("Points", ends, c) }, "every queue's committed offset at its end")
	want := []string{"p16", "p18", "p20", "p5", "special"}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.got) != len(want) || col.count != len(want) {
		t.Fatalf("received %v (%d deliveries), want exactly %v once each", col.got, col.count, want)
	}
	for _, b := range want {
		if col.got[b] != 1 {
			t.Fatalf("%s delivered %d times; all: %v", b, col.got[b], col.got)
		}
	}
}

// TestSQL92RefusedByBroker: with enablePropertyFilter=false Start fails with the
// broker's reason; an expression the broker cannot parse fails Start with the broker's
// position and reason. Either way the consumer is shut down.
func TestSQL92RefusedByBroker(t *testing.T) {
	t.Run("filter off", func(t *testing.T) {
		e := newSQLEnv(t, false)
		e.createTopic("NoSQL", 1)
		c := e.consumer("cg-nosql", ConsumeFromFirstOffset)
		if err := c.SubscribeSQL("NoSQL", "a > 1", newCollector().handler("c")); err != nil {
			t.Fatal(err)
		}
		err := c.Start(context.Background())
		var re *remoting.ResponseError
		if !errors.Is(err, ErrSubscriptionRefused) || !errors.As(err, &re) || re.Code != remoting.SystemError ||
			!strings.Contains(err.Error(), "enablePropertyFilter") {
			t.Fatalf("Start with SQL92 off: %v", err)
		}
		if err := c.Start(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("Start after a refusal: %v", err)
		}
	})
	t.Run("broker parse error", func(t *testing.T) {
		e := newSQLEnv(t, true)
		e.createTopic("BadSQL", 1)
		c := e.consumer("cg-badsql", ConsumeFromFirstOffset)
		if err := c.SubscribeSQL("BadSQL", "a >= 9", newCollector().handler("c")); err != nil {
			t.Fatal(err)
		}
		// Stand in for a broker whose SQL dialect is stricter than this client's check:
		// the expression the broker sees is one it cannot parse.
		c.mu.Lock()
		c.subs["BadSQL"].data.SubString = "a >= 9 AND"
		c.mu.Unlock()
		err := c.Start(context.Background())
		var re *remoting.ResponseError
		if !errors.Is(err, ErrSubscriptionRefused) || !errors.As(err, &re) || re.Code != remoting.SubscriptionParseFailed ||
			!strings.Contains(re.Remark, "a >= 9 AND") || !strings.Contains(re.Remark, "byte 10") {
			t.Fatalf("Start with an expression the broker refuses: %v", err)
		}
	})
	t.Run("tag subscription unaffected", func(t *testing.T) {
		e := newSQLEnv(t, false)
		e.createTopic("Tags", 1)
		c := e.consumer("cg-tagonly", ConsumeFromFirstOffset)
		if err := c.Subscribe("Tags", "*", newCollector().handler("c")); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatalf("a TAG subscription with the filter off: %v", err)
		}
	})
}

// TestSQL92PullConsumer: Pull with ExpressionType SQL92 returns exactly the matching
// messages; a malformed expression fails before the network with its position; a broker
// with the filter off refuses with its reason.
func TestSQL92PullConsumer(t *testing.T) {
	e := newSQLEnv(t, true)
	e.createTopic("PullPoints", 2)
	sendPoints(t, e, "PullPoints")
	pc, err := NewPullConsumer(PullConfig{NamesrvAddrs: e.namesrv, Group: "pull-sql", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pc.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	mqs, err := pc.MessageQueues(ctx, "PullPoints")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, mq := range mqs {
		off := int64(0)
		for i := 0; ; i++ {
			if i > 100 {
				t.Fatal("pull loop did not end")
			}
			r, err := pc.Pull(ctx, PullRequest{Queue: mq, Expression: "amount BETWEEN 30 AND 70 AND vip IS NULL", ExpressionType: ExpressionSQL92, Offset: off})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status == PullNoNewMsg {
				break
			}
			for _, m := range r.Messages {
				got[string(m.Body)]++
			}
			off = r.NextBeginOffset
		}
	}
	if fmt.Sprint(got) != "map[p3:1 p5:1 p7:1]" {
		t.Fatalf("pulled %v, want p3, p5, p7 once each", got)
	}

	_, err = pc.Pull(ctx, PullRequest{Queue: mqs[0], Expression: "amount BETWEEN 30", ExpressionType: "sql92"})
	var se *SQLSyntaxError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "PullRequest.Expression") {
		t.Fatalf("malformed SQL pull: %v", err)
	}
	if _, err := pc.Pull(ctx, PullRequest{Queue: mqs[0], Expression: "*", ExpressionType: "XPATH"}); err == nil || !strings.Contains(err.Error(), "PullRequest.ExpressionType") {
		t.Fatalf("unknown expression type: %v", err)
	}

	off := newSQLEnv(t, false)
	off.createTopic("PullOff", 1)
	pc2, err := NewPullConsumer(PullConfig{NamesrvAddrs: off.namesrv, Group: "pull-sql", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer pc2.Shutdown(context.Background())
	mqs2, err := pc2.MessageQueues(ctx, "PullOff")
	if err != nil {
		t.Fatal(err)
	}
	_, err = pc2.Pull(ctx, PullRequest{Queue: mqs2[0], Expression: "a > 1", ExpressionType: ExpressionSQL92})
	var re *remoting.ResponseError
	if !errors.As(err, &re) || re.Code != remoting.SystemError || !strings.Contains(re.Remark, "enablePropertyFilter") ||
		!re.Retryable() || re.Request != remoting.PullMessage || re.Addr == "" {
		t.Fatalf("SQL pull with the filter off: %v", err)
	}
}
