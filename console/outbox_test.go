package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/outbox"
)

type permanentErr struct{}

func (permanentErr) Error() string   { return "topic refused for good" }
func (permanentErr) Permanent() bool { return true }

// outboxFixture makes an SQLite outbox with dead dead rows (a permanent send error) and
// pending pending rows (a transient one, attempts left), and returns it with the dead
// rows' ids in id order.
func outboxFixture(t *testing.T, dead, pending int) (*outbox.Outbox, []int64) {
	t.Helper()
	tg := sqltest.Open(t, outbox.SQLite)
	ob, err := outbox.New(outbox.Config{DB: tg.DB, Dialect: tg.Dialect, Table: tg.Name("orders_outbox")})
	if err != nil {
		t.Fatal(err)
	}
	c := context.Background()
	if err := ob.CreateTable(c); err != nil {
		t.Fatal(err)
	}
	tx, err := tg.DB.BeginTx(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < dead; i++ {
		if err := ob.Add(c, tx, message.NewMessage("Orders", []byte("dead")).SetKeys(fmt.Sprintf("order-d%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < pending; i++ {
		if err := ob.Add(c, tx, message.NewMessage("Orders", []byte("pending")).SetKeys(fmt.Sprintf("order-p%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r, err := outbox.NewRelay(ob, outbox.RelayConfig{MaxAttempts: 100, BackoffBase: time.Hour, BackoffMax: time.Hour, Logger: testkit.Quiet(),
		Send: func(_ context.Context, m *message.Message) (*message.SendResult, error) {
			if string(m.Body) == "dead" {
				return nil, permanentErr{}
			}
			return nil, errors.New("broker down")
		}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(c); err != nil || n != dead+pending {
		t.Fatalf("relay claimed %d rows (%v)", n, err)
	}
	rows, err := ob.Dead(c, 0, 1000)
	if err != nil || len(rows) != dead {
		t.Fatalf("%d dead rows (%v)", len(rows), err)
	}
	ids := make([]int64, len(rows))
	for i, row := range rows {
		ids[i] = row.ID
	}
	return ob, ids
}

func outboxStats(t *testing.T, ob *outbox.Outbox) outbox.Stats {
	t.Helper()
	st, err := ob.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var deadRowRe = regexp.MustCompile(`<tr data-id="(\d+)">`)

func deadIDs(body string) []string {
	var out []string
	for _, m := range deadRowRe.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestOutboxPage: the outbox page shows the backlog (pending rows, the oldest's age) and
// the dead rows page by page; re-drive asks for a confirmation first, then makes the
// named dead rows (or all) pending with the CLI's semantics (ids that are not dead rows
// reported); bad input is refused with the field named; a read-only console hides the
// buttons and refuses the POST.
func TestOutboxPage(t *testing.T) {
	ob, ids := outboxFixture(t, 3, 2)
	table := ob.Table()
	e := newEnv(t, func(c *console.Config) { c.Outboxes = []*outbox.Outbox{ob}; c.PageSize = 2 }, broker.Config{})

	code, body, _ := do(t, "GET", e.base+"/outbox", nil, nil)
	if code != http.StatusOK || !strings.Contains(body, `<td class="r backlog">2</td>`) || !strings.Contains(body, `<td class="r dead">3</td>`) ||
		strings.Contains(body, `<td class="nowrap oldest">-</td>`) || !strings.Contains(body, `href="/outbox"`) {
		t.Fatalf("outbox page: %d %.3000s", code, body)
	}
	if got := deadIDs(body); strings.Join(got, ",") != fmt.Sprintf("%d,%d", ids[0], ids[1]) {
		t.Fatalf("first page lists %v; want the first two dead rows of %v", got, ids)
	}
	next := regexp.MustCompile(`href="(/outbox\?[^"]+)" rel="next"`).FindStringSubmatch(body)
	if next == nil {
		t.Fatalf("no next page link: %.3000s", body)
	}
	_, body2, _ := do(t, "GET", e.base+strings.ReplaceAll(next[1], "&amp;", "&"), nil, nil)
	if got := deadIDs(body2); strings.Join(got, ",") != strconv.FormatInt(ids[2], 10) || strings.Contains(body2, `rel="next"`) || !strings.Contains(body2, `id="first-page"`) {
		t.Fatalf("second page lists %v: %.3000s", got, body2)
	}

	tok := csrfRe.FindStringSubmatch(body)[1]
	post := func(form url.Values) (int, string) {
		form.Set("csrf", tok)
		code, body, _ := do(t, "POST", e.base+"/outbox/redrive", form, nil)
		return code, body
	}
	id0 := strconv.FormatInt(ids[0], 10)
	// Without confirm=yes: a confirmation page, nothing changed.
	code, body = post(url.Values{"table": {table}, "id": {id0}})
	if code != http.StatusOK || !strings.Contains(body, "Make dead row "+id0+" of "+table+" pending again") || !strings.Contains(body, `id="confirm-button"`) {
		t.Fatalf("confirmation: %d %.3000s", code, body)
	}
	if st := outboxStats(t, ob); st.Dead != 3 {
		t.Fatalf("the confirmation page changed something: %+v", st)
	}
	code, body = post(url.Values{"table": {table}, "id": {id0}, "confirm": {"yes"}})
	if code != http.StatusOK || !strings.Contains(body, "Re-drove 1 dead rows of "+table+".") {
		t.Fatalf("re-drive: %d %.3000s", code, body)
	}
	if st := outboxStats(t, ob); st.Dead != 2 || st.Pending != 3 {
		t.Fatalf("after re-drive: %+v; want 2 dead, 3 pending", st)
	}
	// The same id again is not a dead row any more: reported, as the CLI does.
	code, body = post(url.Values{"table": {table}, "id": {id0}, "confirm": {"yes"}})
	if code != http.StatusConflict || !strings.Contains(body, "1 of the 1 ids were not dead rows") {
		t.Fatalf("re-drive of a pending row: %d %.3000s", code, body)
	}
	for _, c := range []struct {
		form url.Values
		code int
		want string
	}{
		{url.Values{"table": {table}}, http.StatusBadRequest, "give the ids of dead rows, or all dead rows"},
		{url.Values{"table": {table}, "all": {"yes"}, "id": {id0}}, http.StatusBadRequest, "not both"},
		{url.Values{"table": {table}, "id": {"x1"}}, http.StatusBadRequest, `row id &#34;x1&#34;: want a positive integer`},
		{url.Values{"table": {table}, "id": {"-4"}}, http.StatusBadRequest, "want a positive integer"},
		{url.Values{"table": {"nope"}, "all": {"yes"}}, http.StatusNotFound, `no outbox table &#34;nope&#34;`},
	} {
		if code, body := post(c.form); code != c.code || !strings.Contains(body, c.want) {
			t.Fatalf("%v: %d; want %d with %q: %.2000s", c.form, code, c.code, c.want, body)
		}
	}
	code, body = post(url.Values{"table": {table}, "all": {"yes"}})
	if code != http.StatusOK || !strings.Contains(body, "Make every dead row of "+table+" pending again (2 now)") {
		t.Fatalf("confirm all: %d %.3000s", code, body)
	}
	code, body = post(url.Values{"table": {table}, "all": {"yes"}, "confirm": {"yes"}})
	if code != http.StatusOK || !strings.Contains(body, "Re-drove 2 dead rows of "+table+".") || len(deadIDs(body)) != 0 {
		t.Fatalf("re-drive all: %d %.3000s", code, body)
	}
	if st := outboxStats(t, ob); st.Dead != 0 || st.Pending != 5 {
		t.Fatalf("after re-drive all: %+v", st)
	}
}

// TestOutboxPageReadOnly: a read-only console shows the backlog and the dead rows without
// re-drive buttons and refuses the POST (403) without touching the table.
func TestOutboxPageReadOnly(t *testing.T) {
	ob, ids := outboxFixture(t, 1, 0)
	e := newEnv(t, func(c *console.Config) { c.Outboxes = []*outbox.Outbox{ob}; c.ReadOnly = true }, broker.Config{})
	code, body, _ := do(t, "GET", e.base+"/outbox", nil, nil)
	if code != http.StatusOK || len(deadIDs(body)) != 1 || strings.Contains(body, "/outbox/redrive") {
		t.Fatalf("read-only page: %d %.3000s", code, body)
	}
	tok := regexp.MustCompile(`"X-CSRF-Token":"([0-9a-f]+)"`).FindStringSubmatch(body)[1] // the forms are hidden
	code, body, _ = do(t, "POST", e.base+"/outbox/redrive", url.Values{"csrf": {tok}, "table": {ob.Table()}, "id": {strconv.FormatInt(ids[0], 10)}, "confirm": {"yes"}}, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "the console is read-only") {
		t.Fatalf("read-only re-drive: %d %.2000s", code, body)
	}
	if st := outboxStats(t, ob); st.Dead != 1 {
		t.Fatalf("a read-only console re-drove: %+v", st)
	}
	// Without outboxes the page does not exist; an outbox listed twice is refused.
	e2 := newEnv(t, nil, broker.Config{})
	if code, _, _ := do(t, "GET", e2.base+"/outbox", nil, nil); code != http.StatusNotFound {
		t.Fatalf("outbox page without outboxes: %d", code)
	}
	_, err := console.New(console.Config{Admin: e.a, Outboxes: []*outbox.Outbox{ob, ob}})
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "Outboxes" {
		t.Fatalf("an outbox listed twice: %v", err)
	}
}
