package middleware

import (
	"errors"
	"fmt"
)

// The outcome of a send through a parking middleware (redismw.Park): the send failed and
// the message was kept for a resend ([ParkedError]), or it could not be kept
// ([ParkFailedError]). They live here, beside the send chain, so a middleware that tells
// the outcomes apart (prommw.SendMetrics) does not reach the parking store's client.

// ErrParked is matched by every [*ParkedError] (errors.Is(err, ErrParked)): the send
// failed, and the message was kept for a later resend.
var ErrParked = errors.New("send failed; message parked for resend")

// ParkedError is what a send through a parking middleware (redismw.Park) returns when
// the send failed with a retriable error and the message was kept: in Redis (Spooled false) or, Redis being unreachable
// too, in the local spool file (Spooled true). The message was not lost; the retry task
// resends it. errors.Is(err, ErrParked) is true; Unwrap gives the send's error.
type ParkedError struct {
	// RecordID is the parked record's ID (redismw.ParkedRecord.ID).
	RecordID string
	// Topic is the message's topic.
	Topic string
	// Spooled is true when the record went to the spool file because Redis failed; it
	// reaches Redis on the next spool drain.
	Spooled bool
	// RedisErr is the Redis error that made the record go to the spool (nil when not spooled).
	RedisErr error
	// Cause is the send's error.
	Cause error
}

// Error returns "middleware: send to topic T failed; parked as record ID[ in the local
// spool]: <cause>".
func (e *ParkedError) Error() string {
	where := ""
	if e.Spooled {
		where = " in the local spool (redis: " + fmt.Sprint(e.RedisErr) + ")"
	}
	return fmt.Sprintf("middleware: send to topic %q failed; parked as record %s%s: %v", e.Topic, e.RecordID, where, e.Cause)
}

// Unwrap returns Cause.
func (e *ParkedError) Unwrap() error { return e.Cause }

// Is reports whether target is ErrParked.
func (e *ParkedError) Is(target error) bool { return target == ErrParked }

// ParkFailedError is returned when a retriable send failure could be neither parked in
// Redis nor spooled (no SpoolPath, or the spool write failed too): the message is NOT
// kept, and the caller must handle it. Unwrap gives both the send's error and the park
// error.
type ParkFailedError struct {
	// Topic is the message's topic.
	Topic string
	// Cause is the send's error.
	Cause error
	// Err is why parking failed (the Redis error, joined with the spool error if any).
	Err error
}

// Error returns "middleware: send to topic T failed and could not be parked: <err>; send
// error: <cause>".
func (e *ParkFailedError) Error() string {
	return fmt.Sprintf("middleware: send to topic %q failed and could not be parked: %v; send error: %v", e.Topic, e.Err, e.Cause)
}

// Unwrap returns Cause and Err.
func (e *ParkFailedError) Unwrap() []error { return []error{e.Cause, e.Err} }
