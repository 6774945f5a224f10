package admin_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// startRealBroker runs a Sluice broker; with namesrvAddr "" it starts its own name server.
func startRealBroker(t *testing.T, name, namesrvAddr string) *broker.Broker {
	t.Helper()
	b, _ := testbroker.Start(t, broker.Config{BrokerName: name, NamesrvAddr: namesrvAddr, MappedFileSizeCommitLog: 8 << 20})
	return b
}

// sendRaw sends one message with SEND_MESSAGE (10) and returns its offset message id.
func sendRaw(t *testing.T, c *remoting.Client, addr, topic string, sysFlag int32, body []byte, props map[string]string) string {
	t.Helper()
	ext := map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "0", "sysFlag": strconv.Itoa(int(sysFlag)), "bornTimestamp": strconv.FormatInt(time.Now().UnixMilli(), 10),
		"flag": "0", "properties": message.MarshalProperties(props), "reconsumeTimes": "0", "unitMode": "false",
		"maxReconsumeTimes": "0", "batch": "false",
	}
	resp, err := c.InvokeSync(ctx(t), addr, remoting.NewRequest(remoting.SendMessage, ext, body))
	if err != nil || resp.ResponseCode() != remoting.Success {
		t.Fatalf("send to %s: %v %v", addr, err, resp)
	}
	return resp.ExtFields["msgId"]
}

func TestFindAndViewMessagesOnTwoBrokers(t *testing.T) {
	b1 := startRealBroker(t, "broker-a", "")
	b2 := startRealBroker(t, "broker-b", b1.NamesrvAddr())
	a := newAdmin(t, b1.NamesrvAddr())
	testkit.WaitFor(t, 5*time.Second, func() bool {
		ci, err := a.ClusterInfo(ctx(t))
		return err == nil && len(ci.BrokerAddrTable) == 2
	}, "both brokers registered")
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Find", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitTopicRoute(ctx(t), "Find", "broker-a", "broker-b"); err != nil {
		t.Fatal(err)
	}
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	before := time.Now()
	idA := sendRaw(t, c, b1.Addr(), "Find", 0, []byte("on a"), map[string]string{message.PropertyKeys: "dup only-a"})
	// A zlib-compressed body (sysFlag bit 0), as producers send bodies over 4 KiB.
	long := []byte(fmt.Sprintf("%04000d", 7))
	z, err := message.Deflate(long, 5)
	if err != nil {
		t.Fatal(err)
	}
	uniq := message.NewUniqID()
	idB := sendRaw(t, c, b2.Addr(), "Find", message.SysFlagCompressed, z, map[string]string{message.PropertyKeys: "dup", message.PropertyUniqClientMessageIDKeyIdx: uniq})
	after := time.Now()

	ms, err := a.FindMessages(ctx(t), "Find", "dup", time.Time{}, time.Time{})
	if err != nil || len(ms) != 2 {
		t.Fatalf("FindMessages dup: %d messages, %v", len(ms), err)
	}
	if ms[0].BrokerName != "broker-a" || string(ms[0].Body) != "on a" || ms[0].OffsetMsgID != idA ||
		ms[1].BrokerName != "broker-b" || string(ms[1].Body) != string(long) || ms[1].OffsetMsgID != idB {
		t.Fatalf("FindMessages dup: %s %q %s / %s %d bytes %s", ms[0].BrokerName, ms[0].Body, ms[0].OffsetMsgID, ms[1].BrokerName, len(ms[1].Body), ms[1].OffsetMsgID)
	}
	if ms, err := a.FindMessages(ctx(t), "Find", "only-a", before.Add(-time.Second), after.Add(time.Second)); err != nil || len(ms) != 1 || ms[0].BrokerName != "broker-a" {
		t.Fatalf("only-a in range: %v %v", ms, err)
	}
	if ms, err := a.FindMessages(ctx(t), "Find", "dup", before.Add(-time.Hour), before.Add(-time.Minute)); err != nil || len(ms) != 0 {
		t.Fatalf("dup an hour ago: %v %v", ms, err)
	}
	if ms, err := a.FindMessageByUniqKey(ctx(t), "Find", uniq); err != nil || len(ms) != 1 || ms[0].OffsetMsgID != idB {
		t.Fatalf("by UNIQ_KEY: %v %v", ms, err)
	}

	for _, id := range []string{idA, idB} {
		m, err := a.ViewMessage(ctx(t), id)
		if err != nil || m.OffsetMsgID != id || m.Topic != "Find" {
			t.Fatalf("ViewMessage(%s): %v %v", id, m, err)
		}
	}
	if m, _ := a.ViewMessage(ctx(t), idB); string(m.Body) != string(long) {
		t.Fatalf("ViewMessage did not decompress: %d bytes", len(m.Body))
	}

	// Errors.
	var ce *config.Error
	for _, bad := range []func() error{
		func() error { _, err := a.ViewMessage(ctx(t), "not-an-id"); return err },
		func() error { _, err := a.ViewMessage(ctx(t), "00000000000000000000000000000000"); return err },
		func() error { _, err := a.FindMessages(ctx(t), "Find", "a b", time.Time{}, time.Time{}); return err },
		func() error { _, err := a.FindMessages(ctx(t), "Find", "", time.Time{}, time.Time{}); return err },
		func() error { _, err := a.FindMessages(ctx(t), "bad topic", "k", time.Time{}, time.Time{}); return err },
		func() error { _, err := a.FindMessages(ctx(t), "Find", "k", after, before); return err },
	} {
		if err := bad(); !errors.As(err, &ce) {
			t.Errorf("want a ConfigError, got %v", err)
		}
	}
	// A valid id whose offset holds no record: the broker's refusal, as the one
	// *remoting.ResponseError.
	host, off, _ := message.ParseOffsetMsgID(idA)
	_, err = a.ViewMessage(ctx(t), message.OffsetMsgID(host, off+3))
	var re *remoting.ResponseError
	if !errors.As(err, &re) || re.Addr != b1.Addr() || re.Request != remoting.ViewMessageByID || re.Code == remoting.Success || re.Remark == "" {
		t.Errorf("view at a wrong offset: %v (%#v)", err, re)
	}
	if _, err := a.FindMessages(ctx(t), "NoRoute", "k", time.Time{}, time.Time{}); !errors.Is(err, admin.ErrTopicNotExist) {
		t.Errorf("topic without route: %v", err)
	}
}
