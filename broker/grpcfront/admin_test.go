package grpcfront_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
)

func newAdmin(t *testing.T, b *broker.Broker) *admin.Admin {
	t.Helper()
	a, err := admin.New(admin.Config{NamesrvAddrs: testbroker.Namesrv(b), Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func summaryOf(a *admin.Admin, group string) (admin.GroupSummary, bool) {
	all, err := a.GroupSummaries(context.Background())
	if err != nil {
		return admin.GroupSummary{}, false
	}
	i := slices.IndexFunc(all, func(g admin.GroupSummary) bool { return g.Group == group })
	if i < 0 {
		return admin.GroupSummary{}, false
	}
	return all[i], true
}

// TestOfficialClientsInAdmin: the official v5 Go client's SimpleConsumer and
// PushConsumer are listed by the admin requests the CLI and the console use (over
// remoting), with their client id, protocol grpc, language, version, address, consume
// type and subscriptions, beside a 4.x (remoting) consumer; a v5 group's progress (POP's
// committed offsets) is in the group's offsets; a consumer that stops is no longer
// listed.
func TestOfficialClientsInAdmin(t *testing.T) {
	b, s := front(t, nil)
	const topic, simple, push, v4 = "V5Adm", "V5AdmSimple", "V5AdmPush", "V4AdmGroup"
	p := newProducer(t, s.Addr(), topic)
	for i := range 5 {
		msg := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("m-%d", i))}
		msg.SetTag("TagA")
		if _, err := p.Send(testkit.Context(t, 10*time.Second), msg); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: s.Addr(), ConsumerGroup: simple, Credentials: &credentials.SessionCredentials{}},
		rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.NewFilterExpression("TagA || TagB")}))
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = sc.GracefulStop()
		}
	})
	for _, mv := range receiveN(t, sc, 5, 30*time.Second, 30*time.Second) {
		if err := sc.Ack(testkit.Context(t, 10*time.Second), mv); err != nil {
			t.Fatal(err)
		}
	}
	pc, err := rmq.NewPushConsumer(&rmq.Config{Endpoint: s.Addr(), ConsumerGroup: push, Credentials: &credentials.SessionCredentials{}},
		rmq.WithPushAwaitDuration(2*time.Second),
		rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(*rmq.MessageView) rmq.ConsumerResult { return rmq.SUCCESS }}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.GracefulStop() })
	c4, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: testbroker.Namesrv(b), Group: v4, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c4.Subscribe(topic, "*", func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ConsumeSuccess, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c4.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c4.Shutdown(context.Background()) })

	a := newAdmin(t, b)
	testkit.WaitFor(t, 30*time.Second, func() bool {
		gs, ok1 := summaryOf(a, simple)
		gp, ok2 := summaryOf(a, push)
		g4, ok3 := summaryOf(a, v4)
		return ok1 && ok2 && ok3 && gs.Clients == 1 && gp.Clients == 1 && g4.Clients == 1
	}, "the three groups listed with one client each")
	for group, want := range map[string]string{
		simple: "[grpc] CLUSTERING CONSUME_ACTIVELY CONSUME_FROM_LAST_OFFSET",
		push:   "[grpc] CLUSTERING CONSUME_PASSIVELY CONSUME_FROM_LAST_OFFSET",
		v4:     "[remoting] CLUSTERING CONSUME_PASSIVELY",
	} {
		g, _ := summaryOf(a, group)
		got := fmt.Sprintf("%v %s %s %s", g.Protocols, g.MessageModel, g.ConsumeType, g.ConsumeFromWhere)
		if !strings.HasPrefix(got, want) || g.LastHeartbeat == 0 {
			t.Errorf("group %s: %q (last heartbeat %d), want %q", group, got, g.LastHeartbeat, want)
		}
	}

	// The consumer connection view: who each client is and what it subscribes.
	r, err := a.GroupConsistency(context.Background(), simple)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Clients) != 1 || !r.Consistent {
		t.Fatalf("clients of %s: %+v", simple, r)
	}
	c := r.Clients[0]
	if c.Protocol != "grpc" || c.Language != "GO" || c.Version != "5.1.4" || !strings.HasPrefix(c.Addr, "127.0.0.1:") ||
		c.ConsumeType != broker.ConsumeActively || c.ClientID == "" || len(c.Subscriptions) != 1 ||
		c.Subscriptions[0].Topic != topic || c.Subscriptions[0].SubString != "TagA || TagB" || fmt.Sprint(c.Subscriptions[0].Tags) != "[TagA TagB]" {
		t.Errorf("v5 simple consumer as listed: %+v", c)
	}
	r4, err := a.GroupConsistency(context.Background(), v4)
	if err != nil || len(r4.Clients) != 1 {
		t.Fatalf("clients of %s: %v %+v", v4, err, r4)
	}
	if c := r4.Clients[0]; c.Protocol != "remoting" || c.Language != "GO" || c.Version != "V4_5_2" || c.ConsumeType != broker.ConsumePassively {
		t.Errorf("4.x consumer as listed: %+v", c)
	}

	// Progress: POP commits the lowest offset not acknowledged; all five were acknowledged.
	testkit.WaitFor(t, 10*time.Second, func() bool {
		qs, err := a.GroupOffsets(context.Background(), simple)
		var committed int64
		for _, q := range qs {
			if q.Queue.Topic == topic {
				committed += q.Committed
			}
		}
		return err == nil && committed == 5
	}, "the simple consumer's group to have committed 5 messages")

	// A consumer that stops (NotifyClientTermination) is no longer listed.
	stopped = true
	if err := sc.GracefulStop(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		g, ok := summaryOf(a, simple)
		return ok && g.Clients == 0 && len(g.Protocols) == 0
	}, "the stopped simple consumer to leave the group list")
	if r, err := a.GroupConsistency(context.Background(), simple); err != nil || len(r.Clients) != 0 {
		t.Fatalf("clients of %s after its stop: %v %+v", simple, err, r)
	}
}

// TestV5ClientExpires: a v5 client that stops heartbeating without saying so is
// dropped after clientChannelExpiredTimeout; a heartbeat without a client type
// registers nothing.
func TestV5ClientExpires(t *testing.T) {
	b, s := front(t, func(c *broker.Config) { c.ClientChannelExpiredTimeout = 1500 })
	raw, ctx := rawClient(t, s.Addr())
	a := newAdmin(t, b)
	if _, err := raw.Heartbeat(ctx, &v2.HeartbeatRequest{}); err != nil {
		t.Fatal(err)
	}
	resp, err := raw.Heartbeat(ctx, &v2.HeartbeatRequest{Group: &v2.Resource{Name: "RawGroup"}, ClientType: v2.ClientType_SIMPLE_CONSUMER})
	if err != nil || resp.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("heartbeat: %v %v", err, resp.GetStatus())
	}
	r, err := a.GroupConsistency(context.Background(), "RawGroup")
	if err != nil || len(r.Clients) != 1 || r.Clients[0].ClientID != "raw-test-client" || r.Clients[0].Protocol != "grpc" {
		t.Fatalf("clients of RawGroup: %v %+v", err, r)
	}
	if all, err := a.GroupSummaries(context.Background()); err != nil || slices.ContainsFunc(all, func(g admin.GroupSummary) bool { return g.Group == "" }) {
		t.Fatalf("group list after a heartbeat without client type: %v %+v", err, all)
	}
	testkit.WaitFor(t, 15*time.Second, func() bool {
		r, err := a.GroupConsistency(context.Background(), "RawGroup")
		return err == nil && len(r.Clients) == 0
	}, "the silent v5 client to expire")
}
