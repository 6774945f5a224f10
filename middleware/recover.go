package middleware

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/sluicemq/sluice/message"
)

// PanicError is a handler panic turned into an error by [Recover] (and by
// [github.com/sluicemq/sluice/middleware/redismw.Dedup] and
// [github.com/sluicemq/sluice/middleware/redismw.Progress], which must release their lock
// and write the failed marker even when the handler panics).
type PanicError struct {
	// Value is what the handler passed to panic.
	Value any
	// Stack is the panicking goroutine's stack trace (runtime/debug.Stack) at recovery.
	Stack []byte
}

// Error returns "middleware: handler panic: <value>" followed by the stack trace.
func (e *PanicError) Error() string {
	return fmt.Sprintf("middleware: handler panic: %v\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error (panic(err)), else nil.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// Recover returns a consume middleware that turns a panic in the rest of the chain into
// (ReconsumeLater, *PanicError) with the stack trace, so the message is retried instead of
// the consumer crashing, and the middlewares outside it (Logging, Metrics, Dedup) see an
// ordinary failure. Put it innermost, right around the handler.
func Recover() ConsumeMiddleware {
	return func(next ConsumeFunc) ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			return CallRecovered(ctx, next, msgs)
		}
	}
}

// CallRecovered calls next and converts a panic into (ReconsumeLater, *PanicError),
// noting [ReasonPanic]. Steps that must run their own bookkeeping after the handler even
// when it panics (Dedup, Progress, the inbox) call the handler through it.
func CallRecovered(ctx context.Context, next ConsumeFunc, msgs []*message.MessageExt) (res message.ConsumeResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			Note(ctx, ReasonPanic)
			res, err = message.ReconsumeLater, &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return next(ctx, msgs)
}
