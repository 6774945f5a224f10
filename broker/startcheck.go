package broker

import (
	"fmt"

	"github.com/sluicemq/sluice/message"
)

// correctStoredState runs once at Start, after the store has recovered, and brings the
// broker's own stored progress back inside the store's queues. Every correction is
// logged once (a warning with the old and new value) and persisted, so the next start
// finds nothing to correct:
//   - a delay level's progress beyond the end of its SCHEDULE_TOPIC_XXXX queue (the
//     store lost its tail) is set to the end, or below the queue's first entry (retention
//     deleted it) to the first entry;
//   - a consumer group's committed offset beyond the end of its queue is set to the end;
//     left above, the messages written next would get offsets below it and be skipped;
//   - a negative committed offset (only a hand-edited file has one: UPDATE_CONSUMER_OFFSET
//     refuses it) is set to the queue's first entry, the choice that loses nothing.
//
// Other offsets below a queue's first entry are not changed: the pull answers
// OFFSET_MOVED then, as RocketMQ does.
func (b *Broker) correctStoredState() error {
	changed := false
	for level := 1; level <= len(b.sched.levels); level++ {
		q := int32(level - 1)
		old := b.sched.offset(level)
		lo, hi := b.store.MinOffset(message.ScheduleTopic, q), b.store.MaxOffset(message.ScheduleTopic, q)
		var now int64
		var why string
		switch {
		case old > hi:
			now, why = hi, "beyond the end of its queue"
		case old < lo:
			now, why = lo, "below the first message of its queue"
		default:
			continue
		}
		b.sched.setOffset(level, now)
		changed = true
		b.log.Warn("corrected at start: delay level progress "+why, "level", level, "old", old, "new", now,
			"queueMinOffset", lo, "queueMaxOffset", hi)
	}
	if changed {
		if err := b.sched.persist(); err != nil {
			return fmt.Errorf("persist corrected delay progress: %w", err)
		}
	}

	type fix struct {
		topic, group string
		queueID      int32
		old, new     int64
		why          string
	}
	var fixes []fix
	b.offsets.mu.Lock()
	for k, qs := range b.offsets.table {
		topic, group, ok := splitOffsetKey(k)
		if !ok {
			continue
		}
		for q, off := range qs {
			var now int64
			var why string
			switch {
			case off > b.store.MaxOffset(topic, q):
				now, why = b.store.MaxOffset(topic, q), "beyond the end of its queue"
			case off < 0:
				now, why = b.store.MinOffset(topic, q), "negative"
			default:
				continue
			}
			qs[q] = now
			b.offsets.dirty = true
			fixes = append(fixes, fix{topic, group, q, off, now, why})
		}
	}
	b.offsets.mu.Unlock()
	for _, f := range fixes {
		b.log.Warn("corrected at start: consumer offset "+f.why, "group", f.group, "topic", f.topic,
			"queueId", f.queueID, "old", f.old, "new", f.new)
	}
	if len(fixes) > 0 {
		if err := b.offsets.persist(); err != nil {
			return fmt.Errorf("persist corrected consumer offsets: %w", err)
		}
	}
	return nil
}

// splitOffsetKey splits an offset table key "topic@group".
func splitOffsetKey(k string) (topic, group string, ok bool) {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == '@' {
			return k[:i], k[i+1:], i > 0 && i < len(k)-1
		}
	}
	return "", "", false
}
