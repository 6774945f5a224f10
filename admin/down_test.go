package admin_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
)

// TestStoppedBrokerIsAnError: once the only broker is stopped (it unregisters, so the name
// server has no route for anything), every read names the name server and wraps
// ErrNoBroker instead of answering "no such topic" or an empty list.
func TestStoppedBrokerIsAnError(t *testing.T) {
	ns := startNS(t)
	b, stop := testbroker.Start(t, broker.Config{NamesrvAddr: ns.Addr()})
	a := newAdmin(t, ns.Addr())
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "DownT", Queues: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitTopicRoute(ctx(t), "DownT", b.Name()); err != nil {
		t.Fatal(err)
	}
	// Before: an unknown topic is "does not exist", and deleting it is refused.
	if _, err := a.TopicRoute(ctx(t), "NoSuchTopic"); !errors.Is(err, admin.ErrTopicNotExist) {
		t.Errorf("unknown topic with a broker up: %v, want ErrTopicNotExist", err)
	}
	if _, err := a.DeleteTopic(ctx(t), "NoSuchTopic"); !errors.Is(err, admin.ErrTopicNotExist) {
		t.Errorf("delete unknown topic: %v, want ErrTopicNotExist", err)
	}

	stop()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, admin.ErrNoBroker) || !strings.Contains(err.Error(), ns.Addr()) {
			t.Errorf("%s with the broker stopped: err = %v, want ErrNoBroker naming %s", what, err, ns.Addr())
		}
	}
	_, err := a.TopicRoute(ctx(t), "DownT")
	check("TopicRoute", err)
	_, err = a.ListTopics(ctx(t))
	check("ListTopics", err)
	l, err := a.ListDLQ(ctx(t), "billing", admin.DLQListOptions{})
	check("ListDLQ", err)
	if l != nil {
		t.Errorf("ListDLQ rows = %v", l)
	}
	_, err = a.ConsumerOffsets(ctx(t), "billing", "DownT")
	check("ConsumerOffsets", err)
	_, err = a.ConsumerGroups(ctx(t))
	check("ConsumerGroups", err)
	_, err = a.TopicConfigs(ctx(t))
	check("TopicConfigs", err)
	_, err = a.GroupOffsets(ctx(t), "billing")
	check("GroupOffsets", err)
	_, err = a.DeleteTopic(ctx(t), "DownT")
	check("DeleteTopic", err)
	_, err = a.ResendDLQ(ctx(t), "billing", admin.DLQResendOptions{})
	check("ResendDLQ", err)
}
