package brokermetrics_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/brokermetrics"
	"github.com/sluicemq/sluice/internal/testkit"
)

// TestShippedDashboardAndAlerts: every sluice_* metric the Grafana dashboard and the alert
// rules in docs/ query is one the collectors export; with promtool on the PATH, the
// dashboard's queries parse as PromQL and the alert rules pass their unit tests.
func TestShippedDashboardAndAlerts(t *testing.T) {
	b, stop, err := broker.StartEphemeral(broker.Config{Logger: testkit.Quiet(), MetricsPerQueueLag: true})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, stop)
	reg := prometheus.NewRegistry()
	reg.MustRegister(brokermetrics.NewCollector(b), brokermetrics.NewNameServerCollector(b.EmbeddedNameServer()))
	descs := make(chan *prometheus.Desc, 100)
	go func() {
		brokermetrics.NewCollector(b).Describe(descs)
		brokermetrics.NewNameServerCollector(b.EmbeddedNameServer()).Describe(descs)
		close(descs)
	}()
	exported := map[string]bool{"sluice_build_info": true}
	nameRe := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range descs {
		if m := nameRe.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}

	raw, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	alerts, err := os.ReadFile("../../docs/prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	metricRe := regexp.MustCompile(`sluice_[a-z_]+`)
	for _, text := range append(exprs, string(alerts)) {
		for _, name := range metricRe.FindAllString(text, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if !exported[base] {
				t.Errorf("docs query %s, which no collector exports", name)
			}
		}
	}
	if len(exprs) < 8 {
		t.Fatalf("%d dashboard queries", len(exprs))
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on the PATH (Debian package prometheus; .ci/provision installs it): PromQL not checked")
	}
	// The dashboard's queries, Grafana variables filled in, as recording rules.
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	fill := strings.NewReplacer("$__rate_interval", "5m", "$broker", ".*", "$group", ".*")
	for i, e := range exprs {
		q, _ := json.Marshal(fill.Replace(e))
		rules.WriteString("      - record: dashboard:q" + string(rune('a'+i)) + "\n        expr: " + string(q) + "\n")
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", file}, {"check", "rules", "../../docs/prometheus-alerts.yml"}, {"test", "rules", "../../docs/prometheus-alerts.test.yml"}} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
