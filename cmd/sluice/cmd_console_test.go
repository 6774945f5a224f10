package main

import (
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/redistest"
)

var consoleLine = regexp.MustCompile(`sluice console on (http://\S+/)`)

func TestConsoleCommands(t *testing.T) {
	b := startBackground(t, "broker", "--data-dir", filepath.Join(t.TempDir(), "store"), "--listen", "127.0.0.1:0",
		"--namesrv-listen", "127.0.0.1:0", "--log-level", "error", "--console", "127.0.0.1:0", "--console-read-only")
	m := b.waitLine(t, brokerLine)
	name, ns := m[1], m[3]
	url := b.waitLine(t, consoleLine)[1]
	if code, body := get(t, url); code != 200 || !strings.Contains(body, name) || !strings.Contains(body, `data-chart="throughput"`) {
		t.Errorf("broker --console: %d %.300s", code, body)
	}
	if _, body := get(t, url+"topics"); !strings.Contains(body, "read-only") {
		t.Error("broker --console-read-only: the console is not read-only")
	}

	srv := redistest.NewServer(t)
	c := startBackground(t, "console", "--namesrv", ns, "--listen", "127.0.0.1:0", "--read-only", "--log-level", "error",
		"--redis", srv.Addr(), "--park-namespace", "shop")
	url = c.waitLine(t, consoleLine)[1]
	if code, body := get(t, url+"topics"); code != 200 || !strings.Contains(body, "read-only") {
		t.Errorf("console topics: %d", code)
	}
	if code, body := get(t, url+"parked"); code != 200 || !strings.Contains(body, "Parked sends") {
		t.Errorf("console parked: %d %.300s", code, body)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := hc.PostForm(url+"topics", map[string][]string{"topic": {"X"}, "queues": {"1"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("read-only console accepted a POST: %d", resp.StatusCode)
	}
	if err := c.stop(t); err != nil {
		t.Errorf("console: %v", err)
	}
	if err := b.stop(t); err != nil {
		t.Errorf("broker: %v", err)
	}

	if _, err := run(t, "console", "--namesrv", ns, "--listen", "0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("console on 0.0.0.0 without auth: %v", err)
	}
	if _, err := run(t, "console", "--listen", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "namesrv") {
		t.Errorf("console without --namesrv: %v", err)
	}
}
