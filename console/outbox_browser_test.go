package console_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/outbox"
)

// TestOutboxInChromium drives the outbox page in headless Chromium: it reads the backlog
// and the dead rows, re-drives one row through its button and the confirmation page (the
// row leaves the dead list, the backlog grows by one), and cancels a "re-drive all"
// (nothing changes).
func TestOutboxInChromium(t *testing.T) {
	exe := chromium(t)
	ob, ids := outboxFixture(t, 2, 1)
	e := newEnv(t, func(c *console.Config) { c.Outboxes = []*outbox.Outbox{ob} }, broker.Config{})

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
	bctx, cancelTimeout := context.WithTimeout(bctx, 180*time.Second)
	defer cancelTimeout()
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
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

	run("outbox page", chromedp.Navigate(e.base+"/"), chromedp.Click(chromedp.CSS(`header nav a[href="/outbox"]`)), chromedp.WaitVisible(chromedp.CSS("#dead-rows")))
	if b, d, n := text("#outboxes .backlog"), text("#outboxes .dead"), count("#dead-rows tr[data-id]"); b != "1" || d != "2" || n != 2 {
		t.Fatalf("backlog %q, dead %q, %d dead rows listed; want 1, 2, 2", b, d, n)
	}
	first := strconv.FormatInt(ids[0], 10)
	run("re-drive one row",
		chromedp.Click(chromedp.CSS(`#dead-rows tr[data-id="`+first+`"] button.redrive`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-button")),
	)
	if got := text("#effect"); !strings.Contains(got, "Make dead row "+first+" of "+ob.Table()+" pending again") {
		t.Fatalf("confirmation says %q", got)
	}
	run("confirm", chromedp.Click(chromedp.CSS("#confirm-button")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	if got := text("#flash"); got != "Re-drove 1 dead rows of "+ob.Table()+"." {
		t.Fatalf("flash %q", got)
	}
	if b, d, n := text("#outboxes .backlog"), text("#outboxes .dead"), count("#dead-rows tr[data-id]"); b != "2" || d != "1" || n != 1 || count(`#dead-rows tr[data-id="`+first+`"]`) != 0 {
		t.Fatalf("after re-drive: backlog %q, dead %q, %d dead rows listed; want 2, 1, 1 (without %s)", b, d, n, first)
	}
	run("re-drive all, then cancel",
		chromedp.Click(chromedp.CSS("#redrive-all")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-button")),
		chromedp.Click(chromedp.CSS("#cancel")),
		chromedp.WaitVisible(chromedp.CSS("#dead-rows")),
	)
	if st := outboxStats(t, ob); st.Dead != 1 || st.Pending != 2 {
		t.Fatalf("after a cancelled re-drive all: %+v", st)
	}
}
