package broker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// A group whose %RETRY% topic would exceed 127 bytes is refused where it first reaches
// the broker: heartbeat, send-back and pull; the answer names the field and the limit.
// The longest allowed group (120 bytes) is accepted.
func TestOverlongGroupRefused(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "T", 1)
	long := strings.Repeat("g", message.MaxGroupLength+1)
	wantRefused := func(what, field string, r *remoting.RemotingCommand) {
		t.Helper()
		if r.ResponseCode() == remoting.Success || !strings.Contains(r.Remark, field) ||
			!strings.Contains(r.Remark, "limit "+strconv.Itoa(message.MaxGroupLength)) {
			t.Fatalf("%s with a %d-byte group: %d %q, want a refusal naming %s and the limit", what, len(long), r.Code, r.Remark, field)
		}
	}
	hb := wire.HeartbeatData{ClientID: "c1", ConsumerDataSet: []wire.ConsumerData{{GroupName: long, ConsumeType: "CONSUME_PASSIVELY",
		MessageModel: "CLUSTERING", SubscriptionDataSet: []wire.SubscriptionData{{Topic: "T", SubString: "*", SubVersion: 1}}}}}
	body, _ := json.Marshal(hb)
	wantRefused("heartbeat", "groupName", invoke(t, c, b.Addr(), remoting.NewRequest(remoting.HeartBeat, nil, body)))
	if b.topics.get(message.RetryTopic(long)) != nil || b.groups.find(long) != nil {
		t.Fatal("the refused heartbeat created the group or its retry topic")
	}
	sendV1(t, c, b.Addr(), "T", 0, []byte("x"), nil)
	wantRefused("send-back", "group", invoke(t, c, b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{
		"offset": "0", "group": long, "delayLevel": "0", "originMsgId": "x", "originTopic": "T", "unitMode": "false"}, nil)))
	wantRefused("pull", "consumerGroup", pull(t, c, b.Addr(), long, "T", 0, 0, "*", 0))

	heartbeat(t, c, b.Addr(), "c1", strings.Repeat("g", message.MaxGroupLength)) // fails the test if refused
}

// One client instance heartbeats every consumer group of its process (the official
// clients share one per process): a refused group is left out, the answer names it, and
// the client's other groups are still registered and can consume.
func TestOverlongGroupDoesNotBlockOtherGroupsOfTheClient(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "T", 1)
	long := strings.Repeat("g", message.MaxGroupLength+1)
	cd := func(g string) wire.ConsumerData {
		return wire.ConsumerData{GroupName: g, ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING",
			SubscriptionDataSet: []wire.SubscriptionData{{Topic: "T", SubString: "*", SubVersion: 1}}}
	}
	hb := wire.HeartbeatData{ClientID: "c-mixed", ConsumerDataSet: []wire.ConsumerData{cd(long), cd("good_group")}}
	body, _ := json.Marshal(hb)
	r := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.HeartBeat, nil, body))
	if r.ResponseCode() == remoting.Success || !strings.Contains(r.Remark, "limit "+strconv.Itoa(message.MaxGroupLength)) {
		t.Fatalf("heartbeat with a %d-byte group: %d %q, want a refusal naming the limit", len(long), r.Code, r.Remark)
	}
	if ids := consumerList(t, c, b.Addr(), "good_group"); len(ids) != 1 || ids[0] != "c-mixed" {
		t.Fatalf("consumers of good_group after the mixed heartbeat: %v, want [c-mixed]", ids)
	}
	if b.topics.get(message.RetryTopic("good_group")) == nil {
		t.Fatal("the mixed heartbeat did not create the retry topic of good_group")
	}
	if ids := consumerList(t, c, b.Addr(), long); len(ids) != 0 || b.groups.find(long) != nil {
		t.Fatalf("the refused group was registered: %v", ids)
	}
}

// parkRaw stores a delayed message for realTopic directly in SCHEDULE_TOPIC_XXXX, as a
// send-back of an older version (that let an overlong group through) would have left it.
func parkRaw(t *testing.T, b *Broker, realTopic, body string, level int) {
	t.Helper()
	m := &message.MessageExt{Message: message.Message{Topic: realTopic, Body: []byte(body)}, StoreHost: b.storeHost,
		BornTimestamp: time.Now().UnixMilli()}
	m.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, body)
	tags := b.sched.park(m, level)
	if _, err := b.store.PutMessage(context.Background(), m, tags); err != nil {
		t.Fatal(err)
	}
}

