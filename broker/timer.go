package broker

import (
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Timer messages: delivery at any time, for both client generations (RocketMQ 5's
// timer wheel, Java TimerMessageStore; docs/rocketmq5.md "Timer messages").
//
// A send with one of the properties TIMER_DELIVER_MS (unix ms), TIMER_DELAY_SEC or
// TIMER_DELAY_MS (from now) — the gRPC front end sets TIMER_DELIVER_MS from a v5
// message's delivery_timestamp — that is due later than now is stored not in its topic
// but in rmq_sys_wheel_timer (queue 0) with REAL_TOPIC, REAL_QID and TIMER_OUT_MS (the
// delivery time). A delay level (DELAY) takes precedence over the timer properties.
//
// The timer service indexes that queue into per-minute bucket files
// <storePathRootDir>/timer/<unix minute>.slot (delivery ms, commitlog offset: 16 bytes a
// timer), fsyncs them, and then records how far it indexed (timer/index.offset); after
// a crash it indexes again from there (a timer indexed twice is delivered once: buckets
// are de-duplicated by commitlog offset when loaded). Only the buckets of the past and of
// the next minute are held in memory, so millions of pending timers cost disk, not
// memory. Every 100 ms the due timers are delivered to their real topic and queue, and
// each delivery is appended to <minute>.done before the bucket is dropped (a delivered
// message loses TIMER_DELAY_SEC/MS and keeps TIMER_DELIVER_MS); a crash
// between a delivery and its done record delivers that message again (at least once, as
// in RocketMQ).
const (
	// TimerTopic holds timer messages until they are due (Apache RocketMQ 5's name).
	TimerTopic = "rmq_sys_wheel_timer"
	// PropertyTimerDeliverMS is the delivery time in unix ms.
	PropertyTimerDeliverMS = "TIMER_DELIVER_MS"
	// PropertyTimerDelaySec is a delay in seconds from the send.
	PropertyTimerDelaySec = "TIMER_DELAY_SEC"
	// PropertyTimerDelayMS is a delay in milliseconds from the send.
	PropertyTimerDelayMS = "TIMER_DELAY_MS"
	// PropertyTimerOutMS is the delivery time the broker computed, on a parked message.
	PropertyTimerOutMS = "TIMER_OUT_MS"
	// MaxTimerDelay is the longest delay a timer message may have (Apache RocketMQ 5's
	// timerMaxDelaySec default: 3 days).
	MaxTimerDelay = 72 * time.Hour

	timerTick   = 100 * time.Millisecond
	timerBucket = int64(time.Minute / time.Millisecond)
)

// timerDeliverAt reads m's timer properties: the delivery time (unix ms), whether it has
// any, or an error naming the property.
func timerDeliverAt(m *message.MessageExt, nowMs int64) (int64, bool, error) {
	var at int64
	switch {
	case m.Property(PropertyTimerDeliverMS) != "":
		v, err := strconv.ParseInt(m.Property(PropertyTimerDeliverMS), 10, 64)
		if err != nil || v < 0 {
			return 0, true, fmt.Errorf("property %s %q: not a unix time in ms", PropertyTimerDeliverMS, m.Property(PropertyTimerDeliverMS))
		}
		at = v
	case m.Property(PropertyTimerDelaySec) != "":
		v, err := strconv.ParseInt(m.Property(PropertyTimerDelaySec), 10, 64)
		if err != nil || v < 0 || v > int64(MaxTimerDelay/time.Second) {
			return 0, true, fmt.Errorf("property %s %q: not a delay of 0 to %d s", PropertyTimerDelaySec, m.Property(PropertyTimerDelaySec), int64(MaxTimerDelay/time.Second))
		}
		at = nowMs + v*1000
	case m.Property(PropertyTimerDelayMS) != "":
		v, err := strconv.ParseInt(m.Property(PropertyTimerDelayMS), 10, 64)
		if err != nil || v < 0 || v > MaxTimerDelay.Milliseconds() {
			return 0, true, fmt.Errorf("property %s %q: not a delay of 0 to %d ms", PropertyTimerDelayMS, m.Property(PropertyTimerDelayMS), MaxTimerDelay.Milliseconds())
		}
		at = nowMs + v
	default:
		return 0, false, nil
	}
	if at > nowMs+MaxTimerDelay.Milliseconds() {
		return 0, true, fmt.Errorf("timer delivery time %d is more than %v ahead", at, MaxTimerDelay)
	}
	return at, true, nil
}

// parkTimer reroutes m to the timer topic when its timer properties say it is due
// later; it returns whether it did, or a refusal.
func (b *Broker) parkTimer(m *message.MessageExt) (bool, *remoting.RemotingCommand) {
	now := time.Now().UnixMilli()
	at, ok, err := timerDeliverAt(m, now)
	if !ok {
		return false, nil
	}
	if err != nil {
		return false, b.sendResponse(remoting.MessageIllegal, err.Error())
	}
	if at <= now || message.IsDLQTopic(m.Topic) {
		return false, nil // due already: stored in its topic at once
	}
	m.SetProperty(PropertyTimerOutMS, strconv.FormatInt(at, 10))
	m.SetProperty(message.PropertyRealTopic, m.Topic)
	m.SetProperty(message.PropertyRealQueueID, strconv.Itoa(int(m.QueueID)))
	m.Topic = TimerTopic
	m.QueueID = 0
	return true, nil
}

// timerEntry is one indexed timer.
type timerEntry struct {
	at     int64 // unix ms
	offset int64 // commitlog offset of the parked message
}

type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].offset < h[j].offset
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// timerService indexes and delivers timer messages.
type timerService struct {
	b   *Broker
	dir string

	mu      sync.Mutex
	indexed int64                    // next timer-queue offset to index
	loaded  map[int64]map[int64]bool // buckets (unix minute) in the heap -> commitlog offsets seen
	fin     map[int64]map[int64]bool // loaded buckets -> offsets delivered or recalled
	pending map[int64]int            // bucket -> timers not yet delivered (loaded buckets)
	h       timerHeap
	dirty   map[int64]*os.File // bucket files written since the last sync
	done    map[int64]*os.File // open done files of loaded buckets
}

func newTimerService(b *Broker) (*timerService, error) {
	t := &timerService{b: b, dir: filepath.Join(b.cfg.StorePathRootDir, "timer"), loaded: map[int64]map[int64]bool{}, fin: map[int64]map[int64]bool{},
		pending: map[int64]int{}, dirty: map[int64]*os.File{}, done: map[int64]*os.File{}}
	if err := os.MkdirAll(t.dir, 0o755); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(t.dir, "index.offset"))
	switch {
	case err == nil && len(data) == 8:
		t.indexed = int64(binary.BigEndian.Uint64(data))
	case err == nil:
		return nil, fmt.Errorf("timer: %s: %d bytes, want 8", filepath.Join(t.dir, "index.offset"), len(data))
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	return t, nil
}

// loop indexes and delivers until the broker stops.
func (t *timerService) loop() {
	tick := time.NewTicker(timerTick)
	defer tick.Stop()
	lastSync := time.Now()
	for {
		select {
		case <-t.b.ctx.Done():
			return
		case <-tick.C:
		}
		if err := t.index(); err != nil {
			t.b.log.Error("timer: index", "err", err)
		}
		if time.Since(lastSync) >= time.Second {
			if err := t.syncIndex(); err != nil {
				t.b.log.Error("timer: sync", "err", err)
			}
			lastSync = time.Now()
		}
		if err := t.fire(t.b.ctx); err != nil && t.b.ctx.Err() == nil {
			t.b.log.Error("timer: deliver", "err", err)
		}
	}
}

func (t *timerService) bucketPath(minute int64, ext string) string {
	return filepath.Join(t.dir, strconv.FormatInt(minute, 10)+ext)
}

// index appends the timer queue's new entries to their bucket files (and to the heap
// when their bucket is loaded).
func (t *timerService) index() error {
	for range 64 { // bounded per tick
		t.mu.Lock()
		off := t.indexed
		t.mu.Unlock()
		res, err := t.b.store.GetMessage(TimerTopic, 0, off, 256, 0, nil)
		if err != nil {
			return err
		}
		if res.Status == store.OffsetTooSmall || res.Status == store.OffsetOverflowBadly {
			t.mu.Lock()
			t.indexed = res.NextBeginOffset
			t.mu.Unlock()
			continue
		}
		if len(res.Records) == 0 {
			return nil
		}
		t.mu.Lock()
		for _, rec := range res.Records {
			m, _, err := message.DecodeRecord(rec, message.DecodeOptions{})
			if err != nil {
				t.mu.Unlock()
				return err
			}
			at, err := strconv.ParseInt(m.Property(PropertyTimerOutMS), 10, 64)
			if err != nil {
				t.b.log.Error("timer: a parked message without TIMER_OUT_MS is skipped", "offsetMsgId", m.OffsetMsgID)
				t.indexed = m.QueueOffset + 1
				continue
			}
			if err := t.add(timerEntry{at: at, offset: m.CommitLogOffset}); err != nil {
				t.mu.Unlock()
				return err
			}
			t.indexed = m.QueueOffset + 1
		}
		t.mu.Unlock()
	}
	return nil
}

// add writes e to its bucket file (t.mu held).
func (t *timerService) add(e timerEntry) error {
	minute := e.at / timerBucket
	f := t.dirty[minute]
	if f == nil {
		var err error
		if f, err = os.OpenFile(t.bucketPath(minute, ".slot"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
			return err
		}
		t.dirty[minute] = f
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], uint64(e.at))
	binary.BigEndian.PutUint64(b[8:], uint64(e.offset))
	if _, err := f.Write(b[:]); err != nil {
		return err
	}
	if seen := t.loaded[minute]; seen != nil && !seen[e.offset] { // a re-indexed timer is there once
		seen[e.offset] = true
		heap.Push(&t.h, e)
		t.pending[minute]++
	}
	return nil
}

// syncIndex fsyncs the bucket files written since the last sync, then records how far
// the timer queue is indexed.
func (t *timerService) syncIndex() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for m, f := range t.dirty {
		if err := f.Sync(); err != nil {
			errs = append(errs, err)
		}
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
		delete(t.dirty, m)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.indexed))
	return writeFileAtomic(filepath.Join(t.dir, "index.offset"), b[:])
}

