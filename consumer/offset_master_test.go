package consumer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// A consumer that read from a slave while the master was down has a route without the
// master until its periodic refresh (30 s). Storing an offset then asks the name server
// for the route again and reaches the master that came back, instead of failing with
// "no master address known".
func TestUpdateOffsetRefreshesRouteWhenMasterUnknown(t *testing.T) {
	var stored atomic.Int64
	master := fakeremote.Start(t, fakeremote.Handlers{
		remoting.UpdateConsumerOffset: func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
			stored.Add(1)
			return remoting.NewResponse(remoting.Success, "")
		},
	})
	route := `{"brokerDatas":[{"brokerAddrs":{0:"` + master.Addr() + `",1:"127.0.0.1:1"},"brokerName":"broker-a","cluster":"C"}],` +
		`"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSynFlag":0,"writeQueueNums":4}]}`
	ns := fakeremote.Start(t, fakeremote.Handlers{
		remoting.GetRouteInfoByTopic: func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
			r := remoting.NewResponse(remoting.Success, "")
			r.Body = []byte(route)
			return r
		},
	})
	cl, err := client.New(client.Config{NamesrvAddrs: []string{ns.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Close() }()
	// The route as it was while the master was down: only the slave.
	cl.SetRoute("T", &wire.TopicRouteData{
		BrokerDatas: []wire.BrokerData{{Cluster: "C", BrokerName: "broker-a", BrokerAddrs: map[int64]string{1: "127.0.0.1:1"}}},
		QueueDatas:  []wire.QueueData{{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}},
	})
	b := &brokerAPI{cl: cl, group: "g"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.updateOffset(ctx, message.MessageQueue{Topic: "T", BrokerName: "broker-a", QueueID: 1}, 42); err != nil {
		t.Fatalf("updateOffset: %v", err)
	}
	if stored.Load() != 1 {
		t.Fatalf("the master stored %d offsets, want 1", stored.Load())
	}
}
