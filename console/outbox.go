package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/outbox"
)

// Transactional outboxes (Config.Outboxes): each table's backlog (pending rows, age of the
// oldest), its dead rows page by page, and re-drive — the semantics of `sluice admin
// outbox redrive`: the given dead rows, or every dead row, pending again with their
// attempts reset; ids that are not dead rows are reported.

// maxRedriveIDs bounds the ids one re-drive request may name.
const maxRedriveIDs = 1000

type outboxData struct {
	Tables   []outboxTable
	Selected string // the table whose dead rows are listed
	Dead     []outbox.Row
	After    int64        // the listing starts after this id (0: the first page)
	Next     template.URL // the next page ("" on the last)
	First    template.URL // the first page ("" on it)
}

type outboxTable struct {
	Table     string
	Dialect   string
	Stats     outbox.Stats
	OldestAge string // "-" when nothing is pending
	Err       string // the table could not be read
}

func (c *Console) outboxRoutes(mux *http.ServeMux) {
	if len(c.cfg.Outboxes) == 0 {
		return
	}
	mux.HandleFunc("GET /outbox", c.page(c.outboxes))
	mux.HandleFunc("POST /outbox/redrive", c.mutate(c.redriveOutbox))
}

// validateOutboxes checks Config.Outboxes: no nil entry, no table twice.
func validateOutboxes(obs []*outbox.Outbox) error {
	seen := map[string]bool{}
	for i, ob := range obs {
		if ob == nil {
			return &config.Error{Package: "console", Field: "Outboxes", Reason: fmt.Sprintf("entry %d is nil", i)}
		}
		if seen[ob.Table()] {
			return &config.Error{Package: "console", Field: "Outboxes", Reason: fmt.Sprintf("table %s is listed twice (the page tells outboxes apart by table)", ob.Table())}
		}
		seen[ob.Table()] = true
	}
	return nil
}

func (c *Console) outboxByTable(table string) *outbox.Outbox {
	for _, ob := range c.cfg.Outboxes {
		if ob.Table() == table {
			return ob
		}
	}
	return nil
}

func (c *Console) outboxes(w http.ResponseWriter, r *http.Request) {
	c.outboxPage(w, r, http.StatusOK, r.URL.Query().Get("table"), "", "")
}

// outboxPage renders the page listing table's dead rows (the first outbox's when table
// names none) after the id in the "after" query parameter.
func (c *Console) outboxPage(w http.ResponseWriter, r *http.Request, status int, table, flash, errMsg string) {
	d := &outboxData{}
	v := &view{Title: "Outbox", Nav: "outbox", Data: d, Flash: flash, Error: errMsg}
	now := time.Now()
	for _, ob := range c.cfg.Outboxes {
		t := outboxTable{Table: ob.Table(), Dialect: ob.Dialect().String(), OldestAge: "-"}
		st, err := ob.Stats(r.Context())
		if err != nil {
			t.Err = err.Error()
			status = max(status, http.StatusBadGateway)
		} else {
			t.Stats = st
			if !st.OldestPending.IsZero() {
				t.OldestAge = st.OldestPendingAge(now).Round(time.Millisecond).String()
			}
		}
		d.Tables = append(d.Tables, t)
	}
	ob := c.outboxByTable(table)
	if ob == nil {
		if table != "" {
			v.Error = joinErr(v.Error, fmt.Errorf("no outbox table %q on this console", table))
			status = max(status, http.StatusNotFound)
		}
		ob = c.cfg.Outboxes[0]
	}
	d.Selected = ob.Table()
	d.After, _ = strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	d.After = max(d.After, 0)
	rows, err := ob.Dead(r.Context(), d.After, c.cfg.PageSize+1)
	if err != nil {
		v.Error = joinErr(v.Error, err)
		status = max(status, http.StatusBadGateway)
	}
	link := func(after int64) template.URL {
		q := url.Values{"table": {d.Selected}}
		if after > 0 {
			q.Set("after", strconv.FormatInt(after, 10))
		}
		return template.URL("/outbox?" + q.Encode())
	}
	if len(rows) > c.cfg.PageSize {
		rows = rows[:c.cfg.PageSize]
		d.Next = link(rows[len(rows)-1].ID)
	}
	if d.After > 0 {
		d.First = link(0)
	}
	d.Dead = rows
	c.render(w, r, status, "outbox", v)
}