// writeFileAtomic writes data to path through path.tmp and a rename, synced.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// load reads a bucket (t.mu held): its timers minus those in its done file.
func (t *timerService) load(minute int64) error {
	done, err := t.readDone(minute)
	if err != nil {
		return err
	}
	t.fin[minute] = maps.Clone(done)
	f, err := os.Open(t.bucketPath(minute, ".slot"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err != nil {
		f = nil
	}
	n := 0
	if f != nil {
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return err
		}
		for i := 0; i+16 <= len(data); i += 16 { // a torn last entry is dropped: it is indexed again
			e := timerEntry{at: int64(binary.BigEndian.Uint64(data[i:])), offset: int64(binary.BigEndian.Uint64(data[i+8:]))}
			if done[e.offset] {
				continue
			}
			done[e.offset] = true // de-duplicate an entry indexed twice
			heap.Push(&t.h, e)
			n++
		}
	}
	t.loaded[minute] = done // every offset delivered or in the heap
	t.pending[minute] = n
	return nil
}

// bucketsUpTo lists the bucket minutes on disk up to last.
func (t *timerService) bucketsUpTo(last int64) ([]int64, error) {
	names, err := filepath.Glob(filepath.Join(t.dir, "*.slot"))
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, n := range names {
		m, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(n), ".slot"), 10, 64)
		if err == nil && m <= last {
			out = append(out, m)
		}
	}
	return out, nil
}

