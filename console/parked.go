package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/retrytask"
)

// Parked sends (Config.Parked): what the Park middleware wrote to Redis and the
// resender has not sent yet, per state, with "resend now".

type parkedData struct {
	State  string
	Counts retrytask.Counts
	Rows   []parkedRow
	Pager  pager
}

type parkedRow struct {
	retrytask.Parked
	Index int // position in its list (pending, dead) or schedule
}

var parkedStates = []string{retrytask.StateScheduled, retrytask.StatePending, retrytask.StateDead}

func (c *Console) parked(w http.ResponseWriter, r *http.Request) {
	c.parkedPage(w, r, http.StatusOK, "", "")
}

func (c *Console) parkedPage(w http.ResponseWriter, r *http.Request, status int, flash, errMsg string) {
	t := c.cfg.Parked
	state := r.URL.Query().Get("state")
	if state == "" {
		state = r.PostFormValue("state")
	}
	if !slicesContains(parkedStates, state) {
		state = retrytask.StateScheduled
	}
	d := &parkedData{State: state}
	v := &view{Title: "Parked sends", Nav: "parked", Data: d, Flash: flash, Error: errMsg}
	counts, err := t.Counts(r.Context())
	if err != nil {
		v.Error = joinErr(v.Error, err)
		c.render(w, r, http.StatusBadGateway, "parked", v)
		return
	}
	d.Counts = counts
	total := map[string]int64{retrytask.StateScheduled: counts.Scheduled, retrytask.StatePending: counts.Pending, retrytask.StateDead: counts.Dead}[state]
	d.Pager = paginateAt(r, "/parked", int(total), c.cfg.PageSize, url.Values{"state": {state}})
	n := d.Pager.To - d.Pager.From
	if n > 0 {
		var rows []retrytask.Parked
		switch state {
		case retrytask.StatePending:
			rows, err = t.ListPending(r.Context(), d.Pager.From, n)
		case retrytask.StateDead:
			rows, err = t.ListDead(r.Context(), d.Pager.From, n)
		default:
			rows, err = t.ListScheduled(r.Context(), d.Pager.From, n)
		}
		if err != nil {
			v.Error = joinErr(v.Error, err)
		}
		for i, p := range rows {
			d.Rows = append(d.Rows, parkedRow{Parked: p, Index: d.Pager.From + i})
		}
	}
	c.render(w, r, status, "parked", v)
}

func slicesContains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// resendParked resends one record now — a dead one revived first — and nothing else
// (retrytask.Task.ResendNow), and reports what became of it.
func (c *Console) resendParked(w http.ResponseWriter, r *http.Request) {
	t := c.cfg.Parked
	ctx := r.Context()
	state, id := r.PostFormValue("state"), strings.TrimSpace(r.PostFormValue("id"))
	index, err := strconv.Atoi(r.PostFormValue("index"))
	if err != nil || index < 0 || id == "" {
		c.parkedPage(w, r, http.StatusBadRequest, "", "resend: a record id and index are required")
		return
	}
	if state == retrytask.StateDead {
		rows, err := t.ListDead(ctx, index, 1)
		if err != nil || len(rows) != 1 || rows[0].Record == nil || rows[0].Record.ID != id {
			c.parkedPage(w, r, http.StatusConflict, "", fmt.Sprintf("resend %s: the dead list changed; reload and try again", id))
			return
		}
		if err := t.Revive(ctx, rows[0].Raw); err != nil {
			c.parkedPage(w, r, http.StatusConflict, "", "resend "+id+": "+err.Error())
			return
		}
	}
	st, err := t.ResendNow(ctx, id)
	if errors.Is(err, retrytask.ErrNotFound) {
		c.parkedPage(w, r, http.StatusConflict, "", "resend "+id+": not waiting any more (resent, or claimed by a resender right now)")
		return
	}
	if err != nil {
		c.parkedPage(w, r, http.StatusBadGateway, "", "resend "+id+": "+err.Error())
		return
	}
	outcome := "sent"
	switch {
	case st.Dead > 0:
		outcome = "failed again and is dead"
	case st.Retried > 0:
		outcome = "failed again and is rescheduled"
	case st.Sent == 0:
		outcome = "rescheduled for its delivery time"
	}
	if st.Sent == 0 {
		if p, ok, ferr := t.Find(ctx, id); ferr == nil && ok && p.Record != nil && p.Record.LastError != "" {
			outcome += ": " + p.Record.LastError
		}
	}
	c.log.Info("parked record resent from the console", "id", id, "outcome", outcome)
	c.parkedPage(w, r, http.StatusOK, fmt.Sprintf("Record %s: %s. No other record was resent.", id, outcome), "")
}
