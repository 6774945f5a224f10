package broker

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestACLStoredMessageByOffset: VIEW_MESSAGE_BY_ID (33) and CONSUMER_SEND_MSG_BACK (36)
// name a commitlog offset, not a topic. An account with SUB on one topic and one group
// could read any stored message by its offset, or send it back into its own group's
// retry topic and pull it there. Now the topic of the stored message is checked too.
func TestACLStoredMessageByOffset(t *testing.T) {
	b, _ := startACLBroker(t, `  - accessKey: narrowKey
    secretKey: narrowSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Mine=SUB]
    groupPerms: [mine=SUB]
`, nil)
	admin := signedClient(t, "adminKey", "adminSecret")
	prod := signedClient(t, "producerKey", "producerSecret")
	cons := signedClient(t, "consumerKey", "consumerSecret")
	narrow := signedClient(t, "narrowKey", "narrowSecret")
	createTopic(t, admin, b.Addr(), "Orders", 1)
	createTopic(t, admin, b.Addr(), "Mine", 1)

	offsetOf := func(r *remoting.RemotingCommand) int64 {
		t.Helper()
		if r.ResponseCode() != remoting.Success {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
		_, off, err := message.ParseOffsetMsgID(r.ExtFields["msgId"])
		if err != nil {
			t.Fatal(err)
		}
		return off
	}
	secret := offsetOf(sendV1(t, prod, b.Addr(), "Orders", 0, []byte("secret"), nil))
	mine := offsetOf(sendV1(t, admin, b.Addr(), "Mine", 0, []byte("mine"), nil))

	view := func(c *remoting.Client, off int64) *remoting.RemotingCommand {
		return invoke(t, c, b.Addr(), remoting.NewRequest(remoting.ViewMessageByID, map[string]string{"offset": strconv.FormatInt(off, 10)}, nil))
	}
	if r := view(narrow, secret); r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "no SUB permission on topic Orders") {
		t.Errorf("view a message of a topic the account may not read: %d %q (%d body bytes)", r.Code, r.Remark, len(r.Body))
	}
	for _, c := range []struct {
		name string
		c    *remoting.Client
		off  int64
	}{{"consumer views Orders", cons, secret}, {"narrow views Mine", narrow, mine}} {
		if r := view(c.c, c.off); r.ResponseCode() != remoting.Success || len(r.Body) == 0 {
			t.Errorf("%s: %d %q", c.name, r.Code, r.Remark)
		}
	}

	hb, _ := json.Marshal(wire.HeartbeatData{ClientID: "narrow", ConsumerDataSet: []wire.ConsumerData{{GroupName: "mine", MessageModel: "CLUSTERING",
		SubscriptionDataSet: []wire.SubscriptionData{{Topic: "Mine", SubString: "*"}}}}})
	if r := invoke(t, narrow, b.Addr(), remoting.NewRequest(remoting.HeartBeat, nil, hb)); r.ResponseCode() != remoting.Success {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
	sendBack := func(off int64) *remoting.RemotingCommand {
		return invoke(t, narrow, b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{
			"offset": strconv.FormatInt(off, 10), "group": "mine", "delayLevel": "-1", "originTopic": "Mine", "maxReconsumeTimes": "16"}, nil))
	}
	if r := sendBack(secret); r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "no SUB permission on topic Orders") {
		t.Errorf("send back a message of a topic the account may not read: %d %q", r.Code, r.Remark)
	}
	if n := b.store.MaxOffset(message.DLQTopic("mine"), 0); n != 0 {
		t.Fatalf("a refused send-back stored %d message(s) in %s", n, message.DLQTopic("mine"))
	}
	if r := sendBack(mine); r.ResponseCode() != remoting.Success {
		t.Fatalf("send back a message of Mine: %d %q", r.Code, r.Remark)
	}
	if n := b.store.MaxOffset(message.DLQTopic("mine"), 0); n != 1 {
		t.Fatalf("%s holds %d messages after one send-back, want 1", message.DLQTopic("mine"), n)
	}
}

