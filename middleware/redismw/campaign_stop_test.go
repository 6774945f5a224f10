package redismw

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Environment of the paused consumer TestCampaignSIGSTOP starts (the test binary itself;
// TestMain sends it to runStopChild).
const (
	stopChildEnv    = "SLUICE_STOP_CHILD" // "fenced" or "plain": the handler's write
	stopAddrEnv     = "SLUICE_STOP_CHILD_ADDR"
	stopPrefixEnv   = "SLUICE_STOP_CHILD_PREFIX"
	stopDirEnv      = "SLUICE_STOP_CHILD_DIR"
	stopCyclesEnv   = "SLUICE_STOP_CHILD_CYCLES"
	stopLockTTL     = 300 * time.Millisecond
	stopCycles      = 20
	stopWriteTTL    = 10 * time.Minute
	stopWriterChild = "child"
)

// stopKeys returns the Redis keys of a campaign: the effect hashes are per message key;
// writes counts accepted writes per message key, refused the refused ones.
func stopKeys(prefix string) (effect func(string) string, writes, refused string) {
	return func(k string) string { return prefix + ":effect:" + k }, prefix + ":writes", prefix + ":refused"
}

// stopWrite is the handler's downstream write: fenced (FencedSet with the handler's
// token) or plain (an unconditional write). It counts what the store accepted.
func stopWrite(ctx context.Context, c redis.UniversalClient, prefix, mode, key, who string) error {
	effect, writes, refused := stopKeys(prefix)
	if mode == "plain" {
		if err := c.HSet(ctx, effect(key), "v", "balance=110 by "+who).Err(); err != nil {
			return err
		}
		return c.HIncrBy(ctx, writes, key, 1).Err()
	}
	tok, ok := FencingToken(ctx)
	if !ok {
		return errors.New("no fencing token")
	}
	err := FencedSet(ctx, c, effect(key), "balance=110 by "+who, tok, stopWriteTTL)
	switch {
	case err == nil:
		return c.HIncrBy(ctx, writes, key, 1).Err()
	case errors.Is(err, ErrStaleToken):
		return c.HIncrBy(ctx, refused, key, 1).Err()
	}
	return err
}

// runStopChild handles stopCycles messages (keys acct-0, acct-1, ...) one after the other
// through Dedup. Each handler takes its token, says "ready-<i>", waits until the parent
// (which stops and continues this process meanwhile) says "go-<i>", then writes — ignoring
// that its context was cancelled when the renewal found the lock taken, as a handler
// already past its last check would — and the process says "done-<i>". Exit codes: 0
// done, 2 setup failure, 3 the parent never said go.
func runStopChild() int {
	mode, dir := os.Getenv(stopChildEnv), os.Getenv(stopDirEnv)
	c := redis.NewClient(&redis.Options{Addr: os.Getenv(stopAddrEnv), MaxRetries: -1})
	defer c.Close()
	prefix := os.Getenv(stopPrefixEnv)
	d, err := NewDeduper(DedupConfig{Client: c, Prefix: prefix, LockExpiry: stopLockTTL, Logger: testkit.Quiet()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	n, _ := strconv.Atoi(os.Getenv(stopCyclesEnv))
	for i := 0; i < n; i++ {
		i := i
		h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			tok, _ := FencingToken(ctx)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("ready-%d", i)), []byte(strconv.FormatInt(tok, 10)), 0o600); err != nil {
				return message.ReconsumeLater, err
			}
			if !testkit.Eventually(30*time.Second, func() bool { _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("go-%d", i))); return err == nil }) {
				os.Exit(3)
			}
			wctx := context.WithoutCancel(ctx) // the write goes out whatever the lock's fate
			if err := stopWrite(wctx, c, prefix, mode, middleware.KeyOf(msgs[0]), stopWriterChild); err != nil {
				return message.ReconsumeLater, err
			}
			return message.ConsumeSuccess, nil
		}, d.Middleware())
		_, _ = h(context.Background(), []*message.MessageExt{testkit.NewExt("Pay", "paid", fmt.Sprintf("acct-%d", i), "10")})
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("done-%d", i)), nil, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 2
		}
	}
	return 0
}

