package quickstart

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/retrytask"
)

// Retry task settings of the demo: short so the outage part takes about as long as the
// outage (production defaults: MinAge 1 min, backoff from 30 s).
const (
	qsRetryMinAge      = 100 * time.Millisecond
	qsRetryEvery       = 100 * time.Millisecond
	qsRetryBackoffBase = 200 * time.Millisecond
	qsRetryBackoffMax  = time.Second
	qsRestartTimeout   = 10 * time.Second // re-binding the broker's old addresses
)

// qsRedis is the Redis of the reliability part: an embedded miniredis, or the server at
// --redis. Every key the run writes contains ns, and close deletes them.
type qsRedis struct {
	mini   *miniredis.Miniredis // nil for --redis
	client *redis.Client
	addr   string
	ns     string // "qs-<16 hex digits>", unique per run
}

// openQSRedis starts an embedded miniredis (addr "") or connects to addr and checks it
// answers PING within ctx. miniredis expires keys only when told to; nothing in the demo
// waits for an expiry (locks are released, markers outlive the run), so no clock is run.
func openQSRedis(ctx context.Context, addr string) (*qsRedis, error) {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	q := &qsRedis{addr: addr, ns: "qs-" + hex.EncodeToString(b[:])}
	if addr == "" {
		q.mini = miniredis.NewMiniRedis()
		if err := q.mini.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("start the embedded miniredis: %w", err)
		}
		q.addr = q.mini.Addr()
	}
	q.client = redis.NewClient(&redis.Options{
		Addr:                     q.addr,
		DialTimeout:              2 * time.Second,
		ReadTimeout:              3 * time.Second,
		WriteTimeout:             3 * time.Second,
		DisableIdentity:          true, // no CLIENT SETINFO: older servers and miniredis log it as unknown
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := q.client.Ping(pctx).Err(); err != nil {
		_ = q.client.Close()
		if q.mini != nil {
			q.mini.Close()
		}
		return nil, fmt.Errorf("--redis %s: no answer to PING: %w", addr, err)
	}
	return q, nil
}

// describe names the server for the output.
func (q *qsRedis) describe() string {
	if q.mini != nil {
		return "embedded miniredis at " + q.addr
	}
	return "Redis at " + q.addr
}

// dedupPrefix is the Dedup key prefix of consumer group group (one per group, as
// DedupConfig.Prefix asks), inside the run's namespace.
func (q *qsRedis) dedupPrefix(group string) string { return "sluice:" + q.ns + ":dedup:" + group }

// close deletes every key whose name contains the run's namespace (SCAN MATCH + DEL, in
// pages of 500, at most 10000 pages; never FLUSHALL), closes the client and stops an
// embedded miniredis. It returns the number of keys deleted.
func (q *qsRedis) close(ctx context.Context) (int, error) {
	deleted, err := q.deleteNamespace(ctx)
	err = errors.Join(err, q.client.Close())
	if q.mini != nil {
		q.mini.Close()
	}
	return deleted, err
}

func (q *qsRedis) deleteNamespace(ctx context.Context) (int, error) {
	deleted := 0
	var cursor uint64
	for page := 0; page < 10000; page++ {
		keys, next, err := q.client.Scan(ctx, cursor, "*"+q.ns+"*", 500).Result()
		if err != nil {
			return deleted, fmt.Errorf("delete the keys of namespace %s: %w", q.ns, err)
		}
		if len(keys) > 0 {
			n, err := q.client.Del(ctx, keys...).Result()
			deleted += int(n)
			if err != nil {
				return deleted, fmt.Errorf("delete the keys of namespace %s: %w", q.ns, err)
			}
		}
		if next == 0 {
			return deleted, nil
		}
		cursor = next
	}
	return deleted, fmt.Errorf("delete the keys of namespace %s: more than 10000 SCAN pages", q.ns)
}

// qsLedger records what the consumer groups did per message key: deliveries (calls of
// the handler chain), deliveries Dedup skipped as duplicates, and points_service's
// business effect (points added).
type qsLedger struct {
	mu         sync.Mutex
	deliveries map[string]map[string]int // group → key → deliveries
	duplicates map[string]map[string]int // group → key → skipped by Dedup
	effects    map[string]int            // key → times points were added
	points     map[string]int            // key → points added per effect
}

func newQSLedger() *qsLedger {
	return &qsLedger{
		deliveries: map[string]map[string]int{qsOrderGroup: {}, qsPointsGroup: {}},
		duplicates: map[string]map[string]int{qsOrderGroup: {}, qsPointsGroup: {}},
		effects:    map[string]int{},
		points:     map[string]int{},
	}
}

// observe returns a consume middleware counting group's deliveries and the ones a Dedup
// inside it reported as duplicates (middleware.ReasonDuplicate). Consumers get one
// message per call (ConsumeMessageBatchMaxSize 1).
func (l *qsLedger) observe(group string) middleware.ConsumeMiddleware {
	return func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			ctx, rep := middleware.WithReport(ctx)
			res, err := next(ctx, msgs)
			dup := rep.Has(middleware.ReasonDuplicate)
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, m := range msgs {
				k := middleware.KeyOf(m)
				l.deliveries[group][k]++
				if dup {
					l.duplicates[group][k]++
				}
			}
			return res, err
		}
	}
}

