package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A steady-rate run (sluice bench produce --rate) sends at a fixed rate below
// saturation, as the OpenMessaging Benchmark does, and reports the latency users feel
// there: the send latency (from the moment a message was due to its acknowledgement)
// and the end-to-end latency (from the moment it was due to the moment a consumer's
// handler got it). Both are measured from the due time, not from the call, so a sender
// that falls behind its schedule shows the wait in its figures instead of hiding it
// (coordinated omission).

// Limits of --rate.
const (
	MaxRate      = 10_000_000 // msg/s
	MaxRateSpecs = 16
	// rateBodyMin is the smallest body of a rate run: 8 bytes of sequence number and 8 of
	// due time (Unix nanoseconds).
	rateBodyMin = 16
	// DefaultRateWindow is the most sends in flight per producer of a rate run (and of its
	// saturation run) when --inflight is not given.
	DefaultRateWindow = 64
)

// RateSpec is one rate of a --rate run: PerSec messages per second, or, when Fraction
// is above 0, that fraction of the target's saturation measured first.
type RateSpec struct {
	PerSec   float64
	Fraction float64
}

// String is the spec as --rate spells it.
func (r RateSpec) String() string {
	if r.Fraction > 0 {
		return strconv.FormatFloat(r.Fraction*100, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(r.PerSec, 'f', -1, 64)
}

// ParseRates reads --rate: a comma-separated list of at most 16 rates, each messages per
// second ("20000", "20k", "1.5k") or a percentage of the target's measured saturation
// ("50%"). Errors name the entry and the limit: a rate outside (0, 10000000] msg/s, a
// percentage outside (0, 100], an empty entry, too many entries.
func ParseRates(s string) ([]RateSpec, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("--rate: empty; want msg/s (20000, 20k) or percentages of saturation (50%,80%)")
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxRateSpecs {
		return nil, fmt.Errorf("--rate %q: %d rates, at most %d", s, len(parts), MaxRateSpecs)
	}
	out := make([]RateSpec, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		switch {
		case strings.HasSuffix(p, "%"):
			v, err := strconv.ParseFloat(strings.TrimSuffix(p, "%"), 64)
			if err != nil || !(v > 0 && v <= 100) {
				return nil, fmt.Errorf("--rate %q: %q is not a percentage in (0, 100]", s, p)
			}
			out = append(out, RateSpec{Fraction: v / 100})
		default:
			num, mult := p, 1.0
			if strings.HasSuffix(num, "k") || strings.HasSuffix(num, "K") {
				num, mult = num[:len(num)-1], 1000
			}
			v, err := strconv.ParseFloat(num, 64)
			v *= mult
			if err != nil || !(v > 0 && v <= MaxRate) {
				return nil, fmt.Errorf("--rate %q: %q is not a rate in (0, %d] msg/s", s, p, MaxRate)
			}
			out = append(out, RateSpec{PerSec: v})
		}
	}
	return out, nil
}

// needsSaturation reports whether any spec is a fraction of saturation.
func needsSaturation(specs []RateSpec) bool {
	for _, r := range specs {
		if r.Fraction > 0 {
			return true
		}
	}
	return false
}

// resolve returns the msg/s of spec for a target whose saturation is sat msg/s.
func (r RateSpec) resolve(sat float64) float64 {
	if r.Fraction > 0 {
		return r.Fraction * sat
	}
	return r.PerSec
}

// rateMessages returns how many messages a rate run of perSec sends: messages when
// given, else perSec × duration, at least 1.
func rateMessages(perSec float64, messages int64, duration time.Duration) int64 {
	if messages > 0 {
		return messages
	}
	return max(1, int64(perSec*duration.Seconds()))
}

// dueAt returns when message seq (1-based) of a run started at start with perSec msg/s
// is due: start + (seq-1)/perSec.
func dueAt(start time.Time, seq int64, perSec float64) time.Time {
	return start.Add(time.Duration(float64(seq-1) * float64(time.Second) / perSec))
}

// putStamp writes seq and the due time into the first 16 bytes of body; readStamp reads
// them back (ok false for a body too short).
func putStamp(body []byte, seq int64, due time.Time) {
	binary.BigEndian.PutUint64(body, uint64(seq))
	binary.BigEndian.PutUint64(body[8:], uint64(due.UnixNano()))
}

func readStamp(body []byte) (seq int64, due time.Time, ok bool) {
	if len(body) < rateBodyMin {
		return 0, time.Time{}, false
	}
	return int64(binary.BigEndian.Uint64(body)), time.Unix(0, int64(binary.BigEndian.Uint64(body[8:]))), true
}

// e2eSink is the consumer side of a rate run: each handled body's end-to-end latency
// goes into one histogram, each timed message (sequence 1..n) is counted once, and
// warm-up messages (negative sequence numbers) are counted apart. Safe for concurrent
// use; its memory is one flag per timed message plus a fixed-size histogram.
type e2eSink struct {
	n        int64
	seen     []atomic.Bool
	distinct atomic.Int64
	dups     atomic.Int64
	warm     atomic.Int64
	mu       sync.Mutex
	hist     Histogram
	all      chan struct{} // closed once every timed message was handled
	allOnce  sync.Once
	warmWant int64
	warmDone chan struct{} // closed once warmWant warm-up messages were handled
	warmOnce sync.Once
	allAt    atomic.Int64 // Unix ns when the last timed message was handled
	now      func() time.Time
}

func newE2ESink(n, warmups int64) *e2eSink {
	s := &e2eSink{n: n, seen: make([]atomic.Bool, n), all: make(chan struct{}), warmWant: warmups,
		warmDone: make(chan struct{}), now: time.Now}
	if warmups <= 0 {
		s.warmOnce.Do(func() { close(s.warmDone) })
	}
	return s
}

// handle records one consumed body.
func (s *e2eSink) handle(body []byte) {
	now := s.now()
	seq, due, ok := readStamp(body)
	switch {
	case !ok:
		s.dups.Add(1) // not ours: counted with the duplicates
	case seq < 0:
		if s.warm.Add(1) == s.warmWant {
			s.warmOnce.Do(func() { close(s.warmDone) })
		}
	case seq == 0 || seq > s.n || !s.seen[seq-1].CompareAndSwap(false, true):
		s.dups.Add(1)
	default:
		s.mu.Lock()
		s.hist.Record(now.Sub(due))
		s.mu.Unlock()
		if s.distinct.Add(1) == s.n {
			s.allAt.Store(now.UnixNano())
			s.allOnce.Do(func() { close(s.all) })
		}
	}
}

// histogram returns a copy of the end-to-end histogram.
func (s *e2eSink) histogram() Histogram {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hist
}

// rateRig is one target set up for a rate run: producers (asynchronous senders) and a
// consumer already subscribed to the same fresh topic, handing every body to the sink.
type rateRig struct {
	asyncs []asyncSendFunc
	close  func() error // stops the consumer and the producers, deletes the topic
}

// rigMaker sets a target up for one rate run whose consumer hands bodies to onBody.
type rigMaker func(ctx context.Context, cfg *Config, onBody func([]byte)) (*rateRig, error)

// RateResult is one steady-rate run of one target.
type RateResult struct {
	// Target is the target's name; Spec the rate asked for; PerSec the rate it resolved
	// to (the spec's, or its fraction of Saturation).
	Target     string
	Spec       RateSpec
	PerSec     float64
	Saturation float64
	// Result holds what was sent: Messages acknowledged, Elapsed from the first due time
	// to the last acknowledgement, Latency the send latency from each message's due time,
	// CPU of client and server in that window.
	Result *Result
	// EndToEnd is each timed message's latency from its due time to its handler, once
	// per message; Duplicates counts the messages handled again.
	EndToEnd   Histogram
	Duplicates int64
	// Consumed is the time from the first message's due time until the consumer had
	// handled every timed message.
	Consumed time.Duration
}

// runRate sends n messages through rig at perSec msg/s, spread over the rig's senders
// (each with a window of cfg.Inflight sends in flight), after cfg.Warmup untimed
// messages have gone through to the consumer, then waits (up to drainWait) until the
// consumer has handled every timed message once. Errors: a failed send, a warm-up or
// drain that does not complete in time (saying how many arrived), ctx ending.
func runRate(ctx context.Context, cfg *Config, mk rigMaker, perSec float64, n int64, drainWait time.Duration) (*RateResult, error) {
	warmups := int64(max(cfg.Warmup, 0))
	sink := newE2ESink(n, warmups)
	rig, err := mk(ctx, cfg, sink.handle)
	if err != nil {
		return nil, err
	}
	res, err := func() (*RateResult, error) {
		if warmups > 0 {
			pl := plan{messages: warmups, inflight: cfg.Inflight, phase: "warmup", rate: 1e6, seqSign: -1}
			if _, err := driveRate(ctx, cfg, rig.asyncs, pl); err != nil {
				return nil, fmt.Errorf("bench: warm-up: %w", err)
			}
			if err := waitFor(ctx, sink.warmDone, 60*time.Second); err != nil {
				return nil, fmt.Errorf("bench: warm-up: the consumer handled %d of %d warm-up messages: %w", sink.warm.Load(), warmups, err)
			}
		}
		var meter cpuMeter
		meter.start(cfg.ServerPid)
		sendStart := time.Now()
		r, err := driveRate(ctx, cfg, rig.asyncs, plan{messages: n, inflight: cfg.Inflight, phase: "rate", rate: perSec, seqSign: 1})
		if err != nil {
			return nil, err
		}
		if err := waitFor(ctx, sink.all, drainWait); err != nil {
			return nil, fmt.Errorf("bench: the consumer handled %d of %d messages: %w", sink.distinct.Load(), n, err)
		}
		meter.stop(r) // CPU of sending and consuming every message
		return &RateResult{PerSec: perSec, Result: r, EndToEnd: sink.histogram(), Duplicates: sink.dups.Load(),
			Consumed: time.Unix(0, sink.allAt.Load()).Sub(sendStart)}, nil
	}()
	if cerr := rig.close(); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// errDeadline is waitFor's error when the wait ran out.
var errDeadline = errors.New("gave up waiting")

// waitFor waits until ch is closed, ctx ends (its error) or d passes (errDeadline).
func waitFor(ctx context.Context, ch <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("%w after %v", errDeadline, d)
	}
}

// driveRate is driveAsync at a steady rate: message seq (1..plan.messages, shared by
// every sender) is due at start + (seq-1)/plan.rate and is sent then, or as soon as
// its sender has a free slot of its window of plan.inflight; its body carries
// plan.seqSign × seq and the due time. Latency is recorded from the due time. The first
// failure stops every sender.
func driveRate(ctx context.Context, cfg *Config, senders []asyncSendFunc, p plan) (*Result, error) {
	r, ctx := startRun(ctx, cfg, p)
	defer r.cancel()
	type slot struct {
		body []byte
		seq  int64
		due  time.Time
	}
	for _, send := range senders {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			slots := make(chan *slot, p.inflight)
			for range p.inflight {
				slots <- &slot{body: makeBody(cfg.Size)}
			}
			var (
				hmu   sync.Mutex
				h     Histogram
				bytes int64
			)
			pace := time.NewTimer(time.Hour)
			pace.Stop()
			defer func() {
				pace.Stop()
				for range p.inflight {
					<-slots
				}
				r.mu.Lock()
				r.res.Latency.Merge(&h)
				r.res.Bytes += bytes
				r.mu.Unlock()
			}()
			for !r.stop.Load() {
				seq := r.next.Add(1)
				if seq > p.messages {
					return
				}
				due := dueAt(r.start, seq, p.rate)
				if d := time.Until(due); d > 0 {
					pace.Reset(d)
					select {
					case <-pace.C:
					case <-ctx.Done():
						return
					}
				}
				var sl *slot
				select {
				case sl = <-slots:
				case <-ctx.Done():
					return
				}
				sl.seq, sl.due = seq, due
				putStamp(sl.body, p.seqSign*seq, due)
				err := send(ctx, sl.body, func(err error) {
					if err != nil {
						r.fail(fmt.Errorf("send %d: %w", sl.seq, err))
					} else {
						d := time.Since(sl.due)
						hmu.Lock()
						h.Record(d)
						bytes += int64(len(sl.body))
						hmu.Unlock()
						cfg.Progress.Add(1)
					}
					slots <- sl
				})
				if err != nil {
					r.fail(fmt.Errorf("send %d: %w", seq, err))
					slots <- sl
					return
				}
			}
		}()
	}
	return r.finish(ctx)
}
