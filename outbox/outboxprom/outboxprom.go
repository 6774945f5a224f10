// Package outboxprom exports a transactional outbox's state as Prometheus metrics: a
// [Collector] that reads the table's counts at each scrape and sums the counters of the
// relays it is given. Prometheus stays out of package outbox.
package outboxprom

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/outbox"
)

// Metric names (label "table" on each).
const (
	MetricBacklog      = "sluice_outbox_backlog"                   // gauge: unsent rows
	MetricDeadRows     = "sluice_outbox_dead_rows"                 // gauge: dead rows waiting for a re-drive
	MetricOldestAge    = "sluice_outbox_oldest_unsent_age_seconds" // gauge: age of the oldest unsent row (0 when none)
	MetricSent         = "sluice_outbox_sent_total"                // counter: rows sent and recorded by the relays
	MetricSendFailures = "sluice_outbox_send_failures_total"       // counter: failed send attempts
	MetricDead         = "sluice_outbox_dead_total"                // counter: rows the relays made dead
	MetricFenced       = "sluice_outbox_fenced_total"              // counter: outcomes dropped because the lease had passed to another relay
)

// DefaultTimeout bounds the table queries of one scrape.
const DefaultTimeout = 5 * time.Second

// Collector is a prometheus.Collector for one outbox table and the relays of this process
// that send from it. When the table cannot be read, the gauges are reported as invalid
// metrics, so the scrape fails visibly instead of showing stale numbers.
type Collector struct {
	ob      *outbox.Outbox
	relays  []*outbox.Relay
	timeout time.Duration
	now     func() time.Time

	backlog, deadRows, oldest, sent, failures, dead, fenced *prometheus.Desc
}

// NewCollector returns a collector for ob and relays (which may be none: a process that
// only watches the table). Register it with prometheus.Registerer.Register.
func NewCollector(ob *outbox.Outbox, relays ...*outbox.Relay) *Collector {
	l := prometheus.Labels{"table": ob.Table()}
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, l) }
	return &Collector{ob: ob, relays: relays, timeout: DefaultTimeout, now: time.Now,
		backlog:  d(MetricBacklog, "Unsent rows of the outbox table (pending, leased or backing off)."),
		deadRows: d(MetricDeadRows, "Dead rows of the outbox table, waiting for a re-drive."),
		oldest:   d(MetricOldestAge, "Age of the oldest unsent row of the outbox table, 0 when there is none."),
		sent:     d(MetricSent, "Rows the relays of this process sent and recorded."),
		failures: d(MetricSendFailures, "Failed send attempts of the relays of this process."),
		dead:     d(MetricDead, "Rows the relays of this process made dead."),
		fenced:   d(MetricFenced, "Outcomes the relays of this process dropped because another relay had taken the rows."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.backlog, c.deadRows, c.oldest, c.sent, c.failures, c.dead, c.fenced} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one Stats query per scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := c.ob.Stats(ctx)
	if err != nil {
		for _, d := range []*prometheus.Desc{c.backlog, c.deadRows, c.oldest} {
			ch <- prometheus.NewInvalidMetric(d, err)
		}
	} else {
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(st.Pending))
		ch <- prometheus.MustNewConstMetric(c.deadRows, prometheus.GaugeValue, float64(st.Dead))
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, st.OldestPendingAge(c.now()).Seconds())
	}
	var sum outbox.Counters
	for _, r := range c.relays {
		k := r.Counters()
		sum.Sent += k.Sent
		sum.Failed += k.Failed
		sum.Dead += k.Dead
		sum.Fenced += k.Fenced
	}
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(sum.Sent))
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(sum.Failed))
	ch <- prometheus.MustNewConstMetric(c.dead, prometheus.CounterValue, float64(sum.Dead))
	ch <- prometheus.MustNewConstMetric(c.fenced, prometheus.CounterValue, float64(sum.Fenced))
}
