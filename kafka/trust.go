package kafka

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"

	kafkago "github.com/segmentio/kafka-go"
)

// HeaderHMAC authenticates a record's control headers (see Config.ControlHeaderKey):
// hex HMAC-SHA256 over the topic, the key, the value and every control header in
// record order.
const HeaderHMAC = "SLUICE_HMAC"

// Control headers on Kafka are plain record headers any producer can set, and the
// consumer acts on them (a due time holds the partition, a reconsume count spends the
// retry budget, an origin topic bypasses the tag filter). A consumer therefore honours
// them only where Sluice wrote them: on its group's own retry and dead-letter topics and
// on the delay topics a DelayForwarder consumes, or on any topic when they carry a valid
// HeaderHMAC under the group's ControlHeaderKey. Elsewhere they are removed from the
// record before anything reads it, and counted (Consumer.ForgedControlHeaders).

// ownsTopic reports whether topic is one this consumer's group writes control headers
// to: "<group>.retry.<n>" (n within RetrySchedule), "<group>.dlq", or a topic of a raw
// subscription (the delay topics of a DelayForwarder).
func (c *Consumer) ownsTopic(topic string) bool {
	if topic == DLQTopic(c.cfg.Group) {
		return true
	}
	if n, ok := strings.CutPrefix(topic, c.cfg.Group+".retry."); ok {
		lvl, err := strconv.Atoi(n)
		return err == nil && lvl >= 1 && lvl <= len(c.cfg.RetrySchedule) && strconv.Itoa(lvl) == n
	}
	c.mu.Lock()
	s := c.subs[topic]
	c.mu.Unlock()
	return s != nil && s.raw != nil
}

// screen removes the control headers of r unless this consumer may trust them; it
// reports whether it removed any.
func (c *Consumer) screen(r *Record, owned bool) bool {
	forged := false
	for _, h := range r.Headers {
		if controlHeaders[h.Key] && h.Key != HeaderFlag {
			forged = true
			break
		}
	}
	if !forged || owned || verifyControl(c.cfg.ControlHeaderKey, r.Topic, r.Key, r.Value, r.Headers) {
		return false
	}
	kept := r.Headers[:0]
	for _, h := range r.Headers {
		if !controlHeaders[h.Key] || h.Key == HeaderFlag {
			kept = append(kept, h)
		}
	}
	r.Headers = kept
	if n := c.forged.Add(1); n&(n-1) == 0 { // 1, 2, 4, 8 …: log, without flooding
		c.log.Warn("kafka: control headers on a record of a topic Sluice did not write them to were ignored",
			"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "ignoredSoFar", n)
	}
	return true
}

// ForgedControlHeaders returns how many consumed records carried Sluice control headers
// (SLUICE_DUE_MS, SLUICE_ORIGIN_*, SLUICE_RECONSUME_TIMES, …) the consumer ignored:
// records of a topic Sluice does not write them to, without a valid HeaderHMAC.
func (c *Consumer) ForgedControlHeaders() int64 { return c.forged.Load() }

// controlMAC returns the HMAC of a record's control headers under key.
func controlMAC(key []byte, topic string, k, v []byte, headers []kafkago.Header) []byte {
	m := hmac.New(sha256.New, key)
	var n [8]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		m.Write(n[:])
		m.Write(b)
	}
	put([]byte(topic))
	put(k)
	put(v)
	for _, h := range headers {
		if controlHeaders[h.Key] {
			put([]byte(h.Key))
			put(h.Value)
		}
	}
	return m.Sum(nil)
}

// verifyControl reports whether headers hold a HeaderHMAC valid under key (never with
// no key).
func verifyControl(key []byte, topic string, k, v []byte, headers []kafkago.Header) bool {
	if len(key) == 0 {
		return false
	}
	var got []byte
	for _, h := range headers {
		if h.Key == HeaderHMAC {
			got = h.Value
		}
	}
	want := controlMAC(key, topic, k, v, headers)
	mac := make([]byte, hex.EncodedLen(len(want)))
	hex.Encode(mac, want)
	return got != nil && hmac.Equal(got, mac)
}

// signControl replaces km's HeaderHMAC with one under key (nothing without a key).
func signControl(key []byte, km *kafkago.Message) {
	if len(key) == 0 {
		return
	}
	kept := km.Headers[:0:0]
	for _, h := range km.Headers {
		if h.Key != HeaderHMAC {
			kept = append(kept, h)
		}
	}
	mac := controlMAC(key, km.Topic, km.Key, km.Value, kept)
	km.Headers = append(kept, kafkago.Header{Key: HeaderHMAC, Value: []byte(hex.EncodeToString(mac))})
}