// addPoints is points_service's business effect: one point per whole currency unit paid.
func (l *qsLedger) addPoints(key string, ev payEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.effects[key]++
	l.points[key] = int(ev.Amount)
}

// count returns group's deliveries, its duplicates and the effects of key.
func (l *qsLedger) count(group, key string) (deliveries, duplicates, effects int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deliveries[group][key], l.duplicates[group][key], l.effects[key]
}

// doubled returns "<key> (<n> times)" for every key whose points were added more than once.
func (l *qsLedger) doubled(name func(key string) string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, n := range l.effects {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s (%d times)", name(k), n))
		}
	}
	sort.Strings(out)
	return out
}

// qsResends wraps the retry task's send (the bare producer send) to record what it
// resent; it does not change the send.
type qsResends struct {
	mu     sync.Mutex
	lines  []string
	failed int // resend attempts that failed (the broker still down): rescheduled by the task
}

func (s *qsResends) wrap(send middleware.SendFunc) middleware.SendFunc {
	return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		res, err := send(ctx, msg)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.failed++
			return res, err
		}
		var ev payEvent
		_ = json.Unmarshal(msg.Body, &ev)
		s.lines = append(s.lines, fmt.Sprintf("retry task resent %s %s key=%s -> queue %d offset %d (%s)",
			msg.Tag(), ev.OrderID, strings.Join(msg.Keys(), " "), res.Queue.QueueID, res.QueueOffset, res.Status))
		return res, nil
	}
}

func (s *qsResends) counts() (resent, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lines), s.failed
}

func (s *qsResends) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// qsEvent is one payment of the reliability part.
type qsEvent struct {
	order, key string
}

// qsTally is what the reliability part counted. The want* methods say what it must be.
type qsTally struct {
	outage      int   // Send calls made while the broker was down
	sent        int   // Send calls through Keys + Park
	parked      int   // of them answered with a *middleware.ParkedError (in Redis)
	resent      int   // parked records the retry task resent
	stillParked int64 // records of the namespace not yet resent (pending, scheduled, ready, processing)
	dead        int64 // records in the dead list
	events      int   // distinct payments (message keys)
	consumed    int   // deliveries of these payments to points_service
	duplicates  int   // of them skipped by Dedup as duplicates
	effects     int   // times points_service added points for them
	orderGot    int   // deliveries of these payments to order_service (no Dedup)
	lost        []string
	doubled     []string
	note        string // why the run stopped early ("" when it ran to the end)
}

// stored is how many copies the broker stored: the sends that were not parked plus the
// resends.
func (t qsTally) stored() int { return t.sent - t.parked + t.resent }