// fire loads the buckets up to the next minute and delivers what is due.
func (t *timerService) fire(ctx context.Context) error {
	now := time.Now().UnixMilli()
	t.mu.Lock()
	defer t.mu.Unlock()
	minutes, err := t.bucketsUpTo(now/timerBucket + 1)
	if err != nil {
		return err
	}
	for _, m := range minutes {
		if t.loaded[m] == nil {
			if err := t.load(m); err != nil {
				return err
			}
		}
	}
	for len(t.h) > 0 && t.h[0].at <= now {
		e := t.h[0]
		minute := e.at / timerBucket
		if t.fin[minute][e.offset] { // recalled
			heap.Pop(&t.h)
			t.pending[minute]--
			continue
		}
		if err := t.deliver(ctx, e); err != nil {
			return err // tried again next tick
		}
		heap.Pop(&t.h)
		if err := t.markDone(minute, e.offset); err != nil {
			return err
		}
		t.pending[minute]--
	}
	// drop finished buckets of the past
	for m, n := range t.pending {
		if n == 0 && (m+1)*timerBucket <= now && t.dirty[m] == nil {
			if f := t.done[m]; f != nil {
				f.Close()
				delete(t.done, m)
			}
			for _, ext := range []string{".slot", ".done"} {
				if err := os.Remove(t.bucketPath(m, ext)); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
			delete(t.pending, m)
			delete(t.loaded, m)
			delete(t.fin, m)
		}
	}
	return nil
}

func (t *timerService) markDone(minute, offset int64) error {
	f := t.done[minute]
	if f == nil {
		var err error
		if f, err = os.OpenFile(t.bucketPath(minute, ".done"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err != nil {
			return err
		}
		t.done[minute] = f
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(offset))
	if _, err := f.Write(b[:]); err != nil {
		return err
	}
	if fin := t.fin[minute]; fin != nil {
		fin[offset] = true
	}
	return nil
}

// readDone reads a bucket's done file: the offsets delivered or recalled.
func (t *timerService) readDone(minute int64) (map[int64]bool, error) {
	done := map[int64]bool{}
	data, err := os.ReadFile(t.bucketPath(minute, ".done"))
	if errors.Is(err, os.ErrNotExist) {
		return done, nil
	}
	if err != nil {
		return nil, err
	}
	for i := 0; i+8 <= len(data); i += 8 {
		done[int64(binary.BigEndian.Uint64(data[i:]))] = true
	}
	return done, nil
}

// ErrTimerNotPending is returned by RecallTimer for a timer message that was already
// delivered or recalled, or that does not exist.
var ErrTimerNotPending = errors.New("the timer message is not pending: delivered, recalled, or never sent")

// RecallTimer cancels the timer message parked at commitLogOffset with delivery time
// deliverAt (unix ms) and returns its message id (UNIQ_KEY). A recall is recorded in
// the bucket's done file, so it holds across restarts. A timer already delivered or
// recalled gives ErrTimerNotPending.
func (b *Broker) RecallTimer(commitLogOffset, deliverAt int64) (string, error) {
	m, _, err := b.store.LookMessageByOffset(commitLogOffset)
	if err != nil || m.Topic != TimerTopic || m.Property(PropertyTimerOutMS) != strconv.FormatInt(deliverAt, 10) {
		return "", ErrTimerNotPending
	}
	t := b.timer
	t.mu.Lock()
	defer t.mu.Unlock()
	minute := deliverAt / timerBucket
	fin := t.fin[minute]
	if fin == nil {
		if fin, err = t.readDone(minute); err != nil {
			return "", err
		}
		if fin[commitLogOffset] {
			return "", ErrTimerNotPending
		}
		fin = nil // not loaded: the done file alone records it
	} else if fin[commitLogOffset] {
		return "", ErrTimerNotPending
	}
	if err := t.markDone(minute, commitLogOffset); err != nil {
		return "", err
	}
	if seen := t.loaded[minute]; seen != nil {
		seen[commitLogOffset] = true // a later indexing of it adds nothing
	}
	return m.MsgID, nil
}

// deliver writes the parked message at e to its real topic and queue.
func (t *timerService) deliver(ctx context.Context, e timerEntry) error {
	m, _, err := t.b.store.LookMessageByOffset(e.offset)
	if err != nil {
		t.b.log.Error("timer: a parked message is gone from the commitlog (retention); dropped", "offset", e.offset, "err", err)
		return nil
	}
	realTopic := m.Property(message.PropertyRealTopic)
	qid, err := strconv.Atoi(m.Property(message.PropertyRealQueueID))
	if m.Topic != TimerTopic || realTopic == "" || err != nil {
		t.b.log.Error("timer: not a parked timer message; dropped", "offset", e.offset, "topic", m.Topic)
		return nil
	}
	out := &message.MessageExt{
		Message:        message.Message{Topic: realTopic, Flag: m.Flag, Body: m.Body, Properties: m.Properties},
		QueueID:        int32(qid),
		SysFlag:        m.SysFlag,
		BornTimestamp:  m.BornTimestamp,
		BornHost:       m.BornHost,
		StoreHost:      t.b.storeHost,
		ReconsumeTimes: m.ReconsumeTimes,
	}
	out.RemoveProperty(message.PropertyRealTopic)
	out.RemoveProperty(message.PropertyRealQueueID)
	out.RemoveProperty(PropertyTimerOutMS)
	// Relative delays are spent: a later re-send of the message (a retry, a DLQ move)
	// must not park it again. TIMER_DELIVER_MS stays (it is in the past now).
	out.RemoveProperty(PropertyTimerDelaySec)
	out.RemoveProperty(PropertyTimerDelayMS)
	if tc := t.b.topics.get(realTopic); tc != nil && qid >= max(tc.ReadQueueNums, tc.WriteQueueNums) {
		out.QueueID = randomQueue(tc.WriteQueueNums)
	}
	_, err = t.b.store.PutMessage(ctx, out, message.TagHashCode(out.Tag()))
	return err
}

// close syncs and closes the bucket files (at shutdown, after the loop stopped).
func (t *timerService) close() error {
	err := t.syncIndex()
	t.mu.Lock()
	defer t.mu.Unlock()
	for m, f := range t.done {
		if serr := f.Sync(); err == nil {
			err = serr
		}
		f.Close()
		delete(t.done, m)
	}
	return err
}
