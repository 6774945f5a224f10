// Package pop is POP consumption (RocketMQ 5) over the broker's store: a consumer group
// receives messages of a topic from any of its queues; each delivered message stays
// invisible to the group for an invisible duration and comes back, with its delivery
// attempt counted, unless it is acknowledged with its receipt handle before that; after
// the group's maximum delivery attempts it goes to the group's dead-letter topic
// %DLQ%<group>. A receive also delivers the messages of the group's %RETRY%<group> topic
// whose RETRY_TOPIC is the topic received (sent back by the group's 4.x consumers), with
// their reconsume times counted as attempts.
//
// The state (per group, per queue: the pop offset and the deliveries not yet
// acknowledged) is kept in memory and in one append-only log per group beside the store,
// written before each answer, so that a restart or a kill -9 neither brings back an
// acknowledged message nor loses an unacknowledged one. See docs/rocketmq5.md.
//
// The package knows nothing of gRPC: package broker/grpcfront maps the RocketMQ 5
// requests onto a [Service].
package pop

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/message"
)

// Backend is what the POP service needs of the broker; *broker.Broker has these methods
// (see broker/frontend.go), wrapped by the front end for MaxDeliveryAttempts.
type Backend interface {
	// ReadMessages reads up to max messages of a queue from offset that f matches.
	ReadMessages(topic string, queueID int32, offset int64, max int, f store.Filter) ([]*message.MessageExt, store.GetResult, error)
	// QueueOffsets returns a queue's first available offset and next offset to write.
	QueueOffsets(topic string, queueID int32) (minOffset, maxOffset int64)
	// QueryOffset returns the group's committed offset of a queue, if any.
	QueryOffset(group, topic string, queueID int32) (int64, bool)
	// CommitOffset records the group's consume offset of a queue (for admin views).
	CommitOffset(group, topic string, queueID int32, offset int64)
	// WatchQueue returns a channel closed at the next arrival in the queue f matches.
	WatchQueue(topic string, queueID int32, f store.Filter) (<-chan struct{}, func())
	// DeadLetter writes a copy of m to %DLQ%<group> with reconsumeTimes.
	DeadLetter(ctx context.Context, group string, m *message.MessageExt, reconsumeTimes int32) (store.PutResult, error)
	// MaxDeliveryAttempts is the group's maximum delivery attempts (retryMaxTimes + 1).
	MaxDeliveryAttempts(group string) int32
}

