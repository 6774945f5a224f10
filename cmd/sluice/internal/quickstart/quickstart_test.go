package quickstart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/redistest"
)

func TestMain(m *testing.M) {
	// The inbox part's crashing consumer runs this executable as "quickstart
	// inbox-child" (SLUICE_MAIN_ARGS says so when it is a test binary): here, this test
	// binary in child mode.
	if args, ok := os.LookupEnv("SLUICE_MAIN_ARGS"); ok {
		if args != "quickstart inbox-child" {
			fmt.Fprintf(os.Stderr, "quickstart test binary: unknown child mode %q\n", args)
			os.Exit(2)
		}
		if err := RunInboxChild(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "inbox-child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// defaults returns the Options of sluice quickstart without flags.
func defaults() Options {
	return Options{Orders: DefaultOrders, Failed: DefaultFailed, OutageSends: DefaultOutageSends, Timeout: DefaultTimeout}
}

// runFor runs the quickstart with o within timeout and returns its output.
func runFor(t *testing.T, timeout time.Duration, o Options) (string, error) {
	t.Helper()
	var out bytes.Buffer
	o.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := Run(ctx, o)
	return out.String(), err
}

// groupSection returns the lines printed under "consumer group <group> ...", up to the
// next blank line.
func groupSection(t *testing.T, out, group string) (header string, lines []string) {
	t.Helper()
	i := strings.Index(out, "consumer group "+group+" (subscribed")
	if i < 0 {
		t.Fatalf("no section for group %s in output:\n%s", group, out)
	}
	rest := out[i:]
	if j := strings.Index(rest, "\n\n"); j >= 0 {
		rest = rest[:j]
	}
	all := strings.Split(strings.TrimSpace(rest), "\n")
	return all[0], all[1:]
}

var qsDataDir = regexp.MustCompile(`\(data in (\S+)\)`)

func TestQuickstart(t *testing.T) {
	out, err := runFor(t, 60*time.Second, defaults())
	if err != nil {
		t.Fatalf("quickstart failed: %v\n%s", err, out)
	}

	header, lines := groupSection(t, out, "order_service")
	if !strings.Contains(header, `"PaySuccess || PayFailed") received 12 message(s)`) {
		t.Errorf("order_service header %q", header)
	}
	if len(lines) != 12 {
		t.Errorf("order_service lines = %d, want 12:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i := 1; i <= 12; i++ {
		tag, status := "PaySuccess", "PAID"
		if i > 10 {
			tag, status = "PayFailed", "DECLINED"
		}
		order := fmt.Sprintf("ORD-%04d", 1000+i)
		want := fmt.Sprintf(`%s key=%s  {"orderId":"%s","amount":%s,"status":"%s"}`,
			padTag(tag), order, order, strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", float64(1999+i*250)/100), "0"), "."), status)
		if i > len(lines) || strings.TrimSpace(lines[i-1]) != want {
			t.Errorf("order_service line %d: want %q, got:\n%s", i, want, strings.Join(lines, "\n"))
		}
	}

	header, lines = groupSection(t, out, "points_service")
	if !strings.Contains(header, `"PaySuccess") received 10 message(s)`) {
		t.Errorf("points_service header %q", header)
	}
	if len(lines) != 10 {
		t.Errorf("points_service lines = %d, want 10:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		order := fmt.Sprintf("ORD-%04d", 1001+i)
		if !strings.HasPrefix(strings.TrimSpace(l), "PaySuccess key="+order+" ") {
			t.Errorf("points_service line %d = %q, want PaySuccess of %s", i+1, l, order)
		}
	}
	if strings.Contains(strings.Join(lines, "\n"), "PayFailed") {
		t.Errorf("points_service (PaySuccess only) received a PayFailed event:\n%s", strings.Join(lines, "\n"))
	}
	for _, want := range []string{"created topic PayEvents with 4 queues", "both groups received exactly what they subscribed to", "quickstart OK in"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	checkReliability(t, out, 3)
	checkInbox(t, out, 10+3+1)
	if !strings.Contains(out, "redis: embedded miniredis at 127.0.0.1:") {
		t.Errorf("without --redis the run does not use an embedded miniredis:\n%s", out)
	}
	m := qsDataDir.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no data directory in output:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory %s still exists after quickstart (stat: %v)", m[1], err)
	}
}

// padTag pads a tag as the quickstart's %-10s does.
func padTag(tag string) string { return fmt.Sprintf("%-10s", tag) }

func TestQuickstartReportsMissingMessages(t *testing.T) {
	// points_service subscribed to a tag nobody sends: after the deadline the run fails,
	// naming the group and what it is missing, and still shuts everything down. The
	// deadline leaves the sends time on a loaded machine (the run waits it out anyway).
	t.Parallel() // mostly waiting for the deadline
	var out bytes.Buffer
	err := runQuickstart(context.Background(), &out, qsOptions{orders: 3, failed: 1, outageSends: 3, timeout: 8 * time.Second, log: discardLogger(), pointsTags: "Refund"})
	if err == nil {
		t.Fatalf("quickstart succeeded although points_service subscribed to Refund:\n%s", out.String())
	}
	for _, want := range []string{"group points_service is missing 3 of 3 message(s)", "PaySuccess/ORD-1001", "PaySuccess/ORD-1003"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "order_service") {
		t.Errorf("error %q blames order_service, which got everything", err)
	}
	if strings.Contains(out.String(), "quickstart OK") {
		t.Errorf("output claims success:\n%s", out.String())
	}
	m := qsDataDir.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no data directory in output:\n%s", out.String())
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory %s still exists after a failed quickstart (stat: %v)", m[1], err)
	}
}

func TestQuickstartOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Orders = 0 }, "--orders 0: must be 1..1000"},
		{func(o *Options) { o.Failed = -1 }, "--failed -1: must be 0..1000"},
		{func(o *Options) { o.Timeout = 0 }, "--timeout 0s: must be positive"},
		{func(o *Options) { o.OutageSends = 0 }, "--outage-sends 0: must be 1..100"},
		{func(o *Options) { o.OutageSends = 101 }, "--outage-sends 101: must be 1..100"},
		{func(o *Options) { o.Redis = closedAddr(t) }, "no answer to PING"},
	} {
		o := defaults()
		tc.edit(&o)
		_, err := runFor(t, 10*time.Second, o)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want %q", err, tc.want)
		}
	}
}

