package grpcfront_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/grpcfront"
	"github.com/sluicemq/sluice/internal/testkit"
)

// The plain_acl.yml of the ACL tests: the broker's admin account (the embedded name
// server needs one), a publisher, a subscriber of the group, and a subscriber of the
// topic without the group.
const grpcACL = `
whiteListGrantsAdmin: false
accounts:
  - accessKey: adminKey
    secretKey: adminSecret
    admin: true
  - accessKey: pubUser1
    secretKey: pubSecret1
    topicPerms: [AclTopic=PUB]
  - accessKey: subUser1
    secretKey: subSecret1
    topicPerms: [AclTopic=SUB]
    groupPerms: [AclGroup=SUB]
  - accessKey: noGroupUser
    secretKey: noGroupSecret
    topicPerms: [AclTopic=SUB]
    groupPerms: [AclGroup=DENY]
`

func aclFront(t *testing.T) (*broker.Broker, *grpcfront.Server) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(path, []byte(grpcACL), 0o600); err != nil {
		t.Fatal(err)
	}
	return front(t, func(c *broker.Config) {
		c.AclEnable, c.AclFile, c.AccessKey, c.SecretKey = true, path, "adminKey", "adminSecret"
	})
}

func signedProducer(t *testing.T, addr, ak, sk, topic string) (rmq.Producer, error) {
	t.Helper()
	p, err := rmq.NewProducer(&rmq.Config{Endpoint: addr, Credentials: &credentials.SessionCredentials{AccessKey: ak, AccessSecret: sk}},
		rmq.WithTopics(topic))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = p.GracefulStop() })
	return p, nil
}

func signedConsumer(t *testing.T, addr, ak, sk, group, topic string) rmq.SimpleConsumer {
	t.Helper()
	c, err := rmq.NewSimpleConsumer(&rmq.Config{Endpoint: addr, ConsumerGroup: group,
		Credentials: &credentials.SessionCredentials{AccessKey: ak, AccessSecret: sk}},
		rmq.WithSimpleAwaitDuration(2*time.Second),
		rmq.WithSimpleSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatalf("consumer %s start: %v", ak, err)
	}
	t.Cleanup(func() { _ = c.GracefulStop() })
	return c
}

func rpcCode(err error) int32 {
	if rs, ok := rmq.AsErrRpcStatus(err); ok {
		return rs.GetCode()
	}
	return -1
}

