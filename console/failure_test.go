package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/brokermetrics"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/internal/testkit"
)

// The failure scenario an operator must see through: 323 dead letters of billing, a
// lagging group among 24, then the broker stopped while its name server keeps running.
const (
	deadLetters = 323
	laggingLag  = 40 // messages of Orders the lagging group has not consumed
	caughtUp    = 22 // groups with every offset at the end
)

// scenario is an env whose broker registers with a name server of its own (which
// outlives it), scraped over HTTP like a real deployment.
type scenario struct {
	*env
	ns         *namesrv.NameServer
	metrics    *brokermetrics.Server
	stopBroker func()
}

func newScenario(t *testing.T) *scenario {
	t.Helper()
	ns, err := namesrv.New(namesrv.Config{ListenAddr: "127.0.0.1:0", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, ns.Shutdown)
	sc := &scenario{ns: ns}
	// The console scrapes the broker's /metrics, started once the broker is (below).
	var scrapeAddr atomic.Pointer[string]
	sc.env = newEnv(t, func(c *console.Config) {
		c.Metrics = []prometheus.Gatherer{prometheus.GathererFunc(func() ([]*dtoFamily, error) {
			addr := scrapeAddr.Load()
			if addr == nil {
				return nil, fmt.Errorf("no metrics listener yet")
			}
			return console.ScrapeURL("http://" + *addr + "/metrics").Gather()
		})}
	}, broker.Config{NamesrvAddr: ns.Addr()})
	if sc.metrics, err = brokermetrics.Start(brokermetrics.Config{Addr: "127.0.0.1:0", Collectors: []prometheus.Collector{brokermetrics.NewCollector(sc.b)}, Logger: testkit.Quiet()}); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, sc.metrics.Shutdown)
	addr := sc.metrics.Addr()
	scrapeAddr.Store(&addr)
	sc.stopBroker = func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := sc.producer(t).Shutdown(c); err != nil { // before its broker goes
			t.Errorf("producer shutdown: %v", err)
		}
		if err := sc.b.Shutdown(c); err != nil {
			t.Errorf("broker shutdown: %v", err)
		}
		if err := sc.metrics.Shutdown(c); err != nil {
			t.Errorf("metrics shutdown: %v", err)
		}
	}

	if _, err := sc.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Orders", Queues: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.a.WaitTopicRoute(ctx(t), "Orders"); err != nil {
		t.Fatal(err)
	}
	sent := sc.send(t, "Orders", deadLetters)
	for _, r := range sent {
		sc.kill(t, "billing", r)
	}
	qs, err := sc.a.QueueOffsets(ctx(t), "Orders")
	if err != nil {
		t.Fatal(err)
	}
	for i := range caughtUp {
		for _, q := range qs {
			sc.commit(t, "group-"+strconv.Itoa(i), "Orders", q.Queue.QueueID, q.Max)
		}
	}
	left := int64(laggingLag) // "lagging" is behind by laggingLag messages in all
	for _, q := range qs {
		behind := min(left, q.Max)
		left -= behind
		sc.commit(t, "lagging", "Orders", q.Queue.QueueID, q.Max-behind)
	}
	if left != 0 {
		t.Fatalf("could not place a lag of %d", laggingLag)
	}
	return sc
}

var (
	groupRowRe = regexp.MustCompile(`<tr[^>]*data-group="([^"]+)"><td><a [^>]*>[^<]*</a></td><td class="r lag">(\d+)</td>`)
	dlqRowRe   = regexp.MustCompile(`<tr><td class="r">(\d+)</td>`)
)

