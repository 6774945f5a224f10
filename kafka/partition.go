package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/sluicemq/sluice/message"
)

// tracker follows the records of one partition from fetch to finish and knows the
// offset that may be committed: the first unfinished one, or the next to fetch.
type tracker struct {
	mu      sync.Mutex
	next    int64   // offset after the last record taken
	offs    []int64 // taken, in order, from the oldest unfinished on
	done    map[int64]bool
	changed chan struct{} // closed and replaced when a record finishes
}

func newTracker(next int64) *tracker {
	return &tracker{next: next, done: map[int64]bool{}, changed: make(chan struct{})}
}

func (t *tracker) take(off int64) {
	t.mu.Lock()
	t.offs = append(t.offs, off)
	t.next = off + 1
	t.mu.Unlock()
}

func (t *tracker) finish(off int64) {
	t.mu.Lock()
	t.done[off] = true
	for len(t.offs) > 0 && t.done[t.offs[0]] {
		delete(t.done, t.offs[0])
		t.offs = t.offs[1:]
	}
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// committable returns the offset a commit may name.
func (t *tracker) committable() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.offs) > 0 {
		return t.offs[0]
	}
	return t.next
}

// unfinished returns how many taken records are not finished.
func (t *tracker) unfinished() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.offs)
}

// waitRoom waits until fewer than max records are unfinished; false when ctx ended.
func (t *tracker) waitRoom(ctx context.Context, max int) bool {
	for {
		t.mu.Lock()
		n, ch := len(t.offs), t.changed
		t.mu.Unlock()
		if n < max {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// partitionRun is one assigned partition of one generation.
type partitionRun struct {
	c          *Consumer
	gc         *genCommitter
	topic      string
	partition  int
	tr         *tracker
	committed  int64
	lastCommit time.Time
}

// partitionLoop consumes one assigned partition until the generation ends or Shutdown
// stops fetching, then waits for its handlers, commits and (on Shutdown) stays until
// the generation is closed, so it never ends the generation itself.
func (c *Consumer) partitionLoop(genCtx context.Context, gc *genCommitter, topic string, pa kafkago.PartitionAssignment) {
	fetchCtx, cancel := context.WithCancel(genCtx)
	stop := context.AfterFunc(c.stopCtx, cancel)
	defer func() {
		stop()
		cancel()
	}()
	p := &partitionRun{c: c, gc: gc, topic: topic, partition: pa.ID, committed: -1}
	next, ok := p.resolve(fetchCtx, pa.Offset)
	if ok {
		p.tr = newTracker(next)
		p.lastCommit = time.Now()
		if c.cfg.Orderly {
			p.orderly(fetchCtx)
		} else {
			p.concurrent(fetchCtx)
		}
		if err := p.commit(true); err != nil && c.stopCtx.Err() != nil {
			c.noteShutdownErr(fmt.Errorf("kafka: final commit of %s/%d at offset %d: %w", topic, pa.ID, p.tr.committable(), err))
		}
	}
	c.work.Done()
	<-genCtx.Done()
}

// resolve turns a FirstOffset/LastOffset assignment into an absolute offset.
func (p *partitionRun) resolve(ctx context.Context, off int64) (int64, bool) {
	if off >= 0 {
		return off, true
	}
	start := time.Now()
	for {
		res, err := p.c.client.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{
			p.topic: {{Partition: p.partition, Timestamp: off}}}})
		if err == nil {
			for _, po := range res.Topics[p.topic] {
				if po.Partition != p.partition {
					continue
				}
				if po.Error != nil {
					err = po.Error
					break
				}
				if off == kafkago.FirstOffset {
					return po.FirstOffset, true
				}
				return po.LastOffset, true
			}
			if err == nil {
				err = errors.New("partition missing from the answer")
			}
		}
		// A topic just created (the consumer's own retry topics) has no leader for a moment:
		// expected, retried quietly; a failure that outlasts leaderGrace is warned about.
		if leadershipPending(err) && time.Since(start) < leaderGrace {
			p.c.log.Debug("kafka: the partition has no leader yet; resolving its start offset again", "topic", p.topic, "partition", p.partition, "err", err)
		} else {
			p.c.log.Warn("kafka: resolving the start offset failed; retrying", "topic", p.topic, "partition", p.partition, "err", err)
		}
		if !sleepCtx(ctx, p.c.cfg.JoinGroupBackoff) {
			return 0, false
		}
	}
}

// leaderGrace is how long a partition may lack a leader (a topic being created) before
// resolving its start offset warns.
const leaderGrace = 15 * time.Second

// leadershipPending reports whether err is a Kafka error a new partition answers until
// its leader is elected.
func leadershipPending(err error) bool {
	return errors.Is(err, kafkago.NotLeaderForPartition) || errors.Is(err, kafkago.LeaderNotAvailable) ||
		errors.Is(err, kafkago.UnknownTopicOrPartition)
}

// commit commits the partition's committable offset when it moved (and, unless final,
// when CommitInterval has passed since the last commit).
// It returns the commit's error.
func (p *partitionRun) commit(final bool) error {
	if !final && time.Since(p.lastCommit) < p.c.cfg.CommitInterval {
		return nil
	}
	p.lastCommit = time.Now()
	off := p.tr.committable()
	if off == p.committed {
		return nil
	}
	if err := p.gc.commit(p.topic, p.partition, off); err != nil {
		p.c.log.Warn("kafka: commit failed", "topic", p.topic, "partition", p.partition, "offset", off, "final", final, "err", err)
		return err
	}
	p.committed = off
	p.c.log.Debug("kafka: committed", "topic", p.topic, "partition", p.partition, "offset", off, "final", final)
	return nil
}

// fetch reads the records of the partition from p.tr's next offset on.
func (p *partitionRun) fetch(ctx context.Context) ([]*Record, error) {
	from := p.tr.committableNext()
	res, err := p.c.client.Fetch(ctx, &kafkago.FetchRequest{Topic: p.topic, Partition: p.partition, Offset: from,
		MinBytes: 1, MaxBytes: int64(p.c.cfg.FetchMaxBytes), MaxWait: p.c.cfg.FetchMaxWait})
	if err != nil {
		return nil, err
	}
	if res.Error != nil {
		return nil, res.Error
	}
	if res.Records == nil {
		return nil, nil
	}
	var out []*Record
	// A group-less reader (ReadAll, ListDLQ) reports records as stored; a group's
	// consumer screens control headers (trust.go).
	owned := p.c.cfg.Group == "" || p.c.ownsTopic(p.topic)
	for {
		r, err := res.Records.ReadRecord()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		rec := &Record{Topic: p.topic, Partition: p.partition, Offset: r.Offset, Time: r.Time}
		if r.Key != nil {
			rec.Key, err = readBytes(r.Key)
		}
		if err == nil && r.Value != nil {
			rec.Value, err = readBytes(r.Value)
		}
		if err != nil {
			return out, err
		}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, kafkago.Header{Key: h.Key, Value: append([]byte(nil), h.Value...)})
		}
		if rec.Offset >= from {
			p.c.screen(rec, owned)
			out = append(out, rec)
		}
	}
}

