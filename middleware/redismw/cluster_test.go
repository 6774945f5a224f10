package redismw

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// startClusterNode starts a one-node Redis Cluster (redis-server from PATH, cluster mode,
// every slot assigned to it) on a free loopback port and returns a cluster client to it;
// both stop with the test. A one-node cluster refuses a script touching keys of two
// slots (CROSSSLOT) as a larger one does.
func startClusterNode(t *testing.T) redis.UniversalClient {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("needs redis-server in PATH to run a Redis Cluster node")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--dir", dir, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + port
	node := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, MaxRetries: -1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer node.Close()
	ctx := context.Background()
	testkit.WaitFor(t, 10*time.Second, func() bool { return node.Ping(ctx).Err() == nil }, "redis-server to answer")
	if err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() bool {
		return strings.Contains(node.ClusterInfo(ctx).Val(), "cluster_state:ok")
	}, "the one-node cluster to be ok")
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, DisableIdentity: true, MaxRedirects: 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestDedupKeysOnRedisCluster (issue 26, finding 7): a message key starting with "}"
// made the marker, lock and fence keys hash to different slots on Redis Cluster (the
// hash tag "{}" is empty, so Redis hashes the whole key): the Lua scripts failed with
// CROSSSLOT and the message was reconsumed for ever as "redis unavailable". Every key
// now gets a hash tag its three keys share.
func TestDedupKeysOnRedisCluster(t *testing.T) {
	c := startClusterNode(t)
	d := newDeduper(t, c, "cluster", nil)
	eff := testkit.NewEffects()
	h := middleware.ChainConsume(eff.OK(), d.Middleware())
	for _, key := range []string{"order-1", "}order", "}", "a}b", "{x}", "}{", "nul\x00}"} {
		msg := testkit.NewExt("Pay", "paid", key, "body")
		for i := range 2 {
			res, err, reasons := testkit.Call(h, msg)
			if res != message.ConsumeSuccess || err != nil {
				t.Fatalf("key %q delivery %d: %v %v", key, i, res, err)
			}
			if dup := testkit.HasReason(reasons, middleware.ReasonDuplicate); dup != (i > 0) {
				t.Fatalf("key %q delivery %d: reasons %v", key, i, reasons)
			}
		}
		if n := eff.Get(key); n != 1 {
			t.Fatalf("key %q: effects %d, want 1", key, n)
		}
	}
}
