package broker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func lockBatch(t *testing.T, c *remoting.Client, addr string, code remoting.RequestCode, group, clientID string, mqs ...message.MessageQueue) []message.MessageQueue {
	t.Helper()
	body, _ := json.Marshal(wire.LockBatchBody{ConsumerGroup: group, ClientID: clientID, MQSet: mqs})
	r := invoke(t, c, addr, remoting.NewRequest(code, nil, body))
	if r.ResponseCode() != remoting.Success {
		t.Fatalf("lock code %d: %d %s", code, r.Code, r.Remark)
	}
	if code == remoting.UnlockBatchMQ {
		return nil
	}
	var out struct {
		LockOKMQSet []message.MessageQueue `json:"lockOKMQSet"`
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		t.Fatal(err)
	}
	return out.LockOKMQSet
}

// TestQueueLocks: LOCK_BATCH_MQ grants a queue to one client of a group at a time;
// the holder renews it, UNLOCK_BATCH_MQ frees it, an expired lock or a closed holder's
// connection lets another client take it.
func TestQueueLocks(t *testing.T) {
	b := startBroker(t, t.TempDir(), func(c *Config) { c.RebalanceLockMaxLiveTime = 300 })
	c1, c2 := newClient(t), newClient(t)
	createTopic(t, c1, b.Addr(), "T", 2) // only queues the broker has are locked
	q0 := message.MessageQueue{Topic: "T", BrokerName: "broker-a", QueueID: 0}
	q1 := message.MessageQueue{Topic: "T", BrokerName: "broker-a", QueueID: 1}
	if got := lockBatch(t, c1, b.Addr(), remoting.LockBatchMQ, "g", "c1", q0, q1); len(got) != 2 {
		t.Fatalf("c1 locked %v", got)
	}
	if got := lockBatch(t, c2, b.Addr(), remoting.LockBatchMQ, "g", "c2", q0, q1); len(got) != 0 {
		t.Fatalf("c2 took locks held by c1: %v", got)
	}
	if got := lockBatch(t, c2, b.Addr(), remoting.LockBatchMQ, "other", "c2", q0); len(got) != 1 {
		t.Fatalf("another group is independent: %v", got)
	}
	lockBatch(t, c1, b.Addr(), remoting.UnlockBatchMQ, "g", "c1", q1)
	if got := lockBatch(t, c2, b.Addr(), remoting.LockBatchMQ, "g", "c2", q0, q1); len(got) != 1 || got[0] != q1 {
		t.Fatalf("after unlock c2 got %v", got)
	}
	// c1 never renews q0: after 300 ms it expires and c2 may take it.
	testkit.WaitFor(t, 5*time.Second, func() bool {
		return len(lockBatch(t, c2, b.Addr(), remoting.LockBatchMQ, "g", "c2", q0)) == 1
	}, "q0 to expire")
}

// TestQueueLocksReleasedOnClose: with the default 60 s live time, a holder whose
// connection closes loses its locks at once, so its queues do not stall for a minute.
func TestQueueLocksReleasedOnClose(t *testing.T) {
	b := startBroker(t, t.TempDir(), nil)
	c1, c2 := newClient(t), newClient(t)
	createTopic(t, c1, b.Addr(), "T", 2) // only queues the broker has are locked
	q0 := message.MessageQueue{Topic: "T", BrokerName: "broker-a", QueueID: 0}
	heartbeat(t, c2, b.Addr(), "c2", "g")
	if got := lockBatch(t, c2, b.Addr(), remoting.LockBatchMQ, "g", "c2", q0); len(got) != 1 {
		t.Fatalf("c2 locked %v", got)
	}
	if got := lockBatch(t, c1, b.Addr(), remoting.LockBatchMQ, "g", "c1", q0); len(got) != 0 {
		t.Fatalf("c1 took c2's lock: %v", got)
	}
	_ = c2.Close()
	testkit.WaitFor(t, 5*time.Second, func() bool {
		return len(lockBatch(t, c1, b.Addr(), remoting.LockBatchMQ, "g", "c1", q0)) == 1
	}, "c2's lock to be released")
}
