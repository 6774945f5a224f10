package admin_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// dlqEnv is a broker, an admin client, a producer and a raw remoting client.
type dlqEnv struct {
	b  *broker.Broker
	a  *admin.Admin
	p  *producer.Producer
	rc *remoting.Client
}

func newDLQEnv(t *testing.T) *dlqEnv {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{})
	e := &dlqEnv{b: b, a: newAdmin(t, b.NamesrvAddr())}
	var err error
	if e.p, err = producer.New(producer.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Group: "dlq-pg", Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, e.p.Shutdown)
	if e.rc, err = remoting.NewClient(remoting.ClientConfig{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rc.Close() })
	return e
}

// kill sends a stored message straight to the group's DLQ, as an orderly consumer does
// after its last retry (CONSUMER_SEND_MSG_BACK with delay level -1).
func (e *dlqEnv) kill(t *testing.T, group string, r *message.SendResult) {
	t.Helper()
	_, phy, err := message.ParseOffsetMsgID(r.OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.rc.InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{
		"offset": strconv.FormatInt(phy, 10), "group": group, "delayLevel": "-1", "originMsgId": r.MsgID, "maxReconsumeTimes": "16",
	}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("send back: %v %v", err, resp)
	}
}

func TestDLQListAndResend(t *testing.T) {
	e := newDLQEnv(t)
	if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Orders", Queues: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Orders"); err != nil {
		t.Fatal(err)
	}
	// No DLQ yet: nothing, no error.
	if l, err := e.a.ListDLQ(ctx(t), "g1", admin.DLQListOptions{}); err != nil || len(l) != 0 {
		t.Fatalf("empty DLQ: %v %v", l, err)
	}
	big := bytes.Repeat([]byte("compressible "), 800) // > 4 KiB: the producer compresses it
	bodies := [][]byte{[]byte("one"), []byte("two"), big}
	var sent []*message.SendResult
	for i, body := range bodies {
		m := message.NewMessage("Orders", body).SetTag("Paid").SetKeys("order-"+strconv.Itoa(i), "user-7")
		m.SetProperty("color", "blue")
		r, err := e.p.SendSync(ctx(t), m)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r)
		e.kill(t, "g1", r)
	}
	dlq := message.DLQTopic("g1")
	testkit.WaitFor(t, 10*time.Second, func() bool { _, err := e.a.TopicRoute(ctx(t), dlq); return err == nil }, "the DLQ route")

	l, err := e.a.ListDLQ(ctx(t), "g1", admin.DLQListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l) != 3 {
		t.Fatalf("%d dead letters, want 3", len(l))
	}
	for i, d := range l {
		m := d.Message
		if d.OriginTopic != "Orders" || d.Resent || d.QueueOffset != int64(i) || !bytes.Equal(m.Body, bodies[i]) ||
			m.Tag() != "Paid" || strings.Join(m.Keys(), " ") != "order-"+strconv.Itoa(i)+" user-7" || m.MsgID != sent[i].MsgID || m.ReconsumeTimes != 1 {
			t.Fatalf("dead letter %d: %+v origin %q props %v", i, m, d.OriginTopic, m.Properties)
		}
	}
	if l, err := e.a.ListDLQ(ctx(t), "g1", admin.DLQListOptions{FromOffset: 1, Max: 1}); err != nil || len(l) != 1 || l[0].QueueOffset != 1 {
		t.Fatalf("from 1, max 1: %+v %v", l, err)
	}

	res, err := e.a.ResendDLQ(ctx(t), "g1", admin.DLQResendOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Resent) != 3 || len(res.Failed) != 0 {
		t.Fatalf("resend %+v", res)
	}
	for i, r := range res.Resent {
		if r.Topic != message.RetryTopic("g1") || r.MsgID != sent[i].MsgID || r.DLQOffset != int64(i) || strings.Join(r.Keys, " ") != "order-"+strconv.Itoa(i)+" user-7" {
			t.Fatalf("resent %+v", r)
		}
		// The re-driven copy in the group's retry topic (only g1 gets it again): keys, tag,
		// id, user property and body kept; reconsume count 0; its original topic in
		// RETRY_TOPIC and no other retry bookkeeping.
		q, err := e.a.ReadQueue(ctx(t), r.Destination, "", r.QueueOffset, 1)
		if err != nil || len(q.Messages) != 1 {
			t.Fatalf("read back: %+v %v", q, err)
		}
		m := q.Messages[0]
		body := m.Body
		if m.SysFlag&message.SysFlagCompressed != 0 {
			if body, err = message.Inflate(body); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(body, bodies[i]) || m.Tag() != "Paid" || m.Keys()[0] != "order-"+strconv.Itoa(i) || m.UniqKey() != sent[i].MsgID ||
			m.Property("color") != "blue" || m.ReconsumeTimes != 0 || m.Property(message.PropertyRetryTopic) != "Orders" ||
			m.Property(message.PropertyMaxReconsumeTimes) != "" || m.Property(message.PropertyOriginMessageID) != "" {
			t.Fatalf("re-driven message %+v props %v", m, m.Properties)
		}
	}
	// Nothing twice: a second run finds nothing new, and the list marks them resent.
	if res, err := e.a.ResendDLQ(ctx(t), "g1", admin.DLQResendOptions{}); err != nil || len(res.Resent) != 0 {
		t.Fatalf("second resend: %+v %v", res, err)
	}
	l, _ = e.a.ListDLQ(ctx(t), "g1", admin.DLQListOptions{})
	for _, d := range l {
		if !d.Resent {
			t.Fatalf("dead letter %d not marked resent", d.QueueOffset)
		}
	}
	// A new dead letter is the only one resent next time; IncludeResent resends from
	// FromOffset on without moving the mark back.
	r4, err := e.p.SendSync(ctx(t), message.NewMessage("Orders", []byte("four")).SetKeys("order-3"))
	if err != nil {
		t.Fatal(err)
	}
	e.kill(t, "g1", r4)
	if res, err := e.a.ResendDLQ(ctx(t), "g1", admin.DLQResendOptions{}); err != nil || len(res.Resent) != 1 || res.Resent[0].MsgID != r4.MsgID {
		t.Fatalf("resend of the new one: %+v %v", res, err)
	}
	if res, err := e.a.ResendDLQ(ctx(t), "g1", admin.DLQResendOptions{FromOffset: 2, IncludeResent: true, Max: 1}); err != nil || len(res.Resent) != 1 || res.Resent[0].DLQOffset != 2 {
		t.Fatalf("resend again from 2: %+v %v", res, err)
	}
	if res, err := e.a.ResendDLQ(ctx(t), "g1", admin.DLQResendOptions{}); err != nil || len(res.Resent) != 0 {
		t.Fatalf("the mark moved back: %+v %v", res, err)
	}
	// ToOriginalTopic sends to the original topic, for every group subscribed to it.
	r5, err := e.p.SendSync(ctx(t), message.NewMessage("Orders", []byte("five")).SetKeys("order-5"))
	if err != nil {
		t.Fatal(err)
	}
	e.kill(t, "g1", r5)
	res, err = e.a.ResendDLQ(ctx(t), "g1", admin.DLQResendOptions{ToOriginalTopic: true})
	if err != nil || len(res.Resent) != 1 || res.Resent[0].Topic != "Orders" {
		t.Fatalf("resend to the original topic: %+v %v", res, err)
	}
	q, err := e.a.ReadQueue(ctx(t), res.Resent[0].Destination, "", res.Resent[0].QueueOffset, 1)
	if err != nil || len(q.Messages) != 1 || q.Messages[0].Property(message.PropertyRetryTopic) != "" || string(q.Messages[0].Body) != "five" {
		t.Fatalf("read back from Orders: %+v %v", q, err)
	}
}

