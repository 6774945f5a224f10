package failover

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/sluicemq/sluice/inbox"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// killsEnv sets the number of kills per campaign; campaigns are skipped without it.
const killsEnv = "SLUICE_FAILOVER_KILLS"

// campaignKills returns SLUICE_FAILOVER_KILLS, or skips t when it is unset or -short.
func campaignKills(t *testing.T) int {
	t.Helper()
	v := os.Getenv(killsEnv)
	if v == "" || testing.Short() {
		t.Skipf("failover campaign: starts a JVM cluster and kills brokers; run with %s=N (e.g. %s=10 go test -run Failover -timeout 90m ./internal/failover/)", killsEnv, killsEnv)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		t.Fatalf("%s=%q: want a number of kills 1..100", killsEnv, v)
	}
	return n
}

// outage is how long a killed broker stays down: SLUICE_FAILOVER_OUTAGE (a Go
// duration), default 8 s.
func outage(t *testing.T) time.Duration {
	if v := os.Getenv("SLUICE_FAILOVER_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > 10*time.Minute {
			t.Fatalf("SLUICE_FAILOVER_OUTAGE=%q: want a duration up to 10m", v)
		}
		return d
	}
	return 8 * time.Second
}

// sendRec is one send of the load: its key, when it started and ended, and its result.
type sendRec struct {
	key        string
	start, end time.Time
	broker     string // where it was stored (RocketMQ broker name or Kafka partition)
	err        error
}

// ledger counts a campaign per message key: sends (acknowledged or not), deliveries to the
// handler, and the effects the inbox let through (in an SQLite table).
type ledger struct {
	t  *testing.T
	db *sql.DB
	ib *inbox.Inbox

	mu         sync.Mutex
	sends      []sendRec
	deliveries map[string]int
	delivered  []delivery

	// newMsg, when set before the load starts, builds send i of the load (its first
	// key is the ledger's key); default: a message with key and body "k%07d".
	newMsg func(i int, topic string) *message.Message
}

type delivery struct {
	key    string
	broker string
	queue  int32
	offset int64 // queue offset: two deliveries of a key at different offsets are two stored copies
	at     time.Time
}

