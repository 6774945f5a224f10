package client

import (
	"testing"

	"github.com/sluicemq/sluice/internal/wire"
)

// While a broker's master is listed, reads go to it; once the route lists only slaves
// (the master died: the name server dropped it), reads go to the slave with the lowest
// id, and back to the master when it is listed again.
func TestReadAddrFallsBackToSlave(t *testing.T) {
	c, err := New(Config{NamesrvAddrs: []string{deadAddr(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	route := func(addrs map[int64]string) *wire.TopicRouteData {
		return &wire.TopicRouteData{BrokerDatas: []wire.BrokerData{{Cluster: "C", BrokerName: "broker-a", BrokerAddrs: addrs}},
			QueueDatas: []wire.QueueData{{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}}}
	}
	for _, tc := range []struct {
		addrs     map[int64]string
		want      string
		slave, ok bool
	}{
		{map[int64]string{0: "m:1", 1: "s1:1", 2: "s2:1"}, "m:1", false, true},
		{map[int64]string{2: "s2:1", 1: "s1:1"}, "s1:1", true, true},
		{map[int64]string{}, "", false, false},
		{map[int64]string{0: "m:1"}, "m:1", false, true},
	} {
		c.SetRoute("T", route(tc.addrs))
		addr, slave, ok := c.ReadAddr("broker-a")
		if addr != tc.want || slave != tc.slave || ok != tc.ok {
			t.Errorf("route %v: ReadAddr = %q, slave %v, ok %v; want %q, %v, %v", tc.addrs, addr, slave, ok, tc.want, tc.slave, tc.ok)
		}
		if m, ok := c.BrokerAddr("broker-a"); tc.slave && (ok || m != "") {
			t.Errorf("route %v: BrokerAddr (writes) = %q, %v; want no master", tc.addrs, m, ok)
		}
	}
	if _, _, ok := c.ReadAddr("broker-x"); ok {
		t.Error("ReadAddr of an unknown broker: ok")
	}
}