// problems lists every way the tally differs from a run without loss and without a
// double effect; nil when there is none.
func (t qsTally) problems() []string {
	var p []string
	if t.note != "" {
		p = append(p, t.note)
	}
	if t.parked != t.outage {
		p = append(p, fmt.Sprintf("parked %d of the %d sends made while the broker was down", t.parked, t.outage))
	}
	if t.resent != t.parked {
		p = append(p, fmt.Sprintf("resent %d of %d parked sends", t.resent, t.parked))
	}
	if t.stillParked != 0 || t.dead != 0 {
		p = append(p, fmt.Sprintf("%d record(s) still parked and %d dead in Redis", t.stillParked, t.dead))
	}
	if len(t.lost) > 0 {
		p = append(p, "lost: "+strings.Join(t.lost, ", "))
	}
	if len(t.doubled) > 0 {
		p = append(p, "points added more than once: "+strings.Join(t.doubled, ", "))
	}
	if t.consumed != t.stored() {
		p = append(p, fmt.Sprintf("points_service consumed %d deliveries, want %d (one per stored copy)", t.consumed, t.stored()))
	}
	if want := t.stored() - t.events; t.duplicates != want {
		p = append(p, fmt.Sprintf("duplicates skipped %d, want %d", t.duplicates, want))
	}
	if t.effects != t.events {
		p = append(p, fmt.Sprintf("business effects %d, want %d (one per payment)", t.effects, t.events))
	}
	return p
}

// print writes the tally.
func (t qsTally) print(r *qsRun) {
	out := r.out
	fmt.Fprintf(out, "\ntally:\n")
	how := fmt.Sprintf("%d while the broker was down", t.outage)
	if t.sent > t.outage {
		how += fmt.Sprintf(", then %d with the broker up: 1 payment twice", t.sent-t.outage)
	}
	fmt.Fprintf(out, "  %-19s %3d  (%s)\n", "sent", t.sent, how)
	fmt.Fprintf(out, "  %-19s %3d\n", "parked", t.parked)
	fmt.Fprintf(out, "  %-19s %3d  (still parked %d, dead %d)\n", "resent", t.resent, t.stillParked, t.dead)
	fmt.Fprintf(out, "  %-19s %3d  (deliveries to points_service; order_service, without Dedup, handled %d)\n", "consumed", t.consumed, t.orderGot)
	fmt.Fprintf(out, "  %-19s %3d\n", "duplicates skipped", t.duplicates)
	fmt.Fprintf(out, "  %-19s %3d  (points added; %d distinct payments)\n", "business effects", t.effects, t.events)
}

