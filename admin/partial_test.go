package admin_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// TestPartialResults: with a live broker and a registered one that does not answer, the
// multi-broker reads return what the live one answered with a *PartialError naming the
// other (they used to drop it silently); with only the dead one, a plain error.
func TestPartialResults(t *testing.T) {
	ns := startNS(t)
	b, _ := testbroker.Start(t, broker.Config{NamesrvAddr: ns.Addr()})
	a := newAdmin(t, ns.Addr())
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Live", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	dead := deadAddr(t)
	if _, err := wire.RegisterBroker(ctx(t), rc, ns.Addr(), wire.RegisterBrokerRequest{
		ClusterName: "DefaultCluster", BrokerName: "broker-dead", BrokerAddr: dead}); err != nil {
		t.Fatal(err)
	}
	isPartial := func(what string, err error) {
		t.Helper()
		var pe *admin.PartialError
		if !errors.As(err, &pe) || pe.Answered != 1 || len(pe.Failed) != 1 ||
			strings.Join(pe.FailedBrokers(), ",") != "broker-dead ("+dead+")" || !strings.Contains(err.Error(), "1 of 2 broker(s) failed") {
			t.Errorf("%s: err = %v, want a PartialError naming broker-dead (%s)", what, err, dead)
		}
	}
	topics, err := a.TopicConfigs(ctx(t))
	isPartial("TopicConfigs", err)
	if !strings.Contains(topicNames(topics), "Live") {
		t.Errorf("TopicConfigs lost the live broker's topics: %v", topics)
	}
	_, err = a.GroupSummaries(ctx(t))
	isPartial("GroupSummaries", err)
	res, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Half", Queues: 1})
	isPartial("CreateTopic", err)
	if res == nil || len(res.Brokers) != 1 || res.Brokers[0].Name != b.Name() {
		t.Errorf("CreateTopic result %+v: want the live broker", res)
	}
	// A delete does what it can: the live broker deletes the group, the dead one is named.
	if resp, err := rc.InvokeSync(ctx(t), b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{
		"consumerGroup": "gone", "topic": "Live", "queueId": "0", "commitOffset": "0"}, nil)); err != nil || resp.ResponseErr() != nil {
		t.Fatalf("commit: %v %v", err, resp)
	}
	deleted, err := a.DeleteGroup(ctx(t), "gone")
	isPartial("DeleteGroup", err)
	if len(deleted) != 1 || deleted[0].Name != b.Name() {
		t.Errorf("DeleteGroup deleted on %+v: want the live broker", deleted)
	}
	if gs, _ := a.GroupSummaries(ctx(t)); len(gs) != 0 {
		t.Errorf("groups left after DeleteGroup: %+v", gs)
	}
	probes, err := a.ProbeBrokers(ctx(t))
	isPartial("ProbeBrokers", err)
	if len(probes) != 2 || probes[0].Name != b.Name() || probes[0].Err != nil || probes[1].Name != "broker-dead" || probes[1].Err == nil {
		t.Errorf("probes = %+v", probes)
	}

	// Only the dead broker: no answer at all is an error, not a partial result.
	ns2 := startNS(t)
	if _, err := wire.RegisterBroker(ctx(t), rc, ns2.Addr(), wire.RegisterBrokerRequest{
		ClusterName: "DefaultCluster", BrokerName: "broker-dead", BrokerAddr: dead}); err != nil {
		t.Fatal(err)
	}
	a2 := newAdmin(t, ns2.Addr())
	var pe *admin.PartialError
	if ts, err := a2.TopicConfigs(ctx(t)); err == nil || errors.As(err, &pe) || ts != nil {
		t.Errorf("TopicConfigs with no broker answering: %v %v", ts, err)
	}
	var ce *remoting.ConnError
	if _, err := a2.ProbeBrokers(ctx(t)); !errors.As(err, &ce) || errors.As(err, &pe) {
		t.Errorf("ProbeBrokers with no broker answering: %v", err)
	}
}

func topicNames(ts []admin.TopicInfo) string {
	var names []string
	for _, t := range ts {
		names = append(names, t.Topic)
	}
	return strings.Join(names, ",")
}
