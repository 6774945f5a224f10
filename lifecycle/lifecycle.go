// Package lifecycle stops a Sluice application's parts in a safe order when the process
// is asked to stop (SIGINT, SIGTERM), within one deadline, and reports what did not
// finish.
//
// Libraries never install signal handlers; the application's main does, by calling
// [Group.Run] (which installs the handler with [signal.Notify] unless
// [Group.HandleSignals] did so earlier) or by cancelling the context it passes to Run
// itself. The stop order is fixed by [Stage]:
//
//  1. [StageFrontends]: HTTP front ends (the web console, the metrics endpoint) stop
//     accepting requests and finish those in flight. They go first because their
//     requests read from and act on every other part.
//  2. [StageConsumers]: consumers stop pulling, finish in-flight handlers, persist offsets
//     and unregister from the brokers. They go before the senders because handlers may
//     send.
//  3. [StageRetryTask]: the parked-send retry task stops between records; a claimed
//     record is either finished or handed back to Redis. It needs the producers, so it
//     stops before them.
//  4. [StageProducers]: producers finish in-flight (and async) sends and unregister.
//  5. [StageExecutors]: the XXL-JOB executor stops serving and unregisters from the
//     admin.
//  6. [StageServers]: brokers and name servers stop accepting connections, finish the
//     requests in flight and flush their stores. They go last so that the clients of the
//     same process can still reach them while they stop.
//
// The components of one stage stop concurrently; the stages run one after another and
// share one deadline ([Config.Timeout]). When the deadline passes, the remaining stages
// still run (with the expired context, so each component releases its resources at once
// instead of waiting), and the result lists every component that did not finish as a
// [*ComponentError] inside a [*ShutdownError].
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/config"
)

// Component is anything that can be shut down: Sluice's producer, consumer, retry task,
// XXL-JOB executor and broker all are. Shutdown must release the component's resources
// and goroutines, waiting for in-flight work at most until ctx is done, and return a
// non-nil error if something did not finish.
type Component interface {
	Shutdown(ctx context.Context) error
}

// ShutdownFunc adapts a function to a [Component].
type ShutdownFunc func(ctx context.Context) error

// Shutdown calls f(ctx).
func (f ShutdownFunc) Shutdown(ctx context.Context) error { return f(ctx) }

// Stage orders shutdown; the package doc gives the stop order.
type Stage int

// The stages (their values are not their stop order: see the package doc).
const (
	// StageConsumers: push/pull consumers (stop pulling, finish handlers, persist offsets).
	StageConsumers Stage = iota + 1
	// StageRetryTask: the parked-send retry task (stop between records).
	StageRetryTask
	// StageProducers: producers and send adapters (flush async sends, unregister).
	StageProducers
	// StageExecutors: XXL-JOB executors (stop serving, unregister from the admin).
	StageExecutors
	// StageFrontends: HTTP front ends such as the web console and the metrics endpoint
	// (stop accepting requests, finish those in flight). Stops first.
	StageFrontends
	// StageServers: brokers and name servers (stop accepting connections, finish the
	// requests in flight, flush the stores). Stops last.
	StageServers
)

// stages lists every stage in stop order.
var stages = []Stage{StageFrontends, StageConsumers, StageRetryTask, StageProducers, StageExecutors, StageServers}

// String returns the stage's name: "frontends", "consumers", "retry-task", "producers",
// "executors", "servers".
func (s Stage) String() string {
	switch s {
	case StageConsumers:
		return "consumers"
	case StageRetryTask:
		return "retry-task"
	case StageProducers:
		return "producers"
	case StageExecutors:
		return "executors"
	case StageFrontends:
		return "frontends"
	case StageServers:
		return "servers"
	}
	return fmt.Sprintf("Stage(%d)", int(s))
}

// Defaults of Config.
const (
	// DefaultTimeout is the default deadline of a whole shutdown.
	DefaultTimeout = 30 * time.Second
)

