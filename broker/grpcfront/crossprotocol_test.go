package grpcfront_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/sdktest"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
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

// sendBack sends CONSUMER_SEND_MSG_BACK (36) for m over the remoting port, as a 4.x
// consumer of group does when it fails m (delay level 0: the broker's choice).
func sendBack(t *testing.T, b *broker.Broker, group string, m *message.MessageExt) {
	t.Helper()
	cl, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ext := wire.SendBackHeader{Offset: m.CommitLogOffset, Group: group, OriginMsgID: m.MsgID, OriginTopic: m.Topic, MaxReconsumeTimes: -1}.Ext()
	resp, err := cl.InvokeSync(testkit.Context(t, 10*time.Second), b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, ext, nil))
	if err != nil || resp.ResponseCode() != remoting.Success {
		t.Fatalf("send back %s: %v %v", m.Body, resp, err)
	}
}

// consumedByV4 reads every message of topic from the store and commits the group's
// offsets past them, as a 4.x consumer of the group that consumed them would have.
func consumedByV4(t *testing.T, b *broker.Broker, group, topic string) map[string]*message.MessageExt {
	t.Helper()
	tc, err := b.TopicConfig(topic, false)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*message.MessageExt{}
	for q := range int32(tc.ReadQueueNums) {
		msgs, _, err := b.ReadMessages(topic, q, 0, 100, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			out[string(m.Body)] = m
		}
		_, maxOff := b.QueueOffsets(topic, q)
		b.CommitOffset(group, topic, q, maxOff)
	}
	return out
}

// TestOfficialConsumerReceivesRemotingRetries: a message a 4.x consumer of a group sent
// back to %RETRY%<group> is received by the official v5 SimpleConsumer of the same group
// for its topic (shown with its topic and id, attempt = reconsume times + 1); an
// acknowledged one is done; one never acknowledged reaches %DLQ%<group> after the
// group's max attempts, as the 4.x consumer's own send-backs would; a retry of another
// topic of the group goes to that topic's receivers only.
func TestOfficialConsumerReceivesRemotingRetries(t *testing.T) {
	const topic, other, group = "V5RetryTopic", "V5RetryOther", "V5RetryGroup"
	dir := t.TempDir()
	writeGroupConfig(t, dir, group, 2) // 3 attempts
	b, s := front(t, func(c *broker.Config) {
		c.StorePathRootDir = dir
		c.MessageDelayLevel = strings.TrimSpace(strings.Repeat("100ms ", 18))
	})
	p := newProducer(t, s.Addr(), topic, other)
	ids := map[string]string{}
	for _, m := range []struct{ topic, body string }{{topic, "poison"}, {topic, "fine"}, {other, "elsewhere"}} {
		rs, err := p.Send(testkit.Context(t, 10*time.Second), &rmq.Message{Topic: m.topic, Body: []byte(m.body)})
		if err != nil {
			t.Fatal(err)
		}
		ids[m.body] = rs[0].MessageID
	}
	stored := consumedByV4(t, b, group, topic)
	for k, v := range consumedByV4(t, b, group, other) {
		stored[k] = v
	}
	for _, body := range []string{"poison", "fine", "elsewhere"} {
		sendBack(t, b, group, stored[body])
	}
	retry := message.RetryTopic(group)
	testkit.WaitFor(t, 30*time.Second, func() bool {
		msgs, _, _ := b.ReadMessages(retry, 0, 0, 10, nil)
		return len(msgs) == 3
	}, "the three send-backs to reach", retry)

	c := newSimpleConsumer(t, s.Addr(), group, topic, rmq.SUB_ALL)
	raw, ctx := rawClient(t, s.Addr())
	var poison *rmq.MessageView
	for _, mv := range receiveN(t, c, 2, time.Second, 30*time.Second) {
		body := string(mv.GetBody())
		if mv.GetTopic() != topic || mv.GetMessageId() != ids[body] || mv.GetDeliveryAttempt() != 2 {
			t.Fatalf("retry %q: topic %s id %s (sent %s) attempt %d, want %s and attempt 2", body, mv.GetTopic(),
				mv.GetMessageId(), ids[body], mv.GetDeliveryAttempt(), topic)
		}
		switch body {
		case "fine":
			if r := ack(t, raw, ctx, group, topic, mv); r.GetStatus().GetCode() != v2.Code_OK {
				t.Fatalf("ack of a retry: %v", r.GetStatus())
			}
		case "poison":
			poison = mv
		default:
			t.Fatalf("the consumer of %s received %q", topic, body)
		}
	}
	if poison == nil {
		t.Fatal("poison not received")
	}
	// Not acknowledged: delivered once more (attempt 3, the last), then dead-lettered.
	mv := receiveN(t, c, 1, time.Second, 30*time.Second)[0]
	if string(mv.GetBody()) != "poison" || mv.GetDeliveryAttempt() != 3 {
		t.Fatalf("redelivery: %q attempt %d, want poison attempt 3", mv.GetBody(), mv.GetDeliveryAttempt())
	}
	var dead []*message.MessageExt
	testkit.WaitFor(t, 30*time.Second, func() bool {
		dead, _, _ = b.ReadMessages(message.DLQTopic(group), 0, 0, 10, nil)
		return len(dead) == 1
	}, "poison to reach the DLQ")
	if d := dead[0]; string(d.Body) != "poison" || d.Property(message.PropertyRetryTopic) != topic || d.ReconsumeTimes != 3 ||
		d.Property(message.PropertyOriginMessageID) != stored["poison"].MsgID {
		t.Fatalf("DLQ copy: %q RETRY_TOPIC %q reconsumeTimes %d ORIGIN_MESSAGE_ID %q (want %q)", d.Body, d.Property(message.PropertyRetryTopic),
			d.ReconsumeTimes, d.Property(message.PropertyOriginMessageID), stored["poison"].MsgID)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool { return s.Pop().Inflight(group) == 0 }, "nothing in flight")

	// The other topic's retry was left for its own receivers.
	co := newSimpleConsumer(t, s.Addr(), group, other, rmq.SUB_ALL)
	got := receiveN(t, co, 1, 30*time.Second, 30*time.Second)[0]
	if string(got.GetBody()) != "elsewhere" || got.GetTopic() != other || got.GetDeliveryAttempt() != 2 {
		t.Fatalf("the consumer of %s got %q of %s attempt %d", other, got.GetBody(), got.GetTopic(), got.GetDeliveryAttempt())
	}
	if r := ack(t, raw, ctx, group, other, got); r.GetStatus().GetCode() != v2.Code_OK {
		t.Fatalf("ack: %v", r.GetStatus())
	}
}

