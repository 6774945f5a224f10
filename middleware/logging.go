package middleware

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/message"
)

// Logging returns a consume middleware that logs every call of the rest of the chain with
// log/slog: "key" (the first message's key, KeyOf), "topic", "msgId", "batch" (message
// count), "result" (CONSUME_SUCCESS or RECONSUME_LATER), "duration", "reasons" (what the
// reliability steps inside noted: duplicate, lock_held, lock_lost, ...) and "error".
// Calls that acknowledge without reasons log at Debug, acknowledged calls with reasons at
// Info, calls that come back later (ReconsumeLater or an error) at Warn. A nil logger
// means slog.Default(). Put it outermost so it sees everything inside.
func Logging(logger *slog.Logger) ConsumeMiddleware {
	if logger == nil {
		logger = slog.Default()
	}
	return func(next ConsumeFunc) ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			ctx, rep := WithReport(ctx)
			start := time.Now()
			res, err := next(ctx, msgs)
			if err != nil {
				res = message.ReconsumeLater
			}
			reasons := rep.Reasons()
			level := slog.LevelDebug
			switch {
			case res != message.ConsumeSuccess:
				level = slog.LevelWarn
			case len(reasons) > 0:
				level = slog.LevelInfo
			}
			if !logger.Enabled(ctx, level) {
				return res, err
			}
			attrs := []slog.Attr{
				slog.Int("batch", len(msgs)),
				slog.String("result", res.String()),
				slog.Duration("duration", time.Since(start)),
			}
			if len(msgs) > 0 && msgs[0] != nil {
				attrs = append(attrs, slog.String("key", KeyOf(msgs[0])), slog.String("topic", msgs[0].Topic),
					slog.String("msgId", msgs[0].MsgID))
			}
			if len(reasons) > 0 {
				rs := make([]string, len(reasons))
				for i, r := range reasons {
					rs[i] = string(r)
				}
				attrs = append(attrs, slog.Any("reasons", rs))
			}
			if err != nil {
				attrs = append(attrs, slog.String("error", err.Error()))
			}
			logger.LogAttrs(ctx, level, "consume", attrs...)
			return res, err
		}
	}
}
