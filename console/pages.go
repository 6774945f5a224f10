package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/suggest"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
)

// requestTimeout bounds the admin calls of one page.
const requestTimeout = 15 * time.Second

// view is what every page template gets.
type view struct {
	Title    string
	Nav      string // highlighted menu entry
	ReadOnly bool
	CSRF     string
	Error    string // shown as an error banner
	Flash    string // shown as a success banner
	Charts   bool   // metrics are configured
	Parked   bool   // the parked-sends page exists
	Outbox   bool   // the outbox page exists
	Data     any
}

var funcs = template.FuncMap{
	"ms": func(ms int64) string {
		if ms <= 0 {
			return "-"
		}
		return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000")
	},
	"path":  url.PathEscape,
	"query": url.QueryEscape,
	"add":   func(a, b int) int { return a + b },
	"sub":   func(a, b int) int { return a - b },
	"perm": func(p int) string {
		s := ""
		for _, x := range []struct {
			bit int
			c   string
		}{{wire.PermRead, "R"}, {wire.PermWrite, "W"}, {wire.PermInherit, "I"}} {
			if p&x.bit != 0 {
				s += x.c
			} else {
				s += "-"
			}
		}
		return s
	},
	"join": strings.Join,
}

// parseTemplates parses layout.html with each page template.
func parseTemplates() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		out[base] = t
	}
	return out, nil
}