// TestCampaignSIGSTOP is the long-pause campaign. A consumer process takes a message's
// Dedup lock and fencing token and is stopped (SIGSTOP, a stand-in for a long GC pause or
// a frozen VM) before its downstream write; once its lock expires (LockExpiry 300 ms, no
// renewals while stopped) a consumer in this process takes the message over and writes;
// then the first process is continued (SIGCONT) and writes too. stopCycles messages per
// mode:
//
//   - fenced: both writes go through FencedSet with their fencing tokens: the stale one
//     must be refused every time — 0 doubled writes;
//   - plain: Dedup alone, unconditional writes: the doubles are counted and reported
//     (expected: every cycle, the window a lock cannot close).
//
// A real Redis when SLUICE_REDIS_ADDR is set, else miniredis.
//
//	go test -race -run TestCampaignSIGSTOP -v ./middleware/redismw/
func TestCampaignSIGSTOP(t *testing.T) {
	if testing.Short() {
		t.Skip("campaign: skipped with -short")
	}
	addr := os.Getenv(redistest.EnvAddr)
	target := "redis " + addr
	if addr == "" {
		addr = redistest.NewServer(t).Addr()
		target = "miniredis (set " + redistest.EnvAddr + " for a real Redis)"
	}
	c := redistest.Dial(t, addr)
	results := map[string][2]int{}
	for _, mode := range []string{"fenced", "plain"} {
		t.Run(mode, func(t *testing.T) {
			ns := redistest.NS(t)
			t.Cleanup(func() { redistest.DeleteNamespace(t, c, ns) })
			prefix := "sluice:stop:" + ns
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), stopChildEnv+"="+mode, stopAddrEnv+"="+addr, stopPrefixEnv+"="+prefix,
				stopDirEnv+"="+dir, stopCyclesEnv+"="+strconv.Itoa(stopCycles))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := false
			t.Cleanup(func() {
				if !exited {
					_ = cmd.Process.Signal(syscall.SIGCONT)
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}
			})
			exists := func(name string) func() bool {
				return func() bool { _, err := os.Stat(filepath.Join(dir, name)); return err == nil }
			}
			d := newDeduper(t, c, ns, func(cfg *DedupConfig) { cfg.Prefix = prefix; cfg.LockExpiry = stopLockTTL })
			ctx := context.Background()
			for i := 0; i < stopCycles; i++ {
				key := fmt.Sprintf("acct-%d", i)
				testkit.WaitFor(t, 20*time.Second, exists(fmt.Sprintf("ready-%d", i)), "the child holding the lock of "+key)
				if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				testkit.WaitFor(t, 10*time.Second, func() bool { return c.Exists(ctx, d.LockKey(key)).Val() == 0 }, "the stopped child's lock to expire")
				// The successor takes over (the message is redelivered to another consumer).
				h := middleware.ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
					if err := stopWrite(ctx, c, prefix, mode, key, "successor"); err != nil {
						return message.ReconsumeLater, err
					}
					return message.ConsumeSuccess, nil
				}, d.Middleware())
				if res, err := h(ctx, []*message.MessageExt{testkit.NewExt("Pay", "paid", key, "10")}); res != message.ConsumeSuccess || err != nil {
					t.Fatalf("successor on %s: %v %v", key, res, err)
				}
				if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("go-%d", i)), nil, 0o600); err != nil {
					t.Fatal(err)
				}
				testkit.WaitFor(t, 20*time.Second, exists(fmt.Sprintf("done-%d", i)), "the continued child to finish "+key)
			}
			err := cmd.Wait()
			exited = true
			if err != nil {
				t.Fatalf("child: %v; stderr: %s", err, stderr.String())
			}
			_, writes, refused := stopKeys(prefix)
			doubled, refusedN := 0, 0
			for i := 0; i < stopCycles; i++ {
				key := fmt.Sprintf("acct-%d", i)
				w, _ := c.HGet(ctx, writes, key).Int()
				r, _ := c.HGet(ctx, refused, key).Int()
				if w > 1 {
					doubled++
				}
				refusedN += r
				if w < 1 {
					t.Errorf("%s: no write accepted", key)
				}
			}
			results[mode] = [2]int{doubled, refusedN}
			t.Logf("SIGSTOP campaign, %s writes, %s: %d pauses past the lock expiry; doubled writes %d, stale writes refused %d", mode, target, stopCycles, doubled, refusedN)
			if mode == "fenced" && (doubled != 0 || refusedN != stopCycles) {
				t.Fatalf("fenced: doubled %d, refused %d (want 0 and %d)", doubled, refusedN, stopCycles)
			}
			if mode == "plain" && doubled == 0 {
				t.Fatalf("plain: no doubled write in %d pauses: the campaign did not open the window it measures", stopCycles)
			}
		})
	}
	t.Logf("SIGSTOP campaign summary (%d pauses each): Dedup+fencing doubled %d; Dedup alone doubled %d", stopCycles, results["fenced"][0], results["plain"][0])
}
