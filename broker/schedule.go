package broker

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/message"
)

// The schedule service delivers delayed messages (RocketMQ delay levels, Java
// ScheduleMessageService).
//
// A send with property DELAY=n (1..len(messageDelayLevel), higher levels clamped to the
// last) is stored not in its topic but in SCHEDULE_TOPIC_XXXX, queue id n-1, with its real
// topic and queue id in properties REAL_TOPIC and REAL_QID; the consume-queue tag slot of
// the entry holds the delivery time (store time + the level's delay) instead of a tag hash.
// Because every message of one level has the same delay, each level's queue is in delivery
// order, and one goroutine per level only ever waits for the head of its queue.
//
// When the head is due, the goroutine writes a copy to the real topic and queue (through
// the commitlog, like any send, so consumers see an ordinary message) and advances the
// level's offset. Offsets are persisted to config/delayOffset.json after every delivered
// batch and at shutdown, so a graceful restart neither loses nor repeats a delivery; after
// a crash at most the batch in flight is delivered again (at-least-once, as in RocketMQ).
type scheduler struct {
	b      *Broker
	levels []time.Duration
	path   string

	// putHook, when set before Start (tests), replaces the store's PutMessage for
	// deliveries and dead letters, to inject failures.
	putHook func(ctx context.Context, m *message.MessageExt, tagsCode int64) error

	mu       sync.Mutex
	offsets  map[int]int64        // level -> next schedule-queue offset to deliver
	failures map[int]headFailures // level -> failed tries of its head
}

// headFailures counts the failed deliveries of the message at one schedule-queue offset.
type headFailures struct {
	offset int64
	n      int
}

type delayOffsetFile struct {
	OffsetTable map[string]int64 `json:"offsetTable"`
}

func newScheduler(b *Broker) (*scheduler, error) {
	s := &scheduler{b: b, levels: b.delayLevels, path: filepath.Join(b.cfg.StorePathRootDir, "config", "delayOffset.json"),
		offsets: map[int]int64{}, failures: map[int]headFailures{}}
	var f delayOffsetFile
	if err := readJSONFile(s.path, &f); err != nil {
		return nil, err
	}
	for k, v := range f.OffsetTable {
		if lvl, err := strconv.Atoi(k); err == nil {
			s.offsets[lvl] = v
		}
	}
	return s, nil
}

// clampLevel maps a requested delay level to 1..len(levels).
func (s *scheduler) clampLevel(level int) int { return min(level, len(s.levels)) }

// deliverAt returns when a message stored at storeMillis with this level is due.
func (s *scheduler) deliverAt(level int, storeMillis int64) int64 {
	return storeMillis + s.levels[level-1].Milliseconds()
}

// park reroutes m (with a delay level > 0) to SCHEDULE_TOPIC_XXXX and returns the
// consume-queue tag code: its delivery time in ms.
func (s *scheduler) park(m *message.MessageExt, level int) int64 {
	level = s.clampLevel(level)
	m.SetProperty(message.PropertyDelayTimeLevel, strconv.Itoa(level))
	m.SetProperty(message.PropertyRealTopic, m.Topic)
	m.SetProperty(message.PropertyRealQueueID, strconv.Itoa(int(m.QueueID)))
	m.Topic = message.ScheduleTopic
	m.QueueID = int32(level - 1)
	if m.StoreTimestamp == 0 {
		m.StoreTimestamp = time.Now().UnixMilli()
	}
	return s.deliverAt(level, m.StoreTimestamp)
}

func (s *scheduler) offset(level int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offsets[level]
}

func (s *scheduler) setOffset(level int, off int64) {
	s.mu.Lock()
	s.offsets[level] = off
	s.mu.Unlock()
}

func (s *scheduler) persist() error {
	s.mu.Lock()
	f := delayOffsetFile{OffsetTable: make(map[string]int64, len(s.offsets))}
	for k, v := range s.offsets {
		f.OffsetTable[strconv.Itoa(k)] = v
	}
	s.mu.Unlock()
	return writeJSONFile(s.path, f)
}

// start runs one delivery loop per level, owned by the broker.
func (s *scheduler) start() {
	for level := 1; level <= len(s.levels); level++ {
		s.b.spawn(func() { s.loop(level) })
	}
}