// TestFailurePathsOverHTTP: the groups page shows the lagging group first with its lag,
// the DLQ page totals and pages 323 dead letters newest first, and once the broker is
// stopped every page answers non-200 with an error naming the name server — never an
// empty list or zeros; the chart data stops instead of dropping to 0.
func TestFailurePathsOverHTTP(t *testing.T) {
	sc := newScenario(t)
	get := func(path string, want int) string {
		t.Helper()
		code, body, _ := do(t, "GET", sc.base+path, nil, nil)
		if code != want {
			t.Fatalf("GET %s: %d, want %d: %.600s", path, code, want, body)
		}
		return body
	}

	body := get("/groups", http.StatusOK)
	rows := groupRowRe.FindAllStringSubmatch(body, -1)
	if len(rows) != caughtUp+2 || !strings.Contains(body, "1–24 of 24") {
		t.Fatalf("groups page: %d rows: %.2000s", len(rows), body)
	}
	if rows[0][1] != "lagging" || rows[0][2] != strconv.Itoa(laggingLag) {
		t.Fatalf("first row %v, want the lagging group with lag %d", rows[0][1:], laggingLag)
	}
	if !strings.Contains(body, "offsets only") {
		t.Error("groups that only committed offsets are not marked")
	}
	if body := get("/groups?sort=group", http.StatusOK); groupRowRe.FindStringSubmatch(body)[1] != "billing" {
		t.Error("sort by name")
	}

	body = get("/dlq?group=billing", http.StatusOK)
	offs := dlqRowRe.FindAllStringSubmatch(body, -1)
	if !strings.Contains(body, `<strong id="dlq-total">323</strong>`) || len(offs) != console.DefaultPageSize || !strings.Contains(body, "1–50 of 323") {
		t.Fatalf("DLQ page 1: %d rows: %.3000s", len(offs), body)
	}
	// One DLQ queue: newest first is offset 322 down.
	if offs[0][1] != "322" || offs[49][1] != "273" {
		t.Fatalf("DLQ page 1 runs %s..%s, want 322..273", offs[0][1], offs[49][1])
	}
	body = get("/dlq?group=billing&page=7", http.StatusOK)
	offs = dlqRowRe.FindAllStringSubmatch(body, -1)
	if len(offs) != 23 || offs[0][1] != "22" || offs[22][1] != "0" || !strings.Contains(body, "301–323 of 323") {
		t.Fatalf("DLQ page 7: %d rows %v", len(offs), offs)
	}
	if body := get("/dlq?group=billing&order=oldest", http.StatusOK); dlqRowRe.FindStringSubmatch(body)[1] != "0" {
		t.Error("oldest first")
	}
	// A typo in the group is not "no dead letter".
	for _, path := range []string{"/dlq?group=biling", "/groups/biling"} {
		body := get(path, http.StatusNotFound)
		if !strings.Contains(body, `No broker knows consumer group &#34;biling&#34;`) || !strings.Contains(body, "Did you mean billing?") || strings.Contains(body, "No dead letter.") {
			t.Errorf("GET %s: %.1500s", path, body)
		}
	}
	testkit.WaitFor(t, 15*time.Second, func() bool {
		s := seriesOf(t, sc.base)
		return len(s.Lag["lagging"]) > 0 && s.Lag["lagging"][len(s.Lag["lagging"])-1] != nil
	}, "the lagging group charted")
	// Page sizes, for the record (go test -v -run TestFailurePathsOverHTTP ./console).
	for _, path := range []string{"/", "/groups", "/groups/lagging", "/dlq?group=billing", "/dlq?group=billing&page=7", "/topics"} {
		t.Logf("page %s: %d bytes", path, len(get(path, http.StatusOK)))
	}

	sc.stopBroker()
	ns := sc.ns.Addr()
	for _, path := range []string{"/", "/dlq?group=billing", "/groups", "/topics", "/topics/Orders", "/groups/billing", "/messages?topic=Orders"} {
		code, body, _ := do(t, "GET", sc.base+path, nil, nil)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, `id="error"`) || !strings.Contains(body, ns) {
			t.Errorf("GET %s with the broker stopped: %d, want 503 with an error naming %s: %.800s", path, code, ns, body)
		}
		for _, allClear := range []string{"No dead letter.", "No consumer group.", `id="stat-topics">0<`, "No message found."} {
			if strings.Contains(body, allClear) {
				t.Errorf("GET %s with the broker stopped says %q", path, allClear)
			}
		}
	}
	if code, body, _ := do(t, "GET", sc.base+"/groups/billing/lag", nil, nil); code == http.StatusOK || !strings.Contains(body, ns) {
		t.Errorf("lag fragment with the broker stopped: %d %.300s", code, body)
	}
	// The charts: once scrapes fail, the newest points are null (a gap), not 0.
	testkit.WaitFor(t, 15*time.Second, func() bool {
		s := seriesOf(t, sc.base)
		l := s.Lag["lagging"]
		return s.Error != "" && s.status == http.StatusBadGateway && len(l) > 0 && l[len(l)-1] == nil
	}, "the chart data to show the failed scrapes as gaps")
}

type dtoFamily = dto.MetricFamily

// chartData is /api/series as the charts read it, with the answer's status.
type chartData struct {
	Error  string
	Lag    map[string][]*float64
	status int
}

func seriesOf(t *testing.T, base string) chartData {
	t.Helper()
	code, body, _ := do(t, "GET", base+"/api/series", nil, nil)
	var s chartData
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/api/series: %v: %.300s", err, body)
	}
	s.status = code
	return s
}