func newLedger(t *testing.T, group string) *ledger {
	t.Helper()
	db, err := sql.Open("sqlite", inbox.SQLiteDSN(filepath.Join(t.TempDir(), "effects.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (k TEXT PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{DB: db, Dialect: inbox.SQLite, Group: group})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	return &ledger{t: t, db: db, ib: ib, deliveries: map[string]int{}}
}

// handler is the consume function: every delivery is counted, then the inbox applies the
// effect (one row per key, n counting how often it was applied) at most once.
func (l *ledger) handler() middleware.ConsumeFunc {
	apply := l.ib.Consume(func(ctx context.Context, tx *sql.Tx, msgs []*message.MessageExt) error {
		for _, m := range msgs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (k, n) VALUES (?, 1) ON CONFLICT(k) DO UPDATE SET n = n + 1`, middleware.KeyOf(m)); err != nil {
				return err
			}
		}
		return nil
	})
	return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		now := time.Now()
		l.mu.Lock()
		for _, m := range msgs {
			l.deliveries[middleware.KeyOf(m)]++
			l.delivered = append(l.delivered, delivery{key: middleware.KeyOf(m), broker: m.BrokerName, queue: m.QueueID, offset: m.QueueOffset, at: now})
		}
		l.mu.Unlock()
		return apply(ctx, msgs)
	}
}

// storedTwice returns how many keys were delivered from more than one stored copy
// (different queue offsets), as opposed to one copy delivered again.
func (l *ledger) storedTwice() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	copies := map[string]map[string]bool{}
	for _, d := range l.delivered {
		if copies[d.key] == nil {
			copies[d.key] = map[string]bool{}
		}
		copies[d.key][fmt.Sprintf("%s/%d/%d", d.broker, d.queue, d.offset)] = true
	}
	n := 0
	for _, c := range copies {
		if len(c) > 1 {
			n++
		}
	}
	return n
}

// copies returns, per key, how many stored copies (different queue offsets) were
// delivered.
func (l *ledger) copies() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	n := map[string]int{}
	for _, d := range l.delivered {
		c := fmt.Sprintf("%s %s/%d/%d", d.key, d.broker, d.queue, d.offset)
		if !seen[c] {
			seen[c] = true
			n[d.key]++
		}
	}
	return n
}

// offsetGaps returns, per queue, the queue offsets between the lowest and the highest
// delivered one that were never delivered (a consumer that skipped stored messages),
// at most 10 examples, and their number.
func (l *ledger) offsetGaps() (n int, examples []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]map[int64]bool{}
	for _, d := range l.delivered {
		q := fmt.Sprintf("%s/%d", d.broker, d.queue)
		if seen[q] == nil {
			seen[q] = map[int64]bool{}
		}
		seen[q][d.offset] = true
	}
	for q, offs := range seen {
		lo, hi := int64(-1), int64(-1)
		for o := range offs {
			if lo < 0 || o < lo {
				lo = o
			}
			if o > hi {
				hi = o
			}
		}
		for o := lo; o <= hi; o++ {
			if !offs[o] {
				n++
				if len(examples) < 10 {
					examples = append(examples, fmt.Sprintf("%s@%d", q, o))
				}
			}
		}
	}
	return n, examples
}

// countFrom returns how many deliveries came from brokerName's queues.
func (l *ledger) countFrom(brokerName string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, d := range l.delivered {
		if d.broker == brokerName {
			n++
		}
	}
	return n
}

// startLoad runs runLoad in a goroutine (one send every 20 ms, 15 s per send) and returns
// the function that stops it and waits for it; calling that again does nothing more.
func (l *ledger) startLoad(topic string, send middleware.SendFunc) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.runLoad(quit, topic, 20*time.Millisecond, 15*time.Second, send)
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		<-done
	}
}

// runLoad sends one message after another (at most one per interval) through send until
// stop closes, each with its own key and a timeout of perSend, and records every send.
func (l *ledger) runLoad(stop <-chan struct{}, topic string, interval, perSend time.Duration, send middleware.SendFunc) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		key := fmt.Sprintf("k%07d", i)
		msg := message.NewMessage(topic, []byte(key)).SetKeys(key)
		if l.newMsg != nil {
			msg = l.newMsg(i, topic)
			key = msg.Keys()[0]
		}
		ctx, cancel := context.WithTimeout(context.Background(), perSend)
		r := sendRec{key: key, start: time.Now()}
		res, err := send(ctx, msg)
		cancel()
		r.end, r.err = time.Now(), err
		if err == nil && res != nil {
			r.broker = res.Queue.BrokerName
			if res.Status != message.SendOK {
				r.err = fmt.Errorf("stored with status %v", res.Status)
			}
		}
		l.mu.Lock()
		l.sends = append(l.sends, r)
		l.mu.Unlock()
	}
}

// acked returns the keys of acknowledged sends (SEND_OK) and how many sends failed.
func (l *ledger) acked() (keys []string, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sends {
		if s.err == nil {
			keys = append(keys, s.key)
		} else {
			failed++
		}
	}
	return keys, failed
}

// ackedCount is the number of acknowledged sends so far.
func (l *ledger) ackedCount() int {
	k, _ := l.acked()
	return len(k)
}

// effects returns the number of effects per key from the inbox's database.
func (l *ledger) effects() map[string]int {
	rows, err := l.db.Query(`SELECT k, n FROM effects`)
	if err != nil {
		l.t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			l.t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		l.t.Fatal(err)
	}
	return out
}

// allApplied reports whether every acknowledged key has its effect.
func (l *ledger) allApplied() bool {
	keys, _ := l.acked()
	eff := l.effects()
	for _, k := range keys {
		if eff[k] == 0 {
			return false
		}
	}
	return true
}

// outageRec is one kill: when the broker was killed and when it was back.
type outageRec struct {
	what         string
	kill, back   time.Time
	avoided      bool // the producer's fault tolerance listed the killed broker as avoided
	electedAfter time.Duration
}

// gapAfter returns the unavailability window of an outage: the longest stretch between
// kill and back with no send acknowledged, starting at the kill (the time to the first
// acknowledgement after it counts), and the sends that failed in that span.
func (l *ledger) gapAfter(o outageRec) (gap time.Duration, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ends []time.Time
	for _, s := range l.sends {
		if s.end.Before(o.kill) || s.start.After(o.back) {
			continue
		}
		if s.err != nil {
			failed++
			continue
		}
		ends = append(ends, s.end)
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	prev := o.kill
	for _, e := range ends {
		if d := e.Sub(prev); d > gap {
			gap = d
		}
		prev = e
	}
	if d := o.back.Sub(prev); len(ends) == 0 && d > gap {
		gap = d
	}
	return gap, failed
}

// inOutage reports whether s ended between a kill and its restart.
func inOutage(s sendRec, outs []outageRec) bool {
	for _, o := range outs {
		if !s.end.Before(o.kill) && !s.end.After(o.back) {
			return true
		}
	}
	return false
}

// report is a campaign's figures.
type report struct {
	engine, fault          string
	kills, acked, failed   int
	lost, doubled, redeliv int
	gapP50, gapMax         time.Duration
	failedInOutages        int
	avoidedCount           int
	consumedFromSlave      int            // by a group started while the master was down, in the first outage
	reasons                map[string]int // failed sends by error text
}

func (r report) String() string {
	return fmt.Sprintf("%s | %s | kills %d | acked %d (failed sends %d, %d of them during outages) | lost %d | effects doubled %d (deliveries repeated %d) | unavailability p50 %v max %v | killed broker avoided by fault tolerance in %d of %d kills | consumed from the slave by a group started in the outage %d | failed sends by reason %v",
		r.engine, r.fault, r.kills, r.acked, r.failed, r.failedInOutages, r.lost, r.doubled, r.redeliv,
		r.gapP50.Round(10*time.Millisecond), r.gapMax.Round(10*time.Millisecond), r.avoidedCount, r.kills, r.consumedFromSlave, r.reasons)
}

// summarize computes the report once the load has stopped and the consumer drained.
func (l *ledger) summarize(engine, fault string, outs []outageRec) report {
	keys, failed := l.acked()
	eff := l.effects()
	r := report{engine: engine, fault: fault, kills: len(outs), acked: len(keys), failed: failed, reasons: map[string]int{}}
	l.mu.Lock()
	for _, s := range l.sends {
		if s.err != nil {
			msg := s.err.Error()
			if len(msg) > 100 {
				msg = msg[:100]
			}
			when := "after a restart"
			switch {
			case len(outs) > 0 && s.end.Before(outs[0].kill):
				when = "before the first kill"
			case inOutage(s, outs):
				when = "during an outage"
			}
			r.reasons[fmt.Sprintf("%s [%s] %s", when, s.broker, msg)]++
		}
	}
	l.mu.Unlock()
	for _, k := range keys {
		if eff[k] == 0 {
			r.lost++
		}
	}
	for _, n := range eff {
		if n > 1 {
			r.doubled++
		}
	}
	l.mu.Lock()
	for _, n := range l.deliveries {
		if n > 1 {
			r.redeliv++
		}
	}
	l.mu.Unlock()
	var gaps []time.Duration
	for _, o := range outs {
		g, f := l.gapAfter(o)
		gaps = append(gaps, g)
		r.failedInOutages += f
		if o.avoided {
			r.avoidedCount++
		}
	}
	slices.Sort(gaps)
	if len(gaps) > 0 {
		r.gapP50, r.gapMax = gaps[(len(gaps)-1)/2], gaps[len(gaps)-1]
	}
	return r
}

// loadAverage returns /proc/loadavg's first three fields, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil || len(b) < 5 {
		return "unknown"
	}
	f := 0
	for i, c := range b {
		if c == ' ' {
			f++
			if f == 3 {
				return string(b[:i])
			}
		}
	}
	return string(b)
}
