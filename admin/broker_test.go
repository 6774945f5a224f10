package admin_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/remoting"
)

// TestAgainstRealBroker runs the admin client against a real Sluice broker with its
// embedded name server.
func TestAgainstRealBroker(t *testing.T) {
	b, _ := testbroker.Start(t, broker.Config{})
	a := newAdmin(t, b.NamesrvAddr())

	res, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "RealT", Queues: 3, Order: true})
	if err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	if len(res.Brokers) != 1 || res.Brokers[0].Addr != b.Addr() || res.OrderTopicConf != b.Name()+":3" {
		t.Errorf("result = %+v (broker %s at %s)", res, b.Name(), b.Addr())
	}
	r, err := a.WaitTopicRoute(ctx(t), "RealT", b.Name())
	if err != nil {
		t.Fatal(err)
	}
	if q := r.QueueDatas[0]; q.ReadQueueNums != 3 || q.WriteQueueNums != 3 || q.Perm != 6 || r.OrderTopicConf != b.Name()+":3" {
		t.Errorf("route = %+v queue %+v", r, q)
	}
	topics, err := a.ListTopics(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tp := range topics {
		found = found || tp == "RealT"
	}
	if !found {
		t.Errorf("ListTopics = %v, want RealT", topics)
	}

	// Updating the queue count reaches the route too.
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "RealT", Queues: 5}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() bool {
		r, err := a.TopicRoute(ctx(t), "RealT")
		return err == nil && r.QueueDatas[0].WriteQueueNums == 5
	}, "route with 5 queues")

	// The broker refuses system topics; the admin reports its code and remark.
	_, err = a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "SCHEDULE_TOPIC_XXXX"})
	var re *remoting.ResponseError
	if !errors.As(err, &re) || re.Broker != b.Name() || re.Addr != b.Addr() || re.Request != remoting.UpdateAndCreateTopic ||
		re.Code != remoting.SystemError || !strings.Contains(re.Remark, "SCHEDULE_TOPIC_XXXX") || !re.Retryable() {
		t.Errorf("system topic: err = %v, want the broker's *remoting.ResponseError with its code and remark", err)
	}

	if _, err := a.DeleteTopic(ctx(t), "RealT"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.TopicRoute(ctx(t), "RealT"); !errors.Is(err, admin.ErrTopicNotExist) {
		t.Errorf("route after delete: %v", err)
	}
}
