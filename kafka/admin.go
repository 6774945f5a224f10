package kafka

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// partitionsOf returns the partition ids of topic, sorted.
func partitionsOf(ctx context.Context, cl *kafkago.Client, topic string) ([]int, error) {
	md, err := cl.Metadata(ctx, &kafkago.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("kafka: metadata of %q: %w", topic, err)
	}
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("kafka: metadata of %q: %w", topic, t.Error)
		}
		ids := make([]int, 0, len(t.Partitions))
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
		}
		sort.Ints(ids)
		return ids, nil
	}
	return nil, fmt.Errorf("kafka: topic %q: %w", topic, kafkago.UnknownTopicOrPartition)
}

// span is the offsets [first, last) of one partition.
type span struct{ first, last int64 }

func spans(ctx context.Context, cl *kafkago.Client, topic string, parts []int) (map[int]span, error) {
	req := &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{}}
	for _, p := range parts {
		req.Topics[topic] = append(req.Topics[topic], kafkago.FirstOffsetOf(p), kafkago.LastOffsetOf(p))
	}
	res, err := cl.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("kafka: list offsets of %q: %w", topic, err)
	}
	out := map[int]span{}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, fmt.Errorf("kafka: list offsets of %q partition %d: %w", topic, po.Partition, po.Error)
		}
		out[po.Partition] = span{po.FirstOffset, po.LastOffset}
	}
	return out, nil
}

