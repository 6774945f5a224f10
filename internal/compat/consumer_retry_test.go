package compat_test

// The official Go client's push consumer against Sluice's consume retry and DLQ:
// CONSUMER_SEND_MSG_BACK (36), %RETRY%<group> through the delay levels, the DLQ, and an
// admin re-drive of dead letters back to the consumer.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	rmqconsumer "github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/officialclient"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// crBroker starts an embedded broker whose delay levels are all 200 ms, so consume
// retries (delay level 3 + reconsume count) come back quickly, and creates topic and the
// group's retry topic before any client starts (the official client sees routes only at
// start and every 30 s).
func crBroker(t *testing.T, topic, group string) (*broker.Broker, *admin.Admin) {
	t.Helper()
	log := testLogger(t)
	b, _ := testbroker.Start(t, broker.Config{MessageDelayLevel: strings.TrimSpace(strings.Repeat("200ms ", 18)), FlushDiskType: "SYNC_FLUSH", Logger: log})
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = adm.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, tp := range []string{topic, message.RetryTopic(group)} {
		if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: tp, Queues: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.WaitTopicRoute(ctx, tp); err != nil {
			t.Fatal(err)
		}
	}
	return b, adm
}

// crDelivery is one delivery to the official consumer.
type crDelivery struct {
	topic, body, tag, keys string
	reconsumeTimes         int32
}

func (d crDelivery) String() string {
	return fmt.Sprintf("%s(rt=%d,%s)", d.body, d.reconsumeTimes, d.topic)
}

type crLog struct {
	mu  sync.Mutex
	all []crDelivery
}

func (l *crLog) add(m *primitive.MessageExt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, crDelivery{topic: m.Topic, body: string(m.Body), tag: m.GetTags(), keys: m.GetKeys(), reconsumeTimes: m.ReconsumeTimes})
}

func (l *crLog) list() []crDelivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]crDelivery(nil), l.all...)
}

// crOfficialConsumer starts the official push consumer with handler h.
func crOfficialConsumer(t *testing.T, b *broker.Broker, group, topic string, maxReconsume int32,
	h func(*primitive.MessageExt) rmqconsumer.ConsumeResult) {
	t.Helper()
	opts := []rmqconsumer.Option{
		rmqconsumer.WithNameServer(primitive.NamesrvAddr{b.NamesrvAddr()}),
		rmqconsumer.WithGroupName(group),
		rmqconsumer.WithInstance(group + "-official"),
		rmqconsumer.WithConsumeFromWhere(rmqconsumer.ConsumeFromFirstOffset),
	}
	if maxReconsume != 0 {
		opts = append(opts, rmqconsumer.WithMaxReconsumeTimes(maxReconsume))
	}
	c, err := rocketmq.NewPushConsumer(opts...)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, rmqconsumer.MessageSelector{Type: rmqconsumer.TAG, Expression: "*"},
		func(_ context.Context, msgs ...*primitive.MessageExt) (rmqconsumer.ConsumeResult, error) {
			res := rmqconsumer.ConsumeSuccess
			for _, m := range msgs {
				if h(m) != rmqconsumer.ConsumeSuccess {
					res = rmqconsumer.ConsumeRetryLater
				}
			}
			return res, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = officialclient.ShutdownConsumer(c) })
}

func crSend(t *testing.T, b *broker.Broker, topic, body string) {
	t.Helper()
	send := sluiceProducer(t, &env{t: t, b: b, log: testLogger(t)}, "cr-producer-"+body)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m := testMsg{topic: topic, tag: "Pay", keys: []string{"order-" + body, "user-9"}, body: []byte(body), props: map[string]string{"color": "red"}}
	if err := send(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// The official push consumer fails a message twice, then succeeds: three deliveries
// with ReconsumeTimes 0, 1, 2, each shown under the original topic with its tag and
// keys (Sluice's broker restores nothing itself: the client maps %RETRY% back through
// RETRY_TOPIC).
func TestOfficialConsumerRetryFailsTwiceThenSucceeds(t *testing.T) {
	t.Parallel()
	const topic, group = "CrPay", "cr-twice"
	b, _ := crBroker(t, topic, group)
	log := &crLog{}
	crOfficialConsumer(t, b, group, topic, 0, func(m *primitive.MessageExt) rmqconsumer.ConsumeResult {
		log.add(m)
		if m.ReconsumeTimes < 2 {
			return rmqconsumer.ConsumeRetryLater
		}
		return rmqconsumer.ConsumeSuccess
	})
	crSend(t, b, topic, "p1")
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(log.list()) >= 3 }, func() string { return fmt.Sprintf("deliveries %v", log.list()) })
	got := log.list()
	if len(got) != 3 {
		t.Fatalf("deliveries %v, want 3", got)
	}
	for i, d := range got {
		if d.reconsumeTimes != int32(i) || d.topic != topic || d.body != "p1" || d.tag != "Pay" || d.keys != "order-p1 user-9" {
			t.Fatalf("delivery %d: %+v (all: %v)", i, d, got)
		}
	}
}