func (t *tracker) committableNext() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next
}

func readBytes(b interface {
	io.Reader
	Len() int
}) ([]byte, error) {
	out := make([]byte, b.Len())
	_, err := io.ReadFull(b, out)
	return out, err
}

// fetchErr handles a failed fetch: an offset out of range restarts from StartOffset,
// anything else waits a moment. It returns false when ctx ended.
func (p *partitionRun) fetchErr(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if errors.Is(err, kafkago.OffsetOutOfRange) {
		next, ok := p.resolve(ctx, p.c.cfg.StartOffset)
		if !ok {
			return false
		}
		p.c.log.Warn("kafka: fetch offset out of range; restarting from the start offset", "topic", p.topic, "partition", p.partition,
			"from", p.tr.committableNext(), "to", next)
		p.tr.mu.Lock()
		p.tr.next = next
		p.tr.mu.Unlock()
		return true
	}
	p.c.log.Warn("kafka: fetch failed; retrying", "topic", p.topic, "partition", p.partition, "err", err)
	return sleepCtx(ctx, 200*time.Millisecond)
}

// waitDue blocks this partition until r is due (retry and delayed copies); false when
// ctx ended first.
func (p *partitionRun) waitDue(ctx context.Context, r *Record) bool {
	due := r.dueAt()
	if due.IsZero() {
		return true
	}
	d := time.Until(due)
	if d <= 0 {
		return true
	}
	_ = p.commit(true) // nothing will finish while we wait: make the progress durable now
	return sleepCtx(ctx, d)
}

// route finds r's subscription and message; skip reports a record to pass over (not
// subscribed tag or SQL92 mismatch).
func (p *partitionRun) route(r *Record) (sub *subscription, m *message.MessageExt, skip bool) {
	m = r.ToMessageExt()
	p.c.mu.Lock()
	sub = p.c.subs[m.Topic]
	p.c.mu.Unlock()
	if sub == nil {
		return nil, m, false
	}
	if sub.raw != nil {
		return sub, m, false
	}
	if _, isRetry := r.header(HeaderOriginTopic); isRetry {
		return sub, m, false // filtered before its first delivery
	}
	return sub, m, !sub.match(m)
}

// item is one routed record waiting for its handler call.
type item struct {
	r *Record
	m *message.MessageExt
}

// batcher collects consecutive records of one subscription into handler calls of at
// most ConsumeMessageBatchMaxSize records.
type batcher struct {
	max   int
	sub   *subscription
	items []item
}

