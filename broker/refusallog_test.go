package broker

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/remoting"
)

// TestRefusedHeartbeatsLogBounded: a refused heartbeat was logged at warn on every
// attempt, so a client repeating one could fill the broker's disk with log lines. 1,000
// refused heartbeats from each of two addresses now write one warn line per address.
func TestRefusedHeartbeatsLogBounded(t *testing.T) {
	logs, logger := testkit.CountLogs(slog.LevelWarn)
	off := false
	b := startBroker(t, t.TempDir(), func(c *Config) {
		c.Logger = logger
		c.AutoCreateSubscriptionGroup = &off
	})
	hb := heartbeatBody("attacker", []string{"nosuch"}, "T", 1)
	frame, err := remoting.NewRequest(remoting.HeartBeat, nil, hb).Encode()
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for _, ip := range []string{"127.0.0.1", "127.0.0.2"} {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		nc, err := d.Dial("tcp", b.Addr())
		if err != nil {
			t.Skipf("needs %s as a local address (Linux loopback): %v", ip, err)
		}
		_ = nc.SetDeadline(time.Now().Add(60 * time.Second))
		go func() { // the answers are read below; write all requests at once
			for range n {
				if _, err := nc.Write(frame); err != nil {
					return
				}
			}
		}()
		for i := range n {
			f, err := remoting.ReadFrame(nc, 0)
			if err != nil {
				t.Fatalf("%s: answer %d: %v", ip, i, err)
			}
			r, _, err := remoting.DecodeFrame(f)
			if err != nil {
				t.Fatal(err)
			}
			if r.ResponseCode() != remoting.SubscriptionGroupNotExist {
				t.Fatalf("%s: heartbeat %d answered %d %q, want refused", ip, i, r.Code, r.Remark)
			}
		}
		_ = nc.Close()
	}
	recs := logs.Records()
	byRemote := map[string]int{}
	for _, r := range recs {
		if !strings.Contains(r.Message, "refused") {
			t.Errorf("unexpected warn record: %s", r)
			continue
		}
		host, _, _ := net.SplitHostPort(r.Attrs["remote"])
		byRemote[host]++
	}
	t.Logf("%d refused heartbeats from each of 2 addresses: %d warn records %v", n, len(recs), byRemote)
	if len(recs) != 2 || byRemote["127.0.0.1"] != 1 || byRemote["127.0.0.2"] != 1 {
		for i, r := range recs {
			if i == 5 {
				break
			}
			t.Log(r)
		}
		t.Fatalf("%d warn records for %d refused heartbeats (by remote %v), want one per address", len(recs), 2*n, byRemote)
	}
	if got := recs[0].Attrs["suppressed"]; got != "0" {
		t.Fatalf("first record: suppressed=%q, want 0", got)
	}
}