// render executes page (in the layout) with v; a fragment name ("page:block") renders
// only that block, for htmx swaps.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	name, block, _ := strings.Cut(page, ":")
	t := c.tmpl[name]
	if t == nil {
		http.Error(w, "no template "+name, http.StatusInternalServerError)
		return
	}
	v.ReadOnly, v.CSRF, v.Charts, v.Parked = c.cfg.ReadOnly, c.csrf, len(c.cfg.Metrics) > 0, c.cfg.Parked != nil
	v.Outbox = len(c.cfg.Outboxes) > 0
	if block == "" {
		block = "layout"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, block, v); err != nil {
		c.log.Error("render", "page", page, "err", err)
		http.Error(w, "render error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// page wraps a read-only handler with a request timeout.
func (c *Console) page(f func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		f(w, r.WithContext(ctx))
	}
}

// mutate wraps a mutating (POST) handler: refused with 403 in read-only mode or without
// the CSRF token (form field csrf or header X-CSRF-Token).
func (c *Console) mutate(f func(w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return c.page(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.ReadOnly {
			c.render(w, r, http.StatusForbidden, "error", &view{Title: "Read-only", Error: "the console is read-only: changes are refused"})
			return
		}
		tok := r.Header.Get("X-CSRF-Token")
		if tok == "" {
			tok = r.PostFormValue("csrf")
		}
		if !equal(tok, c.csrf) {
			c.render(w, r, http.StatusForbidden, "error", &view{Title: "Refused", Error: "missing or wrong CSRF token: reload the page and try again"})
			return
		}
		f(w, r)
	})
}

// pager cuts a listing into pages.
type pager struct {
	Page, Pages, Total, From, To int
	Prev, Next                   template.URL // links to the neighbour pages ("" at the ends)
}

// paginateAt cuts a listing into pages whose links go to path (not the request's: a
// listing is also rendered after a POST to another path).
func paginateAt(r *http.Request, path string, total, size int, keep url.Values) pager {
	p, _ := strconv.Atoi(r.URL.Query().Get("page"))
	pages := max((total+size-1)/size, 1)
	p = min(max(p, 1), pages)
	from := (p - 1) * size
	pg := pager{Page: p, Pages: pages, Total: total, From: from, To: min(from+size, total)}
	link := func(n int) template.URL {
		q := url.Values{}
		for k, v := range keep {
			q[k] = v
		}
		q.Set("page", strconv.Itoa(n))
		return template.URL(path + "?" + q.Encode())
	}
	if p > 1 {
		pg.Prev = link(p - 1)
	}
	if p < pages {
		pg.Next = link(p + 1)
	}
	return pg
}

// ---------------------------------------------------------------------------------
// Overview

type overviewData struct {
	Namesrv  []string
	Clusters []clusterRow
	Topics   string // a count, or "?" when it could not be read
	Groups   string
}

type clusterRow struct {
	Cluster string
	Brokers []brokerRow
}

type brokerRow struct {
	Name  string
	Addrs []string // "id=addr"
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	v := &view{Title: "Cluster", Nav: "cluster"}
	d := overviewData{Namesrv: c.cfg.Admin.NamesrvAddrs()}
	v.Data = &d
	ci, err := c.cfg.Admin.ClusterInfo(r.Context())
	if err != nil {
		v.Error = err.Error()
		d.Topics, d.Groups = "?", "?"
		c.render(w, r, http.StatusBadGateway, "overview", v)
		return
	}
	for cluster, names := range ci.ClusterAddrTable {
		row := clusterRow{Cluster: cluster}
		for _, n := range names {
			br := brokerRow{Name: n}
			if bd := ci.BrokerAddrTable[n]; bd != nil {
				ids := make([]int64, 0, len(bd.BrokerAddrs))
				for id := range bd.BrokerAddrs {
					ids = append(ids, id)
				}
				slices.Sort(ids)
				for _, id := range ids {
					role := "slave " + strconv.FormatInt(id, 10)
					if id == wire.MasterID {
						role = "master"
					}
					br.Addrs = append(br.Addrs, bd.BrokerAddrs[id]+" ("+role+")")
				}
			}
			row.Brokers = append(row.Brokers, br)
		}
		d.Clusters = append(d.Clusters, row)
	}
	sort.Slice(d.Clusters, func(i, j int) bool { return d.Clusters[i].Cluster < d.Clusters[j].Cluster })
	// Counts that cannot be read are "?" and an error, never 0.
	status := http.StatusOK
	d.Topics, d.Groups = "?", "?"
	if len(ci.BrokerAddrTable) == 0 {
		v.Error, status = fmt.Sprintf("No broker is registered with name server %s: brokers are stopped or cannot reach it. Nothing below can be read.", strings.Join(d.Namesrv, ", ")), http.StatusServiceUnavailable
	}
	if ts, err := c.cfg.Admin.TopicConfigs(r.Context()); errors.Is(err, admin.ErrNoBroker) && status != http.StatusOK {
		// said above
	} else if err == nil {
		n := 0
		for _, t := range ts {
			if !t.System {
				n++
			}
		}
		d.Topics = strconv.Itoa(n)
	} else {
		v.Error, status = joinErr(v.Error, fmt.Errorf("topics: %w", err)), statusFor(err)
	}
	if gs, err := c.cfg.Admin.GroupSummaries(r.Context()); err == nil {
		d.Groups = strconv.Itoa(len(gs))
	} else if !errors.Is(err, admin.ErrNoBroker) { // said once
		v.Error, status = joinErr(v.Error, fmt.Errorf("consumer groups: %w", err)), statusFor(err)
	}
	c.render(w, r, status, "overview", v)
}

// ---------------------------------------------------------------------------------
// Topics

type topicsData struct {
	Q      string
	System bool
	Rows   []admin.TopicInfo
	Pager  pager
}

// topics lists topics, filtered and paginated: one GET_ALL_TOPIC_CONFIG per broker.
func (c *Console) topics(w http.ResponseWriter, r *http.Request) {
	c.topicsPage(w, r, http.StatusOK, "", "")
}

func (c *Console) topicsPage(w http.ResponseWriter, r *http.Request, status int, flash, errMsg string) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	sys := r.URL.Query().Get("system") == "1"
	v := &view{Title: "Topics", Nav: "topics", Flash: flash, Error: errMsg}
	d := &topicsData{Q: q, System: sys}
	v.Data = d
	all, err := c.cfg.Admin.TopicConfigs(r.Context())
	if err != nil {
		v.Error, status = joinErr(v.Error, err), statusFor(err)
		if !errors.As(err, new(*admin.PartialError)) {
			c.render(w, r, status, "topics", v)
			return
		} // else: list what the brokers that answered hold, under the banner naming the others
	}
	rows := all[:0]
	for _, t := range all {
		if (!sys && t.System) || (q != "" && !strings.Contains(strings.ToLower(t.Topic), strings.ToLower(q))) {
			continue
		}
		rows = append(rows, t)
	}
	keep := url.Values{}
	if q != "" {
		keep.Set("q", q)
	}
	if sys {
		keep.Set("system", "1")
	}
	d.Pager = paginateAt(r, "/topics", len(rows), c.cfg.PageSize, keep)
	d.Rows = rows[d.Pager.From:d.Pager.To]
	c.render(w, r, status, "topics", v)
}

func joinErr(prev string, err error) string {
	if prev == "" {
		return err.Error()
	}
	return prev + "; " + err.Error()
}

// statusFor maps an admin error to the page's status: 400 for the operator's input, 404
// for an unknown topic or group, 503 when no broker is registered (stopped or
// unreachable), 502 for any other failure on the way to or at the cluster — never 200.
// brokerNames lists the names of bs, comma-separated.
func brokerNames(bs []admin.Broker) string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.Name
	}
	return strings.Join(names, ", ")
}

func statusFor(err error) int {
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		return http.StatusBadRequest
	case errors.Is(err, admin.ErrNoBroker):
		return http.StatusServiceUnavailable
	case errors.Is(err, admin.ErrTopicNotExist), errors.Is(err, admin.ErrGroupNotExist):
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}