// TestOfficialNackCountsAttempts: a SimpleConsumer that gives a message back
// (ChangeInvisibleDuration to 0, the v5 nack) gets it again with the attempt increased,
// and after the group's max attempts it is in %DLQ%<group>, the DLQ a 4.x consumer of
// the group sends to (read here by a 4.x pull of the store).
func TestOfficialNackCountsAttempts(t *testing.T) {
	const topic, group = "V5NackTopic", "V5NackGroup"
	dir := t.TempDir()
	writeGroupConfig(t, dir, group, 2) // 3 attempts
	b, s := front(t, func(c *broker.Config) { c.StorePathRootDir = dir })
	p := newProducer(t, s.Addr(), topic)
	rs, err := p.Send(testkit.Context(t, 10*time.Second), &rmq.Message{Topic: topic, Body: []byte("nacked")})
	if err != nil {
		t.Fatal(err)
	}
	c := newSimpleConsumer(t, s.Addr(), group, topic, rmq.SUB_ALL)
	for attempt := int32(1); attempt <= 3; attempt++ {
		mv := receiveN(t, c, 1, 30*time.Second, 30*time.Second)[0] // 30 s: only the nack brings it back in time
		if mv.GetDeliveryAttempt() != attempt || mv.GetMessageId() != rs[0].MessageID {
			t.Fatalf("delivery %d: id %s attempt %d", attempt, mv.GetMessageId(), mv.GetDeliveryAttempt())
		}
		if err := c.ChangeInvisibleDuration(mv, 0); err != nil {
			t.Fatalf("nack %d: %v", attempt, err)
		}
	}
	var dead []*message.MessageExt
	testkit.WaitFor(t, 30*time.Second, func() bool {
		dead, _, _ = b.ReadMessages(message.DLQTopic(group), 0, 0, 10, nil)
		return len(dead) == 1
	}, "the nacked message to reach the DLQ")
	if d := dead[0]; string(d.Body) != "nacked" || d.ReconsumeTimes != 3 || d.Property(message.PropertyRetryTopic) != topic {
		t.Fatalf("DLQ copy: %q reconsumeTimes %d RETRY_TOPIC %q", d.Body, d.ReconsumeTimes, d.Property(message.PropertyRetryTopic))
	}
	if n := s.Pop().Inflight(group); n != 0 {
		t.Fatalf("inflight after dead-lettering: %d", n)
	}
}
