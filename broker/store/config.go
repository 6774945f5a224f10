package store

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
)

// FlushDiskType says when a put is acknowledged relative to fsync (RocketMQ broker.conf key
// flushDiskType).
type FlushDiskType int

const (
	// AsyncFlush acknowledges a put once the record is in the page cache and fsyncs the
	// commitlog every Config.FlushInterval ("ASYNC_FLUSH", the RocketMQ default).
	AsyncFlush FlushDiskType = iota
	// SyncFlush acknowledges a put only after an fsync covering its record ("SYNC_FLUSH");
	// concurrent puts share fsyncs (group commit).
	SyncFlush
)

// String returns the broker.conf spelling: "ASYNC_FLUSH" or "SYNC_FLUSH".
func (t FlushDiskType) String() string {
	switch t {
	case AsyncFlush:
		return "ASYNC_FLUSH"
	case SyncFlush:
		return "SYNC_FLUSH"
	}
	return fmt.Sprintf("FlushDiskType(%d)", int(t))
}

// ParseFlushDiskType parses "ASYNC_FLUSH" or "SYNC_FLUSH" (case-insensitive). Anything else
// is an error naming the accepted values.
func ParseFlushDiskType(s string) (FlushDiskType, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "ASYNC_FLUSH":
		return AsyncFlush, nil
	case "SYNC_FLUSH":
		return SyncFlush, nil
	}
	return 0, fmt.Errorf("store: invalid flushDiskType %q: want ASYNC_FLUSH or SYNC_FLUSH", s)
}

