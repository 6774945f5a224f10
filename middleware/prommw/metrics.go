// Package prommw exports Prometheus metrics for both middleware shapes: [Metrics] counts consume calls, messages, results and the steps' reasons; [SendMetrics] counts sends by outcome (ok, error, parked, spooled). It imports the Prometheus client, which the SDK core never does.
package prommw

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Metric names registered by [Metrics] and [SendMetrics].
const (
	MetricConsumeCalls    = "sluice_consume_calls_total"      // counter{result}: chain calls (batches)
	MetricConsumeMessages = "sluice_consume_messages_total"   // counter{result}: messages in those calls
	MetricConsumeReasons  = "sluice_consume_reasons_total"    // counter{reason}: reasons noted inside (Reason values)
	MetricConsumeDuration = "sluice_consume_duration_seconds" // histogram: time in the rest of the chain per call
	MetricSendTotal       = "sluice_send_total"               // counter{result}: sends by outcome
	MetricSendDuration    = "sluice_send_duration_seconds"    // histogram: time in the rest of the send chain
)

// register registers c, or returns the collector already registered under the same
// descriptor (so several consumers can share one registry).
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// Metrics returns a consume middleware that records, with Prometheus:
//
//   - sluice_consume_calls_total{result}: calls of the rest of the chain, result
//     "CONSUME_SUCCESS" or "RECONSUME_LATER" (a non-nil error counts as the latter);
//   - sluice_consume_messages_total{result}: the messages of those calls;
//   - sluice_consume_reasons_total{reason}: reasons noted by the steps inside
//     (duplicate, lock_held, lock_lost, renew_failed, redis_unavailable, fail_open,
//     marker_not_saved, no_key, panic);
//   - sluice_consume_duration_seconds: a histogram of the time spent in the rest of the
//     chain per call (prometheus.DefBuckets, seconds).
//
// reg nil means prometheus.DefaultRegisterer. Calling Metrics again with the same registry
// reuses the registered collectors. It fails when a different collector already uses one
// of the names.
func Metrics(reg prometheus.Registerer) (middleware.ConsumeMiddleware, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	calls, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricConsumeCalls, Help: "Consume handler chain calls (batches), by result.",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	msgsC, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricConsumeMessages, Help: "Messages passed to the consume handler chain, by result.",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	reasons, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricConsumeReasons, Help: "Outcomes noted by reliability middleware (dedup, progress, recover), by reason.",
	}, []string{"reason"}))
	if err != nil {
		return nil, err
	}
	dur, err := register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: MetricConsumeDuration, Help: "Time spent in the consume handler chain per call, in seconds.",
		Buckets: prometheus.DefBuckets,
	}))
	if err != nil {
		return nil, err
	}
	okCalls, laterCalls := calls.WithLabelValues(message.ConsumeSuccess.String()), calls.WithLabelValues(message.ReconsumeLater.String())
	okMsgs, laterMsgs := msgsC.WithLabelValues(message.ConsumeSuccess.String()), msgsC.WithLabelValues(message.ReconsumeLater.String())
	return func(next middleware.ConsumeFunc) middleware.ConsumeFunc {
		return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			ctx, rep := middleware.WithReport(ctx)
			start := time.Now()
			res, err := next(ctx, msgs)
			dur.Observe(time.Since(start).Seconds())
			if err == nil && res == message.ConsumeSuccess {
				okCalls.Inc()
				okMsgs.Add(float64(len(msgs)))
			} else {
				laterCalls.Inc()
				laterMsgs.Add(float64(len(msgs)))
			}
			for _, r := range rep.Reasons() {
				reasons.WithLabelValues(string(r)).Inc()
			}
			return res, err
		}
	}, nil
}

// Send outcomes, the "result" label of sluice_send_total.
const (
	SendResultOK        = "ok"         // stored by the broker
	SendResultError     = "error"      // failed and returned (not retriable, or no Park inside)
	SendResultParked    = "parked"     // failed and parked in Redis
	SendResultSpooled   = "spooled"    // failed and written to the local spool
	SendResultNotParked = "not_parked" // failed, retriable, and could not be parked
)

// SendMetrics returns a send middleware that records sluice_send_total{result} (ok,
// error, parked, spooled, not_parked — see the SendResult constants; put it outside
// redismw.Park to tell parked sends apart) and sluice_send_duration_seconds (a histogram of the
// time in the rest of the send chain). reg nil means prometheus.DefaultRegisterer;
// repeated calls reuse the registered collectors.
func SendMetrics(reg prometheus.Registerer) (middleware.SendMiddleware, error) {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	total, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricSendTotal, Help: "Sends by outcome (ok, error, parked, spooled, not_parked).",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	dur, err := register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: MetricSendDuration, Help: "Time spent in the send chain per send, in seconds.",
		Buckets: prometheus.DefBuckets,
	}))
	if err != nil {
		return nil, err
	}
	return func(next middleware.SendFunc) middleware.SendFunc {
		return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
			start := time.Now()
			res, err := next(ctx, msg)
			dur.Observe(time.Since(start).Seconds())
			total.WithLabelValues(sendOutcome(err)).Inc()
			return res, err
		}
	}, nil
}

func sendOutcome(err error) string {
	if err == nil {
		return SendResultOK
	}
	var pe *middleware.ParkedError
	if errors.As(err, &pe) {
		if pe.Spooled {
			return SendResultSpooled
		}
		return SendResultParked
	}
	var pf *middleware.ParkFailedError
	if errors.As(err, &pf) {
		return SendResultNotParked
	}
	return SendResultError
}