// redriveOutbox re-drives the dead rows named by the "id" fields of table, or all of its
// dead rows with all=yes, after a confirmation page (confirm=yes).
func (c *Console) redriveOutbox(w http.ResponseWriter, r *http.Request) {
	table := r.PostFormValue("table")
	ob := c.outboxByTable(table)
	if ob == nil {
		c.outboxPage(w, r, http.StatusNotFound, "", "", fmt.Sprintf("re-drive: no outbox table %q on this console", table))
		return
	}
	all := r.PostFormValue("all") == "yes"
	raw := r.PostForm["id"]
	if all == (len(raw) > 0) {
		c.outboxPage(w, r, http.StatusBadRequest, table, "", "re-drive: give the ids of dead rows, or all dead rows (not both)")
		return
	}
	if len(raw) > maxRedriveIDs {
		c.outboxPage(w, r, http.StatusBadRequest, table, "", fmt.Sprintf("re-drive: %d ids, at most %d at once", len(raw), maxRedriveIDs))
		return
	}
	ids := make([]int64, 0, len(raw))
	for _, s := range raw {
		id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || id <= 0 {
			c.outboxPage(w, r, http.StatusBadRequest, table, "", fmt.Sprintf("re-drive: row id %q: want a positive integer", s))
			return
		}
		ids = append(ids, id)
	}
	if r.PostFormValue("confirm") != "yes" {
		fields := [][2]string{{"table", table}}
		effect := ""
		if all {
			fields = append(fields, [2]string{"all", "yes"})
			st, err := ob.Stats(r.Context())
			if err != nil {
				c.outboxPage(w, r, http.StatusBadGateway, table, "", "re-drive: "+err.Error())
				return
			}
			effect = fmt.Sprintf("Make every dead row of %s pending again (%d now), attempts reset: the relay sends them at once, each after the earlier rows of its order key.", table, st.Dead)
		} else {
			strs := make([]string, len(ids))
			for i, id := range ids {
				fields = append(fields, [2]string{"id", strconv.FormatInt(id, 10)})
				strs[i] = strconv.FormatInt(id, 10)
			}
			effect = fmt.Sprintf("Make dead row %s of %s pending again, attempts reset: the relay sends it at once, after the earlier rows of its order key.", strings.Join(strs, ", "), table)
			if len(ids) > 1 {
				effect = fmt.Sprintf("Make the %d dead rows %s of %s pending again, attempts reset: the relay sends them at once, each after the earlier rows of its order key.", len(ids), strings.Join(strs, ", "), table)
			}
		}
		c.confirm(w, r, "Re-drive outbox rows", "outbox", &confirmData{Action: "/outbox/redrive", Effect: effect, Fields: fields,
			Button: "Re-drive", Cancel: template.URL("/outbox?" + url.Values{"table": {table}}.Encode())})
		return
	}
	n, err := ob.Redrive(r.Context(), ids...)
	if err != nil {
		c.outboxPage(w, r, http.StatusBadGateway, table, "", "re-drive: "+err.Error())
		return
	}
	c.log.Info("outbox rows re-driven from the console", "table", table, "rows", n, "ids", ids)
	flash := fmt.Sprintf("Re-drove %d dead rows of %s.", n, table)
	if len(ids) > 0 && n < int64(len(ids)) {
		c.outboxPage(w, r, http.StatusConflict, table, flash, fmt.Sprintf("%d of the %d ids were not dead rows (re-driven or sent meanwhile, or never dead)", int64(len(ids))-n, len(ids)))
		return
	}
	c.outboxPage(w, r, http.StatusOK, table, flash, "")
}