// MarshalText implements encoding.TextMarshaler with String.
func (t FlushDiskType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseFlushDiskType.
func (t *FlushDiskType) UnmarshalText(b []byte) error {
	v, err := ParseFlushDiskType(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// Defaults and limits of Config.
const (
	// DefaultCommitLogSegmentSize is the size of a commitlog file: 1 GiB (RocketMQ
	// mappedFileSizeCommitLog).
	DefaultCommitLogSegmentSize = 1 << 30
	// MinCommitLogSegmentSize is the smallest accepted segment size, 4 KiB.
	MinCommitLogSegmentSize = 4 << 10
	// MaxCommitLogSegmentSize is the largest accepted segment size, 2 GiB - 1 (the blank
	// filler stores the remaining space in an int32).
	MaxCommitLogSegmentSize = math.MaxInt32
	// DefaultConsumeQueueEntries is the number of 20-byte entries per consume-queue file:
	// 300000 (6,000,000 bytes; RocketMQ mappedFileSizeConsumeQueue).
	DefaultConsumeQueueEntries = 300000
	// MaxConsumeQueueEntries is the largest accepted ConsumeQueueEntries (file under 2 GiB).
	MaxConsumeQueueEntries = math.MaxInt32 / cqEntrySize
	// DefaultFlushInterval is the ASYNC_FLUSH fsync period: 500 ms (RocketMQ
	// flushIntervalCommitLog).
	DefaultFlushInterval = 500 * time.Millisecond
	// DefaultFlushConsumeQueueInterval is the consume-queue fsync and checkpoint period: 1 s
	// (RocketMQ flushIntervalConsumeQueue).
	DefaultFlushConsumeQueueInterval = time.Second
	// DefaultSyncFlushTimeout is how long a SYNC_FLUSH put waits for its fsync: 5 s (RocketMQ
	// syncFlushTimeout).
	DefaultSyncFlushTimeout = 5 * time.Second
	// DefaultMaxMessageSize is the largest accepted message body: 4 MiB = 4194304 bytes
	// (RocketMQ maxMessageSize).
	DefaultMaxMessageSize = 4 << 20
)

// Config configures a Store. The zero value of every field except Dir means its default.
type Config struct {
	// Dir is the root directory of the store (required). Open creates it and the layout
	// <Dir>/commitlog/<20-digit start offset>, <Dir>/consumequeue/<topic>/<queueId>/<20-digit>,
	// <Dir>/checkpoint.
	Dir string
	// CommitLogSegmentSize is the size in bytes of each commitlog file. Default 1 GiB
	// (1073741824); range 4 KiB .. 2 GiB-1. Files are preallocated to this size. A record
	// (plus 8 bytes) larger than a segment is rejected with *MessageTooLargeError. Existing
	// segments keep the size they were created with.
	CommitLogSegmentSize int64
	// ConsumeQueueEntries is the number of 20-byte entries per consume-queue file.
	// Default 300000; range 1 .. 107374182.
	ConsumeQueueEntries int
	// MaxOpenFiles caps the consume-queue and key-index files kept open: they are opened
	// on demand and the least recently used idle ones closed beyond this many, so the open
	// files do not grow with the number of queues (a file in use is never closed under
	// its user). Commitlog segments (the lock, the checkpoint) are not counted: there are
	// few and they stay open. Default 1000 (DefaultMaxOpenFiles).
	MaxOpenFiles int
	// FlushDiskType selects ASYNC_FLUSH (default) or SYNC_FLUSH.
	FlushDiskType FlushDiskType
	// FlushInterval is the ASYNC_FLUSH commitlog fsync period. Default 500 ms.
	FlushInterval time.Duration
	// FlushConsumeQueueInterval is the period of consume-queue fsyncs and checkpoint
	// writes, in both flush modes. Default 1 s.
	FlushConsumeQueueInterval time.Duration
	// SyncFlushTimeout is how long a SYNC_FLUSH put waits for its fsync before it returns
	// PutFlushDiskTimeout. Default 5 s.
	SyncFlushTimeout time.Duration
	// MaxMessageSize is the largest accepted message body in bytes; a longer body is
	// rejected with *MessageTooLargeError (errors.Is ErrMessageTooLarge). Default 4 MiB
	// (4194304).
	MaxMessageSize int
	// RecoverTagsCode computes the tags code of a consume-queue entry that recovery
	// rebuilds from a commitlog record (the live path gets it from the PutMessage caller).
	// Default: message.TagHashCode of the TAGS property. A broker that stores something
	// else there (the delivery timestamp for SCHEDULE_TOPIC_XXXX) sets this to compute the
	// same value from the decoded record (body not loaded).
	RecoverTagsCode func(msg *message.MessageExt) int64
	// Logger receives recovery and flush-error reports. Default: a logger that discards.
	Logger *slog.Logger
	// Index configures the key index (index.go): on by default, 1,000,000 hash slots and
	// 4,000,000 entries per index file.
	Index IndexConfig
}

func (c *Config) setDefaults() {
	if c.CommitLogSegmentSize == 0 {
		c.CommitLogSegmentSize = DefaultCommitLogSegmentSize
	}
	if c.ConsumeQueueEntries == 0 {
		c.ConsumeQueueEntries = DefaultConsumeQueueEntries
	}
	if c.MaxOpenFiles == 0 {
		c.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.FlushConsumeQueueInterval == 0 {
		c.FlushConsumeQueueInterval = DefaultFlushConsumeQueueInterval
	}
	if c.SyncFlushTimeout == 0 {
		c.SyncFlushTimeout = DefaultSyncFlushTimeout
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.RecoverTagsCode == nil {
		c.RecoverTagsCode = func(m *message.MessageExt) int64 { return message.TagHashCode(m.Tag()) }
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.Index.setDefaults() // key index (index.go)
}

// Validate checks c. Zero fields are valid (they mean the default); it returns a
// *config.Error naming the first field that is missing or out of range.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "":
		return &config.Error{Package: "store", Field: "Dir", Reason: "required"}
	case c.CommitLogSegmentSize != 0 && (c.CommitLogSegmentSize < MinCommitLogSegmentSize || c.CommitLogSegmentSize > MaxCommitLogSegmentSize):
		return &config.Error{Package: "store", Field: "CommitLogSegmentSize", Value: c.CommitLogSegmentSize,
			Reason: fmt.Sprintf("want %d..%d bytes", MinCommitLogSegmentSize, MaxCommitLogSegmentSize)}
	case c.ConsumeQueueEntries < 0 || c.ConsumeQueueEntries > MaxConsumeQueueEntries:
		return &config.Error{Package: "store", Field: "ConsumeQueueEntries", Value: c.ConsumeQueueEntries,
			Reason: fmt.Sprintf("want 1..%d entries", MaxConsumeQueueEntries)}
	case c.MaxOpenFiles < 0:
		return &config.Error{Package: "store", Field: "MaxOpenFiles", Value: c.MaxOpenFiles, Reason: "negative"}
	case c.FlushDiskType != AsyncFlush && c.FlushDiskType != SyncFlush:
		return &config.Error{Package: "store", Field: "FlushDiskType", Value: int(c.FlushDiskType), Reason: "want AsyncFlush or SyncFlush"}
	case c.FlushInterval < 0:
		return &config.Error{Package: "store", Field: "FlushInterval", Value: c.FlushInterval, Reason: "negative"}
	case c.FlushConsumeQueueInterval < 0:
		return &config.Error{Package: "store", Field: "FlushConsumeQueueInterval", Value: c.FlushConsumeQueueInterval, Reason: "negative"}
	case c.SyncFlushTimeout < 0:
		return &config.Error{Package: "store", Field: "SyncFlushTimeout", Value: c.SyncFlushTimeout, Reason: "negative"}
	case c.MaxMessageSize < 0:
		return &config.Error{Package: "store", Field: "MaxMessageSize", Value: c.MaxMessageSize, Reason: "negative"}
	}
	return c.Index.validate() // key index (index.go)
}
