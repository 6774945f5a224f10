package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
)

var csrfRe = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrfOf reads the CSRF token from a page with a form.
func csrfOf(t *testing.T, e *env) string {
	t.Helper()
	_, body, _ := do(t, "GET", e.base+"/topics", nil, nil)
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in /topics")
	}
	return m[1]
}

func TestConfigValidate(t *testing.T) {
	a, err := admin.New(admin.Config{NamesrvAddrs: []string{"127.0.0.1:1"}, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var ce *config.Error
	for _, c := range []struct {
		cfg   console.Config
		field string
	}{
		{console.Config{}, "Admin"},
		{console.Config{Admin: a, Listen: "0.0.0.0:8080"}, "Listen"},
		{console.Config{Admin: a, Listen: "[::]:8080"}, "Listen"},
		{console.Config{Admin: a, Listen: "nohostport"}, "Listen"},
		{console.Config{Admin: a, PageSize: 1001}, "PageSize"},
	} {
		if _, err := console.New(c.cfg); !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%+v: %v, want a ConfigError on %s", c.cfg, err, c.field)
		}
	}
	for _, cfg := range []console.Config{
		{Admin: a},
		{Admin: a, Listen: "[::1]:0"},
		{Admin: a, Listen: "0.0.0.0:0", Token: "t"},
		{Admin: a, Listen: "0.0.0.0:0", BasicAuthUser: "u", BasicAuthPassword: "p"},
	} {
		if _, err := console.New(cfg); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

func TestMutationsNeedCSRFAndSameOrigin(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	form := url.Values{"topic": {"Fresh"}, "queues": {"2"}}
	if code, _, _ := do(t, "POST", e.base+"/topics", form, nil); code != http.StatusForbidden {
		t.Fatalf("POST without CSRF token: %d", code)
	}
	form.Set("csrf", csrfOf(t, e))
	if code, _, _ := do(t, "POST", e.base+"/topics", form, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != http.StatusForbidden {
		t.Fatalf("cross-site POST: %d", code)
	}
	code, _, hdr := do(t, "POST", e.base+"/topics", form, nil)
	if code != http.StatusSeeOther || hdr.Get("Location") != "/topics/Fresh?created=1" {
		t.Fatalf("create: %d %v", code, hdr)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Fresh"); err != nil {
		t.Fatal(err)
	}
	// A bad name is refused with the admin's reason on the page.
	form.Set("topic", "bad topic")
	if code, body, _ := do(t, "POST", e.base+"/topics", form, nil); code != http.StatusBadRequest || !strings.Contains(body, "Topic") {
		t.Fatalf("bad name: %d", code)
	}
	// Delete needs the typed name.
	del := url.Values{"csrf": {form.Get("csrf")}, "confirm": {"nope"}}
	if code, _, _ := do(t, "POST", e.base+"/topics/Fresh/delete", del, nil); code != http.StatusBadRequest {
		t.Fatalf("delete without confirmation: %d", code)
	}
	del.Set("confirm", "Fresh")
	if code, body, _ := do(t, "POST", e.base+"/topics/Fresh/delete", del, nil); code != http.StatusOK || !strings.Contains(body, "Topic Fresh deleted.") {
		t.Fatalf("delete: %d", code)
	}
	if _, err := e.a.TopicRoute(ctx(t), "Fresh"); err == nil {
		t.Fatal("the topic still has a route")
	}
}

// TestUnauthenticatedNeedsLoopbackHost: a console without credentials answers only
// requests addressed to a loopback host, so a web page whose name is rebound to 127.0.0.1
// (DNS rebinding) can neither read it (and its CSRF token) nor change anything.
func TestUnauthenticatedNeedsLoopbackHost(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	port := e.base[strings.LastIndex(e.base, ":")+1:]
	for _, host := range []string{"evil.example:" + port, "evil.example", "10.0.0.1:" + port} {
		if code, body, _ := do(t, "GET", e.base+"/topics", nil, map[string]string{"Host": host}); code != http.StatusMisdirectedRequest || csrfRe.MatchString(body) {
			t.Errorf("GET /topics with Host %s: %d, want 421 without a CSRF token", host, code)
		}
	}
	form := url.Values{"topic": {"Rebound"}, "queues": {"1"}, "csrf": {csrfOf(t, e)}}
	hdr := map[string]string{"Host": "evil.example:" + port, "Origin": "http://evil.example:" + port, "Sec-Fetch-Site": "same-origin"}
	if code, _, _ := do(t, "POST", e.base+"/topics", form, hdr); code != http.StatusMisdirectedRequest {
		t.Errorf("rebound POST /topics: %d, want 421", code)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, "localhost"} {
		if code, _, _ := do(t, "GET", e.base+"/topics", nil, map[string]string{"Host": host}); code != http.StatusOK {
			t.Errorf("GET /topics with Host %s: %d, want 200", host, code)
		}
	}
	if _, err := e.a.TopicRoute(ctx(t), "Rebound"); err == nil {
		t.Fatal("a rebound request created a topic")
	}
}

func TestReadOnly(t *testing.T) {
	e := newEnv(t, func(c *console.Config) { c.ReadOnly = true }, broker.Config{})
	_, body, _ := do(t, "GET", e.base+"/topics", nil, nil)
	if strings.Contains(body, `action="/topics"`) && strings.Contains(body, `method="post"`) || !strings.Contains(body, "read-only") {
		t.Fatal("read-only topics page shows the create form or lacks the badge")
	}
	e.send(t, "RO", 1)
	// The send auto-creates the topic; the broker registers it with the name server
	// after answering the send (registerNow), so wait for the route before proving that
	// the refused delete leaves it in place.
	if _, err := e.a.WaitTopicRoute(ctx(t), "RO"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/topics", "/topics/RO/delete", "/groups/g/reset", "/dlq/g/resend"} {
		// Even with a valid-looking token (read-only refuses before the CSRF check).
		code, body, _ := do(t, "POST", e.base+path, url.Values{"topic": {"X"}, "queues": {"1"}, "confirm": {"RO"}}, nil)
		if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s in read-only mode: %d", path, code)
		}
	}
	if _, err := e.a.TopicRoute(ctx(t), "RO"); err != nil {
		t.Fatalf("the topic is gone: %v", err)
	}
}

func TestTokenAndBasicAuth(t *testing.T) {
	e := newEnv(t, func(c *console.Config) { c.Token = "s3cret"; c.BasicAuthUser, c.BasicAuthPassword = "ops", "pw" }, broker.Config{})
	if code, _, hdr := do(t, "GET", e.base+"/topics", nil, nil); code != http.StatusSeeOther || hdr.Get("Location") != "/login" {
		t.Fatalf("no credentials: %d %v", code, hdr)
	}
	if code, _, _ := do(t, "GET", e.base+"/api/series", nil, map[string]string{"Authorization": "Bearer wrong"}); code != http.StatusSeeOther {
		t.Fatalf("wrong bearer: %d", code)
	}
	if code, _, _ := do(t, "GET", e.base+"/topics", nil, map[string]string{"Authorization": "Bearer s3cret"}); code != http.StatusOK {
		t.Fatalf("bearer: %d", code)
	}
	if code, _, _ := do(t, "POST", e.base+"/topics", url.Values{}, nil); code != http.StatusUnauthorized {
		t.Fatalf("POST without credentials: %d", code)
	}
	req, _ := http.NewRequest("GET", e.base+"/groups", nil)
	req.SetBasicAuth("ops", "pw")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("basic auth: %v %v", err, resp)
	}
	resp.Body.Close()
	req.SetBasicAuth("ops", "nope")
	if resp, err = client.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("wrong basic auth: %v %v", err, resp)
	}
	resp.Body.Close()
	if code, _, _ := do(t, "POST", e.base+"/login", url.Values{"token": {"nope"}}, nil); code != http.StatusUnauthorized {
		t.Fatalf("login with a wrong token: %d", code)
	}
	code, _, hdr := do(t, "POST", e.base+"/login", url.Values{"token": {"s3cret"}}, nil)
	ck := hdr.Get("Set-Cookie")
	if code != http.StatusSeeOther || !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") || strings.Contains(ck, "s3cret") {
		t.Fatalf("login: %d %q", code, ck)
	}
	if code, _, _ := do(t, "GET", e.base+"/topics", nil, map[string]string{"Cookie": strings.Split(ck, ";")[0]}); code != http.StatusOK {
		t.Fatalf("with the login cookie: %d", code)
	}
	if code, _, _ := do(t, "GET", e.base+"/static/app.css", nil, nil); code != http.StatusOK {
		t.Fatalf("static files need no login: %d", code)
	}
}