var (
	qsStartedBroker   = regexp.MustCompile(`started name server (\S+) and broker broker-a at (\S+) \(`)
	qsRestartedBroker = regexp.MustCompile(`started broker broker-a again at (\S+) with name server (\S+) on the same data directory`)
	qsParkedLine      = regexp.MustCompile(`(?m)^send PaySuccess (ORD-\d+) key=(PaySuccess_[0-9a-f]{32}) failed after 3 attempt\(s\): .+ -> parked as record [0-9A-F]{32}$`)
	qsResentLine      = regexp.MustCompile(`(?m)^retry task resent PaySuccess (ORD-\d+) key=(PaySuccess_[0-9a-f]{32}) -> queue \d offset \d+ \(SEND_OK\)$`)
	qsTallyLine       = regexp.MustCompile(`(?m)^  (sent|parked|resent|consumed|duplicates skipped|business effects) +(\d+)`)
	qsNamespace       = regexp.MustCompile(`key namespace (qs-[0-9a-f]{16})\n`)
	qsDeletedKeys     = regexp.MustCompile(`deleted the (\d+) Redis key\(s\) of namespace (qs-[0-9a-f]{16})`)
)

// tallyOf returns the tally lines' numbers by name.
func tallyOf(t *testing.T, out string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, m := range qsTallyLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		got[m[1]] = n
	}
	return got
}

