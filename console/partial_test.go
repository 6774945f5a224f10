package console_test

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// TestPartialClusterPages: with a registered broker that does not answer, the topics and
// groups pages list what the live broker holds under a banner naming the dead one, and
// answer 502 — not 200 as if the list were whole.
func TestPartialClusterPages(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	e.send(t, "Orders", 1)
	e.commit(t, "billing", "Orders", 0, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := wire.RegisterBroker(ctx(t), rc, e.b.NamesrvAddr(), wire.RegisterBrokerRequest{
		ClusterName: "DefaultCluster", BrokerName: "broker-dead", BrokerAddr: dead}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, row string }{
		{"/groups", `href="/groups/billing"`},
		{"/topics", `href="/topics/Orders"`},
	} {
		code, body, _ := do(t, http.MethodGet, e.base+tc.path, nil, nil)
		if code != http.StatusBadGateway || !strings.Contains(body, `id="error"`) || !strings.Contains(body, "broker-dead ("+dead+")") ||
			!strings.Contains(body, "1 of 2 broker(s) failed") || !strings.Contains(body, tc.row) {
			t.Errorf("%s with a dead broker: status %d, want 502 with a banner naming broker-dead and the live rows\n%s", tc.path, code, body)
		}
	}
}
