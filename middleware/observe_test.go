package middleware

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/message"
)

func TestRecover(t *testing.T) {
	sentinel := errors.New("sentinel")
	for _, v := range []any{"plain", sentinel} {
		h := ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			panic(v)
		}, Recover())
		res, err, reasons := call(h, newExt("T", "", "k", "b"))
		var pe *PanicError
		if res != message.ReconsumeLater || !errors.As(err, &pe) || pe.Value != v || !hasReason(reasons, ReasonPanic) {
			t.Fatalf("%v: %v %v %v", v, res, err, reasons)
		}
		if !strings.Contains(err.Error(), "observe_test.go") || !strings.Contains(err.Error(), "handler panic") {
			t.Fatalf("no stack in %q", err.Error())
		}
		if (v == sentinel) != errors.Is(err, sentinel) {
			t.Fatalf("Unwrap of %v", v)
		}
	}
	ok := ChainConsume(newEffects().okHandler(), Recover())
	if res, err, _ := call(ok, newExt("T", "", "k", "b")); res != message.ConsumeSuccess || err != nil {
		t.Fatal(res, err)
	}
}

func TestLoggingLevelsAndFields(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		buf.Reset()
		d := newDeduper(t, tg.Client, tg.NS, nil)
		fail := errors.New("db down")
		n := 0
		h := ChainConsume(func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
			if n++; n == 1 {
				return message.ReconsumeLater, fail
			}
			return message.ConsumeSuccess, nil
		}, Logging(l), d.Middleware(), Recover())
		msg := newExt("Pay", "paid", "order-9", "b")
		for i := 0; i < 3; i++ {
			call(h, msg)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d log lines: %s", len(lines), buf.String())
		}
		for i, want := range []string{
			`"level":"WARN"`, `"level":"DEBUG"`, `"level":"INFO"`,
		} {
			if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], `"key":"order-9"`) ||
				!strings.Contains(lines[i], `"topic":"Pay"`) || !strings.Contains(lines[i], `"duration"`) {
				t.Fatalf("line %d: %s", i, lines[i])
			}
		}
		if !strings.Contains(lines[0], `"result":"RECONSUME_LATER"`) || !strings.Contains(lines[0], `"error":"db down"`) {
			t.Fatalf("failure line: %s", lines[0])
		}
		if !strings.Contains(lines[2], `"reasons":["duplicate"]`) || !strings.Contains(lines[2], `"result":"CONSUME_SUCCESS"`) {
			t.Fatalf("duplicate line: %s", lines[2])
		}
	})
	// Disabled levels cost nothing and change nothing.
	quiet := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	if res, err, _ := call(ChainConsume(newEffects().okHandler(), Logging(quiet)), newExt("T", "", "k", "b")); res != message.ConsumeSuccess || err != nil {
		t.Fatal(res, err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	mw, err := Metrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Metrics(reg); err != nil { // a second consumer on the same registry
		t.Fatalf("second Metrics: %v", err)
	}
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		d := newDeduper(t, tg.Client, tg.NS, nil)
		other := redistest.Dial(t, tg.Addr)
		h := ChainConsume(newEffects().okHandler(), mw, d.Middleware(), Recover())
		call(h, newExt("T", "", "a", "1"))                            // success
		call(h, newExt("T", "", "a", "1"))                            // duplicate
		call(h, newExt("T", "", "b", "2"), newExt("T", "", "c", "3")) // batch of two, success
		other.Set(context.Background(), d.LockKey("held"), "x", 0)
		call(h, newExt("T", "", "held", "4")) // lock held elsewhere
	})
	runs := 1 // one pass per redis target
	if redistestAddr() != "" {
		runs = 2
	}
	check := func(name string, labels prometheus.Labels, want float64) {
		t.Helper()
		c, err := counterValue(reg, name, labels)
		if err != nil || c != want {
			t.Fatalf("%s%v = %v (%v), want %v", name, labels, c, err, want)
		}
	}
	r := float64(runs)
	check(MetricConsumeCalls, prometheus.Labels{"result": "CONSUME_SUCCESS"}, 3*r)
	check(MetricConsumeCalls, prometheus.Labels{"result": "RECONSUME_LATER"}, 1*r)
	check(MetricConsumeMessages, prometheus.Labels{"result": "CONSUME_SUCCESS"}, 4*r)
	check(MetricConsumeReasons, prometheus.Labels{"reason": "duplicate"}, 1*r)
	check(MetricConsumeReasons, prometheus.Labels{"reason": "lock_held"}, 1*r)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var samples uint64
	for _, mf := range mfs {
		if mf.GetName() == MetricConsumeDuration {
			samples = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if samples != uint64(4*runs) {
		t.Fatalf("duration histogram has %d samples, want %d", samples, 4*runs)
	}

	// A different collector under one of the names is an error, not a panic.
	bad := prometheus.NewRegistry()
	bad.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricConsumeCalls, Help: "x"}))
	if _, err := Metrics(bad); err == nil {
		t.Fatal("conflicting registration accepted")
	}
}

func TestSendMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	sm, err := SendMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	redistest.EachTarget(t, func(t *testing.T, tg *redistest.Target) {
		p := newParker(t, tg.Client, tg.NS, nil)
		for _, cause := range []error{nil, errors.New("timeout"), &message.ValidationError{Field: "body", Reason: "empty"}} {
			send := ChainSend(func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
				if cause != nil {
					return nil, cause
				}
				return &message.SendResult{}, nil
			}, sm, Keys(), p.Middleware())
			send(context.Background(), message.NewMessage("T", []byte("b")))
		}
	})
	r := 1.0
	if redistestAddr() != "" {
		r = 2
	}
	for result, want := range map[string]float64{SendResultOK: r, SendResultParked: r, SendResultError: r} {
		if c, err := counterValue(reg, MetricSendTotal, prometheus.Labels{"result": result}); err != nil || c != want {
			t.Fatalf("%s = %v (%v), want %v", result, c, err, want)
		}
	}
	for err, want := range map[error]string{
		&ParkedError{Spooled: true}: SendResultSpooled,
		&ParkFailedError{}:          SendResultNotParked,
	} {
		if got := sendOutcome(err); got != want {
			t.Fatalf("%T: %s", err, got)
		}
	}
}

func redistestAddr() string { return os.Getenv(redistest.EnvAddr) }

// counterValue reads one counter series from reg.
func counterValue(reg *prometheus.Registry, name string, labels prometheus.Labels) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue(), nil
		}
	}
	return 0, errors.New("series not found")
}
