package console_test

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// TestPartialClusterPages: with a registered broker that does not answer, the topics,
// groups and dead-letter pages list what the live broker holds under a banner naming the
// dead one, and answer 502 — not 200 as if the list were whole; deleting a topic or a
// group says where it was deleted and names the broker where it was not.
func TestPartialClusterPages(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	sent := e.send(t, "Orders", 2)
	e.send(t, "Doomed", 1)
	e.commit(t, "billing", "Orders", 0, 0)
	e.commit(t, "points", "Orders", 0, 0)
	e.kill(t, "billing", sent[0])
	testkit.WaitFor(t, 10*time.Second, func() bool { n, err := e.a.CountDLQ(ctx(t), "billing"); return err == nil && n.Total == 1 }, "1 dead letter")
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
	table := map[string]*wire.TopicConfig{}
	for _, tp := range []string{"Doomed", message.DLQTopic("billing")} {
		table[tp] = &wire.TopicConfig{TopicName: tp, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	}
	if _, err := wire.RegisterBroker(ctx(t), rc, e.b.NamesrvAddr(), wire.RegisterBrokerRequest{
		ClusterName: "DefaultCluster", BrokerName: "broker-dead", BrokerAddr: dead,
		Topics: wire.TopicConfigSerializeWrapper{TopicConfigTable: table, DataVersion: wire.DataVersion{Timestamp: 1, Counter: 1}}}); err != nil {
		t.Fatal(err)
	}
	named := "broker-dead (" + dead + ")"
	for _, tc := range []struct{ path, row string }{
		{"/groups", `href="/groups/billing"`},
		{"/topics", `href="/topics/Orders"`},
		{"/dlq?group=billing", sent[0].MsgID}, // the live broker's dead letter, under the banner
	} {
		code, body, _ := do(t, http.MethodGet, e.base+tc.path, nil, nil)
		if code != http.StatusBadGateway || !strings.Contains(body, `id="error"`) || !strings.Contains(body, named) ||
			!strings.Contains(body, "1 of 2 broker(s) failed") || !strings.Contains(body, tc.row) {
			t.Errorf("%s with a dead broker: status %d, want 502 with a banner naming broker-dead and the live rows\n%s", tc.path, code, body)
		}
	}
	// Deletes: done on the live broker and said so, the dead broker named, 502.
	csrf := csrfOf(t, e)
	for _, tc := range []struct{ path, confirm, flash string }{
		{"/topics/Doomed/delete", "Doomed", "Topic Doomed deleted from " + e.b.Name() + " only."},
		{"/groups/points/delete", "yes", "Consumer group points deleted from " + e.b.Name() + " only."},
	} {
		code, body, _ := do(t, http.MethodPost, e.base+tc.path, url.Values{"csrf": {csrf}, "confirm": {tc.confirm}}, nil)
		if code != http.StatusBadGateway || !strings.Contains(body, `id="flash"`) || !strings.Contains(body, tc.flash) ||
			!strings.Contains(body, `id="error"`) || !strings.Contains(body, named) {
			t.Errorf("POST %s with a dead broker: status %d, want 502 with %q and a banner naming broker-dead\n%s", tc.path, code, tc.flash, body)
		}
	}
	if qs, _ := e.a.TopicConfigs(ctx(t)); slices.ContainsFunc(qs, func(ti admin.TopicInfo) bool { return ti.Topic == "Doomed" }) {
		t.Error("Doomed is still on the live broker after the console deleted it")
	}
}
