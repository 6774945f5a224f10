package admin_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// sendBack hands a stored message back to the broker for group, as a consumer whose
// handler failed does (CONSUMER_SEND_MSG_BACK): delayLevel 1 puts a copy into
// %RETRY%<group> after 1 s, -1 into %DLQ%<group> at once.
func (e *dlqEnv) sendBack(t *testing.T, group string, r *message.SendResult, delayLevel int) {
	t.Helper()
	_, phy, err := message.ParseOffsetMsgID(r.OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.rc.InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{
		"offset": strconv.FormatInt(phy, 10), "group": group, "delayLevel": strconv.Itoa(delayLevel), "originMsgId": r.MsgID, "maxReconsumeTimes": "16",
	}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("send back: %v %v", err, resp)
	}
}

func (e *dlqEnv) commit(t *testing.T, group, topic string, queue int, off int64) {
	t.Helper()
	resp, err := e.rc.InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{
		"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(queue), "commitOffset": strconv.FormatInt(off, 10)}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("commit offset: %v %v", err, resp)
	}
}

// TestMessageStatus follows three messages through three groups: one that consumed
// everything, one behind, and one whose handler failed (two retries of the second
// message, the third dead-lettered, then re-driven).
func TestMessageStatus(t *testing.T) {
	e := newDLQEnv(t)
	c := testkit.Context(t, 60*time.Second)
	if _, err := e.a.CreateTopic(c, admin.TopicSpec{Topic: "Orders", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(c, "Orders"); err != nil {
		t.Fatal(err)
	}
	var sent []*message.SendResult
	for i := range 3 {
		r, err := e.p.SendSync(c, message.NewMessage("Orders", []byte("m"+strconv.Itoa(i))).SetKeys("order-"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		if r.QueueOffset != int64(i) {
			t.Fatalf("message %d stored at queue offset %d", i, r.QueueOffset)
		}
		sent = append(sent, r)
	}
	e.commit(t, "done", "Orders", 0, 3)
	e.commit(t, "behind", "Orders", 0, 1)
	e.commit(t, "failing", "Orders", 0, 3)
	e.sendBack(t, "failing", sent[1], 1)
	e.sendBack(t, "failing", sent[1], 1)
	e.sendBack(t, "failing", sent[2], -1)

	get := func(i int) *message.MessageExt {
		t.Helper()
		ms, err := e.a.FindMessageByUniqKey(c, "Orders", sent[i].MsgID)
		if err != nil || len(ms) != 1 {
			t.Fatalf("find message %d: %v %v", i, ms, err)
		}
		return ms[0]
	}
	status := func(m *message.MessageExt) map[string]admin.GroupMessageStatus {
		t.Helper()
		st, err := e.a.MessageStatus(c, m, admin.MessageStatusOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]admin.GroupMessageStatus{}
		for _, g := range st.Groups {
			out[g.Group] = g
		}
		return out
	}
	// Retry copies arrive after their 1 s delay.
	testkit.WaitFor(t, 30*time.Second, func() bool {
		ms, err := e.a.FindMessageByUniqKey(c, message.RetryTopic("failing"), sent[1].MsgID)
		return err == nil && len(ms) == 2
	}, "two retry copies of message 1")

	m0 := status(get(0))
	if len(m0) != 3 || m0["done"].State != admin.StateConsumed || m0["behind"].State != admin.StateConsumed || m0["failing"].State != admin.StateConsumed {
		t.Errorf("message 0: %+v", m0)
	}
	m1 := status(get(1))
	if g := m1["behind"]; g.State != admin.StateNotConsumed || g.Consumed || g.Committed != 1 {
		t.Errorf("message 1 in behind: %+v", g)
	}
	if g := m1["failing"]; g.State != admin.StateRetrying || !g.Consumed || g.Retries != 2 || g.LastRetryConsumed || len(g.DeadLetters) != 0 {
		t.Errorf("message 1 in failing: %+v", g)
	}
	if g := m1["done"]; g.State != admin.StateConsumed || g.Retries != 0 {
		t.Errorf("message 1 in done: %+v", g)
	}
	// The group consumes its retry queue: the message is done after 2 retries.
	rq, err := e.a.QueueOffsets(c, message.RetryTopic("failing"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range rq {
		e.commit(t, "failing", q.Queue.Topic, q.Queue.QueueID, q.Max)
	}
	if g := status(get(1))["failing"]; g.State != admin.StateRetried || !g.LastRetryConsumed || g.Retries != 2 {
		t.Errorf("message 1 in failing after its retries were consumed: %+v", g)
	}

	// The third message is a dead letter of failing only; found by its offset id too.
	byOffset, err := e.a.ViewMessage(c, sent[2].OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.a.MessageStatus(c, byOffset, admin.MessageStatusOptions{Group: "failing"})
	if err != nil || len(st.Groups) != 1 || st.Broker != e.b.Name() || st.QueueOffset != 2 {
		t.Fatalf("status by offset id: %+v %v", st, err)
	}
	if g := st.Groups[0]; g.State != admin.StateDeadLettered || len(g.DeadLetters) != 1 || g.DeadLetters[0].Resent || g.Retries != 0 {
		t.Errorf("message 2 in failing: %+v", g)
	}
	if g := status(get(2))["done"]; g.State != admin.StateConsumed || len(g.DeadLetters) != 0 {
		t.Errorf("message 2 in done: %+v", g)
	}
	if _, err := e.a.ResendDLQ(c, "failing", admin.DLQResendOptions{}); err != nil {
		t.Fatal(err)
	}
	if g := status(get(2))["failing"]; g.State != admin.StateRedriven || len(g.DeadLetters) != 1 || !g.DeadLetters[0].Resent {
		t.Errorf("message 2 in failing after the re-drive: %+v", g)
	}

	if _, err := e.a.MessageStatus(c, get(0), admin.MessageStatusOptions{Group: "nosuchgroup"}); !errors.Is(err, admin.ErrGroupNotExist) {
		t.Errorf("unknown group: err = %v", err)
	}
	var ce *config.Error
	if _, err := e.a.MessageStatus(c, nil, admin.MessageStatusOptions{}); !errors.As(err, &ce) {
		t.Errorf("nil message: err = %v", err)
	}
}