// add appends it when it fits the current batch; false means: flush first.
func (b *batcher) fits(sub *subscription) bool {
	return len(b.items) == 0 || (b.sub == sub && sub != nil && sub.raw == nil && len(b.items) < b.max)
}

func (b *batcher) add(sub *subscription, it item) {
	b.sub = sub
	b.items = append(b.items, it)
}

// take returns the batch and starts a new one.
func (b *batcher) take() (*subscription, []item) {
	sub, items := b.sub, b.items
	b.sub, b.items = nil, nil
	return sub, items
}

// next routes the fetched records to flush, one batch at a time: it waits for room in
// the tracker and for due records (flushing what it holds first, so nothing taken waits
// behind a wait), skips filtered records and batches the rest. It returns false when
// ctx ended (records taken but not flushed stay unfinished: the commit stays before
// them).
func (p *partitionRun) next(ctx context.Context, recs []*Record, flush func(*subscription, []item) bool) bool {
	b := &batcher{max: p.c.cfg.ConsumeMessageBatchMaxSize}
	flushAll := func() bool {
		if len(b.items) == 0 {
			return true
		}
		return flush(b.take())
	}
	for _, r := range recs {
		if p.tr.unfinished() >= p.c.cfg.MaxInFlight || time.Until(r.dueAt()) > 0 {
			if !flushAll() {
				return false
			}
		}
		if !p.tr.waitRoom(ctx, p.c.cfg.MaxInFlight) || !p.waitDue(ctx, r) {
			return false
		}
		sub, m, skip := p.route(r)
		p.tr.take(r.Offset)
		if skip {
			p.tr.finish(r.Offset)
			continue
		}
		if !b.fits(sub) && !flushAll() {
			return false
		}
		b.add(sub, item{r, m})
	}
	return flushAll()
}

// concurrent consumes with up to ConsumeWorkers handler calls at once.
func (p *partitionRun) concurrent(fetchCtx context.Context) {
	c := p.c
	sem := make(chan struct{}, c.cfg.ConsumeWorkers)
	var wg sync.WaitGroup
	defer wg.Wait()
	flush := func(sub *subscription, items []item) bool {
		select {
		case sem <- struct{}{}:
		case <-fetchCtx.Done():
			return false // taken but never run: the commit stays before them
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p.consume(fetchCtx, sub, items)
		}()
		_ = p.commit(false)
		return true
	}
	for fetchCtx.Err() == nil {
		recs, err := p.fetch(fetchCtx)
		if err != nil {
			if !p.fetchErr(fetchCtx, err) {
				return
			}
			continue
		}
		if !p.next(fetchCtx, recs, flush) {
			return
		}
		_ = p.commit(false)
	}
}

// consume runs one batch through its handler and finishes its records; when it fails,
// a copy of each record goes to the retry or dead-letter topic and the record is
// finished once that copy is acknowledged.
func (p *partitionRun) consume(fetchCtx context.Context, sub *subscription, items []item) {
	herr := p.c.call(sub, items)
	for _, it := range items {
		if herr == nil || p.sendFailed(fetchCtx, it.r, it.m, herr, false) {
			p.tr.finish(it.r.Offset)
		}
	}
}

// call runs the handler on a batch; a panic, an error or a result other than
// ConsumeSuccess is a failure of the whole batch.
func (c *Consumer) call(sub *subscription, items []item) (err error) {
	if sub == nil {
		return fmt.Errorf("kafka: no subscription for topic %q in this consumer", items[0].m.Topic)
	}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("kafka: handler panicked: %v", v)
		}
	}()
	if sub.raw != nil {
		return sub.raw(c.handlerCtx, items[0].r)
	}
	msgs := make([]*message.MessageExt, len(items))
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for i, it := range items {
		it.m.SetProperty(message.PropertyConsumeStartTimestamp, now)
		msgs[i] = it.m
	}
	res, err := sub.handler(c.handlerCtx, msgs)
	if err != nil {
		return err
	}
	if res != message.ConsumeSuccess {
		return fmt.Errorf("kafka: handler returned %s", res)
	}
	return nil
}

