package store

import "fmt"

// PutStatus is the outcome of a successful write (RocketMQ PutMessageStatus, the part that
// applies to a stored message).
type PutStatus int

const (
	// PutOK: the message is stored (and, with SYNC_FLUSH, fsynced).
	PutOK PutStatus = iota
	// PutFlushDiskTimeout: SYNC_FLUSH only. The message is stored but the fsync covering it
	// did not finish within Config.SyncFlushTimeout (or the caller's ctx ended first). The
	// broker answers FLUSH_DISK_TIMEOUT (response code 10).
	PutFlushDiskTimeout
)

// String returns the Java PutMessageStatus name: "PUT_OK" or "FLUSH_DISK_TIMEOUT".
func (s PutStatus) String() string {
	switch s {
	case PutOK:
		return "PUT_OK"
	case PutFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	}
	return fmt.Sprintf("PutStatus(%d)", int(s))
}

// PutResult describes a stored message or batch.
type PutResult struct {
	// Status is PutOK or PutFlushDiskTimeout.
	Status PutStatus
	// CommitLogOffset is the physical offset in bytes of the (first) record.
	CommitLogOffset int64
	// QueueOffset is the consume-queue offset of the (first) message; 0 for half and
	// rolled-back transactional messages, which get no consume-queue entry.
	QueueOffset int64
	// MsgSize is the size in bytes of the (first) record.
	MsgSize int32
	// StoreTimestamp is the store time in unix ms (of the first message).
	StoreTimestamp int64
	// OffsetMsgIDs holds one offset message id per stored message, in order
	// (message.OffsetMsgID of the store host and the record's commitlog offset).
	OffsetMsgIDs []string
	// Count is the number of messages stored.
	Count int
	// WroteBytes is the total size in bytes of all records written.
	WroteBytes int64
}

// GetStatus is the outcome of GetMessage (Java GetMessageStatus; docs/protocol.md §3.4 "Store lookup").
type GetStatus int

const (
	// Found: at least one message matched.
	Found GetStatus = iota
	// NoMatchedMessage: entries were scanned but none passed the filter.
	NoMatchedMessage
	// NoMatchedLogicQueue: there is no consume queue for the topic/queue id.
	NoMatchedLogicQueue
	// NoMessageInQueue: the consume queue is empty (max offset 0).
	NoMessageInQueue
	// OffsetTooSmall: the offset is below the queue's min offset.
	OffsetTooSmall
	// OffsetOverflowOne: the offset equals the max offset (nothing new yet; long-poll candidate).
	OffsetOverflowOne
	// OffsetOverflowBadly: the offset is beyond the max offset.
	OffsetOverflowBadly
	// OffsetFoundNull: the consume-queue file holding the offset is missing.
	OffsetFoundNull
	// MessageWasRemoving: the matched entries point at commitlog data that was deleted.
	MessageWasRemoving
)

var getStatusNames = [...]string{
	Found:               "FOUND",
	NoMatchedMessage:    "NO_MATCHED_MESSAGE",
	NoMatchedLogicQueue: "NO_MATCHED_LOGIC_QUEUE",
	NoMessageInQueue:    "NO_MESSAGE_IN_QUEUE",
	OffsetTooSmall:      "OFFSET_TOO_SMALL",
	OffsetOverflowOne:   "OFFSET_OVERFLOW_ONE",
	OffsetOverflowBadly: "OFFSET_OVERFLOW_BADLY",
	OffsetFoundNull:     "OFFSET_FOUND_NULL",
	MessageWasRemoving:  "MESSAGE_WAS_REMOVING",
}

// String returns the Java GetMessageStatus name, e.g. "FOUND", "OFFSET_OVERFLOW_ONE"; the
// broker sends it as the PULL_MESSAGE response remark.
func (s GetStatus) String() string {
	if s >= 0 && int(s) < len(getStatusNames) {
		return getStatusNames[s]
	}
	return fmt.Sprintf("GetStatus(%d)", int(s))
}

// GetResult is the answer of GetMessage.
type GetResult struct {
	// Status is the lookup outcome (docs/protocol.md §3.4 "Store lookup").
	Status GetStatus
	// NextBeginOffset is the queue offset the consumer should pull from next.
	NextBeginOffset int64
	// MinOffset is the queue's first available offset.
	MinOffset int64
	// MaxOffset is the queue's next offset to be written (its entry count).
	MaxOffset int64
	// Records holds the raw stored records, each a full §4.1 record exactly as in the
	// commitlog. They are sub-slices of Body.
	Records [][]byte
	// Body is Records concatenated back to back: the PULL_MESSAGE (code 11) response body.
	Body []byte
	// MessageCount is len(Records).
	MessageCount int
}

// Filter decides which consume-queue entries GetMessage returns. A nil Filter matches all.
type Filter interface {
	// MatchTagsCode reports whether an entry's tags code (message.TagHashCode of the tag,
	// or the delivery timestamp in SCHEDULE_TOPIC_XXXX) matches. It is asked first.
	MatchTagsCode(tagsCode int64) bool
	// MatchRecord reports whether the raw stored record (§4.1) matches; it is asked only for
	// entries that passed MatchTagsCode and must not keep rec.
	MatchRecord(rec []byte) bool
}