// reliability is the second part: a broker outage bridged by Park and the retry task,
// then a duplicate delivery absorbed by Dedup, then the tally. It appends what it starts
// to stops.
func (r *qsRun) reliability(ctx context.Context, stops *[]func(context.Context) error) error {
	out, o := r.out, r.o
	fmt.Fprintf(out, "\n--- reliability: a broker outage and a duplicate delivery ---\n")
	fmt.Fprintf(out, "redis: %s, key namespace %s\n", r.redis.describe(), r.redis.ns)

	parkMW, parker, err := redismw.Park(redismw.ParkConfig{Client: r.redis.client, Namespace: r.redis.ns, Logger: o.log})
	if err != nil {
		return err
	}
	*stops = append(*stops, func(context.Context) error { return parker.Close() })
	send := middleware.ChainSend(r.p.SendFunc(), middleware.Keys(), parkMW)

	resends := &qsResends{}
	task, err := retrytask.New(retrytask.Config{
		Client:      r.redis.client,
		Namespace:   r.redis.ns,
		Send:        resends.wrap(r.p.SendFunc()), // the bare producer send: a failed resend is rescheduled, not parked again
		MinAge:      qsRetryMinAge,
		BackoffBase: qsRetryBackoffBase,
		BackoffMax:  qsRetryBackoffMax,
		Logger:      o.log,
	})
	if err != nil {
		return err
	}
	*stops = append(*stops, task.Shutdown)
	if !o.noRetryTask {
		if err := task.Start(qsRetryEvery); err != nil {
			return err
		}
	}
	dedup := "Dedup"
	if o.noDedup {
		dedup = "NO Dedup (test hook)"
	}
	fmt.Fprintf(out, "producer %s wrapped with Keys + Park (parked sends go to Redis list %s); points_service's handler with %s; retry task every %v (MinAge %v)\n",
		qsProducerGrp, parker.Keys().Pending, dedup, qsRetryEvery, qsRetryMinAge)

	// (a) The outage: stop the broker (and its embedded name server).
	addr, nsAddr, name := r.b.Addr(), r.b.NamesrvAddr(), r.b.Name()
	sctx, scancel := context.WithTimeout(r.deadline, qsShutdownTime)
	err = r.b.Shutdown(sctx)
	scancel()
	r.b = nil
	if err != nil {
		return fmt.Errorf("stop the broker for the outage: %w", err)
	}
	fmt.Fprintf(out, "stopped broker %s at %s and its name server %s: an outage\n", name, addr, nsAddr)

	var t qsTally
	var events []qsEvent
	nextOrder := 2000
	payment := func() (*message.Message, qsEvent, payEvent) {
		nextOrder++
		ev := payEvent{OrderID: fmt.Sprintf("ORD-%04d", nextOrder), Amount: float64(1999+(nextOrder-2000)*250) / 100, Status: "PAID"}
		body, _ := json.Marshal(ev)
		msg := message.NewMessage(qsTopic, body).SetTag(qsTagSuccess) // no keys: Keys sets "<tag>_<md5(body)>"
		e := qsEvent{order: ev.OrderID, key: middleware.ContentKey(msg)}
		events = append(events, e)
		return msg, e, ev
	}
	for i := 0; i < o.outageSends; i++ {
		msg, e, _ := payment()
		_, err := send(r.deadline, msg)
		t.sent++
		t.outage++
		var pe *middleware.ParkedError
		switch {
		case errors.As(err, &pe) && !pe.Spooled:
			t.parked++
			fmt.Fprintf(out, "send %s %s key=%s failed%s -> parked as record %s\n", qsTagSuccess, e.order, e.key, qsBrief(pe.Cause), pe.RecordID)
		case err == nil:
			return r.failed(ctx, []string{fmt.Sprintf("the send of %s succeeded although the broker is down", e.order)})
		default:
			return fmt.Errorf("send %s during the outage: %w", e.order, err)
		}
	}

	// The broker comes back on the same addresses and data directory.
	rctx, rcancel := context.WithTimeout(r.deadline, qsRestartTimeout)
	nb, attempts, err := qsStartBrokerAt(rctx, r.dir, addr, nsAddr, o.log)
	rcancel()
	if err != nil {
		return err
	}
	r.b = nb
	restarted := time.Now()
	fmt.Fprintf(out, "started broker %s again at %s with name server %s on the same data directory (%d attempt(s) to bind)\n", nb.Name(), nb.Addr(), nb.NamesrvAddr(), attempts)

	outageEvents := append([]qsEvent(nil), events...)
	ok := qsWait(r.deadline, func() bool {
		if n, _ := resends.counts(); n < t.parked {
			return false
		}
		for _, e := range outageEvents {
			if got, _, _ := r.ledger.count(qsOrderGroup, e.key); got == 0 {
				return false
			}
			if _, _, eff := r.ledger.count(qsPointsGroup, e.key); eff == 0 {
				return false
			}
		}
		return true
	})
	for _, l := range resends.list() {
		fmt.Fprintln(out, l)
	}
	if _, failed := resends.counts(); failed > 0 {
		fmt.Fprintf(out, "(the retry task's %d earlier resend attempt(s) failed while the broker was down; it rescheduled them with backoff)\n", failed)
	}
	if !ok {
		return r.tally(ctx, task, resends, t, events, "timed out waiting for the parked payments to be resent and consumed")
	}
	fmt.Fprintf(out, "both groups received the %d parked payment(s) %v after the restart (a consumer retries a pull that failed during the outage after 3 s); points_service added their points\n",
		len(outageEvents), time.Since(restarted).Round(100*time.Millisecond))

	// (b) A duplicate delivery: the same payment sent twice, as a producer retry whose
	// first answer was lost would do. The second copy goes out once the first has been
	// handled, so Dedup finds the done marker (a copy arriving while the first is still
	// being handled finds the lock instead and comes back later, which takes the consume
	// retry delay).
	msg, e, ev := payment()
	for copyNo := 1; copyNo <= 2; copyNo++ {
		res, err := send(r.deadline, msg)
		t.sent++
		if err != nil {
			return fmt.Errorf("send %s (copy %d): %w", e.order, copyNo, err)
		}
		again := ""
		if copyNo == 2 {
			again = " again (the same message and key: a duplicate delivery)"
		}
		fmt.Fprintf(out, "sent %s %s key=%s%s -> queue %d offset %d (%s)\n", qsTagSuccess, e.order, e.key, again, res.Queue.QueueID, res.QueueOffset, res.Status)
		ok := qsWait(r.deadline, func() bool {
			og, _, _ := r.ledger.count(qsOrderGroup, e.key)
			pg, _, eff := r.ledger.count(qsPointsGroup, e.key)
			if copyNo == 1 {
				// pg counts a delivery once the whole chain returned, i.e. after Dedup
				// set the done marker (eff moves inside the handler, before it).
				return og >= 1 && pg >= 1 && eff >= 1
			}
			return og >= 2 && pg >= 2
		})
		if !ok {
			return r.tally(ctx, task, resends, t, events, fmt.Sprintf("timed out waiting for copy %d of %s to be consumed", copyNo, e.order))
		}
		if copyNo == 1 {
			fmt.Fprintf(out, "points_service added %d points for %s\n", int(ev.Amount), e.order)
		}
	}
	og, _, _ := r.ledger.count(qsOrderGroup, e.key)
	pg, dups, eff := r.ledger.count(qsPointsGroup, e.key)
	fmt.Fprintf(out, "points_service got %s %d times: %d skipped by Dedup as a duplicate (done marker set), points added %d time(s); order_service (no Dedup) handled it %d times\n",
		e.order, pg, dups, eff, og)
	return r.tally(ctx, task, resends, t, events, "")
}

