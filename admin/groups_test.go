package admin_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestGroupSummariesCheckAndDelete: a group that only committed offsets is listed with
// its lag in messages and time; the retry budget its client sent is reported besides the
// config's default; an unknown group is refused; a group can be deleted once.
func TestGroupSummariesCheckAndDelete(t *testing.T) {
	e := newDLQEnv(t)
	if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Gs", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Gs"); err != nil {
		t.Fatal(err)
	}
	var sent []*message.SendResult
	for i := range 5 {
		r, err := e.p.SendSync(ctx(t), message.NewMessage("Gs", []byte("m"+strconv.Itoa(i))))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, r)
	}
	// "offsets-only" commits offset 1 with UPDATE_CONSUMER_OFFSET: no config, no client.
	resp, err := e.rc.InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{
		"consumerGroup": "offsets-only", "topic": "Gs", "queueId": "0", "commitOffset": "1"}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("commit: %v %v", err, resp)
	}
	// "budget2"'s client sends a failed message back with maxReconsumeTimes 2.
	_, phy, _ := message.ParseOffsetMsgID(sent[0].OffsetMsgID)
	resp, err = e.rc.InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{
		"offset": strconv.FormatInt(phy, 10), "group": "budget2", "delayLevel": "0", "originMsgId": sent[0].MsgID, "maxReconsumeTimes": "2"}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("send back: %v %v", err, resp)
	}

	all, err := e.a.GroupSummaries(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	find := func(name string) *admin.GroupSummary {
		i := slices.IndexFunc(all, func(g admin.GroupSummary) bool { return g.Group == name })
		if i < 0 {
			t.Fatalf("group %s not listed: %+v", name, all)
		}
		return &all[i]
	}
	m1, err := e.a.ViewMessage(ctx(t), sent[1].OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	oo := find("offsets-only")
	if oo.Configured || oo.Lag != 4 || oo.Clients != 0 || len(oo.Topics) != 1 || oo.Topics[0].Topic != "Gs" || oo.OldestUnconsumed != m1.StoreTimestamp {
		t.Errorf("offsets-only = %+v (message 1 stored at %d)", oo, m1.StoreTimestamp)
	}
	if age := oo.LagAge(time.Now()); age <= 0 || age > time.Minute {
		t.Errorf("lag age %v", age)
	}
	if b := find("budget2"); !b.Configured || b.RetryMaxTimes != 16 || b.ClientMaxReconsumeTimes != 2 {
		t.Errorf("budget2 = %+v, want config 16 and client 2", b)
	}

	if err := e.a.CheckGroup(ctx(t), "offsets-only"); err != nil {
		t.Errorf("CheckGroup(offsets-only) = %v", err)
	}
	if err := e.a.CheckGroup(ctx(t), "nosuchgroup"); !errors.Is(err, admin.ErrGroupNotExist) {
		t.Errorf("CheckGroup(nosuchgroup) = %v, want ErrGroupNotExist", err)
	}
	if _, err := e.a.DeleteGroup(ctx(t), "offsets-only"); err != nil {
		t.Fatalf("DeleteGroup: %v", err)
	}
	if err := e.a.CheckGroup(ctx(t), "offsets-only"); !errors.Is(err, admin.ErrGroupNotExist) {
		t.Errorf("after delete: CheckGroup = %v", err)
	}
	if _, err := e.a.DeleteGroup(ctx(t), "offsets-only"); !errors.Is(err, admin.ErrGroupNotExist) {
		t.Errorf("second delete = %v, want ErrGroupNotExist", err)
	}
}

// TestGroupSummariesFromABrokerWithoutThem: a broker that answers GroupSummaries
// REQUEST_CODE_NOT_SUPPORTED (Apache RocketMQ) still has its configured groups listed,
// from GET_ALL_SUBSCRIPTIONGROUP_CONFIG, marked LagUnknown.
func TestGroupSummariesFromABrokerWithoutThem(t *testing.T) {
	ns := startNS(t)
	b := startFakeBroker(t, ns.Addr(), "c1", "apache-like")
	b.srv.Handle(remoting.GetAllSubscriptionGroupConfig, func(context.Context, *remoting.Conn, *remoting.RemotingCommand) *remoting.RemotingCommand {
		r := remoting.NewResponse(remoting.Success, "")
		r.Body = []byte(`{"subscriptionGroupTable":{"orders-g":{"groupName":"orders-g","retryMaxTimes":3}},"dataVersion":{"counter":1,"timestamp":1}}`)
		return r
	})
	a := newAdmin(t, ns.Addr())
	all, err := a.GroupSummaries(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].Group != "orders-g" || !all[0].LagUnknown || !all[0].Configured || all[0].RetryMaxTimes != 3 || all[0].ClientMaxReconsumeTimes != -1 {
		t.Fatalf("summaries %+v", all)
	}
	if err := a.CheckGroup(ctx(t), "orders-g"); err != nil {
		t.Errorf("CheckGroup: %v", err)
	}
}