func (c *Console) createTopic(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostFormValue("topic"))
	queues, err := strconv.Atoi(r.PostFormValue("queues"))
	if err != nil {
		c.topicsPage(w, r, http.StatusBadRequest, "", fmt.Sprintf("queues %q: not a number", r.PostFormValue("queues")))
		return
	}
	spec := admin.TopicSpec{Topic: name, Queues: queues, Order: r.PostFormValue("order") == "on"}
	res, err := c.cfg.Admin.CreateTopic(r.Context(), spec)
	if err != nil {
		// A bad form is the user's to fix (400); anything else failed on the way to or
		// at the name server or brokers (502).
		status := http.StatusBadGateway
		if _, bad := errors.AsType[*config.Error](err); bad {
			status = http.StatusBadRequest
		}
		c.topicsPage(w, r, status, "", "create topic: "+err.Error())
		return
	}
	names := make([]string, len(res.Brokers))
	for i, b := range res.Brokers {
		names[i] = b.Name
	}
	c.log.Info("topic created", "topic", name, "queues", queues, "brokers", names)
	http.Redirect(w, r, "/topics/"+url.PathEscape(name)+"?created=1", http.StatusSeeOther)
}

type topicData struct {
	Topic  string
	Info   *admin.TopicInfo
	Route  *wire.TopicRouteData
	Queues []admin.QueueOffset
}

// topic shows one topic: its route and its queues' offsets.
func (c *Console) topic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("topic")
	v := &view{Title: "Topic " + name, Nav: "topics"}
	if r.URL.Query().Get("created") == "1" {
		v.Flash = "Topic " + name + " created."
	}
	d := &topicData{Topic: name}
	v.Data = d
	status := http.StatusOK
	route, err := c.cfg.Admin.TopicRoute(r.Context(), name)
	if err != nil {
		v.Error, status = err.Error(), statusFor(err)
	}
	d.Route = route
	if route != nil {
		qs, err := c.cfg.Admin.QueueOffsets(r.Context(), name)
		if err != nil {
			v.Error, status = joinErr(v.Error, err), statusFor(err)
		}
		d.Queues = qs
	}
	c.render(w, r, status, "topic", v)
}

func (c *Console) confirmDeleteTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("topic")
	c.render(w, r, http.StatusOK, "delete", &view{Title: "Delete " + name, Nav: "topics", Data: name})
}

func (c *Console) deleteTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("topic")
	if r.PostFormValue("confirm") != name {
		c.render(w, r, http.StatusBadRequest, "delete", &view{Title: "Delete " + name, Nav: "topics", Data: name,
			Error: "type the topic name to confirm"})
		return
	}
	deleted, err := c.cfg.Admin.DeleteTopic(r.Context(), name)
	if err != nil {
		if len(deleted) > 0 { // some brokers deleted it: say where, and where not
			c.log.Warn("topic deleted in part", "topic", name, "brokers", brokerNames(deleted), "err", err)
			c.topicsPage(w, r, statusFor(err), "Topic "+name+" deleted from "+brokerNames(deleted)+" only.",
				"delete: "+err.Error()+"; the topic and its route stay on the other brokers: delete it again once they answer")
			return
		}
		c.render(w, r, statusFor(err), "delete", &view{Title: "Delete " + name, Nav: "topics", Data: name,
			Error: "delete: " + err.Error()})
		return
	}
	c.log.Info("topic deleted", "topic", name)
	c.topicsPage(w, r, http.StatusOK, "Topic "+name+" deleted.", "")
}

// ---------------------------------------------------------------------------------
// Groups

type groupsData struct {
	Q     string
	Sort  string // group, lag, age, clients
	Desc  bool
	Rows  []groupRow
	Pager pager
	Now   int64
	Links map[string]template.URL // column -> link sorting by it (toggling the direction)
}

type groupRow struct {
	admin.GroupSummary
	Age      time.Duration // lag in time: the oldest unconsumed message's wait
	AgeText  string
	Mode     string // push/pull and clustering/broadcasting
	State    string // online, offline, no clients
	Retries  string // retries before the DLQ as the clients send it, else the config's
	Deletion bool   // no client online: the group may be deleted
}

// groupSorts are the sortable columns of the groups page.
var groupSorts = []string{"group", "lag", "age", "clients"}

// groups lists consumer groups — configured, with committed offsets only, or with clients
// online — with lag (messages and time), clients, consume mode and state, filtered,
// sorted (default: the largest lag first) and paginated: one request per broker.
func (c *Console) groups(w http.ResponseWriter, r *http.Request) {
	c.groupsPage(w, r, http.StatusOK, "", "")
}

