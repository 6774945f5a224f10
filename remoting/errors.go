package remoting

import (
	"errors"
	"fmt"
)

// ErrClosed is returned (possibly wrapped in a [*ConnError]) by calls on a [Client],
// [Server] or [Conn] that has been closed, and by pending calls failed by Close.
var ErrClosed = errors.New("remoting: closed")

// ErrTimeout is returned by invoke calls whose context expired (deadline or cancel)
// before the response arrived. The returned error also wraps the context's error, so
// errors.Is(err, context.DeadlineExceeded) or context.Canceled tells which.
// The pending entry for the request has been removed when this error is returned.
var ErrTimeout = errors.New("remoting: invoke timeout")

// HeaderError reports a bad RemotingCommand header: an ext field that is missing or
// does not parse (from the Ext* getters), or a header that cannot be decoded or encoded.
type HeaderError struct {
	Field  string // ext key or header field name, e.g. "queueId", "code", "header"
	Reason string // what is wrong, including the limit where one applies
	Err    error  // underlying error (strconv, encoding/json), may be nil
}

// Error implements error.
func (e *HeaderError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("remoting: header field %q: %s: %v", e.Field, e.Reason, e.Err)
	}
	return fmt.Sprintf("remoting: header field %q: %s", e.Field, e.Reason)
}

// Unwrap returns the underlying error.
func (e *HeaderError) Unwrap() error { return e.Err }

// FrameError reports a frame that violates the remoting frame format (docs/protocol.md §1.1):
// a length field below 4 or above the maximum frame size, a header length beyond the
// frame, an unknown serialize type, or a truncated frame.
type FrameError struct {
	Field  string // "length", "headerLength", "serializeType", "body"
	Reason string // what is wrong, including the limit where one applies
	Err    error  // underlying I/O error for truncated frames, may be nil
}

// Error implements error.
func (e *FrameError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("remoting: frame %s: %s: %v", e.Field, e.Reason, e.Err)
	}
	return fmt.Sprintf("remoting: frame %s: %s", e.Field, e.Reason)
}

// Unwrap returns the underlying error.
func (e *FrameError) Unwrap() error { return e.Err }

// ConnError reports a transport failure on one connection: dial, write, read, or the
// connection closing while a call was waiting for its response. Err is the cause
// ([ErrClosed] when the client, server or connection was closed deliberately).
type ConnError struct {
	Addr string // remote address "ip:port"
	Op   string // "dial", "write", "read", "await response", "close"
	Err  error
}

// Error implements error.
func (e *ConnError) Error() string {
	return fmt.Sprintf("remoting: conn %s: %s: %v", e.Addr, e.Op, e.Err)
}

// Unwrap returns the cause.
func (e *ConnError) Unwrap() error { return e.Err }

// ResponseError is a non-success response turned into an error by
// [RemotingCommand.ResponseErr]; callers decide which codes are errors.
type ResponseError struct {
	Code   ResponseCode
	Remark string
}

// Error implements error.
func (e *ResponseError) Error() string {
	return fmt.Sprintf("remoting: response code %d (%s): %s", int16(e.Code), e.Code, e.Remark)
}
