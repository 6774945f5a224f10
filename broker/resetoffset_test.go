package broker

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// storeTimes pulls every message of topic/queue 0 and returns their store times.
func storeTimes(t *testing.T, c *remoting.Client, addr, topic string) []int64 {
	t.Helper()
	resp := pull(t, c, addr, "st-reader", topic, 0, 0, "*", 0)
	msgs, err := message.DecodeRecords(resp.Body, message.DecodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(msgs))
	for i, m := range msgs {
		out[i] = m.StoreTimestamp
	}
	return out
}

// offsetStoredAtOrAfter finds the first message stored at or after a time, for every
// time around every message (SEARCH_OFFSET_BY_TIMESTAMP alone answers the nearest).
func TestOffsetStoredAtOrAfter(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "RT", 1)
	if got := b.offsetStoredAtOrAfter("RT", 0, time.Now().UnixMilli()); got != 0 {
		t.Fatalf("empty queue: %d", got)
	}
	for round := 0; round < 6; round++ {
		for i := 0; i < 1+round%3; i++ {
			sendV1(t, c, b.Addr(), "RT", 0, []byte("x"), nil)
		}
		last := storeTimes(t, c, b.Addr(), "RT")
		end := last[len(last)-1]
		testkit.WaitFor(t, 5*time.Second, func() bool { return time.Now().UnixMilli() > end+1 }, "the next millisecond")
	}
	ts := storeTimes(t, c, b.Addr(), "RT")
	want := func(at int64) int64 {
		for i, st := range ts {
			if st >= at {
				return int64(i)
			}
		}
		return int64(len(ts))
	}
	for _, st := range ts {
		for _, at := range []int64{st - 1, st, st + 1} {
			if got := b.offsetStoredAtOrAfter("RT", 0, at); got != want(at) {
				t.Fatalf("at %d: offset %d, want %d (store times %v)", at, got, want(at), ts)
			}
		}
	}
	if got := b.offsetStoredAtOrAfter("RT", 0, 0); got != 0 {
		t.Fatalf("time 0: %d", got)
	}
	if got := b.offsetStoredAtOrAfter("RT", 0, ts[len(ts)-1]+1000); got != int64(len(ts)) {
		t.Fatalf("after everything: %d, want %d", got, len(ts))
	}
}

