package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicemq/sluice/message"
)

// ScrapeURL returns a prometheus.Gatherer that GETs url (a broker's or name server's
// /metrics, e.g. "http://127.0.0.1:9100/metrics") and parses the text format; for
// [Config].Metrics. Each Gather is bounded by 5 s.
func ScrapeURL(url string) prometheus.Gatherer {
	// No idle connections: nothing of the client outlives the console (one scrape every
	// few seconds does not need them).
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		resp, err := client.Get(url)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", url, err)
		}
		out := make([]*dto.MetricFamily, 0, len(fams))
		for _, f := range fams {
			out = append(out, f)
		}
		return out, nil
	})
}

// sample is one reading of the brokers' metrics, summed over brokers.
type sample struct {
	at       time.Time
	put, get float64            // sluice_broker_put/get_messages_total, all topics
	dead     float64            // sluice_broker_dead_letters_total, all groups
	lag      map[string]float64 // group -> sluice_broker_consumer_lag_messages summed
	failed   bool               // a source could not be read: no point, not zeros
}

// series keeps the last n samples.
type series struct {
	mu      sync.Mutex
	n       int
	samples []sample
	lastErr string
	running bool // guarded by Console.mu
}

func newSeries(n int) *series { return &series{n: n} }

func (s *series) add(x sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, x)
	if len(s.samples) > s.n {
		s.samples = s.samples[len(s.samples)-s.n:]
	}
}

func (c *Console) sampleLoop() {
	t := time.NewTicker(c.cfg.SampleInterval)
	defer t.Stop()
	for {
		c.sampleOnce()
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
	}
}

// sampleOnce gathers every source once; a failing source is noted and skipped.
func (c *Console) sampleOnce() {
	x := sample{at: time.Now(), lag: map[string]float64{}}
	var errs []string
	for _, g := range c.cfg.Metrics {
		fams, err := g.Gather()
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		for _, f := range fams {
			switch f.GetName() {
			case "sluice_broker_put_messages_total":
				x.put += sum(f)
			case "sluice_broker_get_messages_total":
				x.get += sum(f)
			case "sluice_broker_dead_letters_total":
				x.dead += sum(f)
			case "sluice_broker_up":
				for _, m := range f.Metric {
					if m.GetGauge().GetValue() == 0 { // stopped or stopping: its lag is unknown, not 0
						errs = append(errs, "broker "+label(m, "broker")+" is not ready (sluice_broker_up 0)")
					}
				}
			case "sluice_broker_consumer_lag_messages":
				for _, m := range f.Metric {
					if !message.IsDLQTopic(label(m, "topic")) { // a DLQ's offset is the re-drive mark
						x.lag[label(m, "group")] += m.GetGauge().GetValue()
					}
				}
			}
		}
	}
	x.failed = len(errs) > 0
	c.series.mu.Lock()
	c.series.lastErr = ""
	if len(errs) > 0 {
		c.series.lastErr = fmt.Sprint(errs)
	}
	c.series.mu.Unlock()
	c.series.add(x)
}

func sum(f *dto.MetricFamily) float64 {
	var s float64
	for _, m := range f.Metric {
		switch {
		case m.Counter != nil:
			s += m.Counter.GetValue()
		case m.Gauge != nil:
			s += m.Gauge.GetValue()
		}
	}
	return s
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// seriesJSON is the chart data: uPlot's column layout (x = unix seconds).
type seriesJSON struct {
	Time  []int64               `json:"time"`
	Put   []*float64            `json:"put"`  // messages/s stored
	Get   []*float64            `json:"get"`  // messages/s pulled
	Dead  []*float64            `json:"dead"` // dead letters/s
	Lag   map[string][]*float64 `json:"lag"`  // group -> lag (the 5 largest now, or the asked group); null where a scrape failed
	Error string                `json:"error,omitempty"`
}

// apiSeries serves the chart data; ?group=G limits the lag series to G.
func (c *Console) apiSeries(w http.ResponseWriter, r *http.Request) {
	c.series.mu.Lock()
	ss := append([]sample(nil), c.series.samples...)
	out := seriesJSON{Time: []int64{}, Put: []*float64{}, Get: []*float64{}, Dead: []*float64{}, Lag: map[string][]*float64{}, Error: c.series.lastErr}
	c.series.mu.Unlock()
	var groups []string
	if g := r.URL.Query().Get("group"); g != "" {
		groups = []string{g}
	} else if len(ss) > 0 {
		// Each group's newest value read (failed samples skipped), so a group does not
		// vanish from the chart when the reads start failing.
		last := map[string]float64{}
		for i := len(ss) - 1; i >= 0; i-- {
			if ss[i].failed {
				continue
			}
			for g, v := range ss[i].lag {
				if _, seen := last[g]; !seen {
					last[g] = v
				}
			}
		}
		for g := range last {
			groups = append(groups, g)
		}
		sort.Slice(groups, func(i, j int) bool {
			if last[groups[i]] != last[groups[j]] {
				return last[groups[i]] > last[groups[j]]
			}
			return groups[i] < groups[j]
		})
		groups = groups[:min(len(groups), 5)]
	}
	var failed bool // the current pair of samples has a failed read
	rate := func(a, b float64, dt float64) *float64 {
		if dt <= 0 || b < a || failed { // a counter reset (broker restart) or a failed read: no point
			return nil
		}
		v := (b - a) / dt
		return &v
	}
	for i := 1; i < len(ss); i++ {
		failed = ss[i].failed || ss[i-1].failed
		dt := ss[i].at.Sub(ss[i-1].at).Seconds()
		out.Time = append(out.Time, ss[i].at.Unix())
		out.Put = append(out.Put, rate(ss[i-1].put, ss[i].put, dt))
		out.Get = append(out.Get, rate(ss[i-1].get, ss[i].get, dt))
		out.Dead = append(out.Dead, rate(ss[i-1].dead, ss[i].dead, dt))
		for _, g := range groups {
			var p *float64
			if !ss[i].failed {
				v := ss[i].lag[g]
				p = &v
			}
			out.Lag[g] = append(out.Lag[g], p)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if out.Error != "" {
		w.WriteHeader(http.StatusBadGateway) // the body still has the points read before
	}
	_ = json.NewEncoder(w).Encode(out)
}