// readRange reads the records of topic/partition in [from, to).
func readRange(ctx context.Context, cl *kafkago.Client, topic string, partition int, from, to int64, each func(*Record) error) error {
	p := &partitionRun{c: &Consumer{client: cl, cfg: Config{FetchMaxBytes: DefaultFetchMaxBytes, FetchMaxWait: 100 * time.Millisecond}},
		topic: topic, partition: partition, tr: newTracker(from)}
	for p.tr.committableNext() < to {
		recs, err := p.fetch(ctx)
		if err != nil {
			return fmt.Errorf("kafka: read %s/%d at %d: %w", topic, partition, p.tr.committableNext(), err)
		}
		if len(recs) == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		for _, r := range recs {
			if r.Offset >= to {
				return nil
			}
			p.tr.take(r.Offset)
			if err := each(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// adminClient returns a client with a transport of its own (kafka-go transports cache
// the cluster's metadata for seconds: a fresh one sees topics created a moment ago) and
// the function that closes its connections.
func adminClient(brokers []string) (*kafkago.Client, func()) {
	tr := &kafkago.Transport{DialTimeout: DefaultDialTimeout}
	return &kafkago.Client{Addr: kafkago.TCP(brokers...), Timeout: DefaultTimeout, Transport: tr}, tr.CloseIdleConnections
}

// ReadAll reads every record of topic present when it starts (all partitions, from the
// log start to the high watermark), in partition then offset order, from the cluster at
// brokers. It commits nothing; ctx bounds it.
func ReadAll(ctx context.Context, brokers []string, topic string) ([]*Record, error) {
	cl, closeConns := adminClient(brokers)
	defer closeConns()
	var out []*Record
	err := scan(ctx, cl, topic, func(r *Record) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

func scan(ctx context.Context, cl *kafkago.Client, topic string, each func(*Record) error) error {
	parts, err := partitionsOf(ctx, cl, topic)
	if err != nil {
		return err
	}
	sp, err := spans(ctx, cl, topic, parts)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if err := readRange(ctx, cl, topic, p, sp[p].first, sp[p].last, each); err != nil {
			return err
		}
	}
	return nil
}

// DeadLetter is one record of a group's dead-letter topic.
type DeadLetter struct {
	Partition      int
	Offset         int64
	MsgID          string
	OriginTopic    string
	OriginLocation string // "<partition>@<offset>" of the first delivery
	ReconsumeTimes int
	LastError      string
	Time           time.Time
	Record         *Record
}

// ListDLQ returns every dead letter of group ("<group>.dlq") present when it starts, from
// the cluster at brokers; ctx bounds it. [ListDLQPage] returns a page at a time.
func ListDLQ(ctx context.Context, brokers []string, group string) ([]DeadLetter, error) {
	cl, closeConns := adminClient(brokers)
	defer closeConns()
	var out []DeadLetter
	err := scan(ctx, cl, DLQTopic(group), func(r *Record) error {
		out = append(out, deadLetter(r))
		return nil
	})
	return out, err
}

// ResendGroup is the consumer group whose committed offsets on "<group>.dlq" record
// which dead letters ResendDLQ already re-drove: "<group>.dlq-resend".
func ResendGroup(group string) string { return group + ".dlq-resend" }

// ResendOptions control ResendDLQ.
type ResendOptions struct {
	// ToOriginalTopic sends each dead letter back to its original topic, where every
	// group subscribed to it gets it again. Default false: to "<group>.retry.1", due at
	// once, so only this group consumes it again (shown under its original topic) with
	// a fresh retry budget.
	ToOriginalTopic bool
}

// ResendResult says what ResendDLQ did.
type ResendResult struct {
	Resent  []Resent // in the order sent
	Skipped int      // before the resend group's committed offset: re-driven by an earlier run
}

// Resent is one re-driven dead letter.
type Resent struct {
	Partition int    // of the dead-letter topic
	Offset    int64  // of the dead-letter topic
	MsgID     string // the message's id (UNIQ_KEY)
	To        string // the topic it was sent to
}

// ResendDLQ re-drives the dead letters of group (on the cluster at brokers) present when
// it starts and not re-driven by an earlier run: each is copied (reconsume count reset to 0, last error kept) and
// acknowledged by all in-sync replicas before the resend group's offset on that
// partition moves past it. It stops at the first failure and returns it with the
// counts so far; a rerun goes on from there.
func ResendDLQ(ctx context.Context, brokers []string, group string, opt ResendOptions) (ResendResult, error) {
	var res ResendResult
	topic := DLQTopic(group)
	cl, closeConns := adminClient(brokers)
	defer closeConns()
	w := &kafkago.Writer{Addr: cl.Addr, Transport: cl.Transport, RequiredAcks: kafkago.RequireAll, BatchTimeout: time.Millisecond,
		Balancer: kafkago.Murmur2Balancer{}}
	defer w.Close()
	parts, err := partitionsOf(ctx, cl, topic)
	if err != nil {
		return res, err
	}
	sp, err := spans(ctx, cl, topic, parts)
	if err != nil {
		return res, err
	}
	req := &kafkago.OffsetFetchRequest{GroupID: ResendGroup(group), Topics: map[string][]int{topic: parts}}
	done, err := cl.OffsetFetch(ctx, req)
	if err != nil {
		return res, fmt.Errorf("kafka: fetch offsets of %q: %w", ResendGroup(group), err)
	}
	from := map[int]int64{}
	for _, p := range done.Topics[topic] {
		if p.Error == nil && p.CommittedOffset >= 0 {
			from[p.Partition] = p.CommittedOffset
		}
	}
	for _, p := range parts {
		start := sp[p].first
		if c, ok := from[p]; ok && c > start {
			res.Skipped += int(min(c, sp[p].last) - start)
			start = c
		}
		err := readRange(ctx, cl, topic, p, start, sp[p].last, func(r *Record) error {
			orig, _, _ := r.origin()
			target := RetryTopic(group, 1)
			set := map[string]string{HeaderReconsumeTimes: "0", HeaderDueMs: strconv.FormatInt(time.Now().UnixMilli(), 10)}
			if opt.ToOriginalTopic {
				target = orig
				// Every control header goes: a consumer ignores (and counts) them on a main topic.
				set = map[string]string{HeaderReconsumeTimes: "", HeaderDueMs: "", HeaderOriginTopic: "", HeaderOriginPartition: "", HeaderOriginOffset: "",
					HeaderBornMs: "", HeaderLastError: "", HeaderHMAC: ""}
			}
			if err := write(ctx, w, r.copyFor(target, set)); err != nil {
				return fmt.Errorf("kafka: resend dead letter %d@%d to %q: %w", p, r.Offset, target, err)
			}
			cres, err := cl.OffsetCommit(ctx, &kafkago.OffsetCommitRequest{GroupID: ResendGroup(group), GenerationID: -1,
				Topics: map[string][]kafkago.OffsetCommit{topic: {{Partition: p, Offset: r.Offset + 1}}}})
			if err == nil {
				for _, cp := range cres.Topics[topic] {
					if cp.Error != nil {
						err = cp.Error
					}
				}
			}
			if err != nil {
				return fmt.Errorf("kafka: dead letter %d@%d resent, but recording the progress failed (a rerun sends it again): %w", p, r.Offset, err)
			}
			res.Resent = append(res.Resent, Resent{Partition: p, Offset: r.Offset, MsgID: r.ToMessageExt().MsgID, To: target})
			return nil
		})
		if err != nil {
			return res, err
		}
	}
	return res, ctx.Err()
}

// EnsureTopicsAt is [EnsureTopics] on the cluster at brokers (through a client of its
// own), with the brokers' default replication factor.
func EnsureTopicsAt(ctx context.Context, brokers []string, partitions int, topics ...string) error {
	cl, closeConns := adminClient(brokers)
	defer closeConns()
	return EnsureTopics(ctx, cl, partitions, -1, topics...)
}

// Limits of ListDLQPage.
const (
	DefaultDLQListLimit = 100   // dead letters one page holds by default
	MaxDLQListLimit     = 10000 // most dead letters one page holds
)

// DLQCursor is a position in a dead-letter topic read in (partition, offset) order:
// partition Partition from offset Offset, then every later partition from its start.
type DLQCursor struct {
	Partition int   `json:"partition"`
	Offset    int64 `json:"offset"`
}

// String is the cursor as the CLI's --from takes it: "partition:offset".
func (c DLQCursor) String() string {
	return strconv.Itoa(c.Partition) + ":" + strconv.FormatInt(c.Offset, 10)
}

// ParseDLQCursor reads "partition:offset" (both not negative).
func ParseDLQCursor(s string) (DLQCursor, error) {
	p, o, ok := strings.Cut(s, ":")
	pi, err1 := strconv.Atoi(p)
	oi, err2 := strconv.ParseInt(o, 10, 64)
	if !ok || err1 != nil || err2 != nil || pi < 0 || oi < 0 {
		return DLQCursor{}, fmt.Errorf("%q: want partition:offset, both 0 or more (e.g. 0:100)", s)
	}
	return DLQCursor{Partition: pi, Offset: oi}, nil
}

// DLQListOptions select a page of ListDLQPage.
type DLQListOptions struct {
	// From is where the page starts. Default (the zero cursor): the first dead letter.
	From DLQCursor
	// Limit bounds the dead letters of the page, 1..MaxDLQListLimit. Default
	// DefaultDLQListLimit.
	Limit int
}

// DLQPage is one page of a group's dead letters.
type DLQPage struct {
	// Total is how many dead letters the topic holds (log start to high watermark, over
	// every partition), whatever the page.
	Total int64
	// Rows are the page's dead letters in partition, then offset order.
	Rows []DeadLetter
	// More reports dead letters after the page; Next is where the next page starts.
	More bool
	Next DLQCursor
}

// ListDLQPage returns one page of the dead letters of group ("<group>.dlq") present when
// it starts, in partition then offset order, from opt.From on, at most opt.Limit, with the
// total and the cursor of the next page; ctx bounds it. It reads only the page's records
// (plus at most one fetch more per partition). Errors: an invalid Limit or a From
// partition the topic does not have; metadata, offset and read errors (a group without
// a dead-letter topic wraps kafka-go's UnknownTopicOrPartition).
func ListDLQPage(ctx context.Context, brokers []string, group string, opt DLQListOptions) (*DLQPage, error) {
	if opt.Limit == 0 {
		opt.Limit = DefaultDLQListLimit
	}
	if opt.Limit < 1 || opt.Limit > MaxDLQListLimit {
		return nil, fmt.Errorf("kafka: list dead letters: Limit %d is outside 1..%d", opt.Limit, MaxDLQListLimit)
	}
	if opt.From.Partition < 0 || opt.From.Offset < 0 {
		return nil, fmt.Errorf("kafka: list dead letters: From %s: partition and offset must not be negative", opt.From)
	}
	topic := DLQTopic(group)
	cl, closeConns := adminClient(brokers)
	defer closeConns()
	parts, err := partitionsOf(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	if opt.From.Partition > parts[len(parts)-1] {
		return nil, fmt.Errorf("kafka: list dead letters: From %s: %s has partitions %d..%d", opt.From, topic, parts[0], parts[len(parts)-1])
	}
	sp, err := spans(ctx, cl, topic, parts)
	if err != nil {
		return nil, err
	}
	page := &DLQPage{Rows: []DeadLetter{}}
	for _, p := range parts {
		page.Total += sp[p].last - sp[p].first
	}
	errFull := errors.New("page full")
	for _, p := range parts {
		if p < opt.From.Partition {
			continue
		}
		start := sp[p].first
		if p == opt.From.Partition {
			start = max(start, opt.From.Offset)
		}
		if start >= sp[p].last {
			continue
		}
		if len(page.Rows) == opt.Limit { // the page is full and this partition has more
			page.More, page.Next = true, DLQCursor{Partition: p, Offset: start}
			break
		}
		err := readRange(ctx, cl, topic, p, start, sp[p].last, func(r *Record) error {
			if len(page.Rows) == opt.Limit {
				page.More, page.Next = true, DLQCursor{Partition: p, Offset: r.Offset}
				return errFull
			}
			page.Rows = append(page.Rows, deadLetter(r))
			return nil
		})
		if errors.Is(err, errFull) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return page, nil
}

func deadLetter(r *Record) DeadLetter {
	m := r.ToMessageExt()
	ot, op, oo := r.origin()
	le, _ := r.header(HeaderLastError)
	return DeadLetter{Partition: r.Partition, Offset: r.Offset, MsgID: m.MsgID, OriginTopic: ot,
		OriginLocation: op + "@" + oo, ReconsumeTimes: int(m.ReconsumeTimes), LastError: le, Time: r.Time, Record: r}
}