// checkReliability asserts the reliability part of a successful run with n outage sends:
// n sends parked with the producer's 3 attempts, the broker restarted on its old
// addresses, exactly those n records resent, the duplicate skipped, and the tally.
func checkReliability(t *testing.T, out string, n int) {
	t.Helper()
	first, again := qsStartedBroker.FindStringSubmatch(out), qsRestartedBroker.FindStringSubmatch(out)
	if first == nil || again == nil {
		t.Fatalf("no start and restart of the broker in the output:\n%s", out)
	}
	if again[1] != first[2] || again[2] != first[1] {
		t.Errorf("broker restarted at %s (name server %s), want its old addresses %s (%s)", again[1], again[2], first[2], first[1])
	}
	parked := map[string]string{}
	for _, m := range qsParkedLine.FindAllStringSubmatch(out, -1) {
		parked[m[1]] = m[2]
	}
	resent := map[string]string{}
	for _, m := range qsResentLine.FindAllStringSubmatch(out, -1) {
		if _, dup := resent[m[1]]; dup {
			t.Errorf("%s resent twice", m[1])
		}
		resent[m[1]] = m[2]
	}
	if len(parked) != n {
		t.Errorf("%d parked sends in the output, want %d:\n%s", len(parked), n, out)
	}
	for i := 1; i <= n; i++ {
		order := fmt.Sprintf("ORD-%04d", 2000+i)
		if parked[order] == "" || resent[order] != parked[order] {
			t.Errorf("%s: parked with key %q, resent with key %q; want both, with one key", order, parked[order], resent[order])
		}
	}
	if len(resent) != n {
		t.Errorf("%d resends, want %d", len(resent), n)
	}
	dup := fmt.Sprintf("ORD-%04d", 2000+n+1)
	for _, want := range []string{
		"--- reliability: a broker outage and a duplicate delivery ---",
		fmt.Sprintf("both groups received the %d parked payment(s)", n),
		"sent PaySuccess " + dup + " key=PaySuccess_",
		"points_service added ",
		fmt.Sprintf("points_service got %s 2 times: 1 skipped by Dedup as a duplicate (done marker set), points added 1 time(s); order_service (no Dedup) handled it 2 times", dup),
		fmt.Sprintf("reliability OK: no payment lost (%d parked, %d resent), no points added twice (1 duplicate skipped)", n, n),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, " again (the same message and key: a duplicate delivery)") {
		t.Errorf("output does not show the second send of %s:\n%s", dup, out)
	}
	want := map[string]int{"sent": n + 2, "parked": n, "resent": n, "consumed": n + 2, "duplicates skipped": 1, "business effects": n + 1}
	got := tallyOf(t, out)
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("tally %s = %d (present %v), want %d:\n%s", name, g, ok, w, out)
		}
	}
	if !strings.Contains(out, "(still parked 0, dead 0)") {
		t.Errorf("tally does not show an empty park namespace:\n%s", out)
	}
	if m := qsDeletedKeys.FindStringSubmatch(out); m == nil || m[1] == "0" {
		t.Errorf("no Redis keys deleted at the end:\n%s", out)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// With --redis, the run writes only keys of its own namespace and deletes them all at
// the end; keys of others stay. Against miniredis, and a real Redis when
// SLUICE_REDIS_ADDR is set.
func TestQuickstartExternalRedis(t *testing.T) {
	t.Parallel() // mostly waiting: the consumers' pull backoff, the deadline
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		ctx := context.Background()
		other := tg.NS + ":someone-else"
		if err := tg.Client.Set(ctx, other, "kept", 0).Err(); err != nil {
			t.Fatal(err)
		}
		out, err := runFor(t, 60*time.Second, Options{Redis: tg.Addr, Orders: 3, Failed: 1, OutageSends: 2, Timeout: DefaultTimeout})
		if err != nil {
			t.Fatalf("quickstart --redis %s: %v\n%s", tg.Addr, err, out)
		}
		if !strings.Contains(out, "redis: Redis at "+tg.Addr+", key namespace qs-") {
			t.Errorf("output does not name the Redis at %s:\n%s", tg.Addr, out)
		}
		checkReliability(t, out, 2)
		m := qsNamespace.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no key namespace in the output:\n%s", out)
		}
		keys, err := tg.Client.Keys(ctx, "*"+m[1]+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			t.Errorf("%d key(s) of namespace %s left after the run: %v", len(keys), m[1], keys)
		}
		if d := qsDeletedKeys.FindStringSubmatch(out); d == nil || d[2] != m[1] {
			t.Errorf("the run does not report deleting namespace %s:\n%s", m[1], out)
		}
		if v, err := tg.Client.Get(ctx, other).Result(); err != nil || v != "kept" {
			t.Errorf("a key outside the run's namespace: %q, %v; want it kept", v, err)
		}
	})
}

