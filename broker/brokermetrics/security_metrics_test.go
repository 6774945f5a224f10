package brokermetrics_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/brokermetrics"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// TestScrapeClientAndACLRefusals: what clients make the broker keep
// (Stats.ClientEntries, ClientSubscriptions) and the refusals that guard it and the ACL
// (an address over its share, an account over its nonce share, a plain_acl.yml that
// could not be applied) were in Stats only; they are scraped as
// sluice_broker_client_entries, _client_subscriptions,
// _client_address_share_refused_total, _acl_nonce_quota_refused_total and
// _acl_reload_refused_total.
func TestScrapeClientAndACLRefusals(t *testing.T) {
	quiet := testkit.Quiet()
	dir := t.TempDir()
	aclPath := filepath.Join(dir, "plain_acl.yml")
	if err := os.WriteFile(aclPath, []byte(`accounts:
  - accessKey: adminKey
    secretKey: adminSecret
    admin: true
  - accessKey: consumerKey
    secretKey: consumerSecret
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
`), 0o600); err != nil {
		t.Fatal(err)
	}
	b, stop, err := broker.StartEphemeral(broker.Config{Logger: quiet, StorePathRootDir: filepath.Join(dir, "store"),
		AclEnable: true, AclFile: aclPath, AccessKey: "adminKey", SecretKey: "adminSecret",
		MaxClientEntriesPerAddress: 1, AclSignatureNoncesPerAccount: 1})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, stop)
	ms, err := brokermetrics.Start(brokermetrics.Config{Addr: "127.0.0.1:0", Logger: quiet,
		Collectors: []prometheus.Collector{brokermetrics.NewCollector(b)}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, ms.Shutdown)
	url := "http://" + ms.Addr() + "/metrics"

	client := func(creds remoting.Credentials) *remoting.Client {
		c, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet, Credentials: creds})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	call := func(c *remoting.Client, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		t.Helper()
		r, err := c.InvokeSync(ctx(t), b.Addr(), req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	heartbeat := func(group string, topics ...string) *remoting.RemotingCommand {
		hb := wire.HeartbeatData{ClientID: group, ConsumerDataSet: []wire.ConsumerData{{GroupName: group, MessageModel: "CLUSTERING", ConsumeType: "CONSUME_PASSIVELY"}}}
		for _, topic := range topics {
			hb.ConsumerDataSet[0].SubscriptionDataSet = append(hb.ConsumerDataSet[0].SubscriptionDataSet, wire.SubscriptionData{Topic: topic, SubString: "*"})
		}
		body, _ := json.Marshal(hb)
		// A client of its own: a new connection from the same address (127.0.0.1).
		return call(client(remoting.Credentials{AccessKey: "consumerKey", SecretKey: "consumerSecret"}), remoting.NewRequest(remoting.HeartBeat, nil, body))
	}
	if r := heartbeat("g1", "A", "B", "C"); r.ResponseCode() != remoting.Success {
		t.Fatalf("first heartbeat: %d %s", r.Code, r.Remark)
	}
	if r := heartbeat("g2", "A"); r.ResponseCode() != remoting.SystemError {
		t.Fatalf("heartbeat past the address's share: %d %s", r.Code, r.Remark)
	}
	v2 := client(remoting.Credentials{AccessKey: "adminKey", SecretKey: "adminSecret", SignatureV2: true})
	maxOffset := func() *remoting.RemotingCommand {
		return remoting.NewRequest(remoting.GetMaxOffset, map[string]string{"topic": "TBW102", "queueId": "0"}, nil)
	}
	if r := call(v2, maxOffset()); r.ResponseCode() != remoting.Success {
		t.Fatalf("first v2 request: %d %s", r.Code, r.Remark)
	}
	if r := call(v2, maxOffset()); r.ResponseCode() != remoting.SystemError {
		t.Fatalf("v2 request past the account's nonce share: %d %s", r.Code, r.Remark)
	}
	if err := os.WriteFile(aclPath, nil, 0o600); err != nil { // empty: refused, the rules stay
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() bool { return b.Stats().AclReloadRefused >= 1 }, "the empty plain_acl.yml to be refused")

	fams := scrape(t, url)
	for _, c := range []struct {
		name string
		want float64
	}{
		{"sluice_broker_client_entries", 1},
		{"sluice_broker_client_subscriptions", 6}, // g1's client's 3 and the group's 3
		{"sluice_broker_client_address_share_refused_total", 1},
		{"sluice_broker_acl_nonce_quota_refused_total", 1},
		{"sluice_broker_acl_reload_refused_total", 1},
	} {
		if got := value(fams, c.name); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if got := value(fams, "sluice_broker_refused_total", "reason", "acl"); got < 1 {
		t.Errorf("refused_total{reason=acl} = %v, want the nonce refusal counted", got)
	}
}
