package brokermetrics_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/brokermetrics"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
)

// manyQueues is a broker with one consumer group committed on 4 topics × 1,000 queues,
// a few messages behind on each topic, and its metrics listener.
func manyQueues(t *testing.T, perQueue bool) (b *broker.Broker, stop func(context.Context) error, url string) {
	t.Helper()
	quiet := testkit.Quiet()
	b, stop, err := broker.StartEphemeral(broker.Config{Logger: quiet, MetricsPerQueueLag: perQueue})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, stop)
	ms, err := brokermetrics.Start(brokermetrics.Config{Addr: "127.0.0.1:0", Logger: quiet,
		Collectors: []prometheus.Collector{brokermetrics.NewCollector(b)}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, ms.Shutdown)
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	c := testkit.Context(t, 60*time.Second)
	for i := range 4 {
		topic := "Wide" + strconv.Itoa(i)
		if _, err := a.CreateTopic(c, admin.TopicSpec{Topic: topic, Queues: 1000}); err != nil {
			t.Fatal(err)
		}
		for q := range 1000 {
			resp, err := rc.InvokeSync(c, b.Addr(), remoting.NewRequest(remoting.UpdateConsumerOffset, map[string]string{
				"consumerGroup": "wide", "topic": topic, "queueId": strconv.Itoa(q), "commitOffset": "0"}, nil))
			if err != nil || resp.ResponseErr() != nil {
				t.Fatalf("commit: %v %v", err, resp)
			}
		}
	}
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Group: "wide-pg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(c); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(c)
	for i := range 4 {
		if _, err := p.SendSync(c, message.NewMessage("Wide"+strconv.Itoa(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	return b, stop, "http://" + ms.Addr()
}

// scrapeText returns the /metrics body.
func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := httpc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func countSeries(body, prefix string) int {
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix+"{") || strings.HasPrefix(line, prefix+" ") {
			n++
		}
	}
	return n
}

// TestScrapeSizeManyQueues: one group on 4,000 queues is 4 lag series (and 4 lag-age
// series) by default; the per-queue series come only with metricsPerQueueLag. The
// scrape sizes are logged (figures for docs/operations.md).
func TestScrapeSizeManyQueues(t *testing.T) {
	if testing.Short() {
		t.Skip("commits 8,000 offsets")
	}
	sizes := map[bool]int{}
	for _, perQueue := range []bool{false, true} {
		_, _, url := manyQueues(t, perQueue)
		body := scrapeText(t, url)
		sizes[perQueue] = len(body)
		lag, age, queue := countSeries(body, "sluice_broker_consumer_lag_messages"), countSeries(body, "sluice_broker_consumer_lag_seconds"),
			countSeries(body, "sluice_broker_consumer_queue_lag_messages")
		wantQueue := 0
		if perQueue {
			wantQueue = 4000
		}
		if lag != 4 || age != 4 || queue != wantQueue {
			t.Errorf("metricsPerQueueLag=%t: %d lag, %d lag-age, %d per-queue series; want 4, 4, %d", perQueue, lag, age, queue, wantQueue)
		}
		if !strings.Contains(body, `sluice_broker_consumer_lag_messages{broker="`) || !strings.Contains(body, `group="wide",topic="Wide0"} 1`) {
			t.Errorf("metricsPerQueueLag=%t: no lag of 1 on Wide0", perQueue)
		}
	}
	t.Logf("scrape of one group on 4,000 queues: %d bytes by default, %d bytes with metricsPerQueueLag (per-queue series as before, plus the aggregates)", sizes[false], sizes[true])
}

// TestDeletedTopicSeriesAndReadiness: a deleted topic's series end with it; /readyz
// turns 503 once the broker shuts down, /healthz stays 200 while the listener serves.
func TestDeletedTopicSeriesAndReadiness(t *testing.T) {
	quiet := testkit.Quiet()
	b, stop, err := broker.StartEphemeral(broker.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, stop)
	ms, err := brokermetrics.Start(brokermetrics.Config{Addr: "127.0.0.1:0", Logger: quiet,
		Collectors: []prometheus.Collector{brokermetrics.NewCollector(b)}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, ms.Shutdown)
	url := "http://" + ms.Addr()
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Gone", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitTopicRoute(ctx(t), "Gone"); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{b.NamesrvAddr()}, Group: "gone-pg", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendSync(ctx(t), message.NewMessage("Gone", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if v := value(scrape(t, url+"/metrics"), "sluice_broker_put_messages_total", "topic", "Gone"); v != 1 {
		t.Fatalf("put_messages_total{topic=Gone} = %v before the delete", v)
	}
	if _, err := a.DeleteTopic(ctx(t), "Gone"); err != nil {
		t.Fatal(err)
	}
	if v := value(scrape(t, url+"/metrics"), "sluice_broker_put_messages_total", "topic", "Gone"); v != -1 {
		t.Errorf("put_messages_total{topic=Gone} = %v after the delete, want no series", v)
	}
	get := func(path string) (int, string) {
		resp, err := httpc.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Fatalf("readyz with the broker up: %d %s", code, body)
	}
	if err := stop(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "shut down") {
		t.Errorf("readyz after shutdown: %d %q", code, body)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("healthz: %d", code)
	}
	if v := value(scrape(t, url+"/metrics"), "sluice_broker_up"); v != 0 {
		t.Errorf("sluice_broker_up after shutdown = %v", v)
	}
}
