package producer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit/fakeremote"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// A broker group whose master moved (a DLedger group elected another node after its
// master died): the cached route still names the dead address. A send that fails on
// every attempt there asks the name server for the route again, so the next send goes
// to the new master instead of the dead address until the periodic refresh (30 s).
func TestFailedSendRefreshesRoute(t *testing.T) {
	good := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	dead := deadAddr(t)
	var asked atomic.Int32
	ns := fakeremote.Start(t, fakeremote.Handlers{remoting.GetRouteInfoByTopic: func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		addr := good.Addr()
		if asked.Add(1) == 1 {
			addr = dead // the first answer: the old master
		}
		r := remoting.NewResponse(remoting.Success, "")
		r.Body = []byte(routeJSON(2, [2]string{"broker-a", addr}))
		return r
	}})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, routeRefreshInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, message.NewMessage("T", []byte("x"))); err == nil {
		t.Fatal("the send to the dead master succeeded")
	}
	r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")))
	if err != nil {
		t.Fatalf("send after the failed one: %v (route asked %d times)", err, asked.Load())
	}
	if r.Status != message.SendOK || len(good.Requests(remoting.SendMessageV2)) != 1 {
		t.Fatalf("result %+v; %d sends reached the new master", r, len(good.Requests(remoting.SendMessageV2)))
	}
	// Refreshes after failures are spaced: a second failure within a second asks no more.
	before := asked.Load()
	p2 := newProducer(t, Config{NamesrvAddrs: []string{newNamesrv(t, map[string]string{"T": routeJSON(1, [2]string{"broker-a", dead})}).Addr()},
		routeRefreshInterval: time.Hour})
	for i := 0; i < 3; i++ {
		if _, err := p2.SendSync(ctx, message.NewMessage("T", []byte("x"))); err == nil {
			t.Fatal("send to a dead broker succeeded")
		}
	}
	if asked.Load() != before {
		t.Fatalf("the first name server was asked again")
	}
	if got := p2.routeRefreshes.Load(); got != 1 {
		t.Fatalf("%d route refreshes after 3 failed sends within a second, want 1", got)
	}
}

// While a route lists no master for any broker of the topic (a DLedger group between
// the death of its master and the election of the next), a send asks the name server
// again (spaced by a second) instead of failing with ErrNoQueue until the periodic
// refresh.
func TestNoWritableQueueRefreshesRoute(t *testing.T) {
	good := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	var asked atomic.Int32
	ns := fakeremote.Start(t, fakeremote.Handlers{remoting.GetRouteInfoByTopic: func(req *remoting.RemotingCommand) *remoting.RemotingCommand {
		body := `{"brokerDatas":[{"brokerAddrs":{2:"127.0.0.1:1"},"brokerName":"broker-a","cluster":"C"}],` +
			`"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSynFlag":0,"writeQueueNums":2}]}`
		if asked.Add(1) > 1 {
			body = routeJSON(2, [2]string{"broker-a", good.Addr()}) // elected
		}
		r := remoting.NewResponse(remoting.Success, "")
		r.Body = []byte(body)
		return r
	}})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}, routeRefreshInterval: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")))
	if err != nil || r.Status != message.SendOK {
		t.Fatalf("send: %+v, %v (route asked %d times)", r, err, asked.Load())
	}
}

// A SYNC_MASTER whose slave is not connected (it is catching up after the master came
// back) stores sends but answers SLAVE_NOT_AVAILABLE: the send is on one machine only.
// With latency fault tolerance the producer then prefers the other broker for
// FaultIsolationDuration instead of sending half its traffic unreplicated (failover
// campaign: 537 such answers in three master restarts).
func TestSlaveNotAvailableIsolatesBroker(t *testing.T) {
	lonely := fakeremote.Start(t, brokerHandlers(storeOK(remoting.SlaveNotAvailable)))
	paired := fakeremote.Start(t, brokerHandlers(storeOK(remoting.Success)))
	ns := newNamesrv(t, map[string]string{"T": routeJSON(2, [2]string{"broker-a", lonely.Addr()}, [2]string{"broker-b", paired.Addr()})})
	p := newProducer(t, Config{NamesrvAddrs: []string{ns.Addr()}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	notOK := 0
	for i := 0; i < 20; i++ {
		r, err := p.SendSync(ctx, message.NewMessage("T", []byte("x")))
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != message.SendOK {
			notOK++
		}
	}
	if notOK != 1 {
		t.Fatalf("%d of 20 sends answered not OK, want 1 (then broker-a is avoided)", notOK)
	}
	if _, ok := p.AvoidedBrokers()["broker-a"]; !ok {
		t.Fatalf("broker-a not avoided: %v", p.AvoidedBrokers())
	}
}
