package lifecycle

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder records the order in which components start and finish shutting down.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

func (r *recorder) comp(name string, err error) Component {
	return ShutdownFunc(func(ctx context.Context) error {
		r.add("start " + name)
		r.add("done " + name)
		return err
	})
}

func TestShutdownOrder(t *testing.T) {
	g, err := New(Config{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	// Registered out of order on purpose.
	must(t, g.AddServer("broker", r.comp("broker", nil)))
	must(t, g.AddExecutor("xxl", r.comp("xxl", nil)))
	must(t, g.AddProducer("producer", r.comp("producer", nil)))
	must(t, g.AddRetryTask("retry", r.comp("retry", nil)))
	must(t, g.AddConsumer("consumer", r.comp("consumer", nil)))
	must(t, g.AddFrontend("console", r.comp("console", nil)))
	if err := g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"start console", "done console", "start consumer", "done consumer", "start retry", "done retry",
		"start producer", "done producer", "start xxl", "done xxl", "start broker", "done broker"}
	if got := r.get(); !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	// A second call returns the first result and does nothing again.
	if err := g.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(r.get()) != len(want) {
		t.Fatalf("second Shutdown ran components again: %v", r.get())
	}
	if err := g.AddProducer("late", r.comp("late", nil)); !errors.Is(err, ErrShutDown) {
		t.Fatalf("Add after Shutdown: %v, want ErrShutDown", err)
	}
}

// Components of one stage stop concurrently: two consumers that each wait for the other
// to have started both finish.
func TestStageRunsConcurrently(t *testing.T) {
	g, _ := New(Config{Logger: testkit.Quiet()})
	var started sync.WaitGroup
	started.Add(2)
	both := make(chan struct{})
	go func() { started.Wait(); close(both) }()
	c := ShutdownFunc(func(ctx context.Context) error {
		started.Done()
		select {
		case <-both:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	must(t, g.AddConsumer("a", c))
	must(t, g.AddConsumer("b", c))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// One deadline for everything: a consumer that never returns is abandoned at the
// deadline, later stages still run (with the expired context), and the error names the
// stuck consumer and the failing producer.
func TestDeadlineAndErrors(t *testing.T) {
	g, _ := New(Config{Logger: testkit.Quiet()})
	release := make(chan struct{})
	stuckDone := make(chan struct{})
	t.Cleanup(func() { close(release); <-stuckDone }) // no goroutine left for goleak
	must(t, g.AddConsumer("stuck", ShutdownFunc(func(ctx context.Context) error {
		defer close(stuckDone)
		<-release // ignores ctx on purpose
		return nil
	})))
	must(t, g.AddConsumer("fine", ShutdownFunc(func(ctx context.Context) error { return nil })))
	var producerSawExpired bool
	boom := errors.New("boom")
	must(t, g.AddProducer("p", ShutdownFunc(func(ctx context.Context) error {
		producerSawExpired = ctx.Err() != nil
		return boom
	})))
	must(t, g.AddExecutor("panics", ShutdownFunc(func(ctx context.Context) error { panic("bad component") })))

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := g.Shutdown(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Shutdown took %v: not bounded by the deadline", took)
	}
	var se *ShutdownError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T), want *ShutdownError", err, err)
	}
	var names []string
	for _, f := range se.Failed {
		names = append(names, f.Stage.String()+"/"+f.Name)
	}
	if want := []string{"consumers/stuck", "producers/p", "executors/panics"}; !slices.Equal(names, want) {
		t.Fatalf("failed %v, want %v (err %v)", names, want, err)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, boom) {
		t.Fatalf("error %v should wrap the deadline and the producer's error", err)
	}
	if !producerSawExpired {
		t.Fatal("the producer stage ran before the deadline: it should have been called with the expired context")
	}
}

// Run installs the signal handler only while it waits: SIGTERM sent to this process
// starts the shutdown (and does not kill the test binary).
func TestRunOnSignal(t *testing.T) {
	g, _ := New(Config{Logger: testkit.Quiet(), Timeout: 5 * time.Second})
	r := &recorder{}
	must(t, g.AddConsumer("consumer", r.comp("consumer", nil)))
	must(t, g.AddProducer("producer", r.comp("producer", nil)))
	errc := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		close(waiting)
		errc <- g.Run(context.Background())
	}()
	<-waiting
	// Run may not have installed its handler yet: signal once it has.
	testkit.WaitFor(t, 30*time.Second, func() bool { return signalInstalled(g) }, "Run's signal handler")
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after SIGTERM")
	}
	if got := r.get(); len(got) != 4 || got[0] != "start consumer" || got[2] != "start producer" {
		t.Fatalf("events %v", got)
	}
}

func TestRunOnContext(t *testing.T) {
	g, _ := New(Config{Logger: testkit.Quiet()})
	r := &recorder{}
	must(t, g.AddRetryTask("retry", r.comp("retry", nil)))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- g.Run(ctx) }()
	cancel()
	select {
	case err := <-errc:
		if err != nil || len(r.get()) != 2 {
			t.Fatalf("Run: %v, events %v", err, r.get())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

func TestConfigValidate(t *testing.T) {
	if _, err := New(Config{Timeout: -time.Second}); err == nil {
		t.Fatal("negative Timeout accepted")
	}
	g, _ := New(Config{})
	for _, st := range []Stage{0, StageServers + 1, 9} {
		if err := g.Add(st, "x", ShutdownFunc(func(context.Context) error { return nil })); err == nil {
			t.Fatalf("unknown stage %d accepted", int(st))
		}
	}
	for _, st := range stages {
		if strings.HasPrefix(st.String(), "Stage(") {
			t.Errorf("stage %d has no name", int(st))
		}
	}
	if err := g.AddProducer("nil", nil); err == nil {
		t.Fatal("nil component accepted")
	}
}

func signalInstalled(g *Group) bool { return g.waiting.Load() }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A signal that arrives after HandleSignals but before Run is held for Run, which then
// shuts the group down in order; without the early handler the default action of the
// signal (here SIGUSR1: terminate) would end the test binary.
func TestSignalBeforeRunIsHeld(t *testing.T) {
	g, _ := New(Config{Logger: testkit.Quiet(), Timeout: 5 * time.Second, Signals: []os.Signal{syscall.SIGUSR1}})
	r := &recorder{}
	must(t, g.AddProducer("producer", r.comp("producer", nil)))
	g.HandleSignals()
	g.HandleSignals() // idempotent
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- g.Run(context.Background()) }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not take the signal that arrived before it")
	}
	if got := r.get(); !slices.Equal(got, []string{"start producer", "done producer"}) {
		t.Fatalf("components stopped: %q", got)
	}
	if signalInstalled(g) {
		t.Fatal("the handler is still installed after Run")
	}
}
