package console_test

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/consumer"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
)

// chromium finds the browser: $SLUICE_CHROMIUM, else chromium on the PATH.
func chromium(t *testing.T) string {
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("needs Chromium: set SLUICE_CHROMIUM or install chromium (.ci/provision does)")
	return ""
}

// TestConsoleInChromium drives the console in headless Chromium against an ephemeral
// broker: it creates a topic, sees the messages sent to it and a group's lag, re-drives a
// dead letter, resets the group's offset, and saves a screenshot of each page (checked to
// be non-empty PNGs; kept in $SLUICE_SCREENSHOTS when set).
func TestConsoleInChromium(t *testing.T) {
	exe := chromium(t)
	shots := os.Getenv("SLUICE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, nil, broker.Config{})

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 180*time.Second) // -race on a loaded machine
	defer cancelTimeout()
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	shot := func(name string) {
		t.Helper()
		buf, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if len(buf) < 1000 {
			t.Fatalf("screenshot %s: %d bytes", name, len(buf))
		}
		img, err := png.Decode(bytes.NewReader(buf))
		if err != nil || img.Bounds().Dx() < 800 {
			t.Fatalf("screenshot %s is not a full-width PNG: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// text reads an element's text in one evaluation ("" when absent), so an htmx swap
	// replacing the element between a query and a read cannot fail the test.
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(function(){var e=document.querySelector(`+strconv.Quote(sel)+`);return e?e.textContent:"";})()`))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(sel)+`).length`))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}

	// 1. Create a topic through the form.
	run("create topic",
		chromedp.Navigate(e.base+"/topics"),
		chromedp.Click(chromedp.CSS("#create-topic summary")),
		chromedp.SendKeys(chromedp.CSS("#new-topic"), "Orders"),
		chromedp.SetValue(chromedp.CSS(`input[name="queues"]`), "2"),
		chromedp.Click(chromedp.CSS("#create-button")),
		chromedp.WaitVisible(chromedp.CSS("#flash")),
	)
	if got := text("#flash"); got != "Topic Orders created." {
		t.Fatalf("flash %q", got)
	}
	run("topics page", chromedp.Navigate(e.base+"/topics"), chromedp.WaitVisible(chromedp.CSS("#topics")))
	if n := count(`#topics a[href="/topics/Orders"]`); n != 1 {
		t.Fatalf("the topic list shows Orders %d times", n)
	}
	shot("topics")
	if _, err := e.a.WaitTopicRoute(ctx(t), "Orders"); err != nil {
		t.Fatal(err)
	}

	// 2. Send, and let a group consume one message per queue.
	sent := e.send(t, "Orders", 6)
	pc, err := consumer.NewPullConsumer(consumer.PullConfig{NamesrvAddrs: []string{e.b.NamesrvAddr()}, Group: "billing", Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.ShutdownOnCleanup(t, pc.Shutdown)
	for q := range 2 {
		mq := message.MessageQueue{Topic: "Orders", BrokerName: e.b.Name(), QueueID: q}
		if _, err := pc.Pull(ctx(t), consumer.PullRequest{Queue: mq, Offset: 0, MaxNums: 1}); err != nil {
			t.Fatal(err)
		}
		if err := pc.CommitOffset(ctx(t), mq, 1); err != nil {
			t.Fatal(err)
		}
	}
	run("topic page", chromedp.Navigate(e.base+"/topics/Orders"), chromedp.WaitVisible(chromedp.CSS("#queues")))
	shot("topic")

	// 3. The group's lag: 6 sent, 2 consumed.
	run("group page", chromedp.Navigate(e.base+"/groups/billing"), chromedp.WaitVisible(chromedp.CSS("#lag-total")))
	if got := text("#lag-total"); got != "4" {
		t.Fatalf("lag total %q, want 4", got)
	}
	// The table refreshes itself (htmx polls /groups/billing/lag every 5 s): consume one more.
	if err := pc.CommitOffset(ctx(t), message.MessageQueue{Topic: "Orders", BrokerName: e.b.Name(), QueueID: 0}, 2); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, func() bool { return text("#lag-total") == "3" }, "the lag table to refresh to 3 without a reload")

	// 4. A dead letter, re-driven from the DLQ page.
	e.kill(t, "billing", sent[0])
	testkit.WaitFor(t, 10*time.Second, func() bool {
		run("dlq page", chromedp.Navigate(e.base+"/dlq?group=billing"), chromedp.WaitVisible(chromedp.CSS("#dead-letters")))
		return count("#dead-letters .badge.warn") == 1
	}, "the dead letter on the DLQ page")
	shot("dlq")
	run("re-drive", chromedp.Click(chromedp.CSS("#resend-button")), chromedp.WaitVisible(chromedp.CSS("#effect")))
	if got := text("#effect"); !strings.Contains(got, "Re-drive 1 of the 1 dead letter(s) of billing") {
		t.Fatalf("re-drive confirmation %q", got)
	}
	run("confirm re-drive", chromedp.Click(chromedp.CSS("#confirm-button")), chromedp.WaitVisible(chromedp.CSS("#outcome")))
	if got := text("#outcome tbody tr.ok td:nth-child(3)"); got != "re-driven" {
		t.Fatalf("outcome %q", got)
	}
	if got := text("#outcome tbody tr.ok td:first-child"); got != sent[0].MsgID {
		t.Fatalf("re-driven message %q, want %s", got, sent[0].MsgID)
	}
	shot("redrive")

	// 5. Reset the group's offset to the end: no lag left.
	run("reset",
		chromedp.Navigate(e.base+"/groups/billing"),
		chromedp.SendKeys(chromedp.CSS("#reset-topic"), "Orders"),
		chromedp.Click(chromedp.CSS("#reset-end")),
		chromedp.Click(chromedp.CSS("#reset-button")),
		chromedp.WaitVisible(chromedp.CSS("#effect")),
	)
	if got := text("#effect"); !strings.Contains(got, "Skip every message of Orders that billing has not consumed yet") {
		t.Fatalf("reset confirmation %q", got)
	}
	run("confirm reset", chromedp.Click(chromedp.CSS("#confirm-button")), chromedp.WaitVisible(chromedp.CSS("#reset-result")))
	if got := text("#lag-total"); got != "0" {
		t.Fatalf("lag after reset %q, want 0", got)
	}
	shot("group")

	// 6. Find a message by key and open it.
	run("search",
		chromedp.Navigate(e.base+"/messages"),
		chromedp.SendKeys(chromedp.CSS("#search-topic"), "Orders"),
		chromedp.SendKeys(chromedp.CSS("#search-key"), "key-3"),
		chromedp.Click(chromedp.CSS("#search-button")),
		chromedp.WaitVisible(chromedp.CSS("#results")),
	)
	if n := count("#results tbody a"); n != 1 {
		t.Fatalf("%d results for key-3", n)
	}
	shot("search")
	run("open the message",
		chromedp.Click(chromedp.CSS("#results a")),
		chromedp.WaitVisible(chromedp.CSS("#body")),
	)
	if got := text("#body"); got != `{"order":3,"amount":"12.50"}` {
		t.Fatalf("body %q", got)
	}
	shot("message")

	// 7. The overview with its charts (samples every 200 ms).
	testkit.WaitFor(t, 15*time.Second, func() bool {
		run("overview", chromedp.Navigate(e.base+"/"), chromedp.WaitVisible(chromedp.CSS(".uplot")))
		return count(".uplot") == 2
	}, "two charts on the overview")
	shot("overview")
}

// TestFailurePathsInChromium walks what an operator sees in a 1366 px wide browser: the
// lagging group among 24 on top of the groups page with its lag, 323 dead letters totalled
// and paged newest first, and — once the broker is stopped — an error banner and a non-200
// status instead of an empty DLQ or zeros on the overview. No page is wider than the
// window. Screenshots are kept in $SLUICE_SCREENSHOTS when set.
func TestFailurePathsInChromium(t *testing.T) {
	exe := chromium(t)
	shots := os.Getenv("SLUICE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	sc := newScenario(t)
	const width = 1366
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, 900),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 180*time.Second) // -race on a loaded machine
	defer cancelTimeout()
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(js string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("evaluate %s: %v", js, err)
		}
		return strings.TrimSpace(s)
	}
	text := func(sel string) string {
		t.Helper()
		return eval(`(function(){var e=document.querySelector(` + strconv.Quote(sel) + `);return e?e.textContent:"";})()`)
	}
	// open navigates and returns the HTTP status of the page.
	open := func(path string) int64 {
		t.Helper()
		resp, err := chromedp.Run(bctx, chromedp.NavigateResponse(sc.base+path))
		if err != nil {
			t.Fatalf("open %s: %v", path, err)
		}
		return resp.Status
	}
	// fits checks the page needs no horizontal scrolling at 1366 px and saves a shot.
	fits := func(name string) {
		t.Helper()
		if w := eval(`String(document.documentElement.scrollWidth)`); w != strconv.Itoa(width) {
			vw := eval(`String(window.innerWidth)`)
			if n, _ := strconv.Atoi(w); n > width {
				t.Errorf("%s: the page is %s px wide in a %s px window", name, w, vw)
			}
		}
		buf, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		img, err := png.Decode(bytes.NewReader(buf))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if img.Bounds().Dx() != width {
			t.Errorf("screenshot %s is %d px wide, want %d", name, img.Bounds().Dx(), width)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The groups page: 24 groups, the lagging one first, with its lag.
	if st := open("/groups"); st != 200 {
		t.Fatalf("groups page: HTTP %d", st)
	}
	if n := eval(`String(document.querySelectorAll("#groups tbody tr[data-group]").length)`); n != "24" {
		t.Fatalf("%s groups listed, want 24", n)
	}
	if g, lag := text("#groups tbody tr:first-child td:first-child"), text("#groups tbody tr:first-child td.lag"); g != "lagging" || lag != strconv.Itoa(laggingLag) {
		t.Fatalf("first row %q lag %q, want lagging with %d", g, lag, laggingLag)
	}
	// columns: group, lag, waiting, clients, mode, protocol, state
	if st := text("#groups tbody tr:first-child td:nth-child(7)"); st != "offsets only" {
		t.Errorf("the lagging group's state %q", st)
	}
	fits("groups-1366")

	// The DLQ: 323 in all, newest first, paged.
	if st := open("/dlq?group=billing"); st != 200 {
		t.Fatalf("DLQ page: HTTP %d", st)
	}
	if total := text("#dlq-total"); total != "323" {
		t.Fatalf("DLQ total %q", total)
	}
	if first := text("#dead-letters tbody tr:first-child td:first-child"); first != "322" {
		t.Fatalf("the first dead letter shown is offset %s, want the newest (322)", first)
	}
	if pager := text(".pager"); !strings.Contains(pager, "1–50 of 323") || !strings.Contains(pager, "page 1 / 7") {
		t.Fatalf("pager %q", pager)
	}
	fits("dlq-1366")
	for range 6 {
		run("next page", chromedp.Click(chromedp.CSS("#next-page")), chromedp.WaitVisible(chromedp.CSS("#dead-letters")))
	}
	if pager, last := text(".pager"), text("#dead-letters tbody tr:last-child td:first-child"); !strings.Contains(pager, "301–323 of 323") || last != "0" {
		t.Fatalf("last page: pager %q, last offset %q", pager, last)
	}

	// The broker stops; its name server keeps running.
	sc.stopBroker()
	ns := sc.ns.Addr()
	for _, p := range []struct{ path, shot string }{{"/dlq?group=billing", "dlq-broker-down"}, {"/", "overview-broker-down"}, {"/groups", "groups-broker-down"}} {
		if st := open(p.path); st == 200 {
			t.Errorf("%s with the broker stopped: HTTP 200", p.path)
		}
		if banner := text("#error"); !strings.Contains(banner, ns) {
			t.Errorf("%s with the broker stopped: banner %q does not name the name server %s", p.path, banner, ns)
		}
		body := text("main")
		for _, allClear := range []string{"No dead letter.", "No consumer group."} {
			if strings.Contains(body, allClear) {
				t.Errorf("%s with the broker stopped says %q", p.path, allClear)
			}
		}
		fits(p.shot)
	}
	open("/")
	if n := text("#stat-groups"); n != "?" {
		t.Errorf("overview group count %q with the broker stopped, want ?", n)
	}
}
