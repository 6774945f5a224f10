package remoting

import (
	"errors"
	"fmt"
	"strings"
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

// ResponseError is a server's non-success answer: the one error type for "the broker
// (or name server) answered, and the answer was no". The producer, the consumers and
// admin return it, wrapped with their context, so a caller finds the answer with
//
//	var re *remoting.ResponseError
//	if errors.As(err, &re) { ... re.Code, re.Remark, re.Retryable() ... }
//
// Transport failures (no answer) are not ResponseErrors: they are [*ConnError],
// [ErrTimeout] or [ErrClosed]. [RemotingCommand.ResponseErr] makes one with Code and
// Remark only; [RemotingCommand.ResponseErrFor] fills in the request and the server too.
type ResponseError struct {
	// Code is the answer's response code, never SUCCESS (0).
	Code ResponseCode
	// Remark is the server's error text for Code.
	Remark string
	// Request is the refused request, e.g. SEND_MESSAGE_V2 (310); 0 when not known.
	Request RequestCode
	// Broker is the answering broker's name; "" when not known or for a name server.
	Broker string
	// Addr is the answering server's "ip:port"; "" when not known.
	Addr string
}

// Error implements error: "remoting: <request> to <broker> (<addr>): response code
// <n> (<NAME>): <remark>", leaving out the parts that are not known.
func (e *ResponseError) Error() string {
	var b strings.Builder
	b.WriteString("remoting: ")
	if e.Request != 0 {
		b.WriteString(e.Request.String())
		b.WriteByte(' ')
	}
	switch {
	case e.Broker != "" && e.Addr != "":
		fmt.Fprintf(&b, "to %s (%s): ", e.Broker, e.Addr)
	case e.Broker != "":
		fmt.Fprintf(&b, "to %s: ", e.Broker)
	case e.Addr != "":
		fmt.Fprintf(&b, "to %s: ", e.Addr)
	case e.Request != 0:
		b.WriteString("refused: ")
	}
	fmt.Fprintf(&b, "response code %d (%s): %s", int16(e.Code), e.Code, e.Remark)
	return b.String()
}

// Retryable reports whether the same request may succeed later or on another broker:
// Code.Retryable(), i.e. SYSTEM_ERROR (1), SYSTEM_BUSY (2), SERVICE_NOT_AVAILABLE (14),
// NO_PERMISSION (16) or TOPIC_NOT_EXIST (17). The producer retries exactly these.
func (e *ResponseError) Retryable() bool { return e.Code.Retryable() }