// A dead letter without RETRY_TOPIC (its topic unknown) stops the re-drive of its
// queue there and is reported; the mark stays at it.
func TestDLQResendStopsAtUnknownTopic(t *testing.T) {
	e := newDLQEnv(t)
	dlq := message.DLQTopic("g2")
	// A message written straight to the DLQ topic, as a misbehaving client could.
	h := map[string]string{"a": "pg", "b": dlq, "c": "TBW102", "d": "1", "e": "0", "f": "0", "g": "0", "h": "0", "j": "0", "k": "false", "m": "false"}
	resp, err := e.rc.InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.SendMessageV2, h, []byte("orphan")))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("send to the DLQ topic: %v %v", err, resp)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { _, err := e.a.TopicRoute(ctx(t), dlq); return err == nil }, "the DLQ route")
	res, err := e.a.ResendDLQ(ctx(t), "g2", admin.DLQResendOptions{})
	var re *admin.DLQResendError
	if !errors.As(err, &re) || len(res.Failed) != 1 || len(res.Resent) != 0 || !strings.Contains(err.Error(), "RETRY_TOPIC") {
		t.Fatalf("resend of an orphan: %+v %v", res, err)
	}
	if l, _ := e.a.ListDLQ(ctx(t), "g2", admin.DLQListOptions{}); len(l) != 1 || l[0].Resent {
		t.Fatalf("orphan listed as %+v", l)
	}
}

