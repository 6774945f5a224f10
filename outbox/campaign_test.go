package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/outbox"
)

// The campaigns count per business transaction, end to end: an order row and its outbox
// row committed together (or not), a relay sending to the broker, an orderly consumer
// applying each message through the inbox in the same database. Every committed order
// must have exactly one effect (0 lost, 0 doubled), no effect may exist for an order that
// did not commit (0 phantom), and per order key the effects come in the order the
// transactions committed (0 out of order). Run on SQLite always and on PostgreSQL and
// MySQL/MariaDB when their DSNs are set, each with the Sluice broker and with Kafka. See
// sizes for the counts (small by default; SLUICE_OUTBOX_CAMPAIGN=full for the issue's).

func checkTally(t *testing.T, what string, s tally) {
	t.Helper()
	t.Logf("%s: %v", what, s)
	if s.lost != 0 || s.phantom != 0 || s.doubled != 0 || s.late != 0 || s.committed == 0 {
		t.Fatalf("%s: %v", what, s)
	}
}

// TestCampaignServiceKill: the order service is a child process SIGKILLed at random
// points around its commits (after a random number of transactions begun; each
// transaction lingers before its Add and before its commit, and one in ten rolls back on
// purpose). A relay in the test process sends what committed.
//
//	SLUICE_OUTBOX_CAMPAIGN=full go test -race -run TestCampaignServiceKill -v -timeout 60m ./outbox/
func TestCampaignServiceKill(t *testing.T) {
	if testing.Short() {
		t.Skip("campaign: skipped with -short")
	}
	size := sizes(t)
	eachDB(t, func(t *testing.T, c *campaignDB, e engine) {
		c.startConsumer(t, e)
		c.parentRelay(t, e.sendFunc(t))
		log := filepath.Join(t.TempDir(), "service.log")
		began := 0
		for cycle := 0; cycle < size.cycles; cycle++ {
			k := size.perCycle/2 + rand.IntN(size.perCycle+1) // transactions begun before the kill (perCycle on average)
			before := len(lines(t, log))
			ch := startChild(t, "service", envDialect+"="+c.dialect.String(), envDSN+"="+c.dsn, envTable+"="+c.ob.Table(),
				envOrders+"="+c.orders, envPrefix+"="+fmt.Sprintf("c%03d", cycle), envSeqBase+"="+strconv.Itoa(cycle*1_000_000), envLog+"="+log)
			if !testkit.Eventually(60*time.Second, func() bool { return len(lines(t, log)) >= before+k }) {
				ch.kill(t)
				t.Fatalf("cycle %d: the service began %d of %d transactions within 60 s; stderr: %s", cycle, len(lines(t, log))-before, k, ch.stderr)
			}
			ch.kill(t)
		}
		began = len(lines(t, log))
		c.waitApplied(t, 120*time.Second)
		s := c.tally(t)
		checkTally(t, fmt.Sprintf("service SIGKILL campaign (%s, %s): %d kills, %d transactions begun", c.dialect, e.name(), size.cycles, began), s)
		if s.committed >= began {
			t.Fatalf("%d committed of %d begun: the kills and rollbacks must leave some uncommitted", s.committed, began)
		}
	})
}

