// Package brokermetrics exports a Sluice broker's and name server's statistics to
// Prometheus, on an opt-in HTTP listener.
//
// The collectors read [broker.Broker.StatsSnapshot] and [namesrv.NameServer.Stats] at scrape time:
// the broker keeps only atomic counters on its hot path, and lag, backlogs, connections
// and disk usage are computed when Prometheus asks. [Start] serves /metrics (with the Go
// runtime and process collectors) and, when asked, net/http/pprof under /debug/pprof/.
//
// Every metric and its labels is listed in docs/operations.md ("Metrics").
package brokermetrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/namesrv"
)

// brokerCollector is a prometheus.Collector over one broker's StatsSnapshot.
type brokerCollector struct {
	b *broker.Broker

	putMessages, putBytes, getMessages, getBytes *prometheus.Desc
	lag, consumers, retries, deadLetters         *prometheus.Desc
	queueLag, lagSeconds, pullHeld, up           *prometheus.Desc
	sendLatency, pullLatency, flushLatency       *prometheus.Desc
	heldPulls, connections, txnChecks            *prometheus.Desc
	scheduleBacklog, commitlogBytes, diskUsed    *prometheus.Desc
	register, registerBody, refused              *prometheus.Desc
	unconsumedDeleted, writesRefused, refusing   *prometheus.Desc
	clientEntries, clientSubscriptions           *prometheus.Desc
	addressShareRefused, aclReloadRefused        *prometheus.Desc
	aclNonceQuotaRefused                         *prometheus.Desc
}

// NewCollector returns a collector of b's metrics (names prefixed sluice_broker_, each
// with the constant label broker=<brokerName>). Register it with a prometheus.Registerer,
// or pass it to [Start] in Config.Collectors.
func NewCollector(b *broker.Broker) prometheus.Collector {
	cl := prometheus.Labels{"broker": b.Name()}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sluice_broker_"+name, help, labels, cl)
	}
	return &brokerCollector{b: b,
		putMessages:         d("put_messages_total", "Messages stored by producers' sends, per topic (a batch counts its messages).", "topic"),
		putBytes:            d("put_bytes_total", "Body bytes of producers' stored sends, per topic.", "topic"),
		getMessages:         d("get_messages_total", "Messages returned by pulls, per consumer group and topic.", "group", "topic"),
		getBytes:            d("get_bytes_total", "Stored record bytes returned by pulls, per consumer group and topic.", "group", "topic"),
		lag:                 d("consumer_lag_messages", "Messages of a topic not yet consumed by a consumer group (max offset - committed offset, summed over the queues the group committed on).", "group", "topic"),
		queueLag:            d("consumer_queue_lag_messages", "Messages of one queue not yet consumed by a consumer group; only with metricsPerQueueLag=true.", "group", "topic", "queue"),
		lagSeconds:          d("consumer_lag_seconds", "How long the oldest message of a topic not yet consumed by a consumer group has been stored (0 when nothing lags).", "group", "topic"),
		pullHeld:            d("pull_held_seconds", "Time from a pull request to its answer for pulls held for long polling (the hold included)."),
		up:                  d("up", "1 while the broker is ready (started, registered with a name server, accepting sends), else 0."),
		consumers:           d("consumers", "Consumer clients connected, per consumer group.", "group"),
		retries:             d("retries_total", "Messages that reached a group's retry topic %RETRY%<group> (one per consume retry, when due).", "group"),
		deadLetters:         d("dead_letters_total", "Messages that reached a group's dead-letter topic %DLQ%<group>.", "group"),
		sendLatency:         d("send_latency_seconds", "Time from a send request to its answer (SEND_MESSAGE, V2 and BATCH)."),
		pullLatency:         d("pull_latency_seconds", "Time from a pull request to its answer for pulls answered without a long-polling hold (see pull_held_seconds)."),
		flushLatency:        d("commitlog_flush_seconds", "Duration of commitlog fsync passes that made data durable."),
		heldPulls:           d("held_pulls", "Pulls held for long polling now."),
		connections:         d("connections", "Open client connections."),
		txnChecks:           d("transaction_checks_total", "CHECK_TRANSACTION_STATE requests sent to producers."),
		scheduleBacklog:     d("schedule_backlog_messages", "Delayed messages waiting in SCHEDULE_TOPIC_XXXX, per delay level.", "level", "delay"),
		commitlogBytes:      d("commitlog_bytes", "Bytes kept in the commitlog (max - min physical offset)."),
		diskUsed:            d("disk_used_ratio", "Used share (0-1) of the file system holding the data directory."),
		register:            d("register_total", "REGISTER_BROKER calls to name servers, by result (ok, failed).", "result"),
		registerBody:        d("register_body_bytes", "Size of the last REGISTER_BROKER body sent (compressed when it was)."),
		refused:             d("refused_total", "Requests refused before their handler, by reason (names: a topic, group or client id breaking the naming rules; acl: access control; limits: connection and request limits).", "reason"),
		unconsumedDeleted:   d("unconsumed_deleted_total", "Messages retention deleted before a consumer group that had committed on their queue consumed them (summed over groups)."),
		writesRefused:       d("writes_refused_total", "Sends refused because the disk was full and diskPressurePolicy=refuseWrites kept unconsumed messages."),
		refusing:            d("refusing_writes", "1 while sends are refused for disk pressure, else 0."),
		clientEntries:       d("client_entries", "Producer and consumer registrations (client entries) kept now, bounded by maxClientEntries."),
		clientSubscriptions: d("client_subscriptions", "Subscriptions kept now (each client's own plus each group's), bounded by maxSubscriptions."),
		addressShareRefused: d("client_address_share_refused_total",
			"Heartbeats refused (in part) because their remote address (IPv4, IPv6 /64) used up its share (maxClientEntriesPerAddress, maxSubscriptionsPerAddress); also counted in refused_total{reason=\"limits\"}."),
		aclReloadRefused: d("acl_reload_refused_total", "Changed plain_acl.yml contents the broker could not apply (empty, malformed, unreadable); the previous rules stayed in force."),
		aclNonceQuotaRefused: d("acl_nonce_quota_refused_total",
			"Signature v2 requests refused because their account held its share of the nonce store (aclSignatureNoncesPerAccount); also counted in refused_total{reason=\"acl\"}."),
	}
}