// tally completes t from the ledger and the retry task, prints it, and returns nil when
// it shows no loss and no double effect, else the run's failure naming what is wrong.
func (r *qsRun) tally(ctx context.Context, task *retrytask.Task, resends *qsResends, t qsTally, events []qsEvent, note string) error {
	t.note = note
	t.resent, _ = resends.counts()
	r.paid = append(r.paid[:0], events...)
	orderOf := map[string]string{}
	for _, e := range events {
		orderOf[e.key] = e.order
		t.events++
		d, dup, eff := r.ledger.count(qsPointsGroup, e.key)
		og, _, _ := r.ledger.count(qsOrderGroup, e.key)
		t.consumed += d
		t.duplicates += dup
		t.effects += eff
		t.orderGot += og
		if eff == 0 {
			t.lost = append(t.lost, e.order+" (no points added)")
		}
		if og == 0 {
			t.lost = append(t.lost, e.order+" (never reached order_service)")
		}
	}
	t.doubled = r.ledger.doubled(func(k string) string {
		if o, ok := orderOf[k]; ok {
			return o
		}
		return k // a fan-out payment: its key is its order id
	})
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	c, err := task.Counts(cctx)
	cancel()
	if err != nil {
		return err
	}
	t.stillParked, t.dead = c.Total(), c.Dead
	t.print(r)
	if p := t.problems(); len(p) > 0 {
		return r.failed(ctx, p)
	}
	fmt.Fprintf(r.out, "reliability OK: no payment lost (%d parked, %d resent), no points added twice (%d duplicate skipped)\n", t.parked, t.resent, t.duplicates)
	return nil
}

// qsBrief shortens a send error for one output line: " after N attempt(s): <root cause>".
func qsBrief(err error) string {
	s := ""
	var se *producer.SendError
	if errors.As(err, &se) {
		s = fmt.Sprintf(" after %d attempt(s)", se.Attempts)
	}
	root := err
	for i := 0; i < 32; i++ { // bounded: error chains are short
		next := errors.Unwrap(root)
		if next == nil {
			break
		}
		root = next
	}
	if root != nil {
		s += ": " + root.Error()
	}
	return s
}

// qsStartBrokerAt starts a broker on addr with its embedded name server on nsAddr and
// the store in dir, retrying every 50 ms while an address is still in use (EADDRINUSE:
// the old sockets may take a moment to be released) until ctx is done. It returns the
// broker and the number of attempts.
func qsStartBrokerAt(ctx context.Context, dir, addr, nsAddr string, log *slog.Logger) (*broker.Broker, int, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for attempt := 1; ; attempt++ {
		b, err := broker.New(broker.Config{ListenAddr: addr, NamesrvListenAddr: nsAddr, StorePathRootDir: dir, Logger: log})
		if err != nil {
			return nil, attempt, err
		}
		err = b.Start() // on failure Start has stopped b again
		if err == nil {
			return b, attempt, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, attempt, fmt.Errorf("restart the broker at %s (name server %s): %w", addr, nsAddr, err)
		}
		select {
		case <-ctx.Done():
			return nil, attempt, fmt.Errorf("restart the broker at %s (name server %s): address still in use after %d attempt(s): %w", addr, nsAddr, attempt, err)
		case <-tick.C:
		}
	}
}