// INVOKE_BROKER_TO_RESET_OFFSET stores the new offsets, answers them, and pushes
// RESET_CONSUMER_CLIENT_OFFSET to the group's clients; bad requests get error codes.
func TestResetOffsetPushesToClients(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	admin := newClient(t)
	createTopic(t, admin, b.Addr(), "T", 2)
	for i := 0; i < 4; i++ {
		sendV1(t, admin, b.Addr(), "T", i%2, []byte("m"+strconv.Itoa(i)), nil)
	}
	pushed := make(chan *remoting.RemotingCommand, 1)
	member := newClient(t)
	member.RegisterHandler(remoting.ResetConsumerClientOffset, func(_ context.Context, _ string, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		select {
		case pushed <- req: // the first push; later ones are not looked at
		default:
		}
		return nil
	})
	heartbeat(t, member, b.Addr(), "cid-1", "rg")
	invoke(t, admin, b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{"consumerGroup": "rg", "topic": "T", "queueId": "0", "commitOffset": "2"}, nil))

	reset := func(ext map[string]string) *remoting.RemotingCommand {
		return invoke(t, admin, b.Addr(), remoting.NewRequest(remoting.InvokeBrokerToResetOffset, ext, nil))
	}
	resp := reset(map[string]string{"topic": "T", "group": "rg", "timestamp": "0", "isForce": "true"})
	if resp.ResponseCode() != remoting.Success || resp.Remark != "" {
		t.Fatalf("reset: %d %s", resp.Code, resp.Remark)
	}
	table, err := wire.DecodeResetOffsetBody(resp.Body)
	want := map[message.MessageQueue]int64{{Topic: "T", BrokerName: b.Name(), QueueID: 0}: 0, {Topic: "T", BrokerName: b.Name(), QueueID: 1}: 0}
	if err != nil || len(table) != 2 || table[message.MessageQueue{Topic: "T", BrokerName: b.Name(), QueueID: 0}] != 0 {
		t.Fatalf("response table %v %v", table, err)
	}
	select {
	case req := <-pushed:
		got, err := wire.DecodeResetOffsetBody(req.Body)
		if err != nil || req.ExtFields["topic"] != "T" || req.ExtFields["group"] != "rg" || req.ExtFields["timestamp"] != "0" || len(got) != len(want) {
			t.Fatalf("pushed %+v body %s: %v", req.ExtFields, req.Body, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no RESET_CONSUMER_CLIENT_OFFSET pushed")
	}
	if off, ok := b.offsets.query("rg", "T", 0); !ok || off != 0 {
		t.Fatalf("stored offset %d %v", off, ok)
	}
	// Timestamp -1: the end; without force nothing moves forward.
	if r := reset(map[string]string{"topic": "T", "group": "rg", "timestamp": "-1", "isForce": "false"}); r.ResponseCode() != remoting.Success {
		t.Fatalf("reset to end without force: %d %s", r.Code, r.Remark)
	}
	if off, _ := b.offsets.query("rg", "T", 0); off != 0 {
		t.Fatalf("moved forward without force: %d", off)
	}
	if r := reset(map[string]string{"topic": "T", "group": "rg", "timestamp": "-1"}); r.ResponseCode() != remoting.Success {
		t.Fatalf("reset to end: %d %s", r.Code, r.Remark)
	}
	if off, _ := b.offsets.query("rg", "T", 1); off != 2 {
		t.Fatalf("queue 1 at the end: %d, want 2", off)
	}
	// A group without clients is reset too, with a remark.
	if r := reset(map[string]string{"topic": "T", "group": "nobody", "timestamp": "0"}); r.ResponseCode() != remoting.Success || r.Remark != "no consumer online" {
		t.Fatalf("offline group: %d %q", r.Code, r.Remark)
	}
	for name, ext := range map[string]map[string]string{
		"no topic":      {"group": "rg", "timestamp": "0"},
		"no group":      {"topic": "T", "timestamp": "0"},
		"bad timestamp": {"topic": "T", "group": "rg", "timestamp": "soon"},
		"negative":      {"topic": "T", "group": "rg", "timestamp": "-7"},
		"bad force":     {"topic": "T", "group": "rg", "timestamp": "0", "isForce": "maybe"},
	} {
		if r := reset(ext); r.ResponseCode() != remoting.SystemError {
			t.Errorf("%s: %d %s", name, r.Code, r.Remark)
		}
	}
	if r := reset(map[string]string{"topic": "Nope", "group": "rg", "timestamp": "0"}); r.ResponseCode() != remoting.TopicNotExist {
		t.Errorf("unknown topic: %d %s", r.Code, r.Remark)
	}
}

func TestAdminReadQueueAndGroupSubscriptions(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	invoke(t, c, b.Addr(), remoting.NewRequest(remoting.UpdateAndCreateTopic, map[string]string{
		"topic": "W", "readQueueNums": "1", "writeQueueNums": "1", "perm": "2"}, nil)) // write-only, like a DLQ
	sendV1(t, c, b.Addr(), "W", 0, []byte("hidden"), nil)
	if r := pull(t, c, b.Addr(), "g", "W", 0, 0, "*", 0); r.ResponseCode() != remoting.NoPermission {
		t.Fatalf("pull of a write-only topic: %d", r.Code)
	}
	read := func(ext map[string]string) *remoting.RemotingCommand {
		return invoke(t, c, b.Addr(), remoting.NewRequest(wire.ReadQueue, ext, nil))
	}
	r := read(map[string]string{"topic": "W", "queueId": "0", "offset": "0", "maxMsgNums": "5"})
	msgs, err := message.DecodeRecords(r.Body, message.DecodeOptions{})
	if r.ResponseCode() != remoting.Success || err != nil || len(msgs) != 1 || string(msgs[0].Body) != "hidden" || r.ExtFields["nextBeginOffset"] != "1" {
		t.Fatalf("read: %d %v %v", r.Code, msgs, err)
	}
	if r := read(map[string]string{"topic": "W", "queueId": "0", "offset": "1", "maxMsgNums": "5"}); r.ResponseCode() != remoting.PullNotFound {
		t.Fatalf("read at the end: %d", r.Code)
	}
	for name, ext := range map[string]map[string]string{
		"no offset":       {"topic": "W", "queueId": "0", "maxMsgNums": "1"},
		"negative offset": {"topic": "W", "queueId": "0", "offset": "-1", "maxMsgNums": "1"},
		"negative queue":  {"topic": "W", "queueId": "-1", "offset": "0", "maxMsgNums": "1"},
		"no topic":        {"queueId": "0", "offset": "0", "maxMsgNums": "1"},
	} {
		if r := read(ext); r.ResponseCode() != remoting.SystemError {
			t.Errorf("%s: %d %s", name, r.Code, r.Remark)
		}
	}

	heartbeat(t, c, b.Addr(), "cid-a", "sg")
	r = invoke(t, c, b.Addr(), remoting.NewRequest(wire.GroupSubscriptions, map[string]string{"consumerGroup": "sg"}, nil))
	var body wire.GroupSubscriptionsBody
	if err := json.Unmarshal(r.Body, &body); err != nil || r.ResponseCode() != remoting.Success {
		t.Fatalf("group subscriptions: %d %v", r.Code, err)
	}
	if body.Group != "sg" || len(body.Clients) != 1 || body.Clients[0].ClientID != "cid-a" || len(body.Clients[0].Subscriptions) != 1 ||
		body.Clients[0].Subscriptions[0].Topic != "T" || body.Clients[0].MessageModel != "CLUSTERING" {
		t.Fatalf("body %+v", body)
	}
	if r := invoke(t, c, b.Addr(), remoting.NewRequest(wire.GroupSubscriptions, nil, nil)); r.ResponseCode() != remoting.SystemError {
		t.Fatalf("no group: %d", r.Code)
	}
}