// TestOfficialClientsWithACL: with aclEnable the gRPC port checks the official v5
// client's signatures against the plain ACL of the remoting port: the right credentials
// send and receive; a wrong secret is refused UNAUTHORIZED; an account without PUB on
// the topic, or without SUB on the group, is refused FORBIDDEN; and the broker keeps
// serving the others.
func TestOfficialClientsWithACL(t *testing.T) {
	_, s := aclFront(t)
	const topic, group = "AclTopic", "AclGroup"
	addr := s.Addr()

	p, err := signedProducer(t, addr, "pubUser1", "pubSecret1", topic)
	if err != nil {
		t.Fatalf("producer with the right credentials: %v", err)
	}
	send := func(p rmq.Producer, body string) error {
		_, err := p.Send(testkit.Context(t, 10*time.Second), &rmq.Message{Topic: topic, Body: []byte(body)})
		return err
	}
	for i := range 3 {
		if err := send(p, fmt.Sprint("m", i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	c := signedConsumer(t, addr, "subUser1", "subSecret1", group, topic)
	got := receiveN(t, c, 3, 20*time.Second, 30*time.Second)
	for _, mv := range got {
		if err := c.Ack(testkit.Context(t, 10*time.Second), mv); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return s.Pop().Inflight(group) == 0 }, "the acks of the subscriber")

	// A wrong secret: the producer's start (its route query) is refused.
	if _, err := signedProducer(t, addr, "pubUser1", "wrongSecret", topic); err == nil || !strings.Contains(err.Error(), "check signature failed") {
		t.Fatalf("producer with a wrong secret started: %v", err)
	}
	// No PUB on the topic: the subscriber's account may look the route up and start a
	// producer, but each send is refused FORBIDDEN.
	ps, err := signedProducer(t, addr, "subUser1", "subSecret1", topic)
	if err != nil {
		t.Fatalf("producer of a SUB account: %v", err)
	}
	if err := send(ps, "refused"); rpcCode(err) != int32(v2.Code_FORBIDDEN) || !strings.Contains(err.Error(), "no PUB permission on topic AclTopic") {
		t.Fatalf("send without PUB: %v, want FORBIDDEN", err)
	}
	// No SUB on the group: receives are refused FORBIDDEN.
	cn := signedConsumer(t, addr, "noGroupUser", "noGroupSecret", group, topic)
	if _, err := cn.Receive(testkit.Context(t, 10*time.Second), 1, 20*time.Second); rpcCode(err) != int32(v2.Code_FORBIDDEN) ||
		!strings.Contains(err.Error(), "no SUB permission on group AclGroup") {
		t.Fatalf("receive without SUB on the group: %v, want FORBIDDEN", err)
	}
	// The publisher may not consume either (no SUB on the topic).
	cp := signedConsumer(t, addr, "pubUser1", "pubSecret1", group, topic)
	if _, err := cp.Receive(testkit.Context(t, 10*time.Second), 1, 20*time.Second); rpcCode(err) != int32(v2.Code_FORBIDDEN) {
		t.Fatalf("receive without SUB on the topic: %v, want FORBIDDEN", err)
	}

	// Still serving the right accounts; nothing refused was stored.
	if err := send(p, "after"); err != nil {
		t.Fatalf("send after the refusals: %v", err)
	}
	got = receiveN(t, c, 1, 20*time.Second, 30*time.Second)
	if string(got[0].GetBody()) != "after" {
		t.Fatalf("received %q, want \"after\" (a refused send was stored?)", got[0].GetBody())
	}
}

// v5Signature is the metadata a RocketMQ 5 client signs a call with at time at.
func v5Signature(ak, sk string, at time.Time) metadata.MD {
	dt := at.UTC().Format("20060102T150405Z")
	m := hmac.New(sha1.New, []byte(sk))
	m.Write([]byte(dt))
	return metadata.Pairs("x-mq-date-time", dt, "authorization",
		"MQv2-HMAC-SHA1 Credential="+ak+"//Rocketmq, SignedHeaders=x-mq-date-time, Signature="+hex.EncodeToString(m.Sum(nil)))
}

// TestGrpcACLRefusals: calls without a signature, with a signature too old to be fresh
// (a replay), of an unknown account, or for a resource the account has no permission on
// are refused with UNAUTHORIZED or FORBIDDEN in the answer's status, for every kind of
// RPC; the same connection then serves a signed call.
func TestGrpcACLRefusals(t *testing.T) {
	_, s := aclFront(t)
	raw, base := rawClient(t, s.Addr())
	with := func(md metadata.MD) context.Context {
		out, _ := metadata.FromOutgoingContext(base)
		return metadata.NewOutgoingContext(base, metadata.Join(out, md))
	}
	now := time.Now()
	fresh := v5Signature("subUser1", "subSecret1", now)
	auth := map[string]struct {
		ctx  context.Context
		code v2.Code
		want string
	}{
		"unsigned":        {base, v2.Code_UNAUTHORIZED, "authorization: required"},
		"replayed (old)":  {with(v5Signature("subUser1", "subSecret1", now.Add(-time.Hour))), v2.Code_UNAUTHORIZED, "from the broker's clock"},
		"unknown account": {with(v5Signature("someoneElse", "subSecret1", now)), v2.Code_UNAUTHORIZED, "no acl config"},
		"wrong secret":    {with(v5Signature("subUser1", "pubSecret1", now)), v2.Code_UNAUTHORIZED, "check signature failed"},
		"no PUB":          {with(fresh), v2.Code_FORBIDDEN, "no PUB permission on topic AclTopic"},
	}
	group := &v2.Resource{Name: "AclGroup"}
	topic := &v2.Resource{Name: "AclTopic"}
	msg := &v2.Message{Topic: topic, Body: []byte("x"), SystemProperties: &v2.SystemProperties{MessageId: "01AB", MessageType: v2.MessageType_NORMAL}}
	for name, tc := range auth {
		r, err := raw.SendMessage(tc.ctx, &v2.SendMessageRequest{Messages: []*v2.Message{msg}})
		if err != nil || r.GetStatus().GetCode() != tc.code || !strings.Contains(r.GetStatus().GetMessage(), tc.want) {
			t.Errorf("send %s: %v %v, want %v with %q", name, r.GetStatus(), err, tc.code, tc.want)
		}
	}
	// Every RPC authenticates: unsigned calls are refused.
	statuses := map[string]func(ctx context.Context) (*v2.Status, error){
		"QueryRoute": func(ctx context.Context) (*v2.Status, error) {
			r, err := raw.QueryRoute(ctx, &v2.QueryRouteRequest{Topic: topic})
			return r.GetStatus(), err
		},
		"Heartbeat": func(ctx context.Context) (*v2.Status, error) {
			r, err := raw.Heartbeat(ctx, &v2.HeartbeatRequest{Group: group, ClientType: v2.ClientType_SIMPLE_CONSUMER})
			return r.GetStatus(), err
		},
		"QueryAssignment": func(ctx context.Context) (*v2.Status, error) {
			r, err := raw.QueryAssignment(ctx, &v2.QueryAssignmentRequest{Topic: topic, Group: group})
			return r.GetStatus(), err
		},
		"AckMessage": func(ctx context.Context) (*v2.Status, error) {
			r, err := raw.AckMessage(ctx, &v2.AckMessageRequest{Topic: topic, Group: group, Entries: []*v2.AckMessageEntry{{ReceiptHandle: "x"}}})
			return r.GetStatus(), err
		},
		"ChangeInvisibleDuration": func(ctx context.Context) (*v2.Status, error) {
			r, err := raw.ChangeInvisibleDuration(ctx, &v2.ChangeInvisibleDurationRequest{Topic: topic, Group: group, ReceiptHandle: "x",
				InvisibleDuration: durationpb.New(time.Second)})
			return r.GetStatus(), err
		},
		"ForwardMessageToDeadLetterQueue": func(ctx context.Context) (*v2.Status, error) {
			r, err := raw.ForwardMessageToDeadLetterQueue(ctx, &v2.ForwardMessageToDeadLetterQueueRequest{Topic: topic, Group: group, ReceiptHandle: "x"})
			return r.GetStatus(), err
		},
		"EndTransaction": func(ctx context.Context) (*v2.Status, error) {
			r, err := raw.EndTransaction(ctx, &v2.EndTransactionRequest{Topic: topic, TransactionId: "x", Resolution: v2.TransactionResolution_COMMIT})
			return r.GetStatus(), err
		},
		"RecallMessage": func(ctx context.Context) (*v2.Status, error) {
			r, err := raw.RecallMessage(ctx, &v2.RecallMessageRequest{Topic: topic, RecallHandle: "x"})
			return r.GetStatus(), err
		},
		"ReceiveMessage": func(ctx context.Context) (*v2.Status, error) {
			st, err := raw.ReceiveMessage(ctx, &v2.ReceiveMessageRequest{Group: group, MessageQueue: &v2.MessageQueue{Topic: topic},
				BatchSize: 1, InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(0)})
			if err != nil {
				return nil, err
			}
			r, err := st.Recv()
			return r.GetStatus(), err
		},
		"Telemetry": func(ctx context.Context) (*v2.Status, error) {
			st, err := raw.Telemetry(ctx)
			if err != nil {
				return nil, err
			}
			producer := v2.ClientType_PRODUCER
			if err := st.Send(&v2.TelemetryCommand{Command: &v2.TelemetryCommand_Settings{Settings: &v2.Settings{ClientType: &producer,
				PubSub: &v2.Settings_Publishing{Publishing: &v2.Publishing{Topics: []*v2.Resource{topic}}}}}}); err != nil && !errors.Is(err, io.EOF) {
				return nil, err // io.EOF: the server ended the stream; Recv reads its answer
			}
			r, err := st.Recv()
			_ = st.CloseSend()
			return r.GetStatus(), err
		},
	}
	for name, call := range statuses {
		if st, err := call(base); err != nil || st.GetCode() != v2.Code_UNAUTHORIZED {
			t.Errorf("%s unsigned: %v %v, want UNAUTHORIZED", name, st, err)
		}
	}
	// The subscriber's account: EndTransaction, RecallMessage and a producer's telemetry
	// need PUB (FORBIDDEN); the rest pass the ACL (then answer on their own terms).
	for name, call := range statuses {
		st, err := call(with(v5Signature("subUser1", "subSecret1", time.Now())))
		needsPub := name == "EndTransaction" || name == "RecallMessage" || name == "Telemetry"
		switch {
		case err != nil:
			t.Errorf("%s signed: %v", name, err)
		case needsPub && st.GetCode() != v2.Code_FORBIDDEN:
			t.Errorf("%s signed by a SUB account: %v, want FORBIDDEN", name, st)
		case !needsPub && (st.GetCode() == v2.Code_FORBIDDEN || st.GetCode() == v2.Code_UNAUTHORIZED):
			t.Errorf("%s signed by a SUB account: %v, want past the ACL", name, st)
		}
	}
	// The account without SUB on the group: FORBIDDEN for the group's RPCs.
	for _, name := range []string{"Heartbeat", "QueryAssignment", "AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue", "ReceiveMessage"} {
		st, err := statuses[name](with(v5Signature("noGroupUser", "noGroupSecret", time.Now())))
		if err != nil || st.GetCode() != v2.Code_FORBIDDEN || !strings.Contains(st.GetMessage(), "group AclGroup") {
			t.Errorf("%s without SUB on the group: %v %v, want FORBIDDEN", name, st, err)
		}
	}
	// A SUB-only account's route query does not create the topic (auto-creation is a
	// publisher's); the publisher's does.
	if st, _ := statuses["QueryRoute"](with(fresh)); st.GetCode() != v2.Code_TOPIC_NOT_FOUND {
		t.Errorf("route of a missing topic for a SUB account: %v, want TOPIC_NOT_FOUND", st)
	}
	if st, _ := statuses["QueryRoute"](with(v5Signature("pubUser1", "pubSecret1", time.Now()))); st.GetCode() != v2.Code_OK {
		t.Errorf("route for the publisher: %v", st)
	}
}

// TestGrpcACLFollowsReload: the gRPC port uses the rules in force; a permission taken
// away in plain_acl.yml is refused once the broker has reloaded the file.
func TestGrpcACLFollowsReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(path, []byte(grpcACL), 0o600); err != nil {
		t.Fatal(err)
	}
	_, s := front(t, func(c *broker.Config) {
		c.AclEnable, c.AclFile, c.AccessKey, c.SecretKey = true, path, "adminKey", "adminSecret"
	})
	raw, base := rawClient(t, s.Addr())
	send := func() *v2.Status {
		out, _ := metadata.FromOutgoingContext(base)
		ctx := metadata.NewOutgoingContext(base, metadata.Join(out, v5Signature("pubUser1", "pubSecret1", time.Now())))
		msg := &v2.Message{Topic: &v2.Resource{Name: "AclTopic"}, Body: []byte("x"),
			SystemProperties: &v2.SystemProperties{MessageId: "01AB", MessageType: v2.MessageType_NORMAL}}
		r, err := raw.SendMessage(ctx, &v2.SendMessageRequest{Messages: []*v2.Message{msg}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if st := send(); st.GetCode() != v2.Code_OK {
		t.Fatalf("send before the change: %v", st)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(grpcACL, "AclTopic=PUB", "AclTopic=SUB", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return send().GetCode() == v2.Code_FORBIDDEN }, "the reloaded file to refuse the send")
}

// TestOfficialPushConsumerWithACL: the official PushConsumer (heartbeat, assignment,
// auto-renew receives, acks) works with the subscriber's credentials under ACL.
func TestOfficialPushConsumerWithACL(t *testing.T) {
	_, s := aclFront(t)
	const topic, group = "AclTopic", "AclGroup"
	p, err := signedProducer(t, s.Addr(), "pubUser1", "pubSecret1", topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := p.Send(testkit.Context(t, 10*time.Second), &rmq.Message{Topic: topic, Body: []byte(fmt.Sprint("push-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	pc, err := rmq.NewPushConsumer(&rmq.Config{Endpoint: s.Addr(), ConsumerGroup: group,
		Credentials: &credentials.SessionCredentials{AccessKey: "subUser1", AccessSecret: "subSecret1"}},
		rmq.WithPushAwaitDuration(2*time.Second),
		rmq.WithPushSubscriptionExpressions(map[string]*rmq.FilterExpression{topic: rmq.SUB_ALL}),
		rmq.WithPushMessageListener(&rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
			mu.Lock()
			defer mu.Unlock()
			seen[string(mv.GetBody())]++
			return rmq.SUCCESS
		}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.GracefulStop() })
	testkit.WaitFor(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 3
	}, "the push consumer to consume the three messages")
	testkit.WaitFor(t, 10*time.Second, func() bool { return s.Pop().Inflight(group) == 0 }, "its acks")
}