func TestReadQueueAndOffsetsErrors(t *testing.T) {
	e := newDLQEnv(t)
	mq := message.MessageQueue{Topic: "Nope", BrokerName: e.b.Name()}
	if _, err := e.a.ReadQueue(ctx(t), mq, e.b.Addr(), -1, 1); err == nil || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("negative offset: %v", err)
	}
	if _, err := e.a.ReadQueue(ctx(t), mq, e.b.Addr(), 0, 33); err == nil || !strings.Contains(err.Error(), "maxNums") {
		t.Fatalf("maxNums 33: %v", err)
	}
	if r, err := e.a.ReadQueue(ctx(t), mq, e.b.Addr(), 0, 1); err != nil || len(r.Messages) != 0 {
		t.Fatalf("empty queue: %+v %v", r, err)
	}
	if _, err := e.a.ConsumerOffsets(ctx(t), "", "T"); err == nil || !strings.Contains(err.Error(), "group") {
		t.Fatalf("empty group: %v", err)
	}
	if _, err := e.a.ResetOffsetByTime(ctx(t), "g", "bad topic", time.Time{}, true); err == nil || !strings.Contains(err.Error(), "topic") {
		t.Fatalf("bad topic: %v", err)
	}
	if _, err := e.a.ListDLQ(ctx(t), "g", admin.DLQListOptions{Max: admin.MaxDLQListMax + 1}); err == nil {
		t.Fatal("Max over the limit accepted")
	}
	if _, err := e.a.GroupConsistency(ctx(t), ""); err == nil {
		t.Fatal("empty group accepted")
	}
}

// TestDLQPagesNewestFirst: 37 dead letters are counted without reading them and listed
// in pages, newest first, every one exactly once.
func TestDLQPagesNewestFirst(t *testing.T) {
	e := newDLQEnv(t)
	if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Paged", Queues: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Paged"); err != nil {
		t.Fatal(err)
	}
	const n = 37
	for i := range n {
		r, err := e.p.SendSync(ctx(t), message.NewMessage("Paged", []byte("b")).SetKeys("k-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		e.kill(t, "gp", r)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { _, err := e.a.TopicRoute(ctx(t), message.DLQTopic("gp")); return err == nil }, "the DLQ route")
	c, err := e.a.CountDLQ(ctx(t), "gp")
	if err != nil || c.Total != n || c.Pending != n {
		t.Fatalf("CountDLQ = %+v, %v; want %d total and pending", c, err, n)
	}
	var got []int64
	for page := 0; ; page++ {
		l, err := e.a.ListDLQ(ctx(t), "gp", admin.DLQListOptions{Skip: page * 10, Max: 10, NewestFirst: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 0 {
			break
		}
		if page < 3 && len(l) != 10 || page == 3 && len(l) != 7 {
			t.Fatalf("page %d has %d rows", page, len(l))
		}
		for _, d := range l {
			got = append(got, d.QueueOffset)
		}
	}
	if len(got) != n {
		t.Fatalf("listed %d, want %d", len(got), n)
	}
	for i, off := range got {
		if off != int64(n-1-i) { // one DLQ queue: newest first is offset n-1 down to 0
			t.Fatalf("row %d is offset %d, want %d (all: %v)", i, off, n-1-i, got)
		}
	}
	if _, err := e.a.ListDLQ(ctx(t), "gp", admin.DLQListOptions{Skip: admin.MaxDLQListMax, Max: 1}); err == nil {
		t.Error("Skip+Max over the limit accepted")
	}
	// After re-driving 5 (the oldest), 32 are pending.
	if _, err := e.a.ResendDLQ(ctx(t), "gp", admin.DLQResendOptions{Max: 5}); err != nil {
		t.Fatal(err)
	}
	if c, err := e.a.CountDLQ(ctx(t), "gp"); err != nil || c.Total < n || c.Pending != c.Total-5 {
		t.Fatalf("after re-driving 5: %+v, %v", c, err)
	}
}
