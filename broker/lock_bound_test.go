package broker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestLockBatchBounded: LOCK_BATCH_MQ kept a lock for every queue a body named — any
// broker name, topic or queue id — and never dropped expired ones, so 20 bodies of
// 50,000 invented queues took a broker from 54 MB to 278 MB, for good. Only queues
// this broker has are locked now, and the client id is bounded like a heartbeat's.
func TestLockBatchBounded(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c := newClient(t)
	createTopic(t, c, b.Addr(), "L", 2)
	mqs := []message.MessageQueue{
		{Topic: "L", BrokerName: b.Name(), QueueID: 0},
		{Topic: "L", BrokerName: b.Name(), QueueID: 1},
		{Topic: "L", BrokerName: b.Name(), QueueID: 2},
		{Topic: "L", BrokerName: b.Name(), QueueID: -1},
		{Topic: "L", BrokerName: "broker-elsewhere", QueueID: 0},
		{Topic: "NoSuchTopic", BrokerName: b.Name(), QueueID: 0},
	}
	for i := range 1000 {
		mqs = append(mqs, message.MessageQueue{Topic: "L", BrokerName: b.Name(), QueueID: 100 + i})
	}
	lock := func(clientID string) *remoting.RemotingCommand {
		body, _ := json.Marshal(wire.LockBatchBody{ConsumerGroup: "g", ClientID: clientID, MQSet: mqs})
		return invoke(t, c, b.Addr(), remoting.NewRequest(remoting.LockBatchMQ, nil, body))
	}
	r := lock("c1")
	var res wire.LockBatchResult
	if err := json.Unmarshal(r.Body, &res); r.ResponseCode() != remoting.Success || err != nil {
		t.Fatalf("lock: %d %q %v", r.Code, r.Remark, err)
	}
	if len(res.LockOKMQSet) != 2 {
		t.Errorf("locked %d queues, want L queues 0 and 1 only", len(res.LockOKMQSet))
	}
	b.locks.mu.Lock()
	n := len(b.locks.locks["g"])
	b.locks.mu.Unlock()
	if n != 2 {
		t.Errorf("the lock table holds %d entries for g, want 2", n)
	}
	if r := lock(strings.Repeat("c", MaxClientIDLength+1)); r.ResponseCode() != remoting.SystemError || !strings.Contains(r.Remark, "clientId") {
		t.Errorf("lock with a %d-byte client id: %d %q", MaxClientIDLength+1, r.Code, r.Remark)
	}
}