func (c *Console) groupsPage(w http.ResponseWriter, r *http.Request, status int, flash, errMsg string) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	sortBy := r.URL.Query().Get("sort")
	if !slices.Contains(groupSorts, sortBy) {
		sortBy = "lag"
	}
	desc := r.URL.Query().Get("desc") != "0"
	if r.URL.Query().Get("desc") == "" && sortBy == "group" {
		desc = false
	}
	v := &view{Title: "Consumer groups", Nav: "groups", Flash: flash, Error: errMsg}
	d := &groupsData{Q: q, Sort: sortBy, Desc: desc, Links: map[string]template.URL{}}
	v.Data = d
	all, err := c.cfg.Admin.GroupSummaries(r.Context())
	if err != nil {
		v.Error, status = joinErr(v.Error, err), statusFor(err)
		if !errors.As(err, new(*admin.PartialError)) {
			c.render(w, r, status, "groups", v)
			return
		} // else: list what the brokers that answered know, under the banner naming the others
	}
	now := time.Now()
	rows := make([]groupRow, 0, len(all))
	for _, g := range all {
		if q != "" && !strings.Contains(strings.ToLower(g.Group), strings.ToLower(q)) {
			continue
		}
		rows = append(rows, newGroupRow(g, now))
	}
	cmp := func(a, b groupRow) int {
		switch sortBy {
		case "lag":
			return int(sign(a.Lag - b.Lag))
		case "age":
			return int(sign(int64(a.Age - b.Age)))
		case "clients":
			return a.Clients - b.Clients
		}
		return strings.Compare(a.Group, b.Group)
	}
	slices.SortStableFunc(rows, func(a, b groupRow) int {
		if x := cmp(a, b); x != 0 {
			if desc {
				return -x
			}
			return x
		}
		return strings.Compare(a.Group, b.Group)
	})
	keep := url.Values{}
	if q != "" {
		keep.Set("q", q)
	}
	for _, col := range groupSorts {
		l := url.Values{"sort": {col}}
		if q != "" {
			l.Set("q", q)
		}
		switch {
		case col == sortBy && desc:
			l.Set("desc", "0")
		case col == sortBy || col != "group":
			l.Set("desc", "1")
		}
		d.Links[col] = template.URL("/groups?" + l.Encode())
	}
	keep.Set("sort", sortBy)
	if desc {
		keep.Set("desc", "1")
	} else {
		keep.Set("desc", "0")
	}
	d.Pager = paginateAt(r, "/groups", len(rows), c.cfg.PageSize, keep)
	d.Rows = rows[d.Pager.From:d.Pager.To]
	c.render(w, r, status, "groups", v)
}

