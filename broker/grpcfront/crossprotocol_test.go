package grpcfront_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// A message sent by the official v5 producer is consumed by the Sluice SDK's 4.x push
// consumer with its tag, keys, user property and client message id.
func TestCrossV5SendRemotingConsume(t *testing.T) {
	b, s := front(t, nil)
	const topic = "CrossV5ToV4"
	p := newProducer(t, s.Addr(), topic)
	ids := map[string]string{} // body -> v5 message id
	for i := range 5 {
		msg := &rmq.Message{Topic: topic, Body: []byte(fmt.Sprintf("v5-%d", i))}
		msg.SetTag("T")
		msg.SetKeys("k1", fmt.Sprintf("k-%d", i))
		msg.AddProperty("origin", "v5")
		rs, err := p.Send(testkit.Context(t, 10*time.Second), msg)
		if err != nil {
			t.Fatal(err)
		}
		ids[string(msg.Body)] = rs[0].MessageID
	}
	var mu sync.Mutex
	sdktest.PushReceives(t, consumer.Config{NamesrvAddrs: testbroker.Namesrv(b), Group: "CrossV4Group",
		ConsumeFromWhere: consumer.ConsumeFromFirstOffset}, topic, 5, 60*time.Second, func(m *message.MessageExt) {
		mu.Lock()
		defer mu.Unlock()
		if m.Tag() != "T" || m.Property("origin") != "v5" || len(m.Keys()) != 2 {
			t.Errorf("4.x consumer got tag %q keys %v origin %q", m.Tag(), m.Keys(), m.Property("origin"))
		}
		if id := m.Property(message.PropertyUniqClientMessageIDKeyIdx); id != ids[string(m.Body)] {
			t.Errorf("4.x consumer got UNIQ_KEY %q for %q, want the v5 message id %q", id, m.Body, ids[string(m.Body)])
		}
	})
}

// A message sent by the Sluice SDK's 4.x producer is received by the official v5
// SimpleConsumer with its tag, keys and properties, and its id is the producer's.
func TestCrossRemotingSendV5Consume(t *testing.T) {
	b, s := front(t, nil)
	const topic, group = "CrossV4ToV5", "CrossV5Group"
	p := sdktest.StartProducer(t, producer.Config{NamesrvAddrs: testbroker.Namesrv(b), Group: "CrossV4Producer"}, sdktest.MustShutDown)
	want := map[string]string{}
	for i := range 5 {
		m := message.NewMessage(topic, []byte(fmt.Sprintf("v4-%d", i))).SetTag("Q").SetKeys(fmt.Sprintf("key-%d", i)).SetProperty("origin", "v4")
		res, err := p.SendSync(testkit.Context(t, 10*time.Second), m)
		if err != nil {
			t.Fatal(err)
		}
		want[res.MsgID] = string(m.Body)
	}
	c := newSimpleConsumer(t, s.Addr(), group, topic, rmq.NewFilterExpression("Q"))
	raw, ctx := rawClient(t, s.Addr())
	for _, mv := range receiveN(t, c, 5, 30*time.Second, 30*time.Second) {
		if want[mv.GetMessageId()] != string(mv.GetBody()) {
			t.Fatalf("v5 consumer got id %s body %q; sent %v", mv.GetMessageId(), mv.GetBody(), want)
		}
		if mv.GetTag() == nil || *mv.GetTag() != "Q" || len(mv.GetKeys()) != 1 || mv.GetProperties()["origin"] != "v4" {
			t.Fatalf("v5 consumer got tag %v keys %v properties %v", mv.GetTag(), mv.GetKeys(), mv.GetProperties())
		}
		if _, leaked := mv.GetProperties()[message.PropertyUniqClientMessageIDKeyIdx]; leaked {
			t.Fatalf("a system property reached the user properties: %v", mv.GetProperties())
		}
		if r := ack(t, raw, ctx, group, topic, mv); r.GetStatus().GetCode() != 20000 {
			t.Fatalf("ack: %v", r.GetStatus())
		}
	}
}

// writeGroupConfig writes a subscriptionGroup.json with one group before the broker
// starts.
func writeGroupConfig(t *testing.T, dir, group string, retryMaxTimes int) {
	t.Helper()
	g := map[string]any{"groupName": group, "consumeEnable": true, "consumeFromMinEnable": true, "consumeBroadcastEnable": true,
		"retryQueueNums": 1, "retryMaxTimes": retryMaxTimes, "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": true}
	body, err := json.Marshal(map[string]any{"subscriptionGroupTable": map[string]any{group: g}, "dataVersion": map[string]any{"timestamp": 1, "counter": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config", "subscriptionGroup.json"), body, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A message never acknowledged goes to %DLQ%<group> after the group's max delivery
// attempts (retryMaxTimes 1: 2 attempts), with RETRY_TOPIC and ORIGIN_MESSAGE_ID, and is
// not delivered again.
func TestOfficialSimpleConsumerDLQAfterMaxAttempts(t *testing.T) {
	const topic, group = "V5DLQ", "V5DLQGroup"
	dir := t.TempDir()
	writeGroupConfig(t, dir, group, 1)
	b, s := front(t, func(c *broker.Config) { c.StorePathRootDir = dir })
	p := newProducer(t, s.Addr(), topic)
	rs, err := p.Send(testkit.Context(t, 10*time.Second), &rmq.Message{Topic: topic, Body: []byte("poison")})
	if err != nil {
		t.Fatal(err)
	}
	c := newSimpleConsumer(t, s.Addr(), group, topic, rmq.SUB_ALL)
	for attempt := int32(1); attempt <= 2; attempt++ {
		mv := receiveN(t, c, 1, time.Second, 30*time.Second)[0]
		if mv.GetDeliveryAttempt() != attempt || mv.GetMessageId() != rs[0].MessageID {
			t.Fatalf("delivery %d: id %s attempt %d", attempt, mv.GetMessageId(), mv.GetDeliveryAttempt())
		}
	}
	dlq := message.DLQTopic(group)
	var dead []*message.MessageExt
	testkit.WaitFor(t, 30*time.Second, func() bool {
		dead, _, _ = b.ReadMessages(dlq, 0, 0, 10, nil)
		return len(dead) == 1
	}, "the message to reach the DLQ")
	m := dead[0]
	if string(m.Body) != "poison" || m.Property(message.PropertyRetryTopic) != topic ||
		m.Property(message.PropertyOriginMessageID) != rs[0].MessageID || m.ReconsumeTimes != 2 {
		t.Fatalf("DLQ copy: body %q RETRY_TOPIC %q ORIGIN_MESSAGE_ID %q reconsumeTimes %d", m.Body,
			m.Property(message.PropertyRetryTopic), m.Property(message.PropertyOriginMessageID), m.ReconsumeTimes)
	}
	if n := s.Pop().Inflight(group); n != 0 {
		t.Fatalf("inflight after dead-lettering: %d", n)
	}
}