// Config configures a Service.
type Config struct {
	// Dir holds the POP state: the broker secret and one log per consumer group.
	// Required.
	Dir string
	// Backend is the broker. Required.
	Backend Backend
	// Logger receives the service's logs. Default slog.Default().
	Logger *slog.Logger
	// MaxInflightPerGroup bounds a group's deliveries not yet acknowledged; a receive
	// beyond it gets ErrTooManyInflight. Default 65536.
	MaxInflightPerGroup int
	// ReviveInterval is how often deliveries whose invisibility ended are looked at
	// (dead-lettered after the last attempt, receivers woken). Default 100 ms.
	ReviveInterval time.Duration
	// SyncInterval is how often the logs are fsynced. Default 1 s. A kill -9 loses
	// nothing written (the page cache survives the process); a power loss may lose the
	// last interval's records (acknowledged messages then come back: at least once).
	SyncInterval time.Duration
	// CompactBytes: a group's log is compacted when it is larger than this and four times
	// the size of its last compaction. Default 4 MiB.
	CompactBytes int64
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Errors of receive requests.
var (
	// ErrTooManyInflight: the group has MaxInflightPerGroup deliveries not acknowledged.
	ErrTooManyInflight = errors.New("pop: the consumer group has too many messages received and not acknowledged")
	// ErrClosed: the service was closed.
	ErrClosed = errors.New("pop: closed")
)

// Service serves POP consumption for all consumer groups.
type Service struct {
	cfg    Config
	log    *slog.Logger
	secret []byte

	mu     sync.Mutex
	groups map[string]*group
	closed bool
	revive chan struct{} // closed (and replaced) when deliveries became visible again

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type qkey struct {
	topic   string
	queueID int32
}

type queueState struct {
	popOffset int64
	entries   map[int64]*entry // delivered and not acknowledged, by queue offset
	dirty     bool             // the committed offset may have moved
}

type entry struct {
	attempt   int32 // deliveries so far; 0: held behind an earlier message of its group
	seq       uint64
	visibleAt int64  // unix ms
	msgGroup  string // the message group ("" none): one delivery of a group at a time
}

type group struct {
	name string
	path string

	mu       sync.Mutex
	f        *os.File
	size     int64 // bytes in the log
	compact  int64 // size after the last compaction
	synced   bool
	queues   map[qkey]*queueState
	inflight int
	seq      uint64
	rotate   int // start queue of the next receive
	failed   error
}

// Open reads the secret and every group's log under cfg.Dir and starts the revive loop.
func Open(cfg Config) (*Service, error) {
	if cfg.Dir == "" || cfg.Backend == nil {
		return nil, errors.New("pop: Config.Dir and Config.Backend are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxInflightPerGroup <= 0 {
		cfg.MaxInflightPerGroup = 65536
	}
	if cfg.ReviveInterval <= 0 {
		cfg.ReviveInterval = 100 * time.Millisecond
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = time.Second
	}
	if cfg.CompactBytes <= 0 {
		cfg.CompactBytes = 4 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("pop: %w", err)
	}
	secret, err := loadSecret(filepath.Join(cfg.Dir, "secret"))
	if err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg, log: cfg.Logger, secret: secret, groups: map[string]*group{}, revive: make(chan struct{})}
	names, err := filepath.Glob(filepath.Join(cfg.Dir, "*.pop"))
	if err != nil {
		return nil, err
	}
	for _, p := range names {
		g, err := s.loadGroup(p)
		if err != nil {
			s.closeFiles()
			return nil, err
		}
		s.groups[g.name] = g
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.reviveLoop()
	}()
	return s, nil
}

// loadSecret reads the broker's 32-byte POP secret, creating it on first use.
func loadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) != 32 {
			return nil, fmt.Errorf("pop: %s holds %d bytes, want 32", path, len(b))
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pop: %w", err)
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	if err := writeFileSync(path, b); err != nil {
		return nil, fmt.Errorf("pop: write the secret: %w", err)
	}
	return b, nil
}

func groupPath(dir, name string) string {
	return filepath.Join(dir, hex.EncodeToString([]byte(name))+".pop")
}

func (s *Service) loadGroup(path string) (*group, error) {
	recs, err := readLog(path)
	if err != nil {
		return nil, fmt.Errorf("pop: read %s: %w", path, err)
	}
	g := &group{path: path, queues: map[qkey]*queueState{}}
	for _, r := range recs {
		g.apply(r)
	}
	if g.name == "" {
		raw, derr := hex.DecodeString(strings.TrimSuffix(filepath.Base(path), ".pop"))
		if derr != nil {
			return nil, fmt.Errorf("pop: %s: no header record and not a hex group name", path)
		}
		g.name = string(raw)
	}
	if g.f, g.size, err = openAppend(path); err != nil {
		return nil, fmt.Errorf("pop: %w", err)
	}
	g.compact = g.size
	g.synced = true
	return g, nil
}

// group returns the group's state, creating its log on first use.
func (s *Service) group(name string) (*group, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if g := s.groups[name]; g != nil {
		return g, nil
	}
	g := &group{name: name, path: groupPath(s.cfg.Dir, name), queues: map[qkey]*queueState{}}
	var err error
	if g.f, g.size, err = openAppend(g.path); err != nil {
		return nil, fmt.Errorf("pop: %w", err)
	}
	if err := g.write(appendRecord(nil, record{typ: recHeader, group: name})); err != nil {
		_ = g.f.Close()
		return nil, err
	}
	s.groups[name] = g
	return g, nil
}

// apply changes the in-memory state by one record; live changes and replay share it.
func (g *group) apply(r record) {
	switch r.typ {
	case recHeader:
		g.name = r.group
		return
	case recSeq:
		g.seq = max(g.seq, r.seq)
		return
	}
	q := g.queues[qkey{r.topic, r.queueID}]
	if q == nil {
		q = &queueState{entries: map[int64]*entry{}}
		g.queues[qkey{r.topic, r.queueID}] = q
	}
	q.dirty = true
	switch r.typ {
	case recAdvance:
		q.popOffset = max(q.popOffset, r.offset)
	case recDeliver:
		if q.entries[r.offset] == nil {
			g.inflight++
		}
		q.entries[r.offset] = &entry{attempt: r.attempt, seq: r.seq, visibleAt: r.visibleAt, msgGroup: r.msgGroup}
		g.seq = max(g.seq, r.seq)
	case recAck:
		if e := q.entries[r.offset]; e != nil && e.seq == r.seq {
			delete(q.entries, r.offset)
			g.inflight--
		}
	case recChange:
		if e := q.entries[r.offset]; e != nil {
			e.seq, e.visibleAt = r.seq, r.visibleAt
		}
		g.seq = max(g.seq, r.seq)
	case recDead:
		if q.entries[r.offset] != nil {
			delete(q.entries, r.offset)
			g.inflight--
		}
	}
}

// write appends encoded records to the log (one write). After a failed write the group
// refuses further changes: its file may hold a partial record that the next start
// truncates.
func (g *group) write(b []byte) error {
	if g.failed != nil {
		return g.failed
	}
	if _, err := g.f.Write(b); err != nil {
		g.failed = fmt.Errorf("pop: write the state of group %s: %w", g.name, err)
		return g.failed
	}
	g.size += int64(len(b))
	g.synced = false
	return nil
}

// commitRecords writes recs and applies them.
func (g *group) commitRecords(recs []record) error {
	if len(recs) == 0 {
		return nil
	}
	var b []byte
	for _, r := range recs {
		b = appendRecord(b, r)
	}
	if err := g.write(b); err != nil {
		return err
	}
	for _, r := range recs {
		g.apply(r)
	}
	return nil
}

// snapshot encodes the group's state as a fresh log.
func (g *group) snapshot() []byte {
	b := appendRecord(nil, record{typ: recHeader, group: g.name})
	b = appendRecord(b, record{typ: recSeq, seq: g.seq})
	for k, q := range g.queues {
		b = appendRecord(b, record{typ: recAdvance, topic: k.topic, queueID: k.queueID, offset: q.popOffset})
		for off, e := range q.entries {
			b = appendRecord(b, record{typ: recDeliver, topic: k.topic, queueID: k.queueID, offset: off,
				attempt: e.attempt, seq: e.seq, visibleAt: e.visibleAt, msgGroup: e.msgGroup})
		}
	}
	return b
}

// maybeCompact rewrites the log when it outgrew its state.
func (g *group) maybeCompact(limit int64) error {
	if g.failed != nil || g.size <= limit || g.size <= 4*g.compact {
		return nil
	}
	data := g.snapshot()
	if err := writeFileSync(g.path, data); err != nil {
		return fmt.Errorf("pop: compact the state of group %s: %w", g.name, err)
	}
	f, size, err := openAppend(g.path)
	if err != nil {
		g.failed = fmt.Errorf("pop: reopen the state of group %s: %w", g.name, err)
		return g.failed
	}
	_ = g.f.Close()
	g.f, g.size, g.compact, g.synced = f, size, size, true
	return nil
}

// queue returns the state of a queue, initialising its pop offset from the group's
// committed offset, else the queue's first offset.
func (s *Service) queue(g *group, key string, queueID int32) *queueState {
	k := qkey{key, queueID}
	q := g.queues[k]
	if q == nil {
		q = &queueState{entries: map[int64]*entry{}}
		topic, _ := splitKey(key)
		if off, ok := s.cfg.Backend.QueryOffset(g.name, topic, queueID); ok && off >= 0 {
			q.popOffset = off
		} else {
			q.popOffset, _ = s.cfg.Backend.QueueOffsets(topic, queueID)
		}
		g.queues[k] = q
	}
	return q
}

// ReceiveRequest is one receive of a consumer group.
type ReceiveRequest struct {
	Group, Topic string
	QueueIDs     []int32       // the topic's readable queues
	Filter       store.Filter  // nil: all messages
	BatchSize    int           // at most this many messages (≥ 1)
	Invisible    time.Duration // how long the delivered messages stay invisible
	Wait         time.Duration // long polling: how long to wait for a message
	// RetryQueueIDs are the readable queues of the group's %RETRY%<group> topic (none:
	// the group has no retry topic). Its messages whose RETRY_TOPIC is Topic (sent back
	// by 4.x consumers of the group) are delivered too, attempt = reconsume times + 1.
	RetryQueueIDs []int32
}

// Delivery is one delivered message.
type Delivery struct {
	Message   *message.MessageExt
	Handle    string
	Attempt   int32
	VisibleAt time.Time
}

// Receive delivers up to r.BatchSize messages: first those whose invisibility ended
// (attempt + 1), then new ones from the pop offsets, each invisible for r.Invisible.
// When there is none it waits up to r.Wait (or ctx) for one. The deliveries are in the
// log before Receive returns.
func (s *Service) Receive(ctx context.Context, r ReceiveRequest) ([]Delivery, error) {
	g, err := s.group(r.Group)
	if err != nil {
		return nil, err
	}
	deadline := s.cfg.Now().Add(r.Wait)
	cases := make([]reflect.SelectCase, 0, len(r.QueueIDs)+len(r.RetryQueueIDs)+4)
	for {
		var cancels []func()
		cases = cases[:0]
		for _, src := range r.sources(g.name) {
			for _, q := range src.qids {
				ch, cancel := s.cfg.Backend.WatchQueue(src.read, q, r.Filter)
				cancels = append(cancels, cancel)
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
			}
		}
		s.mu.Lock()
		revive := s.revive
		s.mu.Unlock()
		out, next, err := s.tryReceive(ctx, g, r)
		now := s.cfg.Now()
		if len(out) > 0 || err != nil || !now.Before(deadline) {
			for _, c := range cancels {
				c()
			}
			return out, err
		}
		wait := deadline.Sub(now)
		if next > 0 {
			wait = min(wait, time.Until(time.UnixMilli(next))+time.Millisecond)
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		cases = append(cases,
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(revive)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
			reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.ctx.Done())})
		chosen, _, _ := reflect.Select(cases)
		t.Stop()
		for _, c := range cancels {
			c()
		}
		if chosen == len(cases)-2 {
			return nil, ctx.Err()
		}
		if chosen == len(cases)-1 {
			return nil, ErrClosed
		}
	}
}

