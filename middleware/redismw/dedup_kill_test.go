package redismw

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Environment of the child process TestDedupSIGKILLMidHandler starts (the test binary
// itself; TestMain sends it to runDedupChild).
const (
	childEnv       = "SLUICE_DEDUP_CHILD"        // "1" in the child
	childAddrEnv   = "SLUICE_DEDUP_CHILD_ADDR"   // Redis address
	childPrefixEnv = "SLUICE_DEDUP_CHILD_PREFIX" // DedupConfig.Prefix
	childReadyEnv  = "SLUICE_DEDUP_CHILD_READY"  // file the child creates once its handler runs
	childKey       = "payment-4711"
	childLockTTL   = 3 * time.Second // renewed every second: a loaded CI machine delayed a 300 ms renewal past a 900 ms expiry
)

// childEffectKey is the Redis hash that records business effects idempotently by message
// key (HSETNX) and counts handler completions (HINCRBY).
func childEffectKey(prefix string) string { return prefix + ":effects" }

// runDedupChild is a consumer process: it handles the message through Dedup with a
// handler that never finishes (it blocks until the parent kills it with SIGKILL). Exit
// codes: 2 setup failure, 3 not killed within 60 s.
func runDedupChild() int {
	c := redis.NewClient(&redis.Options{Addr: os.Getenv(childAddrEnv), MaxRetries: -1})
	defer c.Close()
	d, err := NewDeduper(DedupConfig{Client: c, Prefix: os.Getenv(childPrefixEnv), LockExpiry: childLockTTL})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		if err := os.WriteFile(os.Getenv(childReadyEnv), []byte("running"), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		select { // mid-handler: the business effect is not recorded yet
		case <-time.After(60 * time.Second):
			os.Exit(3)
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "child: handler cancelled:", context.Cause(ctx))
			os.Exit(2)
		}
		return message.ConsumeSuccess, nil
	}, d.Middleware())
	res, err := h(context.Background(), []*message.MessageExt{testkit.NewExt("Pay", "paid", childKey, "amount=10")})
	fmt.Fprintln(os.Stderr, "child: handler returned:", res, err)
	return 2
}

// TestDedupSIGKILLMidHandler runs a consumer as a child process, kills it with SIGKILL
// while its handler runs (holding the lock, renewing it), then delivers the message to a
// consumer in this process: it is refused while the dead child's lock lives, then
// processed to completion once; its done marker is set and the effect recorded by key
// appears once; further duplicates are skipped.
func TestDedupSIGKILLMidHandler(t *testing.T) {
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		prefix := "sluice:dedup:" + tg.NS
		ready := filepath.Join(t.TempDir(), "ready")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", childAddrEnv+"="+tg.Addr, childPrefixEnv+"="+prefix, childReadyEnv+"="+ready)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		killed := false
		t.Cleanup(func() {
			if !killed {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		testkit.WaitFor(t, 10*time.Second, func() bool { _, err := os.Stat(ready); return err == nil })

		d := newDeduper(t, tg.Client, tg.NS, func(c *DedupConfig) { c.LockExpiry = childLockTTL })
		lk := d.LockKey(childKey)
		token := tg.Client.Get(ctx, lk).Val()
		if token == "" {
			t.Fatal("child holds no lock")
		}
		// The child renews: its lock outlives the first expiry.
		until := time.Now().Add(childLockTTL + 200*time.Millisecond)
		testkit.WaitFor(t, 5*time.Second, func() bool { return time.Now().After(until) })
		if v := tg.Client.Get(ctx, lk).Val(); v != token {
			t.Fatalf("child's lock not renewed: %q", v)
		}

		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		killed = true
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("child did not die of SIGKILL: %v; stderr: %s", err, stderr.String())
		}

		effKey := childEffectKey(prefix)
		completions := 0
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			k := middleware.KeyOf(msgs[0])
			if err := tg.Client.HSetNX(ctx, effKey, k, "refund applied").Err(); err != nil { // idempotent by key
				return message.ReconsumeLater, err
			}
			if err := tg.Client.HIncrBy(ctx, effKey, "completions", 1).Err(); err != nil {
				return message.ReconsumeLater, err
			}
			completions++
			return message.ConsumeSuccess, nil
		}, d.Middleware())
		msg := testkit.NewExt("Pay", "paid", childKey, "amount=10")

		res, err, _ := testkit.Call(h, msg)
		if res != message.ReconsumeLater || !errors.Is(err, ErrLockHeld) {
			t.Fatalf("right after the kill: %v %v (want the dead child's lock to be held)", res, err)
		}
		testkit.WaitFor(t, 10*time.Second, func() bool { // redeliveries until the dead lock expires
			res, err, _ := testkit.Call(h, msg)
			if errors.Is(err, ErrLockHeld) {
				return false
			}
			if res != message.ConsumeSuccess || err != nil {
				t.Fatalf("after expiry: %v %v", res, err)
			}
			return true
		})
		for i := 0; i < 2; i++ { // later duplicates
			if res, err, reasons := testkit.Call(h, msg); res != message.ConsumeSuccess || err != nil || !testkit.HasReason(reasons, middleware.ReasonDuplicate) {
				t.Fatalf("duplicate: %v %v %v", res, err, reasons)
			}
		}
		if completions != 1 {
			t.Fatalf("handler completed %d times", completions)
		}
		if n := tg.Client.HGet(ctx, effKey, "completions").Val(); n != "1" {
			t.Fatalf("completions recorded in redis: %q", n)
		}
		if n := tg.Client.HLen(ctx, effKey).Val(); n != 2 { // the effect field + the counter
			t.Fatalf("effect fields %d", n)
		}
		if st, _ := d.ProgressState(ctx, childKey); st != MarkerDone {
			t.Fatalf("marker %v", st)
		}
	})
}
