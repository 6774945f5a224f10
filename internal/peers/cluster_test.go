package peers_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/peers"
	"github.com/sluicemq/sluice/internal/peers/peertest"
)

// Options out of range are refused before anything starts.
func TestRocketMQClusterOptionsRefused(t *testing.T) {
	for _, opt := range []peers.RocketMQClusterOptions{
		{Mode: "MASTER"},
		{Groups: 5},
		{Slaves: 3},
		{Mode: peers.ModeDLedger, DLedgerNodes: 2},
	} {
		if _, err := peers.LaunchRocketMQCluster(context.Background(), opt); err == nil {
			t.Errorf("%+v: started", opt)
		}
	}
}

// A DLedger group of three elects a master; when the master is killed another node is
// elected, and the killed node rejoins as a follower.
func TestApacheRocketMQDLedgerElectsNewMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("four Apache RocketMQ JVMs: skipped with -short")
	}
	start := time.Now()
	c := peertest.StartRocketMQCluster(t, peers.RocketMQClusterOptions{Mode: peers.ModeDLedger})
	t.Logf("dledger cluster of 3 started in %v", time.Since(start).Round(time.Second))
	ctx := context.Background()
	m, err := c.WaitMaster(ctx, "broker-a", "", 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := c.Brokers[m].Addr
	killed := time.Now()
	if err := c.Kill(m); err != nil {
		t.Fatal(err)
	}
	m2, err := c.WaitMaster(ctx, "broker-a", old, 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("master %s killed; %s listed as master after %v", old, c.Brokers[m2].Addr, time.Since(killed).Round(100*time.Millisecond))
	if err := c.Restart(ctx, m, 120*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Two SYNC_MASTER groups with a slave each register all four brokers; a killed master's
// slave stays listed and the master comes back at the same address.
func TestApacheRocketMQMasterSlaveCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("five Apache RocketMQ JVMs: skipped with -short")
	}
	start := time.Now()
	c := peertest.StartRocketMQCluster(t, peers.RocketMQClusterOptions{})
	t.Logf("2 masters + 2 slaves started in %v", time.Since(start).Round(time.Second))
	if len(c.Brokers) != 4 || c.Brokers[0].ID != 0 || c.Brokers[1].ID != 1 || c.Brokers[2].Name != "broker-b" {
		t.Fatalf("brokers %+v", c.Brokers)
	}
	ctx := context.Background()
	if err := c.Kill(0); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx, 0, 120*time.Second); err != nil {
		t.Fatal(err)
	}
	if a, err := c.MasterAddr(ctx, "broker-a"); err != nil || a != c.Brokers[0].Addr {
		t.Fatalf("master of broker-a after restart: %q, %v; want %s", a, err, c.Brokers[0].Addr)
	}
}