// Config configures a Group. The zero value is usable.
type Config struct {
	// Timeout is the one deadline for the whole shutdown started by Run (all stages
	// together). Default: 30s. Shutdown called directly uses its ctx instead.
	Timeout time.Duration
	// Signals are the signals Run waits for. Default: SIGINT and SIGTERM.
	Signals []os.Signal
	// Logger receives one line per stage and per component that failed. Default:
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if len(c.Signals) == 0 {
		c.Signals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a negative Timeout or a nil signal as a [*config.Error].
func (c *Config) Validate() error {
	if c.Timeout < 0 {
		return &config.Error{Package: "lifecycle", Field: "Timeout", Value: c.Timeout, Reason: "is negative"}
	}
	for i, s := range c.Signals {
		if s == nil {
			return &config.Error{Package: "lifecycle", Field: "Signals[" + strconv.Itoa(i) + "]", Reason: "is nil"}
		}
	}
	return nil
}

// ErrShutDown is returned by Add after Shutdown has started.
var ErrShutDown = errors.New("lifecycle: group already shut down")

// ComponentError reports one component that did not shut down cleanly: its Shutdown
// returned an error, or it had not returned when the deadline passed (Err then wraps the
// context's error and the component's goroutine is abandoned).
type ComponentError struct {
	Stage Stage
	Name  string
	Err   error
}

// Error implements error.
func (e *ComponentError) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Stage, e.Name, e.Err)
}

// Unwrap returns Err.
func (e *ComponentError) Unwrap() error { return e.Err }

// ShutdownError lists the components that did not shut down cleanly, in stop order.
// errors.Is(err, context.DeadlineExceeded) reports whether the deadline was the cause
// for any of them.
type ShutdownError struct {
	Failed []*ComponentError
}

// Error implements error.
func (e *ShutdownError) Error() string {
	parts := make([]string, len(e.Failed))
	for i, f := range e.Failed {
		parts[i] = f.Error()
	}
	return fmt.Sprintf("lifecycle: %d component(s) did not shut down cleanly: %s", len(e.Failed), strings.Join(parts, "; "))
}

// Unwrap returns the component errors.
func (e *ShutdownError) Unwrap() []error {
	out := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		out[i] = f
	}
	return out
}

type entry struct {
	stage Stage
	name  string
	c     Component
}

// Group is a set of components to shut down together. Create it with New, register
// components with Add (or the AddConsumer/AddRetryTask/AddProducer/AddExecutor/
// AddFrontend/AddServer shorthands), then call Run from main. Safe for concurrent use.
type Group struct {
	cfg Config

	mu      sync.Mutex
	entries []entry
	started bool // Shutdown has begun
	done    chan struct{}
	result  error

	waiting atomic.Bool // Run's signal handler is installed (tests send signals only then)

	sigMu   sync.Mutex
	signals chan os.Signal // set by HandleSignals; nil until then
}

// New returns an empty group for cfg (defaults applied), or the error of cfg.Validate.
func New(cfg Config) (*Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	return &Group{cfg: cfg, done: make(chan struct{})}, nil
}

// Add registers c to be shut down in stage under name (used in logs and errors). It
// fails for a nil component, an unknown stage, or after Shutdown has started
// (ErrShutDown).
func (g *Group) Add(stage Stage, name string, c Component) error {
	if c == nil {
		return fmt.Errorf("lifecycle: component %q is nil", name)
	}
	if stage < StageConsumers || stage > StageServers {
		return fmt.Errorf("lifecycle: component %q: unknown stage %d", name, int(stage))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return ErrShutDown
	}
	g.entries = append(g.entries, entry{stage: stage, name: name, c: c})
	return nil
}

// AddConsumer is Add(StageConsumers, name, c).
func (g *Group) AddConsumer(name string, c Component) error { return g.Add(StageConsumers, name, c) }

// AddRetryTask is Add(StageRetryTask, name, c).
func (g *Group) AddRetryTask(name string, c Component) error { return g.Add(StageRetryTask, name, c) }

// AddProducer is Add(StageProducers, name, c).
func (g *Group) AddProducer(name string, c Component) error { return g.Add(StageProducers, name, c) }

// AddExecutor is Add(StageExecutors, name, c).
func (g *Group) AddExecutor(name string, c Component) error { return g.Add(StageExecutors, name, c) }

// AddFrontend is Add(StageFrontends, name, c).
func (g *Group) AddFrontend(name string, c Component) error { return g.Add(StageFrontends, name, c) }

// AddServer is Add(StageServers, name, c).
func (g *Group) AddServer(name string, c Component) error { return g.Add(StageServers, name, c) }