// loop delivers the due messages of one level until the broker stops.
func (s *scheduler) loop(level int) {
	ctx := s.b.ctx
	queueID := int32(level - 1)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for ctx.Err() == nil {
		arrived, forget := s.b.arrivals.watch(message.ScheduleTopic, queueID, nil)
		wait, err := s.deliverDue(ctx, level)
		if err != nil {
			s.b.log.Error("deliver delayed messages", "level", level, "err", err)
			wait = time.Second
		}
		if wait > 0 {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			forget()
			return
		case <-arrived:
		case <-timer.C:
		}
		forget()
		timer.Stop()
	}
}

// deliverDue delivers every due message at the head of the level's queue. It returns how
// long to wait before the next head is due (0 = wait for an arrival).
func (s *scheduler) deliverDue(ctx context.Context, level int) (time.Duration, error) {
	queueID := int32(level - 1)
	for ctx.Err() == nil {
		off := s.offset(level)
		res, err := s.b.store.GetMessage(message.ScheduleTopic, queueID, off, maxPullMessages, maxPullBytes, nil)
		if err != nil {
			return 0, err
		}
		switch res.Status {
		case store.Found:
		case store.OffsetTooSmall, store.OffsetOverflowBadly:
			s.b.log.Warn("delay level progress outside its queue corrected", "level", level, "old", off, "new", res.NextBeginOffset,
				"status", res.Status.String())
			s.setOffset(level, res.NextBeginOffset)
			continue
		default:
			return 0, nil // caught up: wait for an arrival
		}
		now := time.Now().UnixMilli()
		delivered := 0
		for _, rec := range res.Records {
			m, _, err := message.DecodeRecord(rec, message.DecodeOptions{})
			if err != nil {
				return 0, err
			}
			if due := s.deliverAt(level, m.StoreTimestamp); due > now {
				if delivered > 0 {
					if err := s.persist(); err != nil {
						return 0, err
					}
				}
				return time.Duration(due-now) * time.Millisecond, nil
			}
			if err := s.deliver(ctx, m); err != nil {
				if ctx.Err() != nil {
					return 0, err
				}
				// Bounded: after scheduleDeliverAttempts (at once for a permanent error)
				// the message goes to the dead letters and the level moves on (deadletter.go).
				n := s.failed(level, m.QueueOffset)
				if !permanentPutError(err) && n < scheduleDeliverAttempts {
					return 0, err
				}
				if derr := s.deadLetter(ctx, m, err, n); derr != nil {
					if !permanentPutError(derr) {
						return 0, errors.Join(err, derr)
					}
					s.b.log.Error("delayed message can be neither delivered nor dead-lettered; skipped", "topic",
						m.Property(message.PropertyRealTopic), "offsetMsgId", m.OffsetMsgID, "err", err, "deadLetterErr", derr)
				}
			}
			s.setOffset(level, m.QueueOffset+1)
			delivered++
		}
		if err := s.persist(); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

// deliver writes a due message to its real topic and queue.
func (s *scheduler) deliver(ctx context.Context, m *message.MessageExt) error {
	realTopic := m.Property(message.PropertyRealTopic)
	qid, err := strconv.Atoi(m.Property(message.PropertyRealQueueID))
	if realTopic == "" || err != nil {
		return &store.InvalidArgumentError{Field: "properties", Reason: "delayed message without REAL_TOPIC/REAL_QID"}
	}
	out := &message.MessageExt{
		Message:        message.Message{Topic: realTopic, Flag: m.Flag, Body: m.Body, Properties: m.Properties},
		QueueID:        int32(qid),
		SysFlag:        m.SysFlag,
		BornTimestamp:  m.BornTimestamp,
		BornHost:       m.BornHost,
		StoreHost:      s.b.storeHost,
		ReconsumeTimes: m.ReconsumeTimes,
	}
	out.RemoveProperty(message.PropertyDelayTimeLevel)
	if tc := s.b.topics.get(realTopic); tc != nil && qid >= max(tc.ReadQueueNums, tc.WriteQueueNums) {
		out.QueueID = randomQueue(tc.WriteQueueNums)
	}
	return s.put(ctx, out, message.TagHashCode(out.Tag()))
}

// put stores m (through putHook when a test set one).
func (s *scheduler) put(ctx context.Context, m *message.MessageExt, tagsCode int64) error {
	if s.putHook != nil {
		return s.putHook(ctx, m, tagsCode)
	}
	_, err := s.b.store.PutMessage(ctx, m, tagsCode)
	return err
}

// failed counts a failed delivery of the level's head at off and returns how many tries
// that head has failed so far. Only the level's own loop calls it.
func (s *scheduler) failed(level int, off int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.failures[level]
	if f.offset != off {
		f = headFailures{offset: off}
	}
	f.n++
	s.failures[level] = f
	return f.n
}