// TestACLRetryTopicWithoutGroup: a send to the topic "%RETRY%" (a retry prefix naming no
// group) was checked against the empty group, which the check skipped, so an account
// with no permission at all could send there and auto-create the topic. It is now
// checked as the plain topic it is.
func TestACLRetryTopicWithoutGroup(t *testing.T) {
	b, _ := startACLBroker(t, "", nil)
	prod := signedClient(t, "producerKey", "producerSecret")
	for _, topic := range []string{message.RetryGroupTopicPrefix, message.RetryGroupTopicPrefix + "g"} {
		if r := sendV1(t, prod, b.Addr(), topic, 0, []byte("x"), nil); r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "acl:") {
			t.Errorf("send to %s by an account without permissions: %d %q", topic, r.Code, r.Remark)
		}
	}
	if tc := b.topics.get(message.RetryGroupTopicPrefix); tc != nil {
		t.Errorf("a refused send created topic %s", tc.TopicName)
	}
}

// TestACLRepeatedExtKey: a header may repeat an ext key (a binary header carries any
// list; a JSON object may repeat a name). An account with PUB on Mine only signs a
// SEND_MESSAGE_V2 whose topic field "b" appears twice, in JSON and in binary: the ACL
// check, the signature and the store all read the last occurrence, so naming Orders
// last is refused, and naming Orders first and Mine last stores the message in Mine,
// never in Orders.
func TestACLRepeatedExtKey(t *testing.T) {
	b, _ := startACLBroker(t, `  - accessKey: narrowKey
    secretKey: narrowSecret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Mine=PUB]
`, nil)
	admin := signedClient(t, "adminKey", "adminSecret")
	createTopic(t, admin, b.Addr(), "Orders", 1)
	createTopic(t, admin, b.Addr(), "Mine", 1)
	// send signs a V2 send whose "b" fields are topics, in order, as the broker's
	// reading (the last occurrence wins) sees it, and writes the list as it is.
	send := func(st remoting.SerializeType, topics ...string) *remoting.RemotingCommand {
		list := []remoting.ExtField{{Key: "a", Value: "pg"}}
		for _, tp := range topics {
			list = append(list, remoting.ExtField{Key: "b", Value: tp})
		}
		list = append(list, []remoting.ExtField{{Key: "c", Value: "TBW102"}, {Key: "d", Value: "4"}, {Key: "e", Value: "0"},
			{Key: "f", Value: "0"}, {Key: "g", Value: strconv.FormatInt(time.Now().UnixMilli(), 10)}, {Key: "h", Value: "0"},
			{Key: "i", Value: "KEYS\x01k"}, {Key: "j", Value: "0"}, {Key: "k", Value: "false"}, {Key: remoting.ExtAccessKey, Value: "narrowKey"}}...)
		req := &remoting.RemotingCommand{Code: int16(remoting.SendMessageV2), Language: remoting.LanguageGo, ExtList: list, Body: []byte("x")}
		view := map[string]string{}
		for _, f := range list {
			view[f.Key] = f.Value
		}
		req.ExtList = append(req.ExtList, remoting.ExtField{Key: remoting.ExtSignature, Value: remoting.Signature("narrowSecret", view, req.Body, false)})
		c, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet(), SerializeType: st})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return invoke(t, c, b.Addr(), req)
	}
	for _, st := range []remoting.SerializeType{remoting.SerializeJSON, remoting.SerializeRocketMQ} {
		if r := send(st, "Mine", "Orders"); r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "Orders") {
			t.Errorf("%v: topic Mine then Orders: %d %q, want a refusal naming Orders", st, r.Code, r.Remark)
		}
		if r := send(st, "Orders", "Mine"); r.ResponseCode() != remoting.Success {
			t.Errorf("%v: topic Orders then Mine: %d %q, want it stored in Mine", st, r.Code, r.Remark)
		}
	}
	if n := b.store.MaxOffset("Orders", 0); n != 0 {
		t.Fatalf("Orders holds %d messages; the account may not publish there", n)
	}
	if n := b.store.MaxOffset("Mine", 0); n != 2 {
		t.Fatalf("Mine holds %d messages, want 2", n)
	}
}
