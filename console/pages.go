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

func paginate(r *http.Request, total, size int, keep url.Values) pager {
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
		return template.URL(r.URL.Path + "?" + q.Encode())
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
	Topics   int
	Groups   int
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
	if ts, err := c.cfg.Admin.TopicConfigs(r.Context()); err == nil {
		d.Topics = len(ts)
	}
	if gs, err := c.cfg.Admin.ConsumerGroups(r.Context()); err == nil {
		d.Groups = len(gs)
	}
	c.render(w, r, http.StatusOK, "overview", v)
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
		v.Error = joinErr(v.Error, err)
		c.render(w, r, http.StatusBadGateway, "topics", v)
		return
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
	d.Pager = paginate(r, len(rows), c.cfg.PageSize, keep)
	d.Rows = rows[d.Pager.From:d.Pager.To]
	c.render(w, r, status, "topics", v)
}

func joinErr(prev string, err error) string {
	if prev == "" {
		return err.Error()
	}
	return prev + "; " + err.Error()
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
		if _, bad := errors.AsType[*admin.ConfigError](err); bad {
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
	route, err := c.cfg.Admin.TopicRoute(r.Context(), name)
	if err != nil {
		v.Error = err.Error()
	}
	d.Route = route
	if route != nil {
		qs, err := c.cfg.Admin.QueueOffsets(r.Context(), name)
		if err != nil {
			v.Error = joinErr(v.Error, err)
		}
		d.Queues = qs
	}
	c.render(w, r, http.StatusOK, "topic", v)
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
	if err := c.cfg.Admin.DeleteTopic(r.Context(), name); err != nil {
		c.render(w, r, http.StatusBadGateway, "delete", &view{Title: "Delete " + name, Nav: "topics", Data: name,
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
	Rows  []admin.GroupInfo
	Pager pager
}

// groups lists consumer groups, filtered and paginated: one request per broker.
func (c *Console) groups(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	v := &view{Title: "Consumer groups", Nav: "groups"}
	d := &groupsData{Q: q}
	v.Data = d
	all, err := c.cfg.Admin.ConsumerGroups(r.Context())
	if err != nil {
		v.Error = err.Error()
		c.render(w, r, http.StatusBadGateway, "groups", v)
		return
	}
	rows := all[:0]
	for _, g := range all {
		if q == "" || strings.Contains(strings.ToLower(g.Group), strings.ToLower(q)) {
			rows = append(rows, g)
		}
	}
	keep := url.Values{}
	if q != "" {
		keep.Set("q", q)
	}
	d.Pager = paginate(r, len(rows), c.cfg.PageSize, keep)
	d.Rows = rows[d.Pager.From:d.Pager.To]
	c.render(w, r, http.StatusOK, "groups", v)
}

type groupData struct {
	Group     string
	Report    *admin.SubscriptionReport
	ReportErr string
	Lag       lagData
	Topics    []string // topics of the reset form: subscribed or with offsets
	Reset     *admin.ResetResult
	ResetAt   string
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
	if err != nil {
		d.ReportErr = err.Error()
	}
	d.Report = rep
	d.Lag = c.lagOf(r.Context(), group)
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

// groupLag renders only the lag table (htmx polls it).
func (c *Console) groupLag(w http.ResponseWriter, r *http.Request) {
	d := c.lagOf(r.Context(), r.PathValue("group"))
	c.render(w, r, http.StatusOK, "group:lagtable", &view{Data: &groupData{Group: d.Group, Lag: d}})
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
	res, err := c.cfg.Admin.ResetOffsetByTime(r.Context(), group, topic, at, r.PostFormValue("force") == "on")
	if err != nil {
		c.groupPage(w, r, http.StatusBadGateway, group, nil, "", "reset offset: "+err.Error())
		return
	}
	when := "the end of each queue"
	if !at.IsZero() {
		when = at.Format(time.RFC3339)
	}
	c.log.Info("consumer offset reset", "group", group, "topic", topic, "time", when)
	c.groupPage(w, r, http.StatusOK, group, res, fmt.Sprintf("Offsets of %s on %s reset to %s.", group, topic, when), "")
}

// ---------------------------------------------------------------------------------
// Messages

type messagesData struct {
	Topic, Key, ID, From, To string
	Searched                 bool
	Rows                     []*message.MessageExt
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
		rows, err = c.cfg.Admin.MessagesByTime(r.Context(), d.Topic, from, to, maxTimeRange)
	}
	if err != nil {
		v.Error = err.Error()
	}
	d.Rows = rows
	c.render(w, r, http.StatusOK, "messages", v)
}

type messageView struct {
	M        *message.MessageExt
	Body     string
	Binary   bool
	Props    [][2]string
	Topic    string
	OffsetID string
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
	c.render(w, r, http.StatusOK, "message", v)
}

// ---------------------------------------------------------------------------------
// Dead letters

type dlqData struct {
	Group  string
	Rows   []admin.DLQMessage
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

func (c *Console) dlqPage(w http.ResponseWriter, r *http.Request, status int, group string, res *admin.DLQResendResult, flash, errMsg string) {
	d := &dlqData{Group: group, Result: res}
	v := &view{Title: "Dead letters", Nav: "dlq", Data: d, Flash: flash, Error: errMsg}
	if res != nil {
		for _, f := range res.Failed {
			d.Failed = append(d.Failed, failedRow{DLQResendError: f, Reason: f.Err.Error()})
		}
	}
	if group != "" {
		rows, err := c.cfg.Admin.ListDLQ(r.Context(), group, admin.DLQListOptions{Max: admin.DefaultDLQListMax})
		if err != nil {
			v.Error = joinErr(v.Error, err)
		}
		d.Rows = rows
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
	res, err := c.cfg.Admin.ResendDLQ(r.Context(), group, opt)
	if res == nil {
		c.dlqPage(w, r, http.StatusBadGateway, group, nil, "", "re-drive: "+err.Error())
		return
	}
	c.log.Info("dead letters re-driven", "group", group, "resent", len(res.Resent), "failed", len(res.Failed))
	flash := fmt.Sprintf("%d dead letter(s) re-driven, %d failed.", len(res.Resent), len(res.Failed))
	c.dlqPage(w, r, http.StatusOK, group, res, flash, "")
}
