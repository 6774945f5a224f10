package inbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
)

// Campaign size: killCycles SIGKILLs of a consumer process, killPerCycle new messages
// sent before each.
const (
	killCycles   = 50
	killPerCycle = 30
)

// TestCampaignSIGKILLInbox is the kill -9 campaign: a consumer process (this test binary,
// runConsumerChild) consumes messages of distinct keys from an ephemeral broker through
// the inbox, in batches of 4. Each of killCycles cycles sends killPerCycle new messages,
// starts the process and kills it with SIGKILL once it has started a random number
// (1..killPerCycle) of handlers — 20 run at once, each lingering inside its transaction,
// so kills land mid-handler. Then a last consumer process finishes. The effects table
// must hold exactly one row per key: 0 doubled, 0 lost. The attempts file shows how many
// messages ran more than once (the transactions the kills abandoned, and redeliveries of
// messages whose offsets were not yet stored). SQLite always; PostgreSQL and MySQL when
// their DSNs are set.
//
//	go test -race -run TestCampaignSIGKILLInbox -v ./inbox/
func TestCampaignSIGKILLInbox(t *testing.T) {
	if testing.Short() {
		t.Skip("campaign: skipped with -short")
	}
	sqltest.Each(t, func(t *testing.T, db *sqltest.Target) { killCampaign(t, db, "inbox", "") })
}

// TestCampaignSIGKILLDedup is the same campaign with redismw.Dedup (LockExpiry 1 s) in
// place of the inbox: the effect row is written on its own (autocommit) and the done
// marker set after it, so a kill between the two leaves an effect whose message runs
// again. It measures that window: the doubles are counted and reported, not required to
// be 0 (losses must be 0). SQLite for the effects; the real Redis at SLUICE_REDIS_ADDR,
// else miniredis.
//
//	go test -race -run TestCampaignSIGKILLDedup -v ./inbox/
func TestCampaignSIGKILLDedup(t *testing.T) {
	if testing.Short() {
		t.Skip("campaign: skipped with -short")
	}
	addr := os.Getenv(redistest.EnvAddr)
	if addr == "" {
		addr = redistest.NewServer(t).Addr()
	}
	killCampaign(t, sqltest.Open(t, inbox.SQLite), "dedup", addr)
}

// killCampaign runs the SIGKILL campaign with the consumer process in mode "inbox" or
// "dedup" (then redisAddr is its Redis).
func killCampaign(t *testing.T, db *sqltest.Target, mode, redisAddr string) {
	{
		topic, group := "KillCampaign", "kill_campaign"
		ns := startBroker(t, topic, 4)
		ib := newInbox(t, db, group)
		eff := db.EffectsTable("eff")
		dir := t.TempDir()
		attempts := filepath.Join(dir, "attempts")

		p, err := producer.New(producer.Config{NamesrvAddrs: []string{ns}, Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer shutdownT(t, "producer", p.Shutdown)
		ctx := context.Background()
		keys := make([]string, 0, killCycles*killPerCycle)
		send := func() { // killPerCycle new messages, one batch
			t.Helper()
			msgs := make([]*message.Message, 0, killPerCycle)
			for i := 0; i < killPerCycle; i++ {
				k := fmt.Sprintf("pay-%05d", len(keys))
				keys = append(keys, k)
				msgs = append(msgs, message.NewMessage(topic, []byte("amount="+strconv.Itoa(len(keys)))).SetKeys(k))
			}
			if _, err := p.SendBatch(ctx, msgs); err != nil {
				t.Fatal(err)
			}
		}

		start := func(ready string) (*exec.Cmd, *bytes.Buffer) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envChild+"=consumer", envNamesrv+"="+ns, envTopic+"="+topic, envGroup+"="+group,
				envDialect+"="+db.Dialect.String(), envDSN+"="+db.DSN, envTable+"="+ib.Table(), envEffects+"="+eff,
				envAttempts+"="+attempts, envReady+"="+ready, envBatch+"=4", envMode+"="+mode, envRedis+"="+redisAddr,
				envPrefix+"=sluice:kill:"+redistest.NS(t))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return cmd, &stderr
		}
		kill := func(cmd *exec.Cmd, stderr *bytes.Buffer) {
			t.Helper()
			_ = cmd.Process.Signal(syscall.SIGKILL)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("consumer process did not die of SIGKILL: %v; stderr: %s", err, stderr.String())
			}
		}
		began := time.Now()
		done := func() int { return len(db.Counts(eff)) }
		started := func() int { // handler starts so far (lines of the attempts file)
			b, err := os.ReadFile(attempts)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			return bytes.Count(b, []byte("\n"))
		}
		for cycle := 0; cycle < killCycles; cycle++ {
			send()
			// Kill once the process has started k more handlers, k random in 1..killPerCycle:
			// at that moment up to 20 handlers are inside their transactions. The new
			// messages guarantee that many starts.
			k, before := 1+rand.IntN(killPerCycle), started()
			cmd, stderr := start(filepath.Join(dir, fmt.Sprintf("ready-%d", cycle)))
			if !testkit.Eventually(30*time.Second, func() bool { return started() >= before+k }) {
				kill(cmd, stderr)
				t.Fatalf("cycle %d: the consumer process started %d of %d handlers within 30 s; stderr: %s", cycle, started()-before, k, stderr.String())
			}
			kill(cmd, stderr)
		}
		killed := time.Since(began)
		doneAfterKills := done()

		// A last consumer process finishes the work.
		cmd, stderr := start(filepath.Join(dir, "ready-last"))
		if !testkit.Eventually(60*time.Second, func() bool { return done() == len(keys) }) {
			kill(cmd, stderr)
			t.Fatalf("after the kills only %d of %d keys have an effect; stderr: %s", done(), len(keys), stderr.String())
		}
		kill(cmd, stderr)

		cnt := db.Counts(eff)
		doubled, lost := 0, 0
		for _, k := range keys {
			switch n := cnt[k]; {
			case n == 0:
				lost++
			case n > 1:
				doubled++
			}
		}
		ran := countLines(t, attempts)
		reran := 0
		for _, n := range ran {
			if n > 1 {
				reran++
			}
		}
		if mode == "inbox" {
			for _, k := range keys {
				if ok, _, err := ib.Processed(ctx, k); !ok || err != nil {
					t.Errorf("key %s has no inbox row: %v", k, err)
					break
				}
			}
		}
		t.Logf("SIGKILL campaign (%s, %s): %d kills in %v (%d of %d keys done by then); handler started more than once for %d keys (a kill mid-handler, or a redelivery); effects doubled %d, lost %d",
			mode, db.Dialect, killCycles, killed.Round(time.Millisecond), doneAfterKills, len(keys), reran, doubled, lost)
		if lost != 0 || (mode == "inbox" && doubled != 0) {
			t.Fatalf("doubled %d, lost %d", doubled, lost)
		}
	}
}

// countLines returns how often each line occurs in the file at path.
func countLines(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			m[l]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}
