package redismw

import (
	"strconv"
	"time"

	"github.com/sluicemq/sluice/message"
)

// ParkedRecord is a send that failed after the producer's own retries, as [Park] writes it
// (one JSON document) into the Redis list [ParkKeys].Pending, or one line of the local
// spool file when Redis is unreachable too. The retry task (package retrytask) reads it,
// rebuilds the message with [ParkedRecord.Message] and sends it again.
//
// The JSON field names are a stable contract between Park and the resender.
type ParkedRecord struct {
	// ID identifies the record (message.NewUniqID, 32 hex characters). It is the
	// idempotency key of a spool drain: a record ID is pushed into Redis at most once.
	ID string `json:"id"`
	// Topic is the message's topic.
	Topic string `json:"topic"`
	// Tags is the message tag (property TAGS), "" if none.
	Tags string `json:"tags,omitempty"`
	// Keys are the message keys (property KEYS split on spaces), nil if none.
	Keys []string `json:"keys,omitempty"`
	// Body is the message body as handed to Send (base64 in JSON).
	Body []byte `json:"body"`
	// Flag is the message's user flag.
	Flag int32 `json:"flag,omitempty"`
	// Properties are all message properties except TAGS, KEYS and DELAY (those have their
	// own fields; the delay is kept as DelayLevel and DeliverAtMs).
	Properties map[string]string `json:"properties,omitempty"`
	// DelayLevel is the message's delay level (property DELAY, 1..18), 0 for none. Kept for
	// information; the resender computes the remaining delay from DeliverAtMs.
	DelayLevel int `json:"delayLevel,omitempty"`
	// DeliverAtMs is the absolute delivery time (unix ms) of a delayed or timed message:
	// FirstFailedAtMs + the delay of DelayLevel, or the TIMER_DELIVER_MS property when set.
	// 0 means "deliver as soon as it is sent".
	DeliverAtMs int64 `json:"deliverAtMs,omitempty"`
	// FirstFailedAtMs is when the send first failed (unix ms).
	FirstFailedAtMs int64 `json:"firstFailedAtMs"`
	// ParkedAtMs is when the record was written (unix ms); the resender waits MinAge after it.
	ParkedAtMs int64 `json:"parkedAtMs"`
	// Attempts counts failed Send calls for this record (each Send call may itself have
	// tried several times inside the producer): 1 when parked; the resender increments it.
	Attempts int `json:"attempts"`
	// LastError is the text of the last failure.
	LastError string `json:"lastError"`
}

// NewParkedRecord builds the record for msg, which failed with cause at now. levels maps
// delay level n to levels[n-1] (nil means message.DefaultDelayLevels(); levels above the last entry
// are clamped to it, as the broker does). The body and properties are copied, so msg may be
// reused afterwards. ID is a fresh message.NewUniqID, Attempts is 1, FirstFailedAtMs and
// ParkedAtMs are now.
func NewParkedRecord(msg *message.Message, cause error, now time.Time, levels []time.Duration) *ParkedRecord {
	if levels == nil {
		levels = message.DefaultDelayLevels()
	}
	nowMs := now.UnixMilli()
	r := &ParkedRecord{
		ID:              message.NewUniqID(),
		Topic:           msg.Topic,
		Tags:            msg.Tag(),
		Keys:            msg.Keys(),
		Body:            append([]byte{}, msg.Body...),
		Flag:            msg.Flag,
		DelayLevel:      msg.DelayLevel(),
		FirstFailedAtMs: nowMs,
		ParkedAtMs:      nowMs,
		Attempts:        1,
	}
	if cause != nil {
		r.LastError = cause.Error()
	}
	for k, v := range msg.Properties {
		switch k {
		case message.PropertyTags, message.PropertyKeys, message.PropertyDelayTimeLevel:
			continue
		}
		if r.Properties == nil {
			r.Properties = make(map[string]string, len(msg.Properties))
		}
		r.Properties[k] = v
	}
	if r.DelayLevel > 0 && len(levels) > 0 {
		i := r.DelayLevel - 1
		if i >= len(levels) {
			i = len(levels) - 1
		}
		r.DeliverAtMs = nowMs + levels[i].Milliseconds()
	}
	if ms, err := strconv.ParseInt(msg.Property(message.PropertyTimerDeliverMs), 10, 64); err == nil && ms > 0 {
		r.DeliverAtMs = ms
	}
	return r
}

// Message rebuilds the message: topic, flag, body, properties, tag and keys. It never sets
// DELAY: the caller computes the remaining delay from DeliverAtMs (and may set a delay
// level or send at once when the time has passed). The result shares nothing with r.
func (r *ParkedRecord) Message() *message.Message {
	m := &message.Message{Topic: r.Topic, Flag: r.Flag, Body: append([]byte{}, r.Body...)}
	for k, v := range r.Properties {
		m.SetProperty(k, v)
	}
	m.RemoveProperty(message.PropertyDelayTimeLevel)
	if r.Tags != "" {
		m.SetTag(r.Tags)
	}
	if len(r.Keys) > 0 {
		m.SetKeys(r.Keys...)
	}
	return m
}

// ParkKeys are the Redis keys of one park namespace. All three share the hash tag {ns}, so
// in Redis Cluster they live on one slot and LMOVE between them works.
type ParkKeys struct {
	// Pending is the list Park appends new records to (RPUSH); the resender claims from its head.
	Pending string
	// Processing is the list the resender moves claimed records into (LMOVE) until it acks them.
	Processing string
	// Dead is the list of records that ran out of attempts.
	Dead string
}

// NewParkKeys returns the keys of namespace ns: "sluice:park:{ns}:pending",
// "sluice:park:{ns}:processing" and "sluice:park:{ns}:dead". An empty ns means "default".
func NewParkKeys(namespace string) ParkKeys {
	if namespace == "" {
		namespace = "default"
	}
	p := "sluice:park:{" + namespace + "}:"
	return ParkKeys{Pending: p + "pending", Processing: p + "processing", Dead: p + "dead"}
}