// Describe sends every metric's description.
func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.queueLag, c.lagSeconds, c.pullHeld, c.up, c.putMessages, c.putBytes, c.getMessages, c.getBytes, c.lag,
		c.consumers, c.retries, c.deadLetters, c.sendLatency, c.pullLatency, c.flushLatency, c.heldPulls,
		c.connections, c.txnChecks, c.scheduleBacklog, c.commitlogBytes, c.diskUsed, c.register, c.registerBody,
		c.refused, c.unconsumedDeleted, c.writesRefused, c.refusing, c.clientEntries, c.clientSubscriptions,
		c.addressShareRefused, c.aclReloadRefused, c.aclNonceQuotaRefused} {
		ch <- d
	}
}

// Collect reads the broker's StatsSnapshot once and sends every metric.
func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.b.StatsSnapshot()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range s.Topics {
		counter(c.putMessages, t.Messages, t.Topic)
		counter(c.putBytes, t.Bytes, t.Topic)
	}
	for _, g := range s.Gets {
		counter(c.getMessages, g.Messages, g.Group, g.Topic)
		counter(c.getBytes, g.Bytes, g.Group, g.Topic)
	}
	// Lag per group and topic (and per queue when asked for): one series per pair, not per
	// queue, so a group on thousands of queues stays a few series.
	type pair struct{ group, topic string }
	lags := map[pair]int64{}
	oldest := map[pair]int64{}
	perQueue := c.b.MetricsPerQueueLag()
	for _, l := range s.Lags {
		k := pair{l.Group, l.Topic}
		lags[k] += l.Lag
		if l.OldestUnconsumed > 0 && (oldest[k] == 0 || l.OldestUnconsumed < oldest[k]) {
			oldest[k] = l.OldestUnconsumed
		}
		if perQueue {
			gauge(c.queueLag, float64(l.Lag), l.Group, l.Topic, strconv.Itoa(int(l.QueueID)))
		}
	}
	now := time.Now()
	for k, n := range lags {
		gauge(c.lag, float64(n), k.group, k.topic)
		age := 0.0
		if ts := oldest[k]; ts > 0 {
			age = max(now.Sub(time.UnixMilli(ts)).Seconds(), 0)
		}
		gauge(c.lagSeconds, age, k.group, k.topic)
	}
	up := 0.0
	if c.b.Ready() == nil {
		up = 1
	}
	gauge(c.up, up)
	for _, g := range s.Groups {
		gauge(c.consumers, float64(g.Consumers), g.Group)
		counter(c.retries, g.Retries, g.Group)
		counter(c.deadLetters, g.DeadLetters, g.Group)
	}
	ch <- histogram(c.sendLatency, s.SendLatency)
	ch <- histogram(c.pullLatency, s.PullLatency)
	ch <- histogram(c.pullHeld, s.PullHeld)
	ch <- histogram(c.flushLatency, s.CommitLog.Flush)
	gauge(c.heldPulls, float64(s.HeldPulls))
	gauge(c.connections, float64(s.Connections))
	counter(c.txnChecks, s.TransactionChecks)
	for _, l := range s.Schedule {
		gauge(c.scheduleBacklog, float64(l.Backlog), strconv.Itoa(l.Level), l.Delay.String())
	}
	gauge(c.commitlogBytes, float64(s.CommitLog.MaxOffset-s.CommitLog.MinOffset))
	if s.CommitLog.DiskUsedPercent >= 0 {
		gauge(c.diskUsed, float64(s.CommitLog.DiskUsedPercent)/100)
	}
	k := s.Counters
	counter(c.register, k.RegisterOK, "ok")
	counter(c.register, k.RegisterFailed, "failed")
	gauge(c.registerBody, float64(k.LastRegisterBodyBytes))
	counter(c.refused, k.RefusedNames, "names")
	counter(c.refused, k.RefusedACL, "acl")
	counter(c.refused, k.RefusedLimits, "limits")
	counter(c.unconsumedDeleted, k.UnconsumedDeleted)
	counter(c.writesRefused, k.WritesRefused)
	refusing := 0.0
	if k.RefusingWrites {
		refusing = 1
	}
	gauge(c.refusing, refusing)
	gauge(c.clientEntries, float64(k.ClientEntries))
	gauge(c.clientSubscriptions, float64(k.ClientSubscriptions))
	counter(c.addressShareRefused, k.RefusedAddressShare)
	counter(c.aclReloadRefused, k.AclReloadRefused)
	counter(c.aclNonceQuotaRefused, k.AclNonceQuotaRefused)
}

