package main

import (
	"testing"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/testkit/testbroker"
)

// adminCluster is a name server and one broker in this process, both stopped when the
// test ends, and the `sluice admin` arguments that reach them.
type adminCluster struct {
	ns    *namesrv.NameServer
	b     *broker.Broker
	stop  func()   // stops the broker before the test ends
	admin []string // "admin --namesrv ADDR --timeout 3s"
}

func startAdminCluster(t *testing.T) *adminCluster {
	t.Helper()
	ns, err := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, ns.Shutdown)
	b, stop := testbroker.Start(t, broker.Config{NamesrvAddr: ns.Addr()})
	return &adminCluster{ns: ns, b: b, stop: stop, admin: []string{"admin", "--namesrv", ns.Addr(), "--timeout", "3s"}}
}

// adm runs `sluice admin ARGS…` against the cluster.
func (c *adminCluster) adm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return run(t, append(append([]string{}, c.admin...), args...)...)
}
