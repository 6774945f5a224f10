package console_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/testkit"
)

// TestMessageStatusPage opens a message that one group consumed, another has not reached
// and a third dead-lettered: the message page shows each group's state over HTTP and, when
// Chromium is there, in a browser; a group that cannot be read is an error, not a blank.
func TestMessageStatusPage(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	if _, err := e.a.CreateTopic(ctx(t), admin.TopicSpec{Topic: "Invoices", Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.WaitTopicRoute(ctx(t), "Invoices"); err != nil {
		t.Fatal(err)
	}
	sent := e.send(t, "Invoices", 2)
	e.commit(t, "archive", "Invoices", 0, 2)
	e.commit(t, "slow", "Invoices", 0, 1)
	e.commit(t, "billing", "Invoices", 0, 2)
	e.kill(t, "billing", sent[1])
	testkit.WaitFor(t, 20*time.Second, func() bool { // the key index is written behind the store
		ms, err := e.a.FindMessageByUniqKey(ctx(t), "%DLQ%billing", sent[1].MsgID)
		return err == nil && len(ms) == 1
	}, "the dead letter in the key index")

	page := e.base + "/messages/view?offsetId=" + sent[1].OffsetMsgID
	code, body, _ := do(t, http.MethodGet, page, nil, nil)
	if code != http.StatusOK {
		t.Fatalf("message page: %d\n%s", code, body)
	}
	for _, want := range []string{
		`<tr data-group="archive"><td><a href="/groups/archive">archive</a></td><td class="state">consumed</td>`,
		`<tr data-group="slow"><td><a href="/groups/slow">slow</a></td><td class="state">not-consumed</td>`,
		`<tr data-group="billing"><td><a href="/groups/billing">billing</a></td><td class="state">dead-lettered</td>`,
		`<a href="/dlq?group=billing">1 in %DLQ%billing</a>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("message page lacks %s", want)
		}
	}

	if exe := chromiumOrEmpty(); exe != "" {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.UserDataDir(t.TempDir()),
			chromedp.NoSandbox, chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true))
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		defer cancelAlloc()
		bctx, cancelBrowser := chromedp.NewContext(actx)
		defer cancelBrowser()
		bctx, cancel := context.WithTimeout(bctx, 120*time.Second)
		defer cancel()
		if err := chromedp.Do(bctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#group-status"))); err != nil {
			t.Fatal(err)
		}
		states, err := chromedp.Run(bctx, chromedp.Evaluate[string](`Array.from(document.querySelectorAll("#group-status tbody tr")).map(r => r.dataset.group + "=" + r.querySelector(".state").textContent).join(",")`))
		if err != nil || states != "archive=consumed,billing=dead-lettered,slow=not-consumed" {
			t.Errorf("states in Chromium = %q (%v)", states, err)
		}
	} else {
		t.Log("Chromium not found (SLUICE_CHROMIUM): browser part skipped")
	}

	// The first message: every group past it, no dead letter.
	_, body, _ = do(t, http.MethodGet, e.base+"/messages/view?offsetId="+sent[0].OffsetMsgID, nil, nil)
	if n := strings.Count(body, `<td class="state">consumed</td>`); n != 3 {
		t.Errorf("message 0: %d groups consumed it, want 3", n)
	}

	// With the broker stopped the page is an error, never a table of "not consumed".
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.p.Shutdown(stopCtx); err != nil { // before its broker goes
		t.Fatal(err)
	}
	if err := e.b.Shutdown(stopCtx); err != nil {
		t.Fatal(err)
	}
	code, body, _ = do(t, http.MethodGet, page, nil, nil)
	if code == http.StatusOK || strings.Contains(body, `class="state"`) || !strings.Contains(body, `id="error"`) {
		t.Errorf("message page with the broker stopped: %d\n%s", code, body)
	}
}

// chromiumOrEmpty is chromium's lookup without the skip: "" when there is none.
func chromiumOrEmpty() string {
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}
