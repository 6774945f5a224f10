package pop

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
)

// A receipt handle names one delivery of one message to one consumer group: the queue,
// the queue offset, the delivery's sequence number (unique within the group, never
// reused), the delivery attempt and the time the message becomes visible again. It is
// base64url (no padding) of
//
//	version(1) | queueID(4) | offset(8) | seq(8) | attempt(4) | visibleAt unix ms(8) | mac(16)
//
// version 1 names a message of the topic's queue; version 2 a message of the group's
// %RETRY%<group> topic (a message a 4.x consumer of the group sent back) delivered for
// the topic.
// where mac is the first 16 bytes of HMAC-SHA256 under the broker's POP secret over a
// domain label, the consumer group, the topic and the 33 bytes before it. A handle
// therefore cannot be forged without the secret, cannot be used for another group or
// topic (the mac would not match) nor edited to point at another message or attempt;
// and once the message was acknowledged, delivered again or had its invisibility
// changed, the sequence number no longer matches the broker's state and the handle is
// refused.
const (
	handleVersion      = 1
	handleVersionRetry = 2 // the delivery is of the group's %RETRY% topic
	handlePayloadLen   = 1 + 4 + 8 + 8 + 4 + 8
	handleMACLen       = 16
	handleLen          = handlePayloadLen + handleMACLen
	// MaxHandleLen bounds the length of a receipt handle string a request may carry.
	MaxHandleLen = 128
)

// Handle is a decoded receipt handle.
type Handle struct {
	QueueID   int32
	Offset    int64
	Seq       uint64
	Attempt   int32
	VisibleAt int64 // unix ms: the end of the delivery's invisibility
	// Retry: the message is in the group's %RETRY%<group> topic (handle version 2).
	Retry bool
}

// HandleError is why a receipt handle is refused.
type HandleError struct {
	Kind   HandleErrorKind
	Reason string
}

// HandleErrorKind classifies a refused receipt handle.
type HandleErrorKind int

const (
	// HandleMalformed: not a receipt handle of this broker's format.
	HandleMalformed HandleErrorKind = iota + 1
	// HandleForged: the signature does not match (another broker's secret, another group
	// or topic, or edited).
	HandleForged
	// HandleExpired: the delivery's invisible duration has passed.
	HandleExpired
	// HandleStale: the delivery is no longer current: the message was acknowledged,
	// delivered again, dead-lettered, or its invisibility changed (a new handle was
	// issued).
	HandleStale
)

func (e *HandleError) Error() string { return "receipt_handle: " + e.Reason }

func handleMAC(secret []byte, group, topic string, payload []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sluice-pop-receipt-handle-v1\x00"))
	m.Write([]byte(group))
	m.Write([]byte{0})
	m.Write([]byte(topic))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)[:handleMACLen]
}

