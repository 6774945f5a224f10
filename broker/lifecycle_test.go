package broker

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func heartbeat(t *testing.T, c *remoting.Client, addr, clientID, group string) {
	t.Helper()
	hb := wire.HeartbeatData{ClientID: clientID, ConsumerDataSet: []wire.ConsumerData{{GroupName: group, ConsumeType: "CONSUME_PASSIVELY",
		MessageModel: "CLUSTERING", ConsumeFromWhere: "CONSUME_FROM_LAST_OFFSET",
		SubscriptionDataSet: []wire.SubscriptionData{{Topic: "T", SubString: "*", SubVersion: 1, ExpressionType: "TAG"}}}}}
	body, _ := json.Marshal(hb)
	if r := invoke(t, c, addr, remoting.NewRequest(remoting.HeartBeat, nil, body)); r.ResponseCode() != remoting.Success {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
}

func consumerList(t *testing.T, c *remoting.Client, addr, group string) []string {
	t.Helper()
	r := invoke(t, c, addr, remoting.NewRequest(remoting.GetConsumerListByGroup, map[string]string{"consumerGroup": group}, nil))
	if r.ResponseCode() != remoting.Success {
		return nil
	}
	var body struct {
		ConsumerIDList []string `json:"consumerIdList"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.ConsumerIDList
}

// TestDeadClientsAreDropped: a consumer whose connection closes, or whose heartbeats stop,
// leaves its group, and the remaining consumers are told to rebalance.
func TestDeadClientsAreDropped(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.ClientChannelExpiredTimeout = 600 })
	c1, c2 := newClient(t), newClient(t)
	var notified atomic.Int32
	c1.RegisterHandler(remoting.NotifyConsumerIDsChanged, func(_ context.Context, _ string, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		if req.ExtFields["consumerGroup"] == "g" {
			notified.Add(1)
		}
		return nil
	})
	heartbeat(t, c1, b.Addr(), "client-1", "g")
	heartbeat(t, c2, b.Addr(), "client-2", "g")
	if got := consumerList(t, c1, b.Addr(), "g"); len(got) != 2 || got[0] != "client-1" || got[1] != "client-2" {
		t.Fatalf("consumer list %v", got)
	}
	if b.topics.get(message.RetryTopic("g")) == nil {
		t.Fatalf("%s not created for a clustering group", message.RetryTopic("g"))
	}
	testkit.WaitFor(t, 5*time.Second, func() bool { return notified.Load() >= 1 }, "a notification about client-2 joining")
	before := notified.Load()
	_ = c2.Close()
	testkit.WaitFor(t, 5*time.Second, func() bool {
		got := consumerList(t, c1, b.Addr(), "g")
		return len(got) == 1 && got[0] == "client-1"
	}, "client-2 to be dropped when its connection closed")
	testkit.WaitFor(t, 5*time.Second, func() bool { return notified.Load() > before }, "client-1 to be told to rebalance")

	// client-1 stops heartbeating: it expires after 600 ms and its connection is closed.
	observer := newClient(t)
	testkit.WaitFor(t, 10*time.Second, func() bool { return len(consumerList(t, observer, b.Addr(), "g")) == 0 }, "client-1 to expire")
}

// TestDelayLevels: a delayed message is not visible before its level's delay, reaches its
// topic after it, and a level above the table is clamped to the last level.
func TestDelayLevels(t *testing.T) {
	dir := t.TempDir()
	// Levels of seconds, not milliseconds: on a loaded machine the sends and the first pull
	// can take longer than a short level, and the "not yet visible" check would race it.
	b := startBroker(t, dir, func(c *Config) { c.MessageDelayLevel, c.DelayLevelOutOfRange = "2s 3s", DelayLevelClamp })
	c := newClient(t)
	createTopic(t, c, b.Addr(), "D", 1)
	start := time.Now()
	sendV1(t, c, b.Addr(), "D", 0, []byte("one"), map[string]string{"DELAY": "1", "TAGS": "x"})
	sendV1(t, c, b.Addr(), "D", 0, []byte("nine"), map[string]string{"DELAY": "9"}) // clamped to level 2 (3s)
	r := pull(t, c, b.Addr(), "g", "D", 0, 0, "*", 0)
	if time.Since(start) < 2*time.Second && r.ResponseCode() == remoting.Success {
		t.Fatal("a delayed message was readable before its level's delay")
	}
	var got []*message.MessageExt
	testkit.WaitFor(t, 30*time.Second, func() bool {
		r := pull(t, c, b.Addr(), "g", "D", 0, 0, "*", 0)
		got, _ = message.DecodeRecords(r.Body, message.DecodeOptions{})
		return len(got) == 2
	}, "both delayed messages")
	elapsed := time.Since(start)
	if elapsed < 3*time.Second {
		t.Fatalf("level 9 (clamped to 3s) arrived after %v", elapsed)
	}
	if string(got[0].Body) != "one" || got[0].Tag() != "x" || got[0].DelayLevel() != 0 || got[0].Topic != "D" {
		t.Fatalf("delivered %+v", got[0])
	}
	if got[1].StoreTimestamp-got[0].StoreTimestamp < 500 {
		t.Fatalf("level 1 and clamped level 2 delivered %d ms apart", got[1].StoreTimestamp-got[0].StoreTimestamp)
	}

	// Schedule progress survives a restart: nothing is delivered twice.
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := startBroker(t, dir, func(c *Config) { c.MessageDelayLevel = "300ms 1s" })
	sendV1(t, c, b2.Addr(), "D", 0, []byte("after"), map[string]string{"DELAY": "1"})
	testkit.WaitFor(t, 10*time.Second, func() bool {
		return b2.store.MaxOffset("D", 0) >= 3
	}, "the post-restart delayed message")
	r = pull(t, c, b2.Addr(), "g", "D", 0, 0, "*", 0)
	all, _ := message.DecodeRecords(r.Body, message.DecodeOptions{})
	if len(all) != 3 || string(all[2].Body) != "after" {
		var bodies []string
		for _, m := range all {
			bodies = append(bodies, string(m.Body))
		}
		t.Fatalf("after restart the topic holds %v", bodies)
	}
}

// TestSendBackRetryThenDLQ: CONSUMER_SEND_MSG_BACK puts a failed message into
// %RETRY%<group> after its delay with ReconsumeTimes+1 and the original topic in
// RETRY_TOPIC; at maxReconsumeTimes it goes to %DLQ%<group>, which consumers cannot pull.
func TestSendBackRetryThenDLQ(t *testing.T) {
	levels := "100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms 100ms"
	b := startBroker(t, t.TempDir(), func(c *Config) { c.MessageDelayLevel = levels })
	c := newClient(t)
	createTopic(t, c, b.Addr(), "Pay", 1)
	sendV1(t, c, b.Addr(), "Pay", 0, []byte("order-1"), map[string]string{"TAGS": "PaySuccess", "KEYS": "o1", "UNIQ_KEY": "U1"})
	orig, _ := message.DecodeRecords(pull(t, c, b.Addr(), "g", "Pay", 0, 0, "*", 0).Body, message.DecodeOptions{})
	if len(orig) != 1 {
		t.Fatal("original not readable")
	}
	sendBack := func(m *message.MessageExt, maxTimes int) {
		t.Helper()
		r := invoke(t, c, b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{
			"offset": strconv.FormatInt(m.CommitLogOffset, 10), "group": "g", "delayLevel": "0", "originMsgId": m.MsgID,
			"originTopic": "Pay", "unitMode": "false", "maxReconsumeTimes": strconv.Itoa(maxTimes)}, nil))
		if r.ResponseCode() != remoting.Success {
			t.Fatalf("send back: %d %s", r.Code, r.Remark)
		}
	}
	sendBack(orig[0], 1)
	retry := message.RetryTopic("g")
	var got []*message.MessageExt
	testkit.WaitFor(t, 10*time.Second, func() bool {
		got, _ = message.DecodeRecords(pull(t, c, b.Addr(), "g", retry, 0, 0, "*", 0).Body, message.DecodeOptions{})
		return len(got) == 1
	}, "the retry copy")
	m := got[0]
	if m.ReconsumeTimes != 1 || m.Property(message.PropertyRetryTopic) != "Pay" || string(m.Body) != "order-1" ||
		m.Tag() != "PaySuccess" || m.Keys()[0] != "o1" || m.MsgID != "U1" || m.Property(message.PropertyOriginMessageID) != "U1" {
		t.Fatalf("retry copy %+v", m)
	}
	sendBack(m, 1) // reconsume count 1 has reached the maximum of 1: DLQ
	dlq := message.DLQTopic("g")
	testkit.WaitFor(t, 5*time.Second, func() bool { return b.store.MaxOffset(dlq, 0) == 1 }, "the DLQ copy")
	if r := pull(t, c, b.Addr(), "g", dlq, 0, 0, "*", 0); r.ResponseCode() != remoting.NoPermission {
		t.Fatalf("pulling the DLQ: want NO_PERMISSION, got %d", r.Code)
	}
	res, err := b.store.GetMessage(dlq, 0, 0, 32, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := message.DecodeRecords(res.Body, message.DecodeOptions{})
	if len(dead) != 1 || dead[0].ReconsumeTimes != 2 || string(dead[0].Body) != "order-1" || dead[0].Property(message.PropertyRetryTopic) != "Pay" {
		t.Fatalf("DLQ holds %+v", dead)
	}
}
