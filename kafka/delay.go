package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/config"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/message"
)

// DefaultDelayGroup is the consumer group of a [DelayForwarder].
const DefaultDelayGroup = "sluice-delay-forwarder"

// DelayForwarderConfig configures a [DelayForwarder].
type DelayForwarderConfig struct {
	// Brokers are bootstrap addresses, host:port. Required.
	Brokers []string
	// Group is the forwarders' consumer group; run several forwarders in one group to
	// share the delay topics' partitions. Default "sluice-delay-forwarder".
	Group string
	// Levels is how many delay levels exist: the forwarder consumes topics
	// "sluice.delay.1" … "sluice.delay.<Levels>". Default len(message.DefaultDelayLevels()), 18.
	Levels int
	// Partitions of the delay topics it creates at Start when missing. Default 1.
	Partitions int
	// ReplicationFactor of those topics. Default -1: the broker's default.
	ReplicationFactor int
	// Consumer settings; zero values take the Consumer defaults.
	Timeout           time.Duration
	HeartbeatInterval time.Duration
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	JoinGroupBackoff  time.Duration
	FetchMaxWait      time.Duration
	CommitInterval    time.Duration
	// ControlHeaderKey, when set, signs the forwarded copies' control headers (their
	// first send time, SLUICE_BORN_MS) with SLUICE_HMAC, so consumers whose
	// Config.ControlHeaderKey is the same key honour them on the real topic. Without it
	// consumers ignore those headers there (the copy's born time is then its forward time).
	ControlHeaderKey []byte
	// Logger receives the forwarder's log lines. Default slog.Default().
	Logger *slog.Logger
}

// DelayForwarder moves the records of the delay topics ("sluice.delay.<level>", written
// by a [Producer] with DelayTopics) to their real topic (header REAL_TOPIC) when due
// (header SLUICE_DUE_MS). Each delay partition is consumed in order and waits on its
// head, so a level's topic holds its records in due order. A record is committed only
// after its forwarded copy was acknowledged by all in-sync replicas; a failed forward
// is retried in place until it works (a copy may be forwarded twice after a crash: the
// consumer side's Dedup absorbs that). The forwarded copy keeps the body, key,
// properties and UNIQ_KEY; DELAY, REAL_TOPIC and the due time are removed.
type DelayForwarder struct {
	c      *Consumer
	levels int // delay topics 1..levels are forwarded
}

// NewDelayForwarder validates cfg and returns a forwarder; Start runs it.
func NewDelayForwarder(cfg DelayForwarderConfig) (*DelayForwarder, error) {
	if cfg.Group == "" {
		cfg.Group = DefaultDelayGroup
	}
	if cfg.Levels == 0 {
		cfg.Levels = len(message.DefaultDelayLevels())
	}
	if cfg.Levels < 0 || cfg.Levels > 1000 {
		return nil, &config.Error{Package: "kafka", Field: "Levels", Reason: fmt.Sprintf("%d is outside 1..1000", cfg.Levels)}
	}
	c, err := NewConsumer(Config{
		Brokers: cfg.Brokers, Group: cfg.Group, Orderly: true, retryForever: true,
		RetryPartitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor,
		SuspendCurrentQueueTime: 200 * time.Millisecond,
		Timeout:                 cfg.Timeout, HeartbeatInterval: cfg.HeartbeatInterval, SessionTimeout: cfg.SessionTimeout,
		RebalanceTimeout: cfg.RebalanceTimeout, JoinGroupBackoff: cfg.JoinGroupBackoff, FetchMaxWait: cfg.FetchMaxWait,
		CommitInterval: cfg.CommitInterval, Logger: cfg.Logger, ControlHeaderKey: cfg.ControlHeaderKey,
	})
	if err != nil {
		return nil, err
	}
	f := &DelayForwarder{c: c, levels: cfg.Levels}
	for lvl := 1; lvl <= cfg.Levels; lvl++ {
		if err := c.subscribe(&subscription{topic: DelayTopic(lvl), raw: f.forward}); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// forward writes r to its real topic and waits for the acknowledgement.
func (f *DelayForwarder) forward(ctx context.Context, r *Record) error {
	real, ok := r.header(HeaderRealTopic)
	if !ok || validateTopic("REAL_TOPIC", real) != nil {
		// Not a delayed record we can place: retrying it would block the level forever,
		// so it goes to the forwarder group's dead-letter topic.
		return fmt.Errorf("%w: delay record without a valid %s header", errPoison, HeaderRealTopic)
	}
	km := kafkago.Message{Topic: real, Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderRealTopic, HeaderDueMs, message.PropertyDelayTimeLevel:
			continue
		}
		km.Headers = append(km.Headers, h)
	}
	signControl(f.c.cfg.ControlHeaderKey, &km)
	wctx, cancel := context.WithTimeout(ctx, f.c.cfg.Timeout)
	defer cancel()
	if err := write(wctx, f.c.writer, km); err != nil {
		return fmt.Errorf("kafka: forward delayed record to %q: %w", real, err)
	}
	return nil
}

// Start creates the delay topics when missing and starts forwarding (see
// [Consumer.Start]). It refuses to start, with a *config.Error naming Levels, when the
// cluster already has a delay topic above Levels ("sluice.delay.<n>", n > Levels: a
// producer with a longer DelayLevels table wrote it), because this forwarder would
// never move those records. A delay topic created after Start is not noticed: keep
// Levels at least as long as every producer's DelayLevels.
func (f *DelayForwarder) Start(ctx context.Context) error {
	if err := f.checkLevels(ctx); err != nil {
		f.c.abandon()
		return err
	}
	if err := EnsureTopics(ctx, f.c.client, f.c.cfg.RetryPartitions, f.c.cfg.ReplicationFactor, f.topics()...); err != nil {
		f.c.abandon()
		return err
	}
	return f.c.Start(ctx)
}

// checkLevels lists the cluster's topics and fails on a delay topic above f.levels.
func (f *DelayForwarder) checkLevels(ctx context.Context) error {
	md, err := f.c.client.Metadata(ctx, &kafkago.MetadataRequest{})
	if err != nil {
		return fmt.Errorf("kafka: delay forwarder: list topics: %w", err)
	}
	var beyond []string
	for _, t := range md.Topics {
		rest, ok := strings.CutPrefix(t.Name, DelayTopicPrefix)
		if !ok {
			continue
		}
		if lvl, err := strconv.Atoi(rest); err == nil && lvl > f.levels {
			beyond = append(beyond, t.Name)
		}
	}
	if len(beyond) == 0 {
		return nil
	}
	sort.Strings(beyond)
	return &config.Error{Package: "kafka", Field: "Levels", Reason: fmt.Sprintf("%d, but the cluster has delay topic(s) %s above it, whose records this forwarder would never move; set Levels to at least the longest producer DelayLevels",
		f.levels, strings.Join(beyond, ", "))}
}

func (f *DelayForwarder) topics() []string {
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	out := make([]string, 0, len(f.c.subs))
	for t := range f.c.subs {
		out = append(out, t)
	}
	return out
}

// Shutdown stops forwarding, as [Consumer.Shutdown].
func (f *DelayForwarder) Shutdown(ctx context.Context) error { return f.c.Shutdown(ctx) }
