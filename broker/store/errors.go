package store

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("store: closed")
	// ErrNotFound is returned (wrapped) when a commitlog offset or queue holds no message.
	ErrNotFound = errors.New("store: not found")
	// ErrMessageTooLarge matches every *MessageTooLargeError with errors.Is.
	ErrMessageTooLarge = errors.New("store: message too large")
	// ErrDiskFull is returned by PutMessage and PutMessages while the file system of the
	// store is full (a write failed with ENOSPC, or the store opened on a full disk);
	// reads keep working, and writes resume once free space is back.
	ErrDiskFull = errors.New("store: disk full")
)

// MessageTooLargeError rejects a put whose body exceeds Config.MaxMessageSize (What
// "body") or whose encoded record(s) do not fit in one commitlog segment (What "record").
// Size and Limit are in bytes. errors.Is(err, ErrMessageTooLarge) is true.
type MessageTooLargeError struct {
	What  string // "body" or "record"
	Size  int    // the offending size in bytes
	Limit int    // the limit in bytes
}

// Error implements error.
func (e *MessageTooLargeError) Error() string {
	if e.What == "record" {
		return fmt.Sprintf("store: message too large: encoded record of %d bytes does not fit in a commitlog segment (limit %d bytes)", e.Size, e.Limit)
	}
	return fmt.Sprintf("store: message too large: %s of %d bytes exceeds maxMessageSize %d bytes", e.What, e.Size, e.Limit)
}

// Is makes errors.Is(err, ErrMessageTooLarge) true.
func (e *MessageTooLargeError) Is(target error) bool { return target == ErrMessageTooLarge }

// InvalidArgumentError rejects a put with a bad field: Field names it ("topic", "queueId",
// "msgs", "tagsCodes"), Reason says why. It wraps the underlying validation error, if any.
type InvalidArgumentError struct {
	Field  string
	Reason string
	Err    error
}

// Error implements error.
func (e *InvalidArgumentError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("store: invalid %s: %s: %v", e.Field, e.Reason, e.Err)
	}
	return fmt.Sprintf("store: invalid %s: %s", e.Field, e.Reason)
}

// Unwrap returns the underlying validation error.
func (e *InvalidArgumentError) Unwrap() error { return e.Err }

// CorruptError reports a store file Open cannot make sense of and will not silently repair
// (for example a commitlog file with a bad name or a gap between segments). Path names the
// file.
type CorruptError struct {
	Path   string
	Reason string
}

// Error implements error.
func (e *CorruptError) Error() string { return fmt.Sprintf("store: corrupt %s: %s", e.Path, e.Reason) }
