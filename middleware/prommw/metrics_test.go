package prommw

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

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
		d := newDeduper(t, tg)
		other := redistest.Dial(t, tg.Addr)
		h := middleware.ChainConsume(testkit.NewEffects().OK(), mw, d.Middleware(), middleware.Recover())
		testkit.Call(h, testkit.NewExt("T", "", "a", "1"))                                    // success
		testkit.Call(h, testkit.NewExt("T", "", "a", "1"))                                    // duplicate
		testkit.Call(h, testkit.NewExt("T", "", "b", "2"), testkit.NewExt("T", "", "c", "3")) // batch of two, success
		other.Set(context.Background(), d.LockKey("held"), "x", 0)
		testkit.Call(h, testkit.NewExt("T", "", "held", "4")) // lock held elsewhere
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
		p := newParker(t, tg)
		for _, cause := range []error{nil, errors.New("timeout"), &message.ValidationError{Field: "body", Reason: "empty"}} {
			send := middleware.ChainSend(func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
				if cause != nil {
					return nil, cause
				}
				return &message.SendResult{}, nil
			}, sm, middleware.Keys(), p.Middleware())
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
		&middleware.ParkedError{Spooled: true}: SendResultSpooled,
		&middleware.ParkFailedError{}:          SendResultNotParked,
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

func newDeduper(t *testing.T, tg *redistest.Target) *redismw.Deduper {
	t.Helper()
	d, err := redismw.NewDeduper(redismw.DedupConfig{Client: tg.Client, Prefix: "sluice:dedup:" + tg.NS, LockExpiry: 600 * time.Millisecond, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newParker(t *testing.T, tg *redistest.Target) *redismw.Parker {
	t.Helper()
	p, err := redismw.NewParker(redismw.ParkConfig{Client: tg.Client, Namespace: tg.NS, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}
