package namesrv_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

// TestRefusedRegistrationsLogBounded: a broker registration (the broker's heartbeat to
// the name server) refused by the ACL was logged at warn on every attempt, so a client
// repeating an unsigned REGISTER_BROKER could fill the name server's disk. 1,000 refused
// registrations from one address now write one warn line.
func TestRefusedRegistrationsLogBounded(t *testing.T) {
	v, err := acl.New(&acl.File{Accounts: []acl.Account{{AccessKey: "adminKey", SecretKey: "adminSecret", Admin: true}}})
	if err != nil {
		t.Fatal(err)
	}
	logs, logger := testkit.CountLogs(slog.LevelWarn)
	ns, err := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: logger, ACL: v})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ns.Shutdown(ctx)
	})
	c := newClient(t)
	const n = 1000
	for i := range n {
		req := remoting.NewRequest(remoting.RegisterBroker, map[string]string{"brokerName": "fake", "brokerAddr": "127.0.0.1:1",
			"clusterName": "c", "brokerId": "0"}, []byte(`{"topicConfigSerializeWrapper":{"topicConfigTable":{}}}`))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		r, err := c.InvokeSync(ctx, ns.Addr(), req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if r.ResponseCode() != remoting.SystemError {
			t.Fatalf("unsigned registration %d answered %d %q, want refused", i, r.Code, r.Remark)
		}
	}
	recs := logs.Records()
	t.Logf("%d refused registrations: %d warn records", n, len(recs))
	if len(recs) != 1 || !strings.Contains(recs[0].Message, "refused") || !strings.HasPrefix(recs[0].Attrs["remote"], "127.0.0.1:") {
		for i, r := range recs {
			if i == 5 {
				break
			}
			t.Log(r)
		}
		t.Fatalf("%d warn records for %d refused registrations from one address, want 1 naming it", len(recs), n)
	}
}