// ready is the broker's readiness, for /readyz.
func (c *brokerCollector) ready() error { return c.b.Ready() }

// ready is the name server's readiness, for /readyz.
func (c *nameServerCollector) ready() error { return c.n.Ready() }

func histogram(d *prometheus.Desc, h broker.Histogram) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b.Seconds()] = h.Cumulative[i]
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum.Seconds(), buckets)
}

// nameServerCollector is a prometheus.Collector over one name server's Stats.
type nameServerCollector struct {
	n                            *namesrv.NameServer
	connections, brokers, topics *prometheus.Desc
	register, registerBody       *prometheus.Desc
}

// NewNameServerCollector returns a collector of n's metrics (names prefixed
// sluice_namesrv_, constant label namesrv=<listen address>).
func NewNameServerCollector(n *namesrv.NameServer) prometheus.Collector {
	cl := prometheus.Labels{"namesrv": n.Addr()}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("sluice_namesrv_"+name, help, labels, cl)
	}
	return &nameServerCollector{n: n,
		connections:  d("connections", "Open connections (brokers and clients)."),
		brokers:      d("brokers", "Live broker addresses in the route table."),
		topics:       d("topics", "Topics with routes."),
		register:     d("register_total", "REGISTER_BROKER requests, by result (ok, failed).", "result"),
		registerBody: d("register_body_bytes", "Body size of REGISTER_BROKER requests (the broker's topic table)."),
	}
}

// Describe sends every metric's description.
func (c *nameServerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connections, c.brokers, c.topics, c.register, c.registerBody} {
		ch <- d
	}
}

// Collect reads the name server's Stats once and sends every metric.
func (c *nameServerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.n.Stats()
	ch <- prometheus.MustNewConstMetric(c.connections, prometheus.GaugeValue, float64(s.Connections))
	ch <- prometheus.MustNewConstMetric(c.brokers, prometheus.GaugeValue, float64(s.Brokers))
	ch <- prometheus.MustNewConstMetric(c.topics, prometheus.GaugeValue, float64(s.Topics))
	ch <- prometheus.MustNewConstMetric(c.register, prometheus.CounterValue, float64(s.RegisterOK), "ok")
	ch <- prometheus.MustNewConstMetric(c.register, prometheus.CounterValue, float64(s.RegisterFailed), "failed")
	buckets := make(map[float64]uint64, len(s.RegisterBody.Bounds))
	for i, b := range s.RegisterBody.Bounds {
		buckets[float64(b)] = s.RegisterBody.Cumulative[i]
	}
	ch <- prometheus.MustNewConstHistogram(c.registerBody, s.RegisterBody.Count, float64(s.RegisterBody.Sum), buckets)
}
