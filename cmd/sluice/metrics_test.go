package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var metricsLine = regexp.MustCompile(`metrics on (http://\S+/metrics)`)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBrokerAndNamesrvMetricsFlags(t *testing.T) {
	b := startBackground(t, "broker", "--data-dir", filepath.Join(t.TempDir(), "store"), "--listen", "127.0.0.1:0",
		"--namesrv-listen", "127.0.0.1:0", "--log-level", "error", "--metrics", "127.0.0.1:0", "--pprof")
	url := b.waitLine(t, metricsLine)[1]
	code, body := get(t, url)
	for _, want := range []string{"sluice_broker_connections{broker=", "sluice_namesrv_brokers{namesrv=", "go_goroutines"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("broker /metrics (%d) lacks %q", code, want)
		}
	}
	if code, _ := get(t, strings.TrimSuffix(url, "metrics")+"debug/pprof/"); code != 200 {
		t.Errorf("broker --pprof: %d", code)
	}
	if err := b.stop(t); err != nil {
		t.Errorf("broker: %v", err)
	}

	n := startBackground(t, "namesrv", "--listen", "127.0.0.1:0", "--log-level", "error", "--metrics", "127.0.0.1:0")
	url = n.waitLine(t, metricsLine)[1]
	if code, body := get(t, url); code != 200 || !strings.Contains(body, "sluice_namesrv_register_total") || strings.Contains(body, "sluice_broker_") {
		t.Errorf("namesrv /metrics (%d): %.300s", code, body)
	}
	if code, _ := get(t, strings.TrimSuffix(url, "metrics")+"debug/pprof/"); code != 404 {
		t.Errorf("namesrv without --pprof serves pprof: %d", code)
	}
	if err := n.stop(t); err != nil {
		t.Errorf("namesrv: %v", err)
	}
	if _, err := run(t, "namesrv", "--listen", "127.0.0.1:0", "--pprof"); err == nil || !strings.Contains(err.Error(), "--pprof needs --metrics") {
		t.Errorf("--pprof alone: %v", err)
	}
}