// TestPaginationAtScale serves a broker holding 10,000 topics and 1,000 groups: every
// listing page is one request per broker, and pages and filters cut it right.
func TestPaginationAtScale(t *testing.T) {
	dir := t.TempDir()
	topics := map[string]*wire.TopicConfig{}
	for i := range 10000 {
		n := fmt.Sprintf("topic-%05d", i)
		topics[n] = &wire.TopicConfig{TopicName: n, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6, TopicFilterType: "SINGLE_TAG"}
	}
	groups := map[string]any{}
	for i := range 1000 {
		n := fmt.Sprintf("group-%04d", i)
		groups[n] = map[string]any{"groupName": n, "consumeEnable": true, "retryQueueNums": 1, "retryMaxTimes": 16}
	}
	writeJSON(t, filepath.Join(dir, "config", "topics.json"), map[string]any{"topicConfigTable": topics, "dataVersion": map[string]any{"counter": 1, "timestamp": 1}})
	writeJSON(t, filepath.Join(dir, "config", "subscriptionGroup.json"), map[string]any{"subscriptionGroupTable": groups, "dataVersion": map[string]any{"counter": 1, "timestamp": 1}})
	// Re-register every second: on a loaded machine the first registration of 10,000
	// topics may outlast the broker's 3 s start-up bound.
	e := newEnv(t, nil, broker.Config{StorePathRootDir: dir, RegisterNameServerPeriod: 1000})
	testkit.WaitFor(t, 30*time.Second, func() bool {
		ci, err := e.a.ClusterInfo(ctx(t))
		return err == nil && len(ci.BrokerAddrTable) == 1
	}, "the broker registered")

	rowRe := regexp.MustCompile(`<a href="/topics/(topic-\d+)">`)
	_, body, _ := do(t, "GET", e.base+"/topics?q=topic-&page=2", nil, nil)
	rows := rowRe.FindAllStringSubmatch(body, -1)
	if len(rows) != console.DefaultPageSize || rows[0][1] != "topic-00050" || !strings.Contains(body, "51–100 of 10000") ||
		!strings.Contains(body, `href="/topics?page=3&amp;q=topic-"`) || !strings.Contains(body, `href="/topics?page=1&amp;q=topic-"`) {
		t.Fatalf("page 2: %d rows, first %v; page %.600s", len(rows), rows[:min(1, len(rows))], body)
	}
	_, body, _ = do(t, "GET", e.base+"/topics?page=200", nil, nil) // the broker's own topics are left out
	if rows := rowRe.FindAllStringSubmatch(body, -1); len(rows) != 50 || rows[49][1] != "topic-09999" || strings.Contains(body, `rel="next"`) {
		t.Fatalf("last page: %d rows", len(rows))
	}
	_, body, _ = do(t, "GET", e.base+"/topics?q=topic-0999", nil, nil)
	if rows := rowRe.FindAllStringSubmatch(body, -1); len(rows) != 10 || !strings.Contains(body, "1–10 of 10") {
		t.Fatalf("filter: %d rows", len(rows))
	}
	_, body, _ = do(t, "GET", e.base+"/groups?page=20&q=group-", nil, nil)
	groupRe := regexp.MustCompile(`<a href="/groups/(group-\d+)">`)
	if rows := groupRe.FindAllStringSubmatch(body, -1); len(rows) != 50 || rows[0][1] != "group-0950" || !strings.Contains(body, "of 1000") {
		t.Fatalf("groups page 20: %d rows", len(rows))
	}
	_, body, _ = do(t, "GET", e.base+"/", nil, nil)
	if !strings.Contains(body, `id="stat-groups">1000<`) || !strings.Contains(body, e.b.Name()) {
		t.Fatal("overview lacks the group count or the broker")
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPagesOverHTTP walks the pages a browser test uses, without a browser: messages by
// key, id and time, a message's body and properties, lag, reset, dead letters and
// their re-drive, and the chart data.
func TestPagesOverHTTP(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last: after every shutdown
	e := newEnv(t, nil, broker.Config{})
	if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Orders", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Orders"); err != nil {
		t.Fatal(err)
	}
	sent := e.send(t, "Orders", 4)
	pc, err := consumer.NewPullConsumer(consumer.PullConfig{NamesrvAddrs: []string{e.b.NamesrvAddr()}, Group: "billing", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, pc.Shutdown)
	mq := message.MessageQueue{Topic: "Orders", BrokerName: e.b.Name(), QueueID: 0}
	if _, err := pc.Pull(ctx(t), consumer.PullRequest{Queue: mq, Offset: 0, MaxNums: 1}); err != nil {
		t.Fatal(err)
	}
	if err := pc.CommitOffset(ctx(t), mq, 1); err != nil {
		t.Fatal(err)
	}

	get := func(path string) string {
		t.Helper()
		code, body, _ := do(t, "GET", e.base+path, nil, nil)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, code, body)
		}
		return body
	}
	if body := get("/groups/billing/lag"); !strings.Contains(body, `id="lag-total">3<`) {
		t.Fatalf("lag fragment: %.500s", body)
	}
	if body := get("/messages?topic=Orders&key=key-2"); strings.Count(body, "/messages/view?offsetId=") != 1 || !strings.Contains(body, sent[2].MsgID) {
		t.Fatalf("by key: %.300s", body)
	}
	if body := get("/messages?topic=Orders&id=" + sent[1].MsgID); !strings.Contains(body, "key-1") {
		t.Fatal("by id")
	}
	if body := get("/messages?topic=Orders&from=" + url.QueryEscape(time.Now().Add(-time.Minute).UTC().Format("2006-01-02T15:04:05"))); strings.Count(body, "/messages/view?offsetId=") != 4 {
		t.Fatal("by time range")
	}
	if body := get("/messages/view?offsetId=" + sent[3].OffsetMsgID); !strings.Contains(body, "eu-west") || !strings.Contains(body, `{&#34;order&#34;:3,`) {
		t.Fatalf("view: %.1500s", body)
	}

	tok := csrfOf(t, e)
	// A missing or malformed topic is the operator's mistake (400), not the cluster's (502).
	for _, topic := range []string{"", "bad topic"} {
		if code, body, _ := do(t, "POST", e.base+"/groups/billing/reset", url.Values{"csrf": {tok}, "topic": {topic}}, nil); code != http.StatusBadRequest || !strings.Contains(body, "topic") {
			t.Errorf("reset with topic %q: %d, want 400 naming the topic", topic, code)
		}
	}
	// An empty time is refused (it used to skip everything), the end must be chosen.
	if code, body, _ := do(t, "POST", e.base+"/groups/billing/reset", url.Values{"csrf": {tok}, "topic": {"Orders"}, "force": {"on"}}, nil); code != http.StatusBadRequest || !strings.Contains(body, "choose a time") {
		t.Errorf("reset with an empty time: %d, want 400", code)
	}
	// A typo in the group leaves nothing behind.
	if code, body, _ := do(t, "POST", e.base+"/groups/nosuchgroup/reset", url.Values{"csrf": {tok}, "topic": {"Orders"}, "to": {"end"}, "confirm": {"yes"}}, nil); code != http.StatusNotFound || !strings.Contains(body, "does not exist") {
		t.Errorf("reset of an unknown group: %d %.300s", code, body)
	}
	// The first POST states the effect and changes nothing; the confirmed one resets.
	reset := url.Values{"csrf": {tok}, "topic": {"Orders"}, "force": {"on"}, "to": {"end"}}
	code, body, _ := do(t, "POST", e.base+"/groups/billing/reset", reset, nil)
	if code != http.StatusOK || !strings.Contains(body, `id="confirm-form"`) || !strings.Contains(body, "Skip every message of Orders that billing has not consumed yet") ||
		!strings.Contains(body, "lags 3 message(s)") {
		t.Fatalf("reset confirmation: %d %.1500s", code, body)
	}
	if body := get("/groups/billing/lag"); !strings.Contains(body, `id="lag-total">3<`) {
		t.Fatal("the confirmation page reset the offsets")
	}
	reset.Set("confirm", "yes")
	code, body, _ = do(t, "POST", e.base+"/groups/billing/reset", reset, nil)
	if code != http.StatusOK || !strings.Contains(body, `id="lag-total">0<`) || !strings.Contains(body, "reset to the end of each queue") {
		t.Fatalf("reset: %d %.300s", code, body)
	}

	e.kill(t, "billing", sent[0])
	e.kill(t, "billing", sent[1])
	testkit.WaitFor(t, 10*time.Second, func() bool {
		return strings.Count(get("/dlq?group=billing"), `<span class="badge warn">dead</span>`) == 2
	}, "two dead letters listed")
	code, body, _ = do(t, "POST", e.base+"/dlq/billing/resend", url.Values{"csrf": {tok}, "max": {"1"}}, nil)
	if code != http.StatusOK || !strings.Contains(body, "Re-drive 1 of the 2 dead letter(s) of billing not re-driven yet") || strings.Contains(body, `id="outcome"`) {
		t.Fatalf("re-drive confirmation: %d %.2000s", code, body)
	}
	code, body, _ = do(t, "POST", e.base+"/dlq/billing/resend", url.Values{"csrf": {tok}, "max": {"1"}, "confirm": {"yes"}}, nil)
	if code != http.StatusOK || strings.Count(body, `<tr class="ok">`) != 1 || !strings.Contains(body, sent[0].MsgID) ||
		strings.Count(body, `<span class="badge">re-driven</span>`) != 1 {
		t.Fatalf("re-drive: %d %.2000s", code, body)
	}

	testkit.WaitFor(t, 10*time.Second, func() bool {
		var s struct {
			Time []int64
			Put  []*float64
			Lag  map[string][]float64
		}
		if err := json.Unmarshal([]byte(get("/api/series")), &s); err != nil {
			t.Fatal(err)
		}
		return len(s.Time) >= 2 && len(s.Put) == len(s.Time) && s.Lag["billing"] != nil
	}, "chart samples with billing's lag")
	if body := get("/"); !strings.Contains(body, `data-chart="throughput"`) || !strings.Contains(body, e.b.Name()) {
		t.Fatal("overview")
	}
}

