package rocketmqv5

import (
	"context"
	"log/slog"

	rmq "github.com/apache/rocketmq-clients/golang/v5"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Listener returns the MessageListener for a PushConsumer (rmq.WithPushMessageListener)
// that converts each delivered message ([FromV5]) and runs h with it as a batch of one —
// typically a handler wrapped by middleware.ChainConsume. ConsumeSuccess with a nil error
// is rmq.SUCCESS (the client acknowledges the message); ReconsumeLater, an error or a
// panic in h is rmq.FAILURE: the client gives the message back with the next delay of the
// retry policy the server's settings name (ChangeInvisibleDuration) and, at the last
// attempt, forwards it to %DLQ%<group> (for FIFO groups it retries locally first). The
// failure is logged to logger (nil: slog.Default()) with the topic, message id and attempt.
//
// h runs with ctx (the listener has no context of its own): cancel it to ask running
// handlers to stop, after the consumer's GracefulStop has stopped receiving.
func Listener(ctx context.Context, h middleware.ConsumeFunc, logger *slog.Logger) *rmq.FuncMessageListener {
	if logger == nil {
		logger = slog.Default()
	}
	return &rmq.FuncMessageListener{Consume: func(mv *rmq.MessageView) rmq.ConsumerResult {
		res, err := middleware.CallRecovered(ctx, h, []*message.MessageExt{FromV5(mv)})
		if err == nil && res == message.ConsumeSuccess {
			return rmq.SUCCESS
		}
		logger.Warn("rocketmqv5: consume handler failed; the message will be delivered again",
			"topic", mv.GetTopic(), "msgId", mv.GetMessageId(), "attempt", mv.GetDeliveryAttempt(), "result", res, "err", err)
		return rmq.FAILURE
	}}
}
