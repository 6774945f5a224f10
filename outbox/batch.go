package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sluicemq/sluice/message"
)

// BatchSendFunc sends several messages, each as a SendFunc would, in as few requests as
// the transport can, and returns one error per message in msgs' order: nil means the
// broker stored that message. The relay ([RelayConfig].SendBatch) never passes two
// messages of one order key in one call, so the function may send msgs in any order and
// concurrently; it must not return before every message it reports as stored was
// acknowledged, and it should return when ctx ends (messages not acknowledged by then
// are reported with an error; they may still arrive, and are sent again under the same
// key). It must not keep msgs (the slice) after it returns: the relay reuses it.
// Implementations: Sluice's (*producer.Producer).SendEach, and [AsyncBatch] over a
// SendAsync (kafka's or Sluice's producer).
type BatchSendFunc func(ctx context.Context, msgs []*message.Message) []error

// AsyncSendFunc queues msg and returns; cb runs once with the outcome (a nil error: the
// broker stored msg). An error returned by the call itself means msg was not queued and
// cb will not run. kafka's and Sluice's Producer.SendAsync have this form.
type AsyncSendFunc func(ctx context.Context, msg *message.Message, cb func(*message.SendResult, error)) error

// ErrNotAcknowledged is the error AsyncBatch reports for a message whose callback had not
// run when the call's context ended (errors.Is with the context's error works too).
var ErrNotAcknowledged = errors.New("outbox: no acknowledgement")

// AsyncBatch returns a BatchSendFunc that queues every message with send at once and
// waits for their callbacks (or ctx's end). With kafka's Producer.SendAsync the writer
// packs the queued records into produce batches, so a claim of N rows costs about
// N/BatchSize produce requests instead of N synchronous sends. It starts no goroutine.
func AsyncBatch(send AsyncSendFunc) BatchSendFunc {
	return func(ctx context.Context, msgs []*message.Message) []error {
		errs := make([]error, len(msgs))
		answered := make([]bool, len(msgs))
		var mu sync.Mutex
		left := len(msgs)
		over := false // set when the call returns: later callbacks change nothing
		finished := make(chan struct{})
		settle := func(i int, err error) {
			mu.Lock()
			defer mu.Unlock()
			if over || answered[i] {
				return
			}
			answered[i], errs[i] = true, err
			left--
			if left == 0 {
				close(finished)
			}
		}
		defer func() {
			mu.Lock()
			over = true
			mu.Unlock()
		}()
		if len(msgs) == 0 {
			return errs
		}
		for i, m := range msgs {
			i := i
			if err := send(ctx, m, func(_ *message.SendResult, err error) { settle(i, err) }); err != nil {
				settle(i, err)
			}
		}
		select {
		case <-finished:
		case <-ctx.Done():
		}
		mu.Lock()
		defer mu.Unlock()
		over = true
		for i := range errs {
			if !answered[i] {
				errs[i] = fmt.Errorf("%w before %w", ErrNotAcknowledged, ctx.Err())
			}
		}
		return errs
	}
}