// TestCampaignRelayKill: the relay is a child process SIGKILLed mid-batch (after a random
// number of sends of the cycle's rows; batches of 8, 4 sends at once). Rows it sent but
// had not recorded are sent again by the next relay: counted as duplicate copies at the
// broker, absorbed by the inbox (0 doubled effects).
//
//	SLUICE_OUTBOX_CAMPAIGN=full go test -race -run TestCampaignRelayKill -v -timeout 60m ./outbox/
func TestCampaignRelayKill(t *testing.T) {
	if testing.Short() {
		t.Skip("campaign: skipped with -short")
	}
	size := sizes(t)
	eachDB(t, func(t *testing.T, c *campaignDB, e engine) {
		c.startConsumer(t, e)
		log := filepath.Join(t.TempDir(), "relay.log")
		ctx := context.Background()
		n := 0
		sends := func() int {
			s := 0
			for _, l := range lines(t, log) {
				if strings.HasPrefix(l, "S ") {
					s++
				}
			}
			return s
		}
		for cycle := 0; cycle < size.cycles; cycle++ {
			for i := 0; i < size.perCycle; i++ {
				if err := c.placeOrder(ctx, fmt.Sprintf("r%03d-%05d", cycle, i), fmt.Sprintf("acct-%d", i%campaignKeys), int64(n)); err != nil {
					t.Fatal(err)
				}
				n++
			}
			k, before := 1+rand.IntN(size.perCycle), sends()
			mode := []string{"each", "batch"}[cycle%2] // the relay's two send paths, by turns
			ch := startChild(t, "relay", envDialect+"="+c.dialect.String(), envDSN+"="+c.dsn, envTable+"="+c.ob.Table(),
				envEngine+"="+e.name(), envAddr+"="+e.addr(), envLog+"="+log, envLease+"=2s", envBatch+"=8", envSend+"="+mode)
			if !testkit.Eventually(60*time.Second, func() bool { return sends() >= before+k }) {
				ch.kill(t)
				t.Fatalf("cycle %d: the relay started %d of %d sends within 60 s; stderr: %s", cycle, sends()-before, k, ch.stderr)
			}
			ch.kill(t)
		}
		// A last relay (in the test process) sends what is left, after the killed relays'
		// leases expire.
		c.parentRelay(t, e.sendFunc(t))
		c.waitApplied(t, 120*time.Second)
		s := c.tally(t)
		checkTally(t, fmt.Sprintf("relay SIGKILL campaign (%s, %s): %d kills mid-batch", c.dialect, e.name(), size.cycles), s)
		if s.committed != n {
			t.Fatalf("%d orders committed, want %d", s.committed, n)
		}
	})
}

// TestCampaignRelayStop: two relay processes share the table (lease 1 s); in each cycle
// one of them is SIGSTOPped while it sends, kept stopped for twice its lease (the other
// takes over its rows), and resumed. A send of a row by one relay that overlaps in time a
// send of the same row by the other is counted: it must not happen between running relays
// (the lease); a send frozen by SIGSTOP that the other relay repeated is reported.
//
//	SLUICE_OUTBOX_CAMPAIGN=full go test -race -run TestCampaignRelayStop -v -timeout 60m ./outbox/
func TestCampaignRelayStop(t *testing.T) {
	if testing.Short() {
		t.Skip("campaign: skipped with -short")
	}
	size := sizes(t)
	const lease = time.Second
	eachDB(t, func(t *testing.T, c *campaignDB, e engine) {
		c.startConsumer(t, e)
		dir := t.TempDir()
		logs := []string{filepath.Join(dir, "relay0.log"), filepath.Join(dir, "relay1.log")}
		var relays []*child
		for i, l := range logs { // relay0 sends row by row, relay1 through the batch path
			relays = append(relays, startChild(t, "relay", envDialect+"="+c.dialect.String(), envDSN+"="+c.dsn, envTable+"="+c.ob.Table(),
				envEngine+"="+e.name(), envAddr+"="+e.addr(), envLog+"="+l, envLease+"="+lease.String(), envBatch+"=8",
				envSend+"="+[]string{"each", "batch"}[i]))
		}
		ctx := context.Background()
		var stops [][3]int64 // relay, stopped at, resumed at (unix ns)
		n, idle := 0, 0
		for cycle := 0; cycle < size.cycles; cycle++ {
			victim := cycle % 2
			before := len(lines(t, logs[victim]))
			for i := 0; i < size.perCycle; i++ {
				if err := c.placeOrder(ctx, fmt.Sprintf("s%03d-%05d", cycle, i), fmt.Sprintf("acct-%d", i%campaignKeys), int64(n)); err != nil {
					t.Fatal(err)
				}
				n++
			}
			// Stop the victim once it is sending this cycle's rows.
			if !testkit.Eventually(30*time.Second, func() bool {
				if len(lines(t, logs[victim])) > before {
					return true
				}
				st, err := c.ob.Stats(ctx)
				return err == nil && st.Pending == 0
			}) {
				t.Fatalf("cycle %d: the cycle's rows were not sent within 30 s", cycle)
			}
			if len(lines(t, logs[victim])) == before {
				idle++ // the other relay took all of them: the victim is stopped idle
			}
			relays[victim].signal(t, syscall.SIGSTOP)
			at := time.Now().UnixNano()
			time.Sleep(2 * lease) // the scenario: stopped past its lease
			resumed := time.Now().UnixNano()
			relays[victim].signal(t, syscall.SIGCONT)
			stops = append(stops, [3]int64{int64(victim), at, resumed})
		}
		c.waitApplied(t, 120*time.Second)
		for _, r := range relays {
			r.kill(t)
		}
		s := c.tally(t)
		live, frozen, both := overlaps(t, logs, stops)
		checkTally(t, fmt.Sprintf("two relays, one SIGSTOPped past its lease (%s, %s): %d stops (%d of an idle relay); rows sent by both relays %d; overlapping sends between running relays %d, overlaps with a send frozen by SIGSTOP %d",
			c.dialect, e.name(), size.cycles, idle, both, live, frozen), s)
		if live != 0 {
			t.Fatalf("%d rows were being sent by both relays at once while both ran", live)
		}
	})
}