// Run waits until ctx is done or one of Config.Signals arrives (through the handler
// HandleSignals installed, or that Run installs now; it is removed when Run stops
// waiting), then shuts the group down with a fresh deadline of
// Config.Timeout and returns Shutdown's result: nil when every component finished, a
// *ShutdownError otherwise. After the first signal the default signal behaviour is
// restored, so a second Ctrl-C ends the process at once.
func (g *Group) Run(ctx context.Context) error {
	sigs := g.signalChan()
	cause := "context done"
	select {
	case <-ctx.Done():
	case <-sigs:
		cause = "signal"
	}
	signal.Stop(sigs)
	g.waiting.Store(false)
	g.cfg.Logger.Info("lifecycle: shutting down", "cause", cause, "timeout", g.cfg.Timeout)
	sdctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Timeout)
	defer cancel()
	return g.Shutdown(sdctx)
}

// HandleSignals installs the group's handler for Config.Signals now, before Run, and
// returns its channel (Run calls it when nothing did). A program that starts servers
// and prints where they listen before it calls Run should call it first: a signal that
// arrives in between is then held for Run instead of ending the process with the
// default behaviour (no orderly stop). Calling it again does nothing.
func (g *Group) HandleSignals() { g.signalChan() }

// signalChan installs the handler once and returns its channel.
func (g *Group) signalChan() chan os.Signal {
	g.sigMu.Lock()
	defer g.sigMu.Unlock()
	if g.signals == nil {
		g.signals = make(chan os.Signal, 1)
		signal.Notify(g.signals, g.cfg.Signals...)
		g.waiting.Store(true)
	}
	return g.signals
}

// Shutdown stops every registered component stage by stage (see the package doc),
// components of one stage concurrently, all bounded by ctx. A component whose Shutdown
// has not returned when ctx is done is reported and abandoned; the later stages are
// still shut down (with the expired ctx) so they release their resources. It returns
// nil when all finished, else a *ShutdownError listing the others. A second call waits
// for the first and returns its result.
func (g *Group) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	if g.started {
		g.mu.Unlock()
		select {
		case <-g.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return g.result
	}
	g.started = true
	entries := append([]entry(nil), g.entries...)
	g.mu.Unlock()

	var failed []*ComponentError
	for _, st := range stages {
		var batch []entry
		for _, e := range entries {
			if e.stage == st {
				batch = append(batch, e)
			}
		}
		if len(batch) == 0 {
			continue
		}
		start := time.Now()
		errs := shutdownStage(ctx, batch)
		failed = append(failed, errs...)
		g.cfg.Logger.Info("lifecycle: stage stopped", "stage", st.String(), "components", len(batch),
			"failed", len(errs), "took", time.Since(start))
		for _, e := range errs {
			g.cfg.Logger.Warn("lifecycle: component did not shut down cleanly", "stage", e.Stage.String(), "name", e.Name, "err", e.Err)
		}
	}
	var result error
	if len(failed) > 0 {
		result = &ShutdownError{Failed: failed}
	}
	g.mu.Lock()
	g.result = result
	g.mu.Unlock()
	close(g.done)
	return result
}

// abandonGrace is how long a stage still waits, once the deadline has passed, for
// components that return promptly when they see their expired context (releasing
// resources without waiting), before it reports and abandons the rest.
const abandonGrace = 250 * time.Millisecond

// shutdownStage shuts the components of one stage down concurrently and waits for each
// until ctx is done (plus abandonGrace).
func shutdownStage(ctx context.Context, batch []entry) []*ComponentError {
	type outcome struct {
		i   int
		err error
	}
	results := make(chan outcome, len(batch)) // buffered: an abandoned component never blocks
	for i, e := range batch {
		go func() {
			results <- outcome{i: i, err: safeShutdown(ctx, e.c)}
		}()
	}
	finished := make([]bool, len(batch))
	errs := make([]error, len(batch))
	var grace <-chan time.Time
	ctxDone := ctx.Done()
	for pending := len(batch); pending > 0; {
		select {
		case o := <-results:
			pending--
			finished[o.i] = true
			errs[o.i] = o.err
		case <-ctxDone:
			ctxDone = nil
			t := time.NewTimer(abandonGrace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			for i := range batch {
				if !finished[i] {
					errs[i] = fmt.Errorf("shutdown still running at the deadline: %w", ctx.Err())
				}
			}
			pending = 0
		}
	}
	var failed []*ComponentError // in registration order
	for i, e := range batch {
		if errs[i] != nil {
			failed = append(failed, &ComponentError{Stage: e.stage, Name: e.name, Err: errs[i]})
		}
	}
	return failed
}

// safeShutdown calls c.Shutdown and turns a panic into an error.
func safeShutdown(ctx context.Context, c Component) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("shutdown panicked: %v", r)
		}
	}()
	return c.Shutdown(ctx)
}