// sendFailed writes a copy of r to its next retry topic, or to the dead-letter topic
// when its retries are used up (always when dlq), and waits for all in-sync replicas
// to acknowledge it, trying again until that works or the partition stops (revoked,
// Shutdown): then the record stays unfinished, the commit stays before it and the
// partition's next owner gets it again. It reports whether the copy is stored.
func (p *partitionRun) sendFailed(stopCtx context.Context, r *Record, m *message.MessageExt, herr error, dlq bool) bool {
	c := p.c
	maxRe := c.cfg.maxReconsume()
	times := int(m.ReconsumeTimes)
	topic := DLQTopic(c.cfg.Group)
	now := time.Now()
	set := map[string]string{HeaderLastError: truncateError(herr), HeaderBornMs: strconv.FormatInt(r.bornMs(), 10), HeaderDueMs: ""}
	set[HeaderOriginTopic], set[HeaderOriginPartition], set[HeaderOriginOffset] = r.origin()
	if m.Topic != set[HeaderOriginTopic] {
		set[HeaderOriginTopic] = m.Topic // a delayed or forwarded copy: its subscribed topic
	}
	if !dlq && times < maxRe && !c.cfg.Orderly {
		lvl := min(times+1, len(c.cfg.RetrySchedule))
		topic = RetryTopic(c.cfg.Group, lvl)
		set[HeaderDueMs] = strconv.FormatInt(now.Add(c.cfg.RetrySchedule[lvl-1]).UnixMilli(), 10)
	}
	set[HeaderReconsumeTimes] = strconv.Itoa(times + 1)
	km := r.copyFor(topic, set)
	signControl(c.cfg.ControlHeaderKey, &km)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(c.handlerCtx, c.cfg.Timeout)
		err := write(ctx, c.writer, km)
		cancel()
		if err == nil {
			if topic == DLQTopic(c.cfg.Group) {
				c.log.Warn("kafka: message moved to the dead-letter topic", "topic", m.Topic, "msgId", m.MsgID,
					"partition", r.Partition, "offset", r.Offset, "reconsumeTimes", times+1, "err", herr)
			} else {
				c.log.Debug("kafka: message sent to a retry topic", "to", topic, "topic", m.Topic, "msgId", m.MsgID, "reconsumeTimes", times+1, "err", herr)
			}
			return true
		}
		c.log.Warn("kafka: storing a failed message's copy failed; the offset waits", "to", topic, "msgId", m.MsgID,
			"partition", r.Partition, "offset", r.Offset, "attempt", attempt, "err", err)
		if stopCtx.Err() != nil || !sleepCtx(stopCtx, backoff(attempt)) {
			return false
		}
	}
}

// orderly consumes one batch at a time; a failed batch is retried in place after
// SuspendCurrentQueueTime with ReconsumeTimes raised, and its records that used up
// MaxReconsumeTimes go to the dead-letter topic (the others are retried again).
func (p *partitionRun) orderly(fetchCtx context.Context) {
	c := p.c
	maxRe := c.cfg.maxReconsume()
	flush := func(sub *subscription, items []item) bool {
		for len(items) > 0 {
			herr := c.call(sub, items)
			if herr == nil {
				for _, it := range items {
					p.tr.finish(it.r.Offset)
				}
				break
			}
			var again []item
			for _, it := range items {
				if errors.Is(herr, errPoison) || !c.cfg.retryForever && int(it.m.ReconsumeTimes) >= maxRe {
					if p.sendFailed(fetchCtx, it.r, it.m, herr, true) {
						p.tr.finish(it.r.Offset)
						continue
					}
				} else {
					it.m.ReconsumeTimes++
				}
				again = append(again, it)
			}
			items = again
			if len(items) > 0 {
				c.log.Info("kafka: orderly batch failed; suspending the partition", "topic", p.topic, "partition", p.partition,
					"offset", items[0].r.Offset, "count", len(items), "err", herr, "suspend", c.cfg.SuspendCurrentQueueTime)
			}
			_ = p.commit(false)
			if len(items) > 0 && !sleepCtx(fetchCtx, c.cfg.SuspendCurrentQueueTime) {
				return false
			}
		}
		_ = p.commit(false)
		return true
	}
	for fetchCtx.Err() == nil {
		recs, err := p.fetch(fetchCtx)
		if err != nil {
			if !p.fetchErr(fetchCtx, err) {
				return
			}
			continue
		}
		if !p.next(fetchCtx, recs, flush) {
			return
		}
		_ = p.commit(false)
	}
}

// errPoison marks a failure no retry can fix: the record goes to the dead-letter topic.
var errPoison = errors.New("kafka: record cannot be processed")

// backoff is the wait before attempt+1 of a failed copy: 100 ms doubling up to 5 s.
func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < attempt && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// EnsureTopics creates the topics that do not exist yet, each with partitions
// partitions and replicationFactor replicas (-1: the broker's default); topics that
// exist are left as they are. ctx bounds the call.
func EnsureTopics(ctx context.Context, client *kafkago.Client, partitions, replicationFactor int, topics ...string) error {
	if len(topics) == 0 {
		return nil
	}
	req := &kafkago.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafkago.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: replicationFactor})
	}
	res, err := client.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("kafka: create topics: %w", err)
	}
	var errs []error
	for t, e := range res.Errors {
		if e != nil && !errors.Is(e, kafkago.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("kafka: create topic %q: %w", t, e))
		}
	}
	return errors.Join(errs...)
}
