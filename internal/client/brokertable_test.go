package client

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sluicemq/sluice/internal/wire"
)

func routeOf(brokers ...wire.BrokerData) *wire.TopicRouteData {
	rd := &wire.TopicRouteData{}
	for _, b := range brokers {
		rd.BrokerDatas = append(rd.BrokerDatas, b)
		rd.QueueDatas = append(rd.QueueDatas, wire.QueueData{BrokerName: b.BrokerName, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6})
	}
	return rd
}

func brokerOf(name string, addrs map[int64]string) wire.BrokerData {
	return wire.BrokerData{Cluster: "c", BrokerName: name, BrokerAddrs: addrs}
}

// TestSetRouteBrokerTable: the broker table SetRoute keeps (merging a route's brokers,
// rebuilding only when a replaced route drops an address) equals the one a rebuild from
// every cached route gives, through additions, a slave appearing, a master moving and a
// broker leaving every route.
func TestSetRouteBrokerTable(t *testing.T) {
	c, err := New(Config{NamesrvAddrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := brokerOf("a", map[int64]string{0: "10.0.0.1:10911"})
	aWithSlave := brokerOf("a", map[int64]string{0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})
	aMoved := brokerOf("a", map[int64]string{0: "10.0.0.9:10911"})
	b := brokerOf("b", map[int64]string{0: "10.0.1.1:10911"})
	check := func(step string, want map[string]map[int64]string) {
		t.Helper()
		c.mu.Lock()
		got := map[string]map[int64]string{}
		for n, bd := range c.brokers {
			got[n] = bd.BrokerAddrs
		}
		c.rebuildBrokersLocked()
		rebuilt := map[string]map[int64]string{}
		for n, bd := range c.brokers {
			rebuilt[n] = bd.BrokerAddrs
		}
		c.mu.Unlock()
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(rebuilt, want) {
			t.Fatalf("%s: table %v, rebuilt %v, want %v", step, got, rebuilt, want)
		}
	}
	for i := range 100 {
		c.SetRoute(fmt.Sprintf("T%d", i), routeOf(a))
	}
	check("100 routes on a", map[string]map[int64]string{"a": a.BrokerAddrs})
	c.SetRoute("T5", routeOf(aWithSlave, b))
	check("a slave and broker b", map[string]map[int64]string{"a": aWithSlave.BrokerAddrs, "b": b.BrokerAddrs})
	c.SetRoute("T5", routeOf(a))
	check("T5 drops the slave and b", map[string]map[int64]string{"a": a.BrokerAddrs})
	for i := range 100 {
		c.SetRoute(fmt.Sprintf("T%d", i), routeOf(aMoved))
	}
	check("master of a moved", map[string]map[int64]string{"a": aMoved.BrokerAddrs})
	c.SetRoute("T7", routeOf(aMoved, b))
	c.ForgetRoute("T7")
	check("b forgotten", map[string]map[int64]string{"a": aMoved.BrokerAddrs})
}