func storedBodies(t *testing.T, b *Broker, topic string) []*message.MessageExt {
	t.Helper()
	res, err := b.store.GetMessage(topic, 0, 0, 32, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := message.DecodeRecords(res.Body, message.DecodeOptions{})
	return ms
}

// A due delayed message that cannot be written to its real topic (a %RETRY% topic over
// 127 bytes, parked before the group check existed) no longer blocks its delay level:
// it goes to the group's dead letters when %DLQ%<group> is valid, otherwise to the
// broker's error queue, with the reason in a property; the messages behind it are
// delivered.
func TestScheduleUndeliverableGoesToDeadLetters(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.MessageDelayLevel = "200ms 200ms 200ms" })
	c := newClient(t)
	createTopic(t, c, b.Addr(), "D", 1)
	g121 := strings.Repeat("a", 121) // %RETRY% 128 bytes, %DLQ% 126: the group's DLQ works
	g125 := strings.Repeat("b", 125) // %DLQ% 130 bytes too: the broker's error queue
	parkRaw(t, b, message.RetryTopic(g121), "bad-121", 3)
	parkRaw(t, b, message.RetryTopic(g125), "bad-125", 3)
	sendV1(t, c, b.Addr(), "D", 0, []byte("good"), map[string]string{"DELAY": "3"})

	testkit.WaitFor(t, 10*time.Second, func() bool { return b.store.MaxOffset("D", 0) == 1 }, "the good message behind two undeliverable ones")
	dead := storedBodies(t, b, message.DLQTopic(g121))
	if len(dead) != 1 || string(dead[0].Body) != "bad-121" || !strings.Contains(dead[0].Property(PropertyUndeliverableReason), "topic") ||
		dead[0].Property(message.PropertyRealTopic) != message.RetryTopic(g121) {
		t.Fatalf("%%DLQ%%<121-byte group> holds %+v", dead)
	}
	errq := storedBodies(t, b, message.DLQTopic(UndeliverableGroup))
	if len(errq) != 1 || string(errq[0].Body) != "bad-125" || errq[0].Property(PropertyUndeliverableReason) == "" {
		t.Fatalf("the broker error queue holds %+v", errq)
	}
	t.Logf("reason: %s", errq[0].Property(PropertyUndeliverableReason))
	if got := storedBodies(t, b, "D"); len(got) != 1 || string(got[0].Body) != "good" {
		t.Fatalf("D holds %+v", got)
	}
}

// A delivery that keeps failing with an error a retry might fix is tried a bounded
// number of times (scheduleDeliverAttempts), then dead-lettered with the last error as
// the reason; the message behind it is delivered.
func TestScheduleTransientFailureIsBounded(t *testing.T) {
	cfg := Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: t.TempDir(),
		MappedFileSizeCommitLog: 8 << 20, Logger: testkit.Quiet(), MessageDelayLevel: "200ms"}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int32
	b.sched.putHook = func(ctx context.Context, m *message.MessageExt, tags int64) error {
		if m.Topic == "D" && string(m.Body) == "flaky" {
			attempts.Add(1)
			return errors.New("disk hiccup")
		}
		_, err := b.store.PutMessage(ctx, m, tags)
		return err
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	c := newClient(t)
	createTopic(t, c, b.Addr(), "D", 1)
	sendV1(t, c, b.Addr(), "D", 0, []byte("flaky"), map[string]string{"DELAY": "1"})
	sendV1(t, c, b.Addr(), "D", 0, []byte("good"), map[string]string{"DELAY": "1"})

	testkit.WaitFor(t, 20*time.Second, func() bool { return b.store.MaxOffset("D", 0) == 1 }, "the message behind the failing one")
	if n := attempts.Load(); n != scheduleDeliverAttempts {
		t.Fatalf("%d delivery attempts, want %d", n, scheduleDeliverAttempts)
	}
	dead := storedBodies(t, b, message.DLQTopic(UndeliverableGroup))
	if len(dead) != 1 || string(dead[0].Body) != "flaky" ||
		!strings.Contains(dead[0].Property(PropertyUndeliverableReason), "after 3 attempt(s): disk hiccup") {
		t.Fatalf("error queue holds %+v", dead)
	}
	if got := storedBodies(t, b, "D"); len(got) != 1 || string(got[0].Body) != "good" {
		t.Fatalf("D holds %+v", got)
	}
}