func sign(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

func newGroupRow(g admin.GroupSummary, now time.Time) groupRow {
	row := groupRow{GroupSummary: g, Age: g.LagAge(now)}
	row.AgeText = "-"
	if row.Age > 0 {
		row.AgeText = shortDuration(row.Age)
	}
	switch g.ConsumeType {
	case "CONSUME_PASSIVELY":
		row.Mode = "push"
	case "CONSUME_ACTIVELY":
		row.Mode = "pull"
	}
	if g.MessageModel != "" {
		row.Mode = strings.TrimSpace(row.Mode + " " + strings.ToLower(g.MessageModel))
	}
	switch {
	case g.Clients > 0:
		row.State = "online"
	case !g.Configured:
		row.State = "offsets only"
	default:
		row.State = "offline"
	}
	switch {
	case g.ClientMaxReconsumeTimes >= 0:
		row.Retries = strconv.Itoa(g.ClientMaxReconsumeTimes)
	case g.Configured:
		row.Retries = strconv.Itoa(g.RetryMaxTimes) + " (broker default)" // no client has sent its own yet
	default:
		row.Retries = "-"
	}
	row.Deletion = g.Clients == 0
	return row
}

// unknownGroup returns an error message when no broker knows group (naming the nearest
// known groups), "" when one does or the groups cannot be read.
func (c *Console) unknownGroup(ctx context.Context, group string) string {
	all, err := c.cfg.Admin.GroupSummaries(ctx)
	if err != nil || slices.ContainsFunc(all, func(g admin.GroupSummary) bool { return g.Group == group }) {
		return ""
	}
	return unknownGroupMessage(group, all)
}

func unknownGroupMessage(group string, all []admin.GroupSummary) string {
	names := make([]string, len(all))
	for i, g := range all {
		names[i] = g.Group
	}
	msg := fmt.Sprintf("No broker knows consumer group %q (no config, committed offset or client online).", group)
	if near := suggest.Nearest(group, names); len(near) > 0 {
		msg += " Did you mean " + strings.Join(near, " or ") + "?"
	}
	return msg
}

// shortDuration prints d as "45s", "12m", "3h05m" or "2d04h".
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

type groupData struct {
	Group     string
	Report    *admin.SubscriptionReport
	ReportErr string
	Lag       lagData
	Topics    []string // topics of the reset form: subscribed or with offsets
	Reset     *admin.ResetResult
	ResetAt   string
	Summary   *groupRow // nil when no broker lists the group
}

type lagData struct {
	Group string
	Rows  []lagRow
	Total int64
	Err   string
}

type lagRow struct {
	admin.QueueOffset
	Lag  int64
	Mark bool // a %DLQ% queue: the offset is the re-drive mark, its lag the dead letters not re-driven
}

func (c *Console) lagOf(ctx context.Context, group string) lagData {
	d := lagData{Group: group}
	qs, err := c.cfg.Admin.GroupOffsets(ctx, group)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	for _, q := range qs {
		l := q.Lag()
		mark := message.IsDLQTopic(q.Queue.Topic)
		d.Rows = append(d.Rows, lagRow{QueueOffset: q, Lag: l, Mark: mark})
		if !mark {
			d.Total += l
		}
	}
	return d
}

// group shows a consumer group: clients and subscriptions, consistency warnings, lag
// per queue (refreshed by htmx from /groups/{group}/lag) and the reset form.
func (c *Console) group(w http.ResponseWriter, r *http.Request) {
	c.groupPage(w, r, http.StatusOK, r.PathValue("group"), nil, "", "")
}

func (c *Console) groupPage(w http.ResponseWriter, r *http.Request, status int, group string, reset *admin.ResetResult, flash, errMsg string) {
	v := &view{Title: "Group " + group, Nav: "groups", Flash: flash, Error: errMsg}
	d := &groupData{Group: group, Reset: reset}
	v.Data = d
	rep, err := c.cfg.Admin.GroupConsistency(r.Context(), group)
	switch {
	case errors.Is(err, admin.ErrNotSupported): // a broker that is not Sluice: this section only
		d.ReportErr = err.Error()
	case err != nil:
		v.Error = joinErr(v.Error, err)
		if status == http.StatusOK {
			status = statusFor(err)
		}
	}
	d.Report = rep
	d.Lag = c.lagOf(r.Context(), group)
	if d.Lag.Err != "" && status == http.StatusOK {
		status = http.StatusBadGateway
	}
	if all, err := c.cfg.Admin.GroupSummaries(r.Context()); err == nil {
		if i := slices.IndexFunc(all, func(g admin.GroupSummary) bool { return g.Group == group }); i >= 0 {
			row := newGroupRow(all[i], time.Now())
			d.Summary = &row
		} else if status == http.StatusOK {
			v.Error, status = joinErr(v.Error, errors.New(unknownGroupMessage(group, all))), http.StatusNotFound
		}
	}
	topics := map[string]bool{}
	if rep != nil {
		for _, cl := range rep.Clients {
			for _, s := range cl.Subscriptions {
				topics[s.Topic] = true
			}
		}
	}
	for _, l := range d.Lag.Rows {
		topics[l.Queue.Topic] = true
	}
	for t := range topics {
		d.Topics = append(d.Topics, t)
	}
	sort.Strings(d.Topics)
	c.render(w, r, status, "group", v)
}

// groupLag renders only the lag table (htmx polls it; an error answers 502 with the
// error in the fragment, which replaces the old table).
func (c *Console) groupLag(w http.ResponseWriter, r *http.Request) {
	d := c.lagOf(r.Context(), r.PathValue("group"))
	status := http.StatusOK
	if d.Err != "" {
		status = http.StatusBadGateway
	}
	c.render(w, r, status, "group:lagtable", &view{Data: &groupData{Group: d.Group, Lag: d}})
}

// parseTime reads a form time: "" = the zero time, "2006-01-02T15:04[:05]" (UTC, as an
// HTML datetime-local input sends it) or RFC 3339.
func parseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02 15:04:05", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want YYYY-MM-DDTHH:MM (UTC) or RFC 3339", s)
}

// confirmData is a confirmation page: what an action will do, and a form that posts it
// again with confirm=yes.
type confirmData struct {
	Action template.URL // where the form posts
	Effect string       // what the action will do, in the operator's terms
	Fields [][2]string  // the request's fields, carried as hidden inputs
	Button string
	Cancel template.URL
}

func (c *Console) confirm(w http.ResponseWriter, r *http.Request, title, nav string, d *confirmData) {
	c.render(w, r, http.StatusOK, "confirm", &view{Title: title, Nav: nav, Data: d})
}