// TestInconsistentGroupWarned shows a group whose two clients subscribe to different
// tags: both clients listed with their subscriptions, and the warning naming the topic.
func TestInconsistentGroupWarned(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Mixed", Queues: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Mixed"); err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
		return message.ConsumeSuccess, nil
	}
	for i, tags := range []string{"TagA", "TagB"} {
		c, err := consumer.NewPushConsumer(consumer.Config{NamesrvAddrs: []string{e.b.NamesrvAddr()}, Group: "mixed",
			InstanceName: fmt.Sprintf("c%d", i), Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Subscribe("Mixed", tags, ok); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		testkit.ShutdownOnCleanup(t, c.Shutdown)
	}
	var body string
	testkit.WaitFor(t, 10*time.Second, func() bool {
		_, body, _ = do(t, "GET", e.base+"/groups/mixed", nil, nil)
		return strings.Count(body, "<code>TagA</code>")+strings.Count(body, "<code>TagB</code>") >= 2
	}, "both clients on the group page")
	if !strings.Contains(body, `id="inconsistent"`) || !strings.Contains(body, "on <strong>Mixed</strong>") {
		t.Fatalf("no inconsistency warning: %.3000s", body)
	}
}

// TestCreateTopicFailureStatus: a form the admin refuses is the user's error (400); a
// broker that refuses the topic (here: a name its system topics use) is a failure
// upstream (502), with the broker's reason shown.
func TestCreateTopicFailureStatus(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	form := url.Values{"topic": {"SCHEDULE_TOPIC_XXXX"}, "queues": {"2"}, "csrf": {csrfOf(t, e)}}
	code, body, _ := do(t, "POST", e.base+"/topics", form, nil)
	if code != http.StatusBadGateway || !strings.Contains(body, "conflict with system topic") {
		t.Fatalf("create refused by the broker: %d, reason shown: %v", code, strings.Contains(body, "conflict with system topic"))
	}
	form.Set("topic", "bad topic")
	if code, _, _ := do(t, "POST", e.base+"/topics", form, nil); code != http.StatusBadRequest {
		t.Fatalf("create with a bad name: %d, want 400", code)
	}
}
