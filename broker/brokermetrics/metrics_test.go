package brokermetrics_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/brokermetrics"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

func ctx(t *testing.T) context.Context { return testkit.Context(t, 10*time.Second) }

// httpc keeps no idle connections, so no goroutine of it outlives a test.
var httpc = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// scrape fetches url and parses the Prometheus text format.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := httpc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of the sample of name whose labels include want (-1 if none).
func value(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if have[want[i]] != want[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

func TestScrapeAfterTraffic(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last: after every shutdown
	quiet := testkit.Quiet()
	b, stop, err := broker.StartEphemeral(broker.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, stop)
	ms, err := brokermetrics.Start(brokermetrics.Config{Addr: "127.0.0.1:0", Pprof: true, Logger: quiet,
		Collectors: []prometheus.Collector{brokermetrics.NewCollector(b), brokermetrics.NewNameServerCollector(b.EmbeddedNameServer())}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, ms.Shutdown)
	url := "http://" + ms.Addr()

	a, err := admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "T", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitTopicRoute(ctx(t), "T"); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Group: "pg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, p.Shutdown)
	bodyBytes := 0
	var first *message.SendResult
	for i := range 5 {
		body := "order-" + strconv.Itoa(i)
		bodyBytes += len(body)
		r, err := p.SendSync(ctx(t), message.NewMessage("T", []byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = r
		}
	}
	// One delayed message (level 18, 2 h): it waits in the schedule topic.
	if _, err := p.SendSync(ctx(t), message.NewMessage("Later", []byte("x")).SetDelayLevel(18)); err != nil {
		t.Fatal(err)
	}

	pc, err := consumer.NewPullConsumer(consumer.PullConfig{NamesrvAddrs: []string{b.NamesrvAddr()}, Group: "g", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, pc.Shutdown)
	mq := message.MessageQueue{Topic: "T", BrokerName: b.Name(), QueueID: 0}
	res, err := pc.Pull(ctx(t), consumer.PullRequest{Queue: mq, Offset: 0})
	if err != nil || len(res.Messages) != 5 {
		t.Fatalf("pull: %v %+v", err, res)
	}
	if err := pc.CommitOffset(ctx(t), mq, 2); err != nil {
		t.Fatal(err)
	}
	// One message of the group straight to its DLQ, one to a retry at level 1 (1 s).
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	_, phy, err := message.ParseOffsetMsgID(first.OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	for _, level := range []string{"-1", "1"} {
		resp, err := rc.InvokeSync(ctx(t), b.Addr(), remoting.NewRequest(remoting.ConsumerSendMsgBack, map[string]string{
			"offset": strconv.FormatInt(phy, 10), "group": "g", "delayLevel": level, "originMsgId": first.MsgID}, nil))
		if err != nil || resp.ResponseErr() != nil {
			t.Fatalf("send back %s: %v %v", level, err, resp)
		}
	}

	// A request with an invalid group name is refused before its handler, and counted.
	bad, err := rc.InvokeSync(ctx(t), b.Addr(), remoting.NewRequest(remoting.QueryConsumerOffset, map[string]string{
		"consumerGroup": "bad group", "topic": "T", "queueId": "0"}, nil))
	if err != nil || bad.ResponseErr() == nil {
		t.Fatalf("a bad group name was accepted: %v %v", err, bad)
	}

	var fams map[string]*dto.MetricFamily
	testkit.WaitFor(t, 10*time.Second, func() bool {
		fams = scrape(t, url+"/metrics")
		return value(fams, "sluice_broker_retries_total", "group", "g") == 1
	}, "the retry at level 1 to reach %RETRY%g")
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_broker_put_messages_total", []string{"topic", "T", "broker", b.Name()}, 5},
		{"sluice_broker_put_bytes_total", []string{"topic", "T"}, float64(bodyBytes)},
		{"sluice_broker_put_messages_total", []string{"topic", "Later"}, 1},
		{"sluice_broker_get_messages_total", []string{"group", "g", "topic", "T"}, 5},
		{"sluice_broker_consumer_lag_messages", []string{"group", "g", "topic", "T"}, 3},
		{"sluice_broker_up", nil, 1},
		{"sluice_broker_dead_letters_total", []string{"group", "g"}, 1},
		{"sluice_broker_retries_total", []string{"group", "g"}, 1},
		{"sluice_broker_send_latency_seconds", nil, 6},
		{"sluice_broker_schedule_backlog_messages", []string{"level", "18", "delay", "2h0m0s"}, 1},
		{"sluice_broker_schedule_backlog_messages", []string{"level", "1"}, 0},
		{"sluice_broker_held_pulls", nil, 0},
		{"sluice_broker_transaction_checks_total", nil, 0},
		{"sluice_broker_refused_total", []string{"reason", "names"}, 1},
		{"sluice_broker_refused_total", []string{"reason", "acl"}, 0},
		{"sluice_broker_refused_total", []string{"reason", "limits"}, 0},
		{"sluice_broker_unconsumed_deleted_total", nil, 0},
		{"sluice_broker_writes_refused_total", nil, 0},
		{"sluice_broker_refusing_writes", nil, 0},
	}
	for _, c := range checks {
		if got := value(fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	atLeast := []struct {
		name   string
		labels []string
		min    float64
	}{
		{"sluice_broker_pull_latency_seconds", nil, 1},
		{"sluice_broker_consumer_lag_seconds", []string{"group", "g", "topic", "T"}, 0.001}, // the oldest unconsumed message's age
		{"sluice_broker_connections", nil, 2},
		{"sluice_broker_commitlog_bytes", nil, 1},
		{"sluice_broker_commitlog_flush_seconds", nil, 0},
		{"sluice_broker_disk_used_ratio", nil, 0},
		{"sluice_broker_register_total", []string{"result", "ok"}, 1},
		{"sluice_broker_register_body_bytes", nil, 100},
		{"sluice_namesrv_register_total", []string{"result", "ok"}, 1},
		{"sluice_namesrv_register_body_bytes", nil, 1},
		{"sluice_namesrv_brokers", nil, 1},
		{"sluice_namesrv_topics", nil, 1},
		{"go_goroutines", nil, 1},
	}
	for _, c := range atLeast {
		if got := value(fams, c.name, c.labels...); got < c.min {
			t.Errorf("%s%v = %v, want >= %v", c.name, c.labels, got, c.min)
		}
	}
	if got := value(fams, "sluice_broker_register_total", "result", "failed"); got != 0 {
		t.Errorf("failed registrations %v", got)
	}
	if fams["sluice_broker_consumer_queue_lag_messages"] != nil {
		t.Error("per-queue lag series exported without metricsPerQueueLag")
	}
	if value(fams, "sluice_build_info") != 1 {
		t.Error("no sluice_build_info")
	}
	// The Monitoring tables (README, docs/operations.md) list exactly the metrics exported.
	documented := map[string]bool{}
	for _, doc := range []string{"../../README.md", "../../docs/operations.md"} {
		text, err := os.ReadFile(doc)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("(?m)^\\| `(sluice_(?:broker|namesrv)_\\w+)`").FindAllStringSubmatch(string(text), -1) {
			documented[m[1]] = true
		}
	}
	for name := range fams {
		if (strings.HasPrefix(name, "sluice_broker_") || strings.HasPrefix(name, "sluice_namesrv_")) && !documented[name] {
			t.Errorf("metric %s is not documented (README or docs/operations.md)", name)
		}
	}
	for name := range documented {
		if fams[name] == nil && name != "sluice_broker_consumer_queue_lag_messages" { // opt-in: TestPerQueueLagAndDeletedTopics
			t.Errorf("the docs list %s, which is not exported", name)
		}
	}

	// A held pull shows while it waits.
	held := make(chan error, 1)
	go func() {
		_, err := pc.Pull(ctx(t), consumer.PullRequest{Queue: mq, Offset: 5, LongPoll: 5 * time.Second})
		held <- err
	}()
	testkit.WaitFor(t, 5*time.Second, func() bool {
		return value(scrape(t, url+"/metrics"), "sluice_broker_held_pulls") == 1
	}, "a held pull")
	if _, err := p.SendSync(ctx(t), message.NewMessage("T", []byte("wake"))); err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// The held pull is timed apart from the pulls answered at once.
	if n := value(scrape(t, url+"/metrics"), "sluice_broker_pull_held_seconds"); n < 1 {
		t.Errorf("held pulls observed: %v", n)
	}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		resp, err := httpc.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != want {
			t.Errorf("GET %s: %s %q", path, resp.Status, body)
		}
	}

	resp, err := httpc.Get(url + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "goroutine") {
		t.Fatalf("pprof index: %s", resp.Status)
	}
}

func TestPprofOffByDefault(t *testing.T) {
	ms, err := brokermetrics.Start(brokermetrics.Config{Addr: "127.0.0.1:0", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, ms.Shutdown)
	resp, err := httpc.Get("http://" + ms.Addr() + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("pprof without Pprof: %s", resp.Status)
	}
	if _, err := brokermetrics.Start(brokermetrics.Config{}); err == nil {
		t.Fatal("empty Addr accepted")
	}
}