// Without Dedup (test hook) the duplicate adds points twice: the tally says so and the
// run fails naming the payment, and still shuts everything down.
func TestQuickstartReportsDoubleEffect(t *testing.T) {
	t.Parallel() // mostly waiting: the consumers' pull backoff, the deadline
	var out bytes.Buffer
	err := runQuickstart(context.Background(), &out, qsOptions{orders: 2, failed: 0, outageSends: 2, timeout: 30 * time.Second,
		log: discardLogger(), noDedup: true})
	if err == nil {
		t.Fatalf("quickstart without Dedup succeeded:\n%s", out.String())
	}
	for _, want := range []string{"points added more than once: ORD-2003 (2 times)", "duplicates skipped 0, want 1", "business effects 4, want 3"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "lost") || strings.Contains(err.Error(), "resent") {
		t.Errorf("error %q blames the outage part, which worked", err)
	}
	got := tallyOf(t, out.String())
	if got["duplicates skipped"] != 0 || got["business effects"] != 3+1 || got["consumed"] != 4 {
		t.Errorf("tally %v, want 0 duplicates skipped, 4 effects, 4 consumed:\n%s", got, out.String())
	}
	if strings.Contains(out.String(), "quickstart OK") || strings.Contains(out.String(), "reliability OK") {
		t.Errorf("output claims success:\n%s", out.String())
	}
	checkCleanedUp(t, out.String())
}

// Without the retry task (test hook) the parked payments are never resent: at the
// deadline the run fails naming them, and still shuts everything down.
func TestQuickstartReportsLoss(t *testing.T) {
	t.Parallel() // mostly waiting: the consumers' pull backoff, the deadline
	var out bytes.Buffer
	err := runQuickstart(context.Background(), &out, qsOptions{orders: 2, failed: 0, outageSends: 2, timeout: 8 * time.Second,
		log: discardLogger(), noRetryTask: true})
	if err == nil {
		t.Fatalf("quickstart without the retry task succeeded:\n%s", out.String())
	}
	for _, want := range []string{"timed out waiting for the parked payments to be resent and consumed", "resent 0 of 2 parked sends",
		"2 record(s) still parked and 0 dead in Redis", "lost: ORD-2001 (no points added), ORD-2001 (never reached order_service), ORD-2002 (no points added)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "more than once") {
		t.Errorf("error %q reports a double effect", err)
	}
	if got := tallyOf(t, out.String()); got["parked"] != 2 || got["resent"] != 0 || got["business effects"] != 0 {
		t.Errorf("tally %v, want 2 parked, 0 resent, 0 effects:\n%s", got, out.String())
	}
	checkCleanedUp(t, out.String())
}

// checkCleanedUp asserts a failed run removed its data directory.
func checkCleanedUp(t *testing.T, out string) {
	t.Helper()
	m := qsDataDir.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no data directory in output:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory %s still exists after a failed quickstart (stat: %v)", m[1], err)
	}
}

func TestQuickstartTallyProblems(t *testing.T) {
	good := qsTally{outage: 3, sent: 5, parked: 3, resent: 3, events: 4, consumed: 5, duplicates: 1, effects: 4, orderGot: 5}
	if p := good.problems(); p != nil {
		t.Fatalf("a clean tally has problems: %v", p)
	}
	for _, tc := range []struct {
		name string
		edit func(*qsTally)
		want string
	}{
		{"a send during the outage not parked", func(x *qsTally) { x.parked, x.resent, x.consumed = 2, 2, 4 }, "parked 2 of the 3 sends made while the broker was down"},
		{"a parked send not resent", func(x *qsTally) { x.resent, x.consumed, x.duplicates = 2, 4, 0 }, "resent 2 of 3 parked sends"},
		{"records left", func(x *qsTally) { x.stillParked, x.dead = 1, 2 }, "1 record(s) still parked and 2 dead in Redis"},
		{"lost", func(x *qsTally) { x.lost = []string{"ORD-2002 (no points added)"} }, "lost: ORD-2002 (no points added)"},
		{"doubled", func(x *qsTally) { x.doubled = []string{"ORD-2004 (2 times)"} }, "points added more than once: ORD-2004 (2 times)"},
		{"an extra delivery", func(x *qsTally) { x.consumed, x.duplicates = 6, 2 }, "points_service consumed 6 deliveries, want 5"},
		{"duplicate not skipped", func(x *qsTally) { x.duplicates, x.effects = 0, 5 }, "duplicates skipped 0, want 1"},
		{"an effect missing", func(x *qsTally) { x.effects = 3 }, "business effects 3, want 4"},
		{"stopped early", func(x *qsTally) { x.note = "timed out waiting" }, "timed out waiting"},
	} {
		x := good
		tc.edit(&x)
		p := strings.Join(x.problems(), "; ")
		if !strings.Contains(p, tc.want) {
			t.Errorf("%s: problems %q lack %q", tc.name, p, tc.want)
		}
	}
}