// overlaps reads the relays' send logs and counts, per row, send intervals of the two
// relays that overlap in time: live when neither interval spans a SIGSTOP of its relay,
// frozen otherwise; both counts rows that both relays started to send at all.
func overlaps(t *testing.T, logs []string, stops [][3]int64) (live, frozen, both int) {
	type span struct{ from, to int64 }
	sends := make([]map[string][]span, len(logs))
	for i, l := range logs {
		sends[i] = map[string][]span{}
		open := map[string]int64{}
		for _, line := range lines(t, l) {
			f := strings.Fields(line)
			if len(f) != 3 {
				continue
			}
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			switch f[0] {
			case "S":
				open[f[1]] = ns
			case "E":
				sends[i][f[1]] = append(sends[i][f[1]], span{open[f[1]], ns})
				delete(open, f[1])
			}
		}
		for k, from := range open { // started, never ended (failed or killed): until the end
			sends[i][k] = append(sends[i][k], span{from, 1<<63 - 1})
		}
	}
	spansStop := func(relay int, s span) bool {
		for _, st := range stops {
			if int(st[0]) == relay && s.from < st[2] && s.to > st[1] {
				return true
			}
		}
		return false
	}
	var keys []string
	for k := range sends[0] {
		if len(sends[1][k]) > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	both = len(keys)
	for _, k := range keys {
		isLive, isFrozen := false, false
		for _, a := range sends[0][k] {
			for _, b := range sends[1][k] {
				if a.from < b.to && b.from < a.to {
					if spansStop(0, a) || spansStop(1, b) {
						isFrozen = true
					} else {
						isLive = true
					}
				}
			}
		}
		if isLive {
			live++
		} else if isFrozen {
			frozen++
		}
	}
	return live, frozen, both
}

// TestCampaignOutage: while orders keep committing, the broker goes down (the Sluice
// broker stopped; Kafka refusing every produce request) and the backlog grows; it comes
// back and the backlog drains. Then the database is restarted (a PostgreSQL of the test's
// own, stopped in immediate mode as a crash and started again; a MariaDB of the test's
// own, SIGKILLed and started again) while orders keep coming; transactions that fail
// during the restart did not commit. The relay uses the batch path (RelayConfig.SendBatch). Without root and the server binaries the restart
// parts are skipped (logged); the outage part runs on every database.
//
//	SLUICE_OUTBOX_CAMPAIGN=full go test -race -run TestCampaignOutage -v -timeout 60m ./outbox/
func TestCampaignOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("campaign: skipped with -short")
	}
	size := sizes(t)
	run := func(t *testing.T, c *campaignDB, e engine, restart func() error) {
		c.startConsumer(t, e)
		// The relay sends through the batch path (SendBatch): its failures during the
		// outage back off and retry as the per-row path's do.
		send, shut, err := engineBatch(e.name(), e.addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(shut)
		c.parentRelay(t, nil, func(cfg *outbox.RelayConfig) { cfg.SendBatch = send })
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var placed, failed atomic.Int64
		wg.Add(1)
		go func() { // the order service: one order every 5 ms
			defer wg.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
				if err := c.placeOrder(octx, fmt.Sprintf("o%06d", i), fmt.Sprintf("acct-%d", i%campaignKeys), int64(i)); err != nil {
					failed.Add(1)
				} else {
					placed.Add(1)
				}
				ocancel()
			}
		}()
		defer func() { cancel(); wg.Wait() }()
		testkit.WaitFor(t, 120*time.Second, func() bool { return c.tally(t).applied >= 20 }, "first orders applied") // 30 s passed by under -race at load 45
		e.setDown(t, true)
		downAt := placed.Load()
		time.Sleep(size.outage) // the scenario: the broker is down this long
		// ... and until some orders were placed meanwhile (a loaded machine under -race
		// placed 8 in a 1 s outage of the default run, where one per 5 ms is asked).
		testkit.WaitFor(t, 60*time.Second, func() bool { return placed.Load()-downAt >= 10 }, "10 orders placed while the broker is down")
		st, err := c.ob.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		backlog := st.Pending
		oldest := st.OldestPendingAge(time.Now())
		e.setDown(t, false)
		t.Logf("broker down %v: %d orders placed meanwhile, backlog %d rows, oldest %v", size.outage, placed.Load()-downAt, backlog, oldest.Round(time.Millisecond))
		if backlog < 10 {
			t.Fatalf("backlog %d after %v down: the orders placed meanwhile must wait in the outbox", backlog, size.outage)
		}
		testkit.WaitFor(t, 120*time.Second, func() bool {
			st, err := c.ob.Stats(ctx)
			return err == nil && st.Pending < 20
		}, "backlog drained after the outage")
		if restart != nil {
			if err := restart(); err != nil {
				t.Fatal(err)
			}
			at := placed.Load()
			testkit.WaitFor(t, 60*time.Second, func() bool { return placed.Load() > at+50 }, "orders committing after the restart")
		}
		cancel()
		wg.Wait()
		c.waitApplied(t, 180*time.Second)
		s := c.tally(t)
		restarted := "no database restart"
		if restart != nil {
			restarted = "database restarted"
		}
		checkTally(t, fmt.Sprintf("outage campaign (%s, %s): broker down %v, %s; %d orders failed to commit", c.dialect, e.name(), size.outage, restarted, failed.Load()), s)
	}
	t.Run("shared", func(t *testing.T) {
		eachDB(t, func(t *testing.T, c *campaignDB, e engine) { run(t, c, e, nil) })
	})
	t.Run("postgres-restart", func(t *testing.T) {
		pg := sqltest.StartPostgres(t)
		for _, en := range enginesFor(outbox.Postgres) {
			t.Run(en, func(t *testing.T) {
				db := pg.Open(t)
				db.SetMaxOpenConns(20)
				prefix := fmt.Sprintf("t%d_%s_", time.Now().UnixNano()%1e6, en)
				c := newCampaignDB(t, db, outbox.Postgres, pg.DSN, func(s string) string { return prefix + s })
				run(t, c, startEngine(t, en), func() error {
					if err := pg.Crash(); err != nil {
						return err
					}
					return pg.Start()
				})
			})
		}
	})
	t.Run("mariadb-restart", func(t *testing.T) {
		m := startMariaDB(t)
		for _, en := range enginesFor(outbox.MySQL) {
			t.Run(en, func(t *testing.T) {
				db, err := sql.Open("mysql", m.DSN)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				db.SetMaxOpenConns(20)
				prefix := fmt.Sprintf("t%d_%s_", time.Now().UnixNano()%1e6, en)
				c := newCampaignDB(t, db, outbox.MySQL, m.DSN, func(s string) string { return prefix + s })
				run(t, c, startEngine(t, en), m.crash)
			})
		}
	})
}