func (c *Console) resetOffset(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	topic := strings.TrimSpace(r.PostFormValue("topic"))
	if err := message.ValidateTopic(topic); err != nil {
		c.groupPage(w, r, http.StatusBadRequest, group, nil, "", "reset offset: topic: "+err.Error())
		return
	}
	at, err := parseTime(r.PostFormValue("time"))
	if err != nil {
		c.groupPage(w, r, http.StatusBadRequest, group, nil, "", err.Error())
		return
	}
	toEnd := r.PostFormValue("to") == "end"
	if at.IsZero() && !toEnd {
		c.groupPage(w, r, http.StatusBadRequest, group, nil, "", "reset offset: choose a time, or \"the end of each queue\" to skip every message not consumed yet")
		return
	}
	if !at.IsZero() && toEnd {
		c.groupPage(w, r, http.StatusBadRequest, group, nil, "", "reset offset: a time and \"the end of each queue\" were both chosen")
		return
	}
	if err := c.cfg.Admin.CheckGroup(r.Context(), group); err != nil {
		c.groupPage(w, r, statusFor(err), group, nil, "", "reset offset: "+err.Error()+" (a typo would store offsets for a group nobody runs)")
		return
	}
	force := r.PostFormValue("force") == "on"
	when := "the end of each queue"
	if !at.IsZero() {
		when = at.UTC().Format("2006-01-02 15:04:05") + " UTC"
	}
	if r.PostFormValue("confirm") != "yes" {
		var lag int64
		queues := 0
		if qs, err := c.cfg.Admin.GroupOffsets(r.Context(), group); err == nil {
			for _, q := range qs {
				if q.Queue.Topic == topic {
					lag += q.Lag()
					queues++
				}
			}
		}
		effect := fmt.Sprintf("Move the offsets of %s on %s to the first message stored at or after %s: messages stored before it are skipped, messages after it are consumed (again). ", group, topic, when)
		if toEnd {
			effect = fmt.Sprintf("Skip every message of %s that %s has not consumed yet: its offsets move to the end of each queue. ", topic, group)
		}
		effect += fmt.Sprintf("Now %s lags %d message(s) on %s (%d queue(s) with offsets). Running consumers of the group jump there.", group, lag, topic, queues)
		if !force {
			effect += " Offsets only move back (\"also move forward\" is off)."
		}
		fields := [][2]string{{"topic", topic}, {"time", r.PostFormValue("time")}}
		if toEnd {
			fields = append(fields, [2]string{"to", "end"})
		}
		if force {
			fields = append(fields, [2]string{"force", "on"})
		}
		c.confirm(w, r, "Reset offsets of "+group, "groups", &confirmData{Action: template.URL("/groups/" + url.PathEscape(group) + "/reset"),
			Effect: effect, Fields: fields, Button: "Reset offsets", Cancel: template.URL("/groups/" + url.PathEscape(group))})
		return
	}
	res, err := c.cfg.Admin.ResetOffsetByTime(r.Context(), group, topic, at, force)
	if err != nil {
		c.groupPage(w, r, statusFor(err), group, nil, "", "reset offset: "+err.Error())
		return
	}
	c.log.Info("consumer offset reset", "group", group, "topic", topic, "time", when)
	c.groupPage(w, r, http.StatusOK, group, res, fmt.Sprintf("Offsets of %s on %s reset to %s.", group, topic, when), "")
}

// confirmDeleteGroup states what deleting a group does.
func (c *Console) confirmDeleteGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	all, err := c.cfg.Admin.GroupSummaries(r.Context())
	if err != nil {
		c.groupsPage(w, r, statusFor(err), "", "delete group: "+err.Error())
		return
	}
	i := slices.IndexFunc(all, func(g admin.GroupSummary) bool { return g.Group == group })
	if i < 0 {
		c.groupsPage(w, r, http.StatusNotFound, "", fmt.Sprintf("delete group: no broker knows consumer group %q", group))
		return
	}
	g := all[i]
	effect := fmt.Sprintf("Delete consumer group %s from %s: its subscription config and the offsets it committed on %d topic(s) (lag %d) are removed; its %%RETRY%% and %%DLQ%% topics and their messages stay. A consumer started later with this group starts afresh (from where its ConsumeFromWhere says).",
		group, strings.Join(g.Brokers, ", "), len(g.Topics), g.Lag)
	if g.Clients > 0 {
		effect += fmt.Sprintf(" It has %d client(s) online: the brokers refuse until they stop.", g.Clients)
	}
	c.confirm(w, r, "Delete group "+group, "groups", &confirmData{Action: template.URL("/groups/" + url.PathEscape(group) + "/delete"),
		Effect: effect, Button: "Delete group", Cancel: template.URL("/groups/" + url.PathEscape(group))})
}

func (c *Console) deleteGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if r.PostFormValue("confirm") != "yes" {
		c.confirmDeleteGroup(w, r)
		return
	}
	deleted, err := c.cfg.Admin.DeleteGroup(r.Context(), group)
	if err != nil {
		flash := ""
		if len(deleted) > 0 { // some brokers deleted it: say where
			c.log.Warn("consumer group deleted in part", "group", group, "brokers", brokerNames(deleted), "err", err)
			flash = "Consumer group " + group + " deleted from " + brokerNames(deleted) + " only."
		}
		c.groupsPage(w, r, statusFor(err), flash, "delete group "+group+": "+err.Error())
		return
	}
	c.log.Info("consumer group deleted", "group", group)
	c.groupsPage(w, r, http.StatusOK, "Consumer group "+group+" deleted.", "")
}