var qsInboxTally = regexp.MustCompile(`inbox tally \([^)]*\): (\d+) PaySuccess message\(s\) of (\d+) payment\(s\) \(one sent twice\); after the crash ledger_service acknowledged (\d+) deliveries, (\d+) skipped by the inbox as already booked; ledger rows (\d+); doubled (\d+), lost (\d+)`)

// checkInbox asserts the inbox part of a successful run with payments distinct PaySuccess
// payments: a consumer process committed a batch and crashed in the next, the restarted
// consumer skipped the booked ones, and the ledger holds one row per payment.
func checkInbox(t *testing.T, out string, payments int) {
	t.Helper()
	for _, want := range []string{
		"--- exactly once: the same payments booked through a transactional inbox ---",
		": batch 1 [", ", committing",
		fmt.Sprintf(": batch 2 ["), fmt.Sprintf("inside the transaction, then CRASH (exit %d) before commit", qsCrashExit),
		fmt.Sprintf("the process died with status %d mid-batch", qsCrashExit),
		"inbox OK: every payment booked exactly once across the crash",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	m := qsInboxTally.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no inbox tally in the output:\n%s", out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	// Skipped at least: the committed batch (one payment or more) and one copy of the
	// payment sent twice; the batch the crash abandoned is booked again.
	if n(1) != payments+1 || n(2) != payments || n(3) < payments+1 || n(4) < 2 || n(5) != payments || n(6) != 0 || n(7) != 0 {
		t.Errorf("inbox tally %v, want %d messages, %d payments, >= %d acknowledged, >= 2 skipped, %d rows, 0 doubled, 0 lost",
			m[1:], payments+1, payments, payments+1, payments)
	}
}

// Booking without the inbox (test hook), the restarted consumer books the batch the crashed
// process had committed again: the run fails naming the payments booked twice.
func TestQuickstartInboxReportsDouble(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := runQuickstart(context.Background(), &out, qsOptions{orders: 6, failed: 0, outageSends: 1, timeout: 40 * time.Second,
		log: discardLogger(), noInbox: true})
	if err == nil || !strings.Contains(err.Error(), "booked twice: ") {
		t.Fatalf("quickstart without the inbox: %v\n%s", err, out.String())
	}
	if strings.Contains(err.Error(), "never booked") {
		t.Errorf("error %q reports a loss", err)
	}
	if strings.Contains(out.String(), "inbox OK") || strings.Contains(out.String(), "quickstart OK") {
		t.Errorf("output claims success:\n%s", out.String())
	}
	checkCleanedUp(t, out.String())
}

// With --postgres the inbox part runs on PostgreSQL (SLUICE_POSTGRES_DSN).
func TestQuickstartInboxPostgres(t *testing.T) {
	dsn := os.Getenv("SLUICE_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("SLUICE_POSTGRES_DSN not set: skipping quickstart --postgres")
	}
	t.Parallel()
	out, err := runFor(t, 60*time.Second, Options{Orders: 5, Failed: 0, OutageSends: 1, Postgres: dsn, Timeout: DefaultTimeout})
	if err != nil {
		t.Fatalf("quickstart --postgres: %v\n%s", err, out)
	}
	if !strings.Contains(out, "database: PostgreSQL (--postgres)") {
		t.Errorf("not on PostgreSQL:\n%s", out)
	}
	checkInbox(t, out, 5+1+1)
}