// tryReceive delivers what is there now. next is the earliest time (unix ms) a
// delivery of these queues becomes visible again (0: none), for the wait.
func (s *Service) tryReceive(ctx context.Context, g *group, r ReceiveRequest) ([]Delivery, int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed != nil {
		return nil, 0, g.failed
	}
	now := s.cfg.Now()
	nowMs := now.UnixMilli()
	maxAttempts := s.cfg.Backend.MaxDeliveryAttempts(g.name)
	visibleAt := now.Add(r.Invisible).UnixMilli()
	batch := max(r.BatchSize, 1)
	var recs []record
	var out []Delivery
	var next int64
	held := 0 // messages read but held behind their group

	// 1. deliveries whose invisibility ended (and messages held behind their group),
	// oldest first. Of a message group only the earliest outstanding message of its queue
	// (the head) may be delivered: a group's next message waits until the previous one
	// is acknowledged or dead-lettered.
	type due struct {
		src source
		q   int32
		off int64
		e   *entry
	}
	var dues []due
	sources := r.sources(g.name)
	for _, src := range sources {
		for _, qid := range src.qids {
			q := g.queues[qkey{src.key, qid}]
			if q == nil {
				continue
			}
			heads := groupHeads(q)
			for off, e := range q.entries {
				if e.msgGroup != "" && heads[e.msgGroup] != off {
					continue // behind an earlier message of its group
				}
				switch {
				case e.visibleAt > nowMs:
					if next == 0 || e.visibleAt < next {
						next = e.visibleAt
					}
				case e.attempt < maxAttempts:
					dues = append(dues, due{src, qid, off, e})
				}
			}
		}
	}
	slices.SortFunc(dues, func(a, b due) int {
		if c := cmp.Compare(a.e.visibleAt, b.e.visibleAt); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
	for _, d := range dues {
		if len(out) >= batch {
			break
		}
		msgs, _, err := s.cfg.Backend.ReadMessages(d.src.read, d.q, d.off, 1, nil)
		if err != nil {
			return nil, 0, err
		}
		if len(msgs) == 0 || msgs[0].QueueOffset != d.off {
			s.log.Warn("a received message is gone from the store (retention); its delivery ends", "group", g.name,
				"topic", d.src.read, "queueId", d.q, "offset", d.off)
			recs = append(recs, record{typ: recDead, topic: d.src.key, queueID: d.q, offset: d.off})
			continue
		}
		g.seq++
		rec := record{typ: recDeliver, topic: d.src.key, queueID: d.q, offset: d.off, attempt: d.e.attempt + 1, seq: g.seq,
			visibleAt: visibleAt, msgGroup: d.e.msgGroup}
		recs = append(recs, rec)
		out = append(out, s.delivery(g.name, r.Topic, msgs[0], rec))
	}

	// 2. new messages from the pop offsets, starting at a rotating queue
	type sq struct {
		src source
		qid int32
	}
	var all []sq
	for _, src := range sources {
		for _, qid := range src.qids {
			all = append(all, sq{src, qid})
		}
	}
	if len(out) < batch && len(all) > 0 {
		if g.inflight+len(out)+held >= s.cfg.MaxInflightPerGroup {
			if len(out) == 0 {
				return nil, 0, ErrTooManyInflight
			}
		} else {
			start := g.rotate % len(all)
			g.rotate++
			for i := range all {
				if len(out) >= batch {
					break
				}
				src, qid := all[(start+i)%len(all)].src, all[(start+i)%len(all)].qid
				q := s.queue(g, src.key, qid)
				room := min(batch-len(out), s.cfg.MaxInflightPerGroup-g.inflight-len(out)-held)
				if room <= 0 {
					break
				}
				msgs, res, err := s.cfg.Backend.ReadMessages(src.read, qid, q.popOffset, room, r.Filter)
				if err != nil {
					return nil, 0, err
				}
				nextOff := q.popOffset
				switch res.Status {
				case store.NoMatchedLogicQueue, store.NoMessageInQueue:
				default:
					nextOff = max(nextOff, res.NextBeginOffset)
				}
				busy := map[string]bool{} // message groups with an outstanding message in this queue
				for _, e := range q.entries {
					if e.msgGroup != "" {
						busy[e.msgGroup] = true
					}
				}
				for _, m := range msgs {
					if m.QueueOffset < q.popOffset {
						continue
					}
					attempt := int32(1)
					if src.retry {
						if m.Property(message.PropertyRetryTopic) != r.Topic {
							nextOff = max(nextOff, m.QueueOffset+1) // another topic's retry: its receivers take it
							continue
						}
						// sent back by a 4.x consumer: its reconsume times count as attempts
						attempt = max(m.ReconsumeTimes, 0) + 1
					}
					mg := m.Property(PropertyMessageGroup)
					g.seq++
					rec := record{typ: recDeliver, topic: src.key, queueID: qid, offset: m.QueueOffset, attempt: attempt, seq: g.seq,
						visibleAt: visibleAt, msgGroup: mg}
					if mg != "" && busy[mg] {
						// held: delivered when the earlier messages of its group are done
						rec.attempt, rec.seq, rec.visibleAt = 0, 0, 0
						g.seq--
						recs = append(recs, rec)
						held++
					} else {
						recs = append(recs, rec)
						out = append(out, s.delivery(g.name, r.Topic, m, rec))
					}
					if mg != "" {
						busy[mg] = true
					}
					nextOff = max(nextOff, m.QueueOffset+1)
				}
				if nextOff != q.popOffset {
					recs = append(recs, record{typ: recAdvance, topic: src.key, queueID: qid, offset: nextOff})
				}
			}
		}
	}
	if err := g.commitRecords(recs); err != nil {
		g.seq -= uint64(len(out)) // nothing was delivered
		return nil, 0, err
	}
	if err := g.maybeCompact(s.cfg.CompactBytes); err != nil {
		s.log.Error("pop state compaction failed", "group", g.name, "err", err)
	}
	return out, next, nil
}

func (s *Service) delivery(group, topic string, m *message.MessageExt, rec record) Delivery {
	_, retry := splitKey(rec.topic)
	h := Handle{QueueID: rec.queueID, Offset: rec.offset, Seq: rec.seq, Attempt: rec.attempt, VisibleAt: rec.visibleAt, Retry: retry}
	if retry { // shown as a message of its topic, as a 4.x consumer sees a retried message
		view := *m
		view.Topic = topic
		m = &view
	}
	return Delivery{Message: m, Handle: encodeHandle(s.secret, group, topic, h), Attempt: rec.attempt, VisibleAt: time.UnixMilli(rec.visibleAt)}
}

// source is a topic a receive reads: the topic itself, or the group's %RETRY% topic for
// the topic's messages sent back by 4.x consumers.
type source struct {
	key   string // the state key: the topic, or retryKey(group, topic)
	read  string // the topic read from the store
	qids  []int32
	retry bool
}

// sources is what r reads for group.
func (r ReceiveRequest) sources(group string) []source {
	out := []source{{key: r.Topic, read: r.Topic, qids: r.QueueIDs}}
	if len(r.RetryQueueIDs) > 0 {
		out = append(out, source{key: retryKey(group, r.Topic), read: message.RetryTopic(group), qids: r.RetryQueueIDs, retry: true})
	}
	return out
}

// retryKey is the state key of the group's %RETRY%<group> topic as read for topic's
// receivers: each topic keeps its own pop offset there (the retry topic holds the sent
// back messages of every topic of the group; a topic's receivers skip the others').
func retryKey(group, topic string) string { return message.RetryTopic(group) + "\x00" + topic }

// splitKey returns the topic a state key reads from the store, and whether it is a
// retry key.
func splitKey(key string) (read string, retry bool) {
	if i := strings.IndexByte(key, 0); i >= 0 {
		return key[:i], true
	}
	return key, false
}

// current checks a handle against the group's state: signed for group and topic, not
// expired, and still the current delivery of its message. key is the state key of the
// delivery's queue (the topic, or its retry key). It holds g.mu.
func (s *Service) current(g *group, topic, handle string) (h Handle, key string, e *entry, err error) {
	h, err = decodeHandle(s.secret, g.name, topic, handle)
	if err != nil {
		return h, "", nil, err
	}
	if h.expired(s.cfg.Now()) {
		return h, "", nil, &HandleError{HandleExpired, "expired: the message's invisible duration has passed"}
	}
	key = topic
	if h.Retry {
		key = retryKey(g.name, topic)
	}
	q := g.queues[qkey{key, h.QueueID}]
	if q != nil {
		e = q.entries[h.Offset]
	}
	if e == nil || e.seq != h.Seq {
		return h, "", nil, &HandleError{HandleStale, "no longer valid: the message was acknowledged, delivered again or its invisible duration changed"}
	}
	return h, key, e, nil
}

// Ack acknowledges the delivery named by handle. The acknowledgement is in the log
// before Ack returns nil. A refused handle is a *HandleError.
func (s *Service) Ack(group, topic, handle string) error {
	g, err := s.group(group)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	h, key, e, err := s.current(g, topic, handle)
	if err != nil {
		return err
	}
	next := groupWaiting(g.queues[qkey{key, h.QueueID}], e, h.Offset)
	if err := g.commitRecords([]record{{typ: recAck, topic: key, queueID: h.QueueID, offset: h.Offset, seq: h.Seq}}); err != nil {
		return err
	}
	if next {
		s.wake()
	}
	return nil
}

// ChangeInvisible makes the delivery named by handle invisible for d from now and
// returns its new handle; the old one is no longer valid.
func (s *Service) ChangeInvisible(group, topic, handle string, d time.Duration) (string, time.Time, error) {
	g, err := s.group(group)
	if err != nil {
		return "", time.Time{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	h, key, e, err := s.current(g, topic, handle)
	if err != nil {
		return "", time.Time{}, err
	}
	visibleAt := s.cfg.Now().Add(d).UnixMilli()
	rec := record{typ: recChange, topic: key, queueID: h.QueueID, offset: h.Offset, seq: g.seq + 1, visibleAt: visibleAt}
	if err := g.commitRecords([]record{rec}); err != nil {
		return "", time.Time{}, err
	}
	nh := Handle{QueueID: h.QueueID, Offset: h.Offset, Seq: rec.seq, Attempt: e.attempt, VisibleAt: visibleAt, Retry: h.Retry}
	return encodeHandle(s.secret, group, topic, nh), time.UnixMilli(visibleAt), nil
}

// wake wakes the receives waiting in long polling (a delivery became visible again, or
// a message group's next message may go).
func (s *Service) wake() {
	s.mu.Lock()
	close(s.revive)
	s.revive = make(chan struct{})
	s.mu.Unlock()
}

// groupWaiting reports whether q holds another message of e's group (held behind e).
func groupWaiting(q *queueState, e *entry, off int64) bool {
	if e.msgGroup == "" {
		return false
	}
	for o, x := range q.entries {
		if o != off && x.msgGroup == e.msgGroup {
			return true
		}
	}
	return false
}

// Inflight returns how many deliveries of the group are not acknowledged.
func (s *Service) Inflight(group string) int {
	s.mu.Lock()
	g := s.groups[group]
	s.mu.Unlock()
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// reviveLoop dead-letters deliveries past their last attempt, wakes receivers when
// deliveries become visible, commits offsets and syncs the logs.
func (s *Service) reviveLoop() {
	t := time.NewTicker(s.cfg.ReviveInterval)
	defer t.Stop()
	lastSync := s.cfg.Now()
	lastTick := int64(0) // deliveries visible since before this were announced already
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		groups := make([]*group, 0, len(s.groups))
		for _, g := range s.groups {
			groups = append(groups, g)
		}
		s.mu.Unlock()
		now := s.cfg.Now()
		sync := now.Sub(lastSync) >= s.cfg.SyncInterval
		if sync {
			lastSync = now
		}
		woke := false
		for _, g := range groups {
			if s.reviveGroup(g, lastTick, now, sync) {
				woke = true
			}
		}
		lastTick = now.UnixMilli()
		if woke {
			s.wake()
		}
	}
}

// reviveGroup handles one group's due deliveries; it reports whether some became
// visible for another attempt.
func (s *Service) reviveGroup(g *group, lastTick int64, now time.Time, sync bool) bool {
	maxAttempts := s.cfg.Backend.MaxDeliveryAttempts(g.name)
	g.mu.Lock()
	defer g.mu.Unlock()
	nowMs := now.UnixMilli()
	woke := false
	for k, q := range g.queues {
		for off, e := range q.entries {
			if e.visibleAt > nowMs || e.attempt == 0 {
				continue // invisible, or held behind its group
			}
			if e.attempt < maxAttempts {
				if e.visibleAt > lastTick {
					woke = true // newly visible
				}
				continue
			}
			if groupWaiting(q, e, off) {
				woke = true // the group's next message may go
			}
			s.deadLetter(g, k, off, e)
		}
		if _, retry := splitKey(k.topic); retry {
			q.dirty = false // a topic's view of the retry topic: the group's offset there is its 4.x consumers'
		}
		if q.dirty {
			base := q.popOffset
			for off := range q.entries {
				base = min(base, off)
			}
			s.cfg.Backend.CommitOffset(g.name, k.topic, k.queueID, base)
			q.dirty = false
		}
	}
	if sync && !g.synced && g.failed == nil {
		if err := g.f.Sync(); err != nil {
			s.log.Error("pop state sync failed", "group", g.name, "err", err)
		} else {
			g.synced = true
		}
	}
	if err := g.maybeCompact(s.cfg.CompactBytes); err != nil {
		s.log.Error("pop state compaction failed", "group", g.name, "err", err)
	}
	return woke
}

// deadLetter moves one delivery past its last attempt to %DLQ%<group>. It holds g.mu.
func (s *Service) deadLetter(g *group, k qkey, off int64, e *entry) {
	read, _ := splitKey(k.topic)
	msgs, _, err := s.cfg.Backend.ReadMessages(read, k.queueID, off, 1, nil)
	if err != nil {
		s.log.Error("read a message to dead-letter", "group", g.name, "topic", read, "queueId", k.queueID, "offset", off, "err", err)
		return
	}
	if len(msgs) == 1 && msgs[0].QueueOffset == off {
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		_, err := s.cfg.Backend.DeadLetter(ctx, g.name, msgs[0], e.attempt)
		cancel()
		if err != nil {
			s.log.Error("dead-letter a message past its last delivery attempt (tried again later)", "group", g.name,
				"topic", read, "queueId", k.queueID, "offset", off, "err", err)
			return
		}
		s.log.Info("message moved to the DLQ after its last delivery attempt", "group", g.name, "topic", read,
			"queueId", k.queueID, "offset", off, "attempts", e.attempt)
	}
	if err := g.commitRecords([]record{{typ: recDead, topic: k.topic, queueID: k.queueID, offset: off}}); err != nil {
		s.log.Error("record a dead-lettered message", "group", g.name, "err", err)
	}
}

// Close stops the revive loop, syncs and closes the logs.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return s.closeFiles()
}

func (s *Service) closeFiles() error {
	var errs []error
	for _, g := range s.groups {
		g.mu.Lock()
		if g.f != nil {
			if err := g.f.Sync(); err != nil {
				errs = append(errs, err)
			}
			if err := g.f.Close(); err != nil {
				errs = append(errs, err)
			}
			g.f = nil
			g.failed = ErrClosed
		}
		g.mu.Unlock()
	}
	return errors.Join(errs...)
}

// DeadLetterNow moves the message of the delivery named by handle to %DLQ%<group> at
// once (a push consumer gave up on it: ForwardMessageToDeadLetterQueue).
func (s *Service) DeadLetterNow(ctx context.Context, group, topic, handle string) error {
	g, err := s.group(group)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	h, key, e, err := s.current(g, topic, handle)
	if err != nil {
		return err
	}
	read, _ := splitKey(key)
	msgs, _, err := s.cfg.Backend.ReadMessages(read, h.QueueID, h.Offset, 1, nil)
	if err != nil {
		return err
	}
	if len(msgs) == 1 && msgs[0].QueueOffset == h.Offset {
		if _, err := s.cfg.Backend.DeadLetter(ctx, group, msgs[0], e.attempt); err != nil {
			return err
		}
	}
	next := groupWaiting(g.queues[qkey{key, h.QueueID}], e, h.Offset)
	if err := g.commitRecords([]record{{typ: recDead, topic: key, queueID: h.QueueID, offset: h.Offset}}); err != nil {
		return err
	}
	if next {
		s.wake()
	}
	return nil
}

// groupHeads returns, per message group of q, the lowest outstanding offset.
func groupHeads(q *queueState) map[string]int64 {
	var heads map[string]int64
	for off, e := range q.entries {
		if e.msgGroup == "" {
			continue
		}
		if heads == nil {
			heads = map[string]int64{}
		}
		if h, ok := heads[e.msgGroup]; !ok || off < h {
			heads[e.msgGroup] = off
		}
	}
	return heads
}

// PropertyMessageGroup is the stored property that names a FIFO message's group
// (Apache RocketMQ's __SHARDINGKEY, written by the gRPC front end for FIFO messages).
const PropertyMessageGroup = "__SHARDINGKEY"