// encodeHandle signs h for group and topic.
func encodeHandle(secret []byte, group, topic string, h Handle) string {
	var b [handleLen]byte
	b[0] = handleVersion
	if h.Retry {
		b[0] = handleVersionRetry
	}
	binary.BigEndian.PutUint32(b[1:], uint32(h.QueueID))
	binary.BigEndian.PutUint64(b[5:], uint64(h.Offset))
	binary.BigEndian.PutUint64(b[13:], h.Seq)
	binary.BigEndian.PutUint32(b[21:], uint32(h.Attempt))
	binary.BigEndian.PutUint64(b[25:], uint64(h.VisibleAt))
	copy(b[handlePayloadLen:], handleMAC(secret, group, topic, b[:handlePayloadLen]))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeHandle checks s's format and signature for group and topic. It does not look at
// the time or the broker's state.
func decodeHandle(secret []byte, group, topic, s string) (Handle, error) {
	if len(s) > MaxHandleLen {
		return Handle{}, &HandleError{HandleMalformed, fmt.Sprintf("%d characters, longer than %d", len(s), MaxHandleLen)}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s) // strict: one string per handle
	if err != nil {
		return Handle{}, &HandleError{HandleMalformed, "not a receipt handle of this broker (not base64url)"}
	}
	if len(b) != handleLen || (b[0] != handleVersion && b[0] != handleVersionRetry) {
		return Handle{}, &HandleError{HandleMalformed, "not a receipt handle of this broker (length or version)"}
	}
	if !hmac.Equal(b[handlePayloadLen:], handleMAC(secret, group, topic, b[:handlePayloadLen])) {
		return Handle{}, &HandleError{HandleForged, "signature does not match: not issued by this broker for this consumer group and topic"}
	}
	h := Handle{
		QueueID:   int32(binary.BigEndian.Uint32(b[1:])),
		Offset:    int64(binary.BigEndian.Uint64(b[5:])),
		Seq:       binary.BigEndian.Uint64(b[13:]),
		Attempt:   int32(binary.BigEndian.Uint32(b[21:])),
		VisibleAt: int64(binary.BigEndian.Uint64(b[25:])),
		Retry:     b[0] == handleVersionRetry,
	}
	return h, nil
}

// expired reports whether h's invisibility ended before now.
func (h Handle) expired(now time.Time) bool { return now.UnixMilli() >= h.VisibleAt }

// A recall handle names one timer message for RecallMessage: base64url (strict) of
// version(1)=2 | commitlog offset(8) | delivery time unix ms(8) | mac(16), the mac an
// HMAC-SHA256 under the POP secret over a domain label, the topic and the 17 bytes (the
// version byte keeps recall handles and transaction ids apart).
const recallLen = 1 + 8 + 8 + handleMACLen

func recallMAC(secret []byte, topic string, payload []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sluice-recall-handle-v1\x00"))
	m.Write([]byte(topic))
	m.Write([]byte{0})
	m.Write(payload)
	return m.Sum(nil)[:handleMACLen]
}

// RecallHandle signs a recall handle for the timer message of topic stored at
// commitLogOffset with delivery time deliverAt.
func (s *Service) RecallHandle(topic string, commitLogOffset, deliverAt int64) string {
	return s.signPair(2, topic, commitLogOffset, deliverAt)
}

// ParseRecallHandle checks a recall handle for topic and returns what it names; a
// refused one is a *HandleError.
func (s *Service) ParseRecallHandle(topic, h string) (commitLogOffset, deliverAt int64, err error) {
	return s.parsePair(2, "recall_handle", topic, h)
}

// TransactionID signs the transaction id of a half message of topic (same format as a
// recall handle, version 3: the half's commitlog offset and its queue offset in the
// half topic), so EndTransaction cannot name another producer's half message.
func (s *Service) TransactionID(topic string, commitLogOffset, queueOffset int64) string {
	return s.signPair(3, topic, commitLogOffset, queueOffset)
}

// ParseTransactionID checks a transaction id for topic.
func (s *Service) ParseTransactionID(topic, id string) (commitLogOffset, queueOffset int64, err error) {
	return s.parsePair(3, "transaction_id", topic, id)
}

func (s *Service) signPair(version byte, topic string, a, b int64) string {
	var buf [recallLen]byte
	buf[0] = version
	binary.BigEndian.PutUint64(buf[1:], uint64(a))
	binary.BigEndian.PutUint64(buf[9:], uint64(b))
	copy(buf[17:], recallMAC(s.secret, topic, buf[:17]))
	return base64.RawURLEncoding.EncodeToString(buf[:])
}

func (s *Service) parsePair(version byte, field, topic, h string) (int64, int64, error) {
	if len(h) > MaxHandleLen {
		return 0, 0, &HandleError{HandleMalformed, field + ": too long"}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(h)
	if err != nil || len(b) != recallLen || b[0] != version {
		return 0, 0, &HandleError{HandleMalformed, field + ": not issued by this broker"}
	}
	if !hmac.Equal(b[17:], recallMAC(s.secret, topic, b[:17])) {
		return 0, 0, &HandleError{HandleForged, field + ": signature does not match: not issued by this broker for this topic"}
	}
	return int64(binary.BigEndian.Uint64(b[1:])), int64(binary.BigEndian.Uint64(b[9:])), nil
}