// ---------------------------------------------------------------------------------
// Messages

type messagesData struct {
	Topic, Key, ID, From, To string
	Searched                 bool
	Rows                     []*message.MessageExt
	Truncated                bool // the time range holds more than the rows shown
	Limit                    int
}

// maxTimeRange bounds a search by time range.
const maxTimeRange = 200

// messages finds messages by key, by message id, or by time range.
func (c *Console) messages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &messagesData{Topic: strings.TrimSpace(q.Get("topic")), Key: strings.TrimSpace(q.Get("key")),
		ID: strings.TrimSpace(q.Get("id")), From: q.Get("from"), To: q.Get("to")}
	v := &view{Title: "Messages", Nav: "messages", Data: d}
	if d.Topic == "" {
		c.render(w, r, http.StatusOK, "messages", v)
		return
	}
	d.Searched = true
	from, err1 := parseTime(d.From)
	to, err2 := parseTime(d.To)
	err := errors.Join(err1, err2)
	if err != nil {
		v.Error = err.Error()
		c.render(w, r, http.StatusBadRequest, "messages", v)
		return
	}
	if to.IsZero() {
		to = time.Now().Add(time.Minute)
	}
	var rows []*message.MessageExt
	switch {
	case d.ID != "":
		rows, err = c.cfg.Admin.FindMessageByUniqKey(r.Context(), d.Topic, d.ID)
		if len(rows) == 0 && err == nil {
			if m, verr := c.cfg.Admin.ViewMessage(r.Context(), d.ID); verr == nil && m.Topic == d.Topic {
				rows = []*message.MessageExt{m} // an offset message id
			}
		}
	case d.Key != "":
		if from.IsZero() {
			from = time.UnixMilli(0)
		}
		rows, err = c.cfg.Admin.FindMessages(r.Context(), d.Topic, d.Key, from, to)
	default:
		if from.IsZero() {
			from = time.Now().Add(-time.Hour)
		}
		rows, err = c.cfg.Admin.MessagesByTime(r.Context(), d.Topic, from, to, maxTimeRange+1)
		if len(rows) > maxTimeRange {
			rows, d.Truncated, d.Limit = rows[:maxTimeRange], true, maxTimeRange
		}
	}
	status := http.StatusOK
	if err != nil {
		v.Error, status = err.Error(), statusFor(err)
	}
	d.Rows = rows
	c.render(w, r, status, "messages", v)
}

type messageView struct {
	M        *message.MessageExt
	Body     string
	Binary   bool
	Props    [][2]string
	Topic    string
	OffsetID string
	Status   *admin.MessageStatus // what became of it in each consumer group (msgstatus.go)
}

// viewMessage shows one message (by offset message id): body and properties.
func (c *Console) viewMessage(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.URL.Query().Get("offsetId"))
	v := &view{Title: "Message", Nav: "messages"}
	m, err := c.cfg.Admin.ViewMessage(r.Context(), id)
	if err != nil {
		v.Error = err.Error()
		c.render(w, r, http.StatusNotFound, "message", v)
		return
	}
	mv := &messageView{M: m, OffsetID: id}
	if utf8.Valid(m.Body) {
		mv.Body = string(m.Body)
	} else {
		mv.Binary = true
		mv.Body = fmt.Sprintf("%x", m.Body)
	}
	for k, val := range m.Properties {
		mv.Props = append(mv.Props, [2]string{k, val})
	}
	sort.Slice(mv.Props, func(i, j int) bool { return mv.Props[i][0] < mv.Props[j][0] })
	v.Data = mv
	status := http.StatusOK
	if mv.Status, err = c.cfg.Admin.MessageStatus(r.Context(), m, admin.MessageStatusOptions{}); err != nil {
		v.Error, status = "consumer groups cannot be read: "+err.Error(), statusFor(err)
	}
	c.render(w, r, status, "message", v)
}

// ---------------------------------------------------------------------------------
// Dead letters

type dlqData struct {
	Group  string
	Rows   []admin.DLQMessage
	Count  admin.DLQCount
	Oldest bool // oldest first (default: newest first)
	Pager  pager
	Result *admin.DLQResendResult
	Failed []failedRow
}

type failedRow struct {
	admin.DLQResendError
	Reason string
}

func (c *Console) dlq(w http.ResponseWriter, r *http.Request) {
	c.dlqPage(w, r, http.StatusOK, strings.TrimSpace(r.URL.Query().Get("group")), nil, "", "")
}

