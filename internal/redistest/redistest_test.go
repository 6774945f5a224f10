package redistest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEachNamespaceAndCleanup(t *testing.T) {
	ctx := context.Background()
	var names []string
	EachTarget(t, func(t *testing.T, tg *Target) {
		names = append(names, tg.Name)
		if tg.NS != NS(t) || tg.NS == "" {
			t.Fatalf("NS %q vs %q", tg.NS, NS(t))
		}
		other := "other-" + NS(t) + "x" // contains ns: deleted too
		outside := "redistest-outside-" + runID
		for _, k := range []string{"a:" + tg.NS, "b:{" + tg.NS + "}:c", other, outside} {
			if err := tg.Client.Set(ctx, k, "v", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		DeleteNamespace(t, tg.Client, tg.NS)
		n, err := tg.Client.Exists(ctx, "a:"+tg.NS, "b:{"+tg.NS+"}:c", other).Result()
		if err != nil || n != 0 {
			t.Fatalf("namespace keys left: %d, %v", n, err)
		}
		if v, _ := tg.Client.Get(ctx, outside).Result(); v != "v" {
			t.Fatalf("a key outside the namespace was deleted")
		}
		tg.Client.Del(ctx, outside)
	})
	if len(names) == 0 || names[0] != "miniredis" {
		t.Fatalf("targets %v", names)
	}
}

func TestNSUnique(t *testing.T) {
	var a, b string
	t.Run("x", func(t *testing.T) { a = NS(t) })
	t.Run("x", func(t *testing.T) { b = NS(t) })
	if a == b {
		t.Fatalf("same namespace %q for two tests", a)
	}
}

func TestMiniredisClockExpires(t *testing.T) {
	c := New(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Second, func() bool { return c.Exists(ctx, "k").Val() == 0 })
}

func TestUnreachable(t *testing.T) {
	c := Unreachable(t)
	if err := c.Ping(context.Background()).Err(); err == nil {
		t.Fatal("ping to a closed port succeeded")
	}
}

func TestSwitchDownUp(t *testing.T) {
	EachTarget(t, func(t *testing.T, tg *Target) {
		ctx := context.Background()
		c, sw := tg.Outage(t)
		key := "sw:" + tg.NS
		if err := c.Set(ctx, key, "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		sw.Down()
		if err := c.Get(ctx, key).Err(); err == nil {
			t.Fatal("get through a cut relay succeeded")
		}
		if err := sw.Up(); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 3*time.Second, func() bool { return c.Get(ctx, key).Val() == "1" })
	})
}

func TestCountRoundTrips(t *testing.T) {
	c := New(t)
	ctx := context.Background()
	n := CountRoundTrips(c)
	c.Set(ctx, "a", "1", 0)
	c.Get(ctx, "a")
	p := c.Pipeline()
	p.Get(ctx, "a")
	p.Get(ctx, "a")
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if got := n.N(); got != 3 {
		t.Fatalf("round trips %d, want 3", got)
	}
}
