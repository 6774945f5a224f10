package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
)

// TestFrontClientLimits: front-end clients count against the client limits of the
// remoting port, and what they were charged is given back when they go or expire.
func TestFrontClientLimits(t *testing.T) {
	m := newClientManager(false, func(string, ...any) {}, nil, clientLimits{entries: 3, entriesPerAddr: 2, subsPerGroup: 2, subs: 3})
	now := time.Now()
	sub := func(topics ...string) []wire.Subscription {
		out := []wire.Subscription{}
		for _, tp := range topics {
			out = append(out, wire.Subscription{Topic: tp, SubString: "*"})
		}
		return out
	}
	c := func(id, addr, group string, subs []wire.Subscription) FrontClient {
		return FrontClient{Protocol: ProtocolGRPC, ClientID: id, Addr: addr, Group: group, ConsumeType: ConsumeActively, Subscriptions: subs}
	}
	refused := func(err error, key string) {
		t.Helper()
		var le *ClientLimitError
		if !errors.As(err, &le) || le.Key != key {
			t.Fatalf("got %v, want a refusal for %s", err, key)
		}
	}
	if err := m.frontHeartbeat(c("a", "10.0.0.1:1", "g1", sub("T1", "T2")), now); err != nil {
		t.Fatal(err)
	}
	refused(m.frontHeartbeat(c("a", "10.0.0.1:1", "g1", sub("T1", "T2", "T3")), now), "maxSubscriptionsPerGroup")
	if err := m.frontHeartbeat(c("b", "10.0.0.1:2", "g1", sub("T1")), now); err != nil {
		t.Fatal(err)
	}
	refused(m.frontHeartbeat(c("c", "10.0.0.1:3", "g2", nil), now), "maxClientEntriesPerAddress")
	refused(m.frontHeartbeat(c("c", "10.0.0.2:3", "g2", sub("T9")), now), "maxSubscriptions")
	if err := m.frontHeartbeat(c("c", "10.0.0.2:3", "g2", nil), now); err != nil {
		t.Fatal(err)
	}
	refused(m.frontHeartbeat(c("d", "10.0.0.3:3", "g3", nil), now), "maxClientEntries")
	// A heartbeat (no subscriptions) keeps the ones from the settings.
	if err := m.frontHeartbeat(c("a", "10.0.0.1:1", "g1", nil), now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := m.groupSubscriptions("g1"); len(got) != 2 || len(got[0].Subscriptions) != 2 || got[0].Protocol != ProtocolGRPC {
		t.Fatalf("g1 clients: %+v", got)
	}
	if s := m.summaries()["g1"]; s.clients != 2 || s.consumeType != ConsumeActively || len(s.protocols) != 1 {
		t.Fatalf("g1 summary: %+v", s)
	}
	m.frontGone(ProtocolGRPC, "b", "")
	m.mu.Lock()
	m.expireFrontLocked(now.Add(2*time.Second), 1500*time.Millisecond) // c (now) expires, a (now+1s) stays
	m.mu.Unlock()
	if c := m.counts(); c.entries != 1 || c.subs != 2 || len(m.perAddr) != 1 || m.perAddr["10.0.0.1"] == nil {
		t.Fatalf("after a goes and c expires: %+v, per address %v", c, m.perAddr)
	}
	if m.online("g1") != 1 || m.online("g2") != 0 {
		t.Fatalf("online: g1 %d, g2 %d", m.online("g1"), m.online("g2"))
	}
}
