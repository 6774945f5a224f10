package transporttest

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/transport"
)

// delivery is one delivered message as one handler call saw it.
type delivery struct {
	who   string // which consumer of the test
	call  int    // handler call number within the recorder
	batch int    // messages in that handler call
	msg   *message.MessageExt
}

func (d delivery) body() string { return string(d.msg.Body) }

// recorder keeps every delivery of a test, in the order the handlers saw them.
type recorder struct {
	mu    sync.Mutex
	calls int
	all   []delivery
}

// wrap returns a handler that records each call's messages under who, then runs next.
func (r *recorder) wrap(who string, next middleware.ConsumeFunc) middleware.ConsumeFunc {
	return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		r.mu.Lock()
		r.calls++
		for _, m := range msgs {
			r.all = append(r.all, delivery{who: who, call: r.calls, batch: len(msgs), msg: m})
		}
		r.mu.Unlock()
		return next(ctx, msgs)
	}
}

// middleware is wrap as a consume middleware.
func (r *recorder) middleware(who string) middleware.ConsumeMiddleware {
	return func(next middleware.ConsumeFunc) middleware.ConsumeFunc { return r.wrap(who, next) }
}

func (r *recorder) list() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.all...)
}

// bodies counts deliveries per body.
func (r *recorder) bodies() map[string]int {
	out := map[string]int{}
	for _, d := range r.list() {
		out[d.body()]++
	}
	return out
}

// has reports whether every body in want was delivered at least once.
func (r *recorder) has(want ...string) bool {
	got := r.bodies()
	for _, b := range want {
		if got[b] == 0 {
			return false
		}
	}
	return true
}

// of returns the deliveries of body, in order.
func (r *recorder) of(body string) []delivery {
	var out []delivery
	for _, d := range r.list() {
		if d.body() == body {
			out = append(out, d)
		}
	}
	return out
}

// summary is a short description of what arrived, for failure messages.
func (r *recorder) summary() string {
	got := r.bodies()
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for i, k := range keys {
		if i == 40 {
			fmt.Fprintf(&sb, " ... (%d bodies)", len(keys))
			break
		}
		fmt.Fprintf(&sb, " %s×%d", k, got[k])
	}
	return sb.String()
}

// ok is a handler that succeeds.
func ok(context.Context, []*message.MessageExt) (message.ConsumeResult, error) {
	return message.ConsumeSuccess, nil
}

var (
	seq      atomic.Int64
	runID    = fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	nameChar = regexp.MustCompile(`[^A-Za-z0-9_-]+`)
)

// name returns a topic or group name unique per process and call, readable in broker
// logs: "tt_<kind>_<test>_<run>_<n>", at most 100 bytes.
func name(t testing.TB, kind string) string {
	tn := nameChar.ReplaceAllString(t.Name(), "_")
	if i := strings.LastIndex(tn, "/"); i >= 0 {
		tn = tn[i+1:]
	}
	if len(tn) > 48 {
		tn = tn[len(tn)-48:]
	}
	return fmt.Sprintf("tt_%s_%s_%s_%d", kind, tn, runID, seq.Add(1))
}

// suite is one test's view of the transport.
type suite struct {
	t  *testing.T
	tr Transport
	p  *transport.Producer // the producer a Test function started when not run by Run
}

func newSuite(t *testing.T, tr Transport) suite { return suite{t, tr, new(transport.Producer)} }

func (s suite) timeout() time.Duration {
	if s.tr.Timeout > 0 {
		return s.tr.Timeout
	}
	return 30 * time.Second
}

// topic creates a fresh topic with shards shards.
func (s suite) topic(shards int) string {
	s.t.Helper()
	tp := name(s.t, "t")
	s.tr.CreateTopic(s.t, tp, shards)
	return tp
}

// newConsumer makes an unstarted consumer for cfg with Transport.NewConsumer and shuts it
// down in the test's cleanup (again, if the test already did).
func (s suite) newConsumer(cfg ConsumerConfig) transport.Consumer {
	s.t.Helper()
	c := s.tr.NewConsumer(s.t, cfg)
	if c == nil {
		s.t.Fatalf("transporttest: NewConsumer returned no consumer for group %s", cfg.Group)
	}
	s.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Shutdown(ctx)
	})
	return c
}

// start makes a consumer for cfg, subscribes cfg.Handler to cfg.Topic (SubscribeSQL when
// cfg.SQL is set, else Subscribe with cfg.Tags) and starts it, all through the
// transport.Consumer contract.
func (s suite) start(cfg ConsumerConfig) transport.Consumer {
	s.t.Helper()
	if cfg.Handler == nil {
		cfg.Handler = ok
	}
	c := s.newConsumer(cfg)
	var err error
	if cfg.SQL != "" {
		err = c.SubscribeSQL(cfg.Topic, cfg.SQL, cfg.Handler)
	} else {
		err = c.Subscribe(cfg.Topic, cfg.Tags, cfg.Handler)
	}
	if err != nil {
		s.t.Fatalf("subscribe %s to %s: %v", cfg.Group, cfg.Topic, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		s.t.Fatalf("start consumer of %s: %v", cfg.Group, err)
	}
	return c
}

// newProducer makes a producer with Transport.NewProducer and shuts it down in the test's
// cleanup; it does not start it.
func (s suite) newProducer() transport.Producer {
	s.t.Helper()
	return newProducer(s.t, s.tr)
}

func newProducer(t *testing.T, tr Transport) transport.Producer {
	t.Helper()
	p := tr.NewProducer(t)
	if p == nil {
		t.Fatal("transporttest: NewProducer returned no producer")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("producer shutdown: %v", err)
		}
	})
	return p
}

// startProducer makes and starts a producer; see Run.
func startProducer(t *testing.T, tr Transport) transport.Producer {
	t.Helper()
	p := newProducer(t, tr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("start producer: %v", err)
	}
	return p
}

// producer returns the producer Run started, or starts one for this test when a Test
// function runs on its own.
func (s suite) producer() transport.Producer {
	s.t.Helper()
	if s.tr.producer != nil {
		return s.tr.producer
	}
	if *s.p == nil {
		*s.p = startProducer(s.t, s.tr)
	}
	return *s.p
}

// stop shuts c down (bounded) and fails the test on an error.
func (s suite) stop(c transport.Consumer) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Shutdown(ctx); err != nil {
		s.t.Fatalf("consumer shutdown: %v", err)
	}
}

// send sends msg with Send and fails the test on an error.
func (s suite) send(msg *message.Message) *message.SendResult {
	s.t.Helper()
	return s.sendWith(s.producer().SendFunc(), msg)
}

func (s suite) sendWith(f middleware.SendFunc, msg *message.Message) *message.SendResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := f(ctx, msg)
	if err != nil {
		s.t.Fatalf("send %q to %s: %v", msg.Body, msg.Topic, err)
	}
	if r == nil || r.MsgID == "" {
		s.t.Fatalf("send %q to %s: no result or no MsgID (%+v)", msg.Body, msg.Topic, r)
	}
	return r
}

// waitFor waits up to the transport's timeout for cond.
func (s suite) waitFor(what string, cond func() bool, r *recorder) {
	s.t.Helper()
	if !testkit.Eventually(s.timeout(), cond) {
		got := ""
		if r != nil {
			got = "; delivered:" + r.summary()
		}
		s.t.Fatalf("not within %v: %s%s", s.timeout(), what, got)
	}
}

// need skips the test unless on holds.
func (s suite) need(on bool, feature string) {
	s.t.Helper()
	if !on {
		s.t.Skipf("transport does not offer Features.%s", feature)
	}
}
