package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// rateTarget is what a --rate run needs of one target: its saturation run (the
// target's async produce) and its rig.
type rateTarget struct {
	name     string
	saturate func(ctx context.Context, cfg Config) (*Result, error)
	rig      rigMaker
}

// runRates is sluice bench produce --rate: for each target in turn, its saturation
// (sent and consumed, see below) when a spec is a percentage, then one
// steady-rate run per spec, each on a fresh topic with its own consumer; then a table
// of every run's send and end-to-end p50/p99/p99.9.
func runRates(ctx context.Context, o Options, s *benchSetup, targets []string) error {
	specs, err := ParseRates(o.Rate)
	if err != nil {
		return err
	}
	switch {
	case s.cfg.Size < rateBodyMin:
		return fmt.Errorf("--size %d: --rate needs at least %d bytes (sequence number and due time)", s.cfg.Size, rateBodyMin)
	case o.Repeat > 1:
		return errors.New("--rate and --repeat: pick one")
	case o.changed("mode") && s.cfg.Mode != ModeAsync || o.changed("async"):
		return errors.New("--rate sends asynchronously (a window of --inflight per producer); --mode and --async do not apply")
	}
	if !o.changed("inflight") {
		s.cfg.Inflight = DefaultRateWindow
	}
	s.cfg.Async, s.cfg.Mode = true, ModeAsync
	s.cfg.ConsumeGoroutines = 20
	if s.cfg.Messages == 0 && s.cfg.Duration == 0 {
		s.cfg.Duration = DefaultDuration
	}
	out := o.Out
	brokerStarted, kafkaStarted := false, false
	var all []*RateResult
	for _, tgt := range targets {
		cfg := s.cfg
		var rt rateTarget
		switch tgt {
		case TargetSluice:
			if !brokerStarted {
				if err := s.startBroker(out); err != nil {
					return err
				}
				brokerStarted = true
			}
			cfg = s.cfg
			rt = rateTarget{TargetSluice, Produce, sluiceRig}
		case TargetJetStream:
			cfg.ServerPid = 0
			if pid, perr := natsPid(cfg.NatsURL); perr == nil {
				cfg.ServerPid = pid
			}
			rt = rateTarget{TargetJetStream, ProduceJetStream, jetStreamRig}
		case TargetKafka, TargetKafkaFranz:
			if !kafkaStarted {
				ks := *s
				if err := ks.startKafka(o, out); err != nil {
					return err
				}
				s.kfake, s.cfg.KafkaBrokers, kafkaStarted = ks.kfake, ks.cfg.KafkaBrokers, true
			}
			cfg.KafkaBrokers, cfg.ServerPid = s.cfg.KafkaBrokers, 0
			rt = rateTarget{TargetKafka, ProduceKafka, kafkaRig}
			if tgt == TargetKafkaFranz {
				rt = rateTarget{TargetKafkaFranz, ProduceKafkaFranz, franzRig}
			}
		}
		cfg.setDefaults()
		var sat float64
		if needsSaturation(specs) {
			// Saturation is the rate the target sends and its consumer keeps up with: first
			// the producer alone (as bench produce --async) sizes the run, then the same
			// count goes out unpaced with the consumer attached, and the saturation is the
			// count over the time until the consumer has handled all of it.
			fmt.Fprintf(out, "%s: saturation, producer alone\n", s.describe(tgt))
			r, err := rt.saturate(ctx, cfg)
			if err != nil {
				return fmt.Errorf("%s saturation: %w", tgt, err)
			}
			s.bar.finish()
			printProduce(out, r)
			n := rateMessages(r.MsgPerSec(), cfg.Messages, cfg.Duration)
			fmt.Fprintf(out, "%s saturation with the consumer attached: %d messages unpaced, window %d per producer\n", tgt, n, cfg.Inflight)
			rr, err := runRate(ctx, &cfg, rt.rig, MaxRate, n, max(time.Minute, 2*cfg.Duration))
			if err != nil {
				return fmt.Errorf("%s saturation: %w", tgt, err)
			}
			s.bar.finish()
			sat = float64(n) / max(rr.Consumed.Seconds(), 1e-9)
			fmt.Fprintf(out, "  saturation %.0f msg/s sent and consumed (all %d handled %v after the first send; producer alone %.0f msg/s)\n",
				sat, n, rr.Consumed.Round(time.Millisecond), r.MsgPerSec())
			printCPU(out, rr.Result)
		}
		for _, spec := range specs {
			perSec := spec.resolve(sat)
			n := rateMessages(perSec, cfg.Messages, cfg.Duration)
			fmt.Fprintf(out, "%s rate %s: %.0f msg/s, %d messages of %d bytes, %d producer(s) x window %d, consumer on the same fresh topic\n",
				tgt, spec, perSec, n, cfg.Size, cfg.Producers, cfg.Inflight)
			drainWait := max(30*time.Second, time.Duration(float64(n)/perSec*float64(time.Second)))
			rr, err := runRate(ctx, &cfg, rt.rig, perSec, n, drainWait)
			if err != nil {
				return fmt.Errorf("%s rate %s: %w", tgt, spec, err)
			}
			s.bar.finish()
			rr.Target, rr.Spec, rr.Saturation = tgt, spec, sat
			rr.Result.Target = tgt
			printRate(out, rr)
			all = append(all, rr)
		}
	}
	printRateTable(out, all)
	return nil
}

// printRate prints one rate run.
func printRate(out io.Writer, rr *RateResult) {
	r := rr.Result
	fmt.Fprintf(out, "  sent       %d messages in %v: %.0f msg/s of %.0f asked\n", r.Messages, r.Elapsed.Round(time.Millisecond), r.MsgPerSec(), rr.PerSec)
	fmt.Fprintf(out, "  send       %s\n", quantiles(&r.Latency))
	fmt.Fprintf(out, "  end-to-end %s, %d duplicate(s)\n", quantiles(&rr.EndToEnd), rr.Duplicates)
	printCPU(out, r)
}

// quantiles formats p50, p99, p99.9 and max of h.
func quantiles(h *Histogram) string {
	return fmt.Sprintf("p50 %v, p99 %v, p99.9 %v, max %v", roundLat(h.Quantile(0.5)), roundLat(h.Quantile(0.99)), roundLat(h.Quantile(0.999)), roundLat(h.Max()))
}

// printRateTable prints every rate run of a --rate run in one table.
func printRateTable(out io.Writer, all []*RateResult) {
	if len(all) == 0 {
		return
	}
	fmt.Fprintln(out, "summary (latencies from each message's due time):")
	fmt.Fprintf(out, "  %-11s %-6s %9s %9s | %9s %9s %9s | %9s %9s %9s\n", "target", "rate", "msg/s", "achieved", "send p50", "p99", "p99.9", "e2e p50", "p99", "p99.9")
	for _, rr := range all {
		s, e := &rr.Result.Latency, &rr.EndToEnd
		fmt.Fprintf(out, "  %-11s %-6s %9.0f %9.0f | %9v %9v %9v | %9v %9v %9v\n", rr.Target, rr.Spec, rr.PerSec, rr.Result.MsgPerSec(),
			roundLat(s.Quantile(0.5)), roundLat(s.Quantile(0.99)), roundLat(s.Quantile(0.999)),
			roundLat(e.Quantile(0.5)), roundLat(e.Quantile(0.99)), roundLat(e.Quantile(0.999)))
	}
}