// dlqPage lists a group's dead letters with their total, a page at a time (&page=N),
// newest first unless &order=oldest. A cluster that cannot be read is an error banner and
// a non-200 status, never "no dead letter".
func (c *Console) dlqPage(w http.ResponseWriter, r *http.Request, status int, group string, res *admin.DLQResendResult, flash, errMsg string) {
	d := &dlqData{Group: group, Result: res, Oldest: r.URL.Query().Get("order") == "oldest"}
	v := &view{Title: "Dead letters", Nav: "dlq", Data: d, Flash: flash, Error: errMsg}
	if res != nil {
		for _, f := range res.Failed {
			d.Failed = append(d.Failed, failedRow{DLQResendError: f, Reason: f.Err.Error()})
		}
	}
	if group != "" {
		count, err := c.cfg.Admin.CountDLQ(r.Context(), group)
		if err != nil {
			v.Error = joinErr(v.Error, err)
			if status == http.StatusOK {
				status = statusFor(err)
			}
			if _, some := errors.AsType[*admin.PartialError](err); !some {
				c.render(w, r, status, "dlq", v)
				return
			} // some brokers answered: show their dead letters under the banner
		}
		d.Count = count
		if count.Total == 0 {
			// No DLQ: an unknown group (a typo) must not read as "no dead letter".
			if msg := c.unknownGroup(r.Context(), group); msg != "" {
				v.Error = joinErr(v.Error, errors.New(msg))
				if status == http.StatusOK {
					status = http.StatusNotFound
				}
				c.render(w, r, status, "dlq", v)
				return
			}
		}
		keep := url.Values{"group": {group}}
		if d.Oldest {
			keep.Set("order", "oldest")
		}
		// Pages reach as far as ListDLQ reads (Skip+Max within MaxDLQListMax).
		shown := int(min(count.Total, int64(admin.MaxDLQListMax)))
		d.Pager = paginateAt(r, "/dlq", shown, c.cfg.PageSize, keep)
		if n := d.Pager.To - d.Pager.From; n > 0 {
			rows, err := c.cfg.Admin.ListDLQ(r.Context(), group, admin.DLQListOptions{Skip: d.Pager.From, Max: n, NewestFirst: !d.Oldest})
			if err != nil {
				v.Error = joinErr(v.Error, err)
				if status == http.StatusOK {
					status = statusFor(err)
				}
			}
			d.Rows = rows
		}
	}
	c.render(w, r, status, "dlq", v)
}

func (c *Console) resendDLQ(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	opt := admin.DLQResendOptions{ToOriginalTopic: r.PostFormValue("original") == "on"}
	if s := r.PostFormValue("max"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			c.dlqPage(w, r, http.StatusBadRequest, group, nil, "", fmt.Sprintf("max %q: want a number >= 0", s))
			return
		}
		opt.Max = n
	}
	if r.PostFormValue("confirm") != "yes" {
		count, err := c.cfg.Admin.CountDLQ(r.Context(), group)
		if err != nil {
			c.dlqPage(w, r, statusFor(err), group, nil, "", "re-drive: "+err.Error())
			return
		}
		n := count.Pending
		if opt.Max > 0 {
			n = min(n, int64(opt.Max))
		}
		effect := fmt.Sprintf("Re-drive %d of the %d dead letter(s) of %s not re-driven yet (oldest first) to %s: only %s consumes them again, with a fresh retry budget.",
			n, count.Pending, group, message.RetryTopic(group), group)
		if opt.ToOriginalTopic {
			effect = fmt.Sprintf("Re-drive %d of the %d dead letter(s) of %s not re-driven yet (oldest first) to their original topics: EVERY consumer group subscribed to them gets them again, not only %s.",
				n, count.Pending, group, group)
		}
		fields := [][2]string{{"max", strconv.Itoa(opt.Max)}}
		if opt.ToOriginalTopic {
			fields = append(fields, [2]string{"original", "on"})
		}
		c.confirm(w, r, "Re-drive dead letters of "+group, "dlq", &confirmData{Action: template.URL("/dlq/" + url.PathEscape(group) + "/resend"),
			Effect: effect, Fields: fields, Button: "Re-drive", Cancel: template.URL("/dlq?group=" + url.QueryEscape(group))})
		return
	}
	res, err := c.cfg.Admin.ResendDLQ(r.Context(), group, opt)
	if res == nil {
		c.dlqPage(w, r, statusFor(err), group, nil, "", "re-drive: "+err.Error())
		return
	}
	c.log.Info("dead letters re-driven", "group", group, "resent", len(res.Resent), "failed", len(res.Failed))
	flash := fmt.Sprintf("%d dead letter(s) re-driven, %d failed.", len(res.Resent), len(res.Failed))
	if _, some := errors.AsType[*admin.PartialError](err); some { // brokers skipped: say which
		c.dlqPage(w, r, statusFor(err), group, res, flash, "re-drive: "+err.Error())
		return
	}
	c.dlqPage(w, r, http.StatusOK, group, res, flash, "")
}
