package admin_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func TestTablesAndGroupOffsets(t *testing.T) {
	e := newDLQEnv(t)
	for i, name := range []string{"Tb", "Ta"} {
		if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: name, Queues: i + 1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Tb"); err != nil {
		t.Fatal(err)
	}
	topics, err := e.a.TopicConfigs(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(topics, func(ti admin.TopicInfo) bool { return ti.Topic == "Ta" })
	if i < 0 || topics[i].ReadQueues != 2 || topics[i].WriteQueues != 2 || topics[i+1].Topic != "Tb" || topics[i+1].ReadQueues != 1 ||
		!slices.Equal(topics[i].Brokers, []string{e.b.Name()}) || topics[i].System {
		t.Fatalf("topics %+v", topics)
	}

	for _, ti := range topics {
		if want := ti.Topic == e.b.Name() || ti.Topic == "DefaultCluster" || message.IsSystemTopic(ti.Topic); ti.System != want {
			t.Errorf("topic %s: System %v", ti.Topic, ti.System)
		}
	}
	start := time.Now().Add(-time.Second)
	for n := range 3 {
		if _, err := e.p.SendSync(ctx(t), message.NewMessage("Tb", []byte("m"+strconv.Itoa(n)))); err != nil {
			t.Fatal(err)
		}
	}
	// A group pulls and commits offset 1 on Tb queue 0 (the broker creates the group on its
	// first pull; sysFlag 1|4 = commit offset, subscription in the request).
	resp, err := e.rc.InvokeSync(ctx(t), e.b.Addr(), remoting.NewRequest(remoting.PullMessage, map[string]string{
		"consumerGroup": "cg", "topic": "Tb", "queueId": "0", "queueOffset": "1", "maxMsgNums": "1", "sysFlag": "5",
		"commitOffset": "1", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}, nil))
	if err != nil || resp.ResponseErr() != nil {
		t.Fatalf("commit: %v %v", err, resp)
	}
	offs, err := e.a.GroupOffsets(ctx(t), "cg")
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) != 1 || offs[0].Queue.Topic != "Tb" || offs[0].Committed != 1 || offs[0].Max != 3 || offs[0].Lag() != 2 {
		t.Fatalf("offsets %+v", offs)
	}
	if qs, err := e.a.QueueOffsets(ctx(t), "Tb"); err != nil || len(qs) != 1 || qs[0].Max != 3 || qs[0].Min != 0 || qs[0].Committed != -1 {
		t.Fatalf("queue offsets %+v %v", qs, err)
	}
	groups, err := e.a.ConsumerGroups(ctx(t))
	if j := slices.IndexFunc(groups, func(g admin.GroupInfo) bool { return g.Group == "cg" }); err != nil || j < 0 || groups[j].RetryMaxTimes != 16 {
		t.Fatalf("groups %+v %v", groups, err)
	}
	if offs, err := e.a.GroupOffsets(ctx(t), "nobody"); err != nil || len(offs) != 0 {
		t.Fatalf("unknown group: %+v %v", offs, err)
	}
	if _, err := e.a.GroupOffsets(ctx(t), ""); err == nil {
		t.Fatal("empty group accepted")
	}

	msgs, err := e.a.MessagesByTime(ctx(t), "Tb", start, time.Now().Add(time.Second), 2)
	if err != nil || len(msgs) != 2 || string(msgs[0].Body) != "m0" || string(msgs[1].Body) != "m1" {
		t.Fatalf("by time: %v %v", msgs, err)
	}
	if msgs, err := e.a.MessagesByTime(ctx(t), "Tb", time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), 10); err != nil || len(msgs) != 0 {
		t.Fatalf("future range: %v %v", msgs, err)
	}
	if _, err := e.a.MessagesByTime(ctx(t), "Tb", time.Now(), start, 10); err == nil {
		t.Fatal("end before begin accepted")
	}
}

// TestMessagesByTimeAcrossQueues: the first max messages of the range come from every
// queue (earliest first), not max from the first queue read; asking for one more than
// shown tells that the range holds more.
func TestMessagesByTimeAcrossQueues(t *testing.T) {
	e := newDLQEnv(t)
	if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Tq", Queues: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Tq"); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Second)
	var stored []int64
	for i := range 12 {
		r, err := e.p.SendSync(ctx(t), message.NewMessage("Tq", []byte("m"+strconv.Itoa(i))))
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, int64(r.Queue.QueueID))
	}
	all, err := e.a.MessagesByTime(ctx(t), "Tq", start, time.Now().Add(time.Second), 13)
	if err != nil || len(all) != 12 {
		t.Fatalf("all: %d, %v", len(all), err)
	}
	// Two per queue over 4 queues: the old per-queue fill returned 2 of queue 0.
	msgs, err := e.a.MessagesByTime(ctx(t), "Tq", start, time.Now().Add(time.Second), 2)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("by time: %d messages, %v", len(msgs), err)
	}
	for i, m := range msgs {
		if m.StoreTimestamp != all[i].StoreTimestamp {
			t.Fatalf("message %d stored at %d, the range's %d-th earliest at %d (queues sent to: %v)", i, m.StoreTimestamp, i+1, all[i].StoreTimestamp, stored)
		}
	}
	if msgs[0].QueueID == msgs[1].QueueID && all[0].QueueID != all[1].QueueID {
		t.Fatalf("both from queue %d", msgs[0].QueueID)
	}
}
