package middleware

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runDedupChild())
	}
	goleak.VerifyTestMain(m)
}

// waitFor polls cond every 5 ms until it holds or timeout passes (then fails the test).
func waitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newExt returns a received message with topic, tag, body and (when key != "") keys.
func newExt(topic, tag, key, body string) *message.MessageExt {
	m := &message.MessageExt{Message: message.Message{Topic: topic, Body: []byte(body)}}
	m.SetTag(tag)
	if key != "" {
		m.SetKeys(key)
	}
	m.MsgID = message.NewUniqID()
	return m
}

// effects counts successful business effects per key.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func newEffects() *effects { return &effects{n: make(map[string]int)} }

func (e *effects) add(key string) {
	e.mu.Lock()
	e.n[key]++
	e.mu.Unlock()
}

func (e *effects) get(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[key]
}

// okHandler records one effect per message key and succeeds.
func (e *effects) okHandler() ConsumeFunc {
	return func(ctx context.Context, msgs []*message.MessageExt) (message.ConsumeResult, error) {
		for _, m := range msgs {
			e.add(KeyOf(m))
		}
		return message.ConsumeSuccess, nil
	}
}

// call runs f with a fresh Report and returns its result, error and reasons.
func call(f ConsumeFunc, msgs ...*message.MessageExt) (message.ConsumeResult, error, []Reason) {
	ctx, rep := WithReport(context.Background())
	res, err := f(ctx, msgs)
	return res, err, rep.Reasons()
}

func hasReason(rs []Reason, r Reason) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// tWriter writes log lines to t.Log.
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// testLogger returns a slog logger writing through t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