// The official push consumer with MaxReconsumeTimes 2 fails a message every time:
// after 3 deliveries (ReconsumeTimes 0, 1, 2) exactly one copy is in %DLQ%<group>, and
// nothing is left to deliver (the retry topic holds exactly the 2 retries). Re-driven
// with the admin (as `sluice admin dlq resend` does), it reaches the same consumer again
// with ReconsumeTimes 0, its topic, tag and keys.
func TestOfficialConsumerAlwaysFailingLandsInDLQOnceAndIsRedriven(t *testing.T) {
	t.Parallel()
	const topic, group = "CrDead", "cr-dead"
	b, adm := crBroker(t, topic, group)
	log := &crLog{}
	var fixed atomic.Bool
	crOfficialConsumer(t, b, group, topic, 2, func(m *primitive.MessageExt) rmqconsumer.ConsumeResult {
		log.add(m)
		if fixed.Load() {
			return rmqconsumer.ConsumeSuccess
		}
		return rmqconsumer.ConsumeRetryLater
	})
	crSend(t, b, topic, "d1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var dead []admin.DLQMessage
	testkit.WaitFor(t, 60*time.Second, func() bool {
		var err error
		dead, err = adm.ListDLQ(ctx, group, admin.DLQListOptions{})
		return err == nil && len(dead) > 0
	}, func() string { return fmt.Sprintf("no dead letter; deliveries %v", log.list()) })
	retryMax := crMaxOffset(t, b.Addr(), message.RetryTopic(group))
	dlqMax := crMaxOffset(t, b.Addr(), message.DLQTopic(group))
	if retryMax != 2 || dlqMax != 1 {
		t.Fatalf("retry topic holds %d messages, DLQ %d; want 2 and 1", retryMax, dlqMax)
	}
	got := log.list()
	if len(got) != 3 {
		t.Fatalf("deliveries %v, want 3 (maxReconsumeTimes 2 + 1)", got)
	}
	for i, d := range got {
		if d.reconsumeTimes != int32(i) || d.topic != topic || d.body != "d1" {
			t.Fatalf("delivery %d: %+v", i, d)
		}
	}
	m := dead[0].Message
	if len(dead) != 1 || dead[0].OriginTopic != topic || string(m.Body) != "d1" || m.Tag() != "Pay" ||
		strings.Join(m.Keys(), " ") != "order-d1 user-9" || m.Property("color") != "red" || m.ReconsumeTimes != 3 {
		t.Fatalf("dead letters %+v, message %+v props %v", dead, m, m.Properties)
	}

	fixed.Store(true)
	res, err := adm.ResendDLQ(ctx, group, admin.DLQResendOptions{})
	if err != nil || len(res.Resent) != 1 {
		t.Fatalf("resend: %+v %v", res, err)
	}
	testkit.WaitFor(t, 60*time.Second, func() bool { return len(log.list()) >= 4 }, func() string { return fmt.Sprintf("deliveries %v", log.list()) })
	d := log.list()[3]
	if d.reconsumeTimes != 0 || d.topic != topic || d.body != "d1" || d.tag != "Pay" || d.keys != "order-d1 user-9" {
		t.Fatalf("re-driven delivery %+v", d)
	}
}

// crMaxOffset returns queue 0's max offset of topic (GET_MAX_OFFSET, 30).
func crMaxOffset(t *testing.T, addr, topic string) int64 {
	t.Helper()
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rc.InvokeSync(ctx, addr, remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": topic, "queueId": "0"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	off, err := resp.ExtInt64("offset", true)
	if err != nil {
		t.Fatal(err)
	}
	return off
}
