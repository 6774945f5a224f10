package testkit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// LogRecord is one captured log line: its level, message and attributes (group names
// joined with ".", values formatted with fmt's %v).
type LogRecord struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// String renders the record as "LEVEL message k=v ...".
func (r LogRecord) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	for k, v := range r.Attrs {
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}

// LogCapture records every log record of the loggers made from it (all levels), and
// also writes them through t.Log when made with a test. Safe for concurrent use.
type LogCapture struct {
	t       testing.TB
	mu      sync.Mutex
	records []LogRecord
}

// CaptureLogs returns a capture and a debug-level logger that records into it (and
// writes through t.Log, so a failing test shows the lines).
func CaptureLogs(t testing.TB) (*LogCapture, *slog.Logger) {
	c := &LogCapture{t: t}
	return c, slog.New(&captureHandler{c: c})
}

// Records returns a copy of the records captured so far.
func (c *LogCapture) Records() []LogRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]LogRecord(nil), c.records...)
}

// Find returns the captured records whose message contains msg.
func (c *LogCapture) Find(msg string) []LogRecord {
	var out []LogRecord
	for _, r := range c.Records() {
		if strings.Contains(r.Message, msg) {
			out = append(out, r)
		}
	}
	return out
}

// Reset forgets the records captured so far.
func (c *LogCapture) Reset() {
	c.mu.Lock()
	c.records = nil
	c.mu.Unlock()
}

type captureHandler struct {
	c      *LogCapture
	attrs  []slog.Attr
	prefix string
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	rec := LogRecord{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		addAttr(rec.Attrs, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(rec.Attrs, h.prefix, a)
		return true
	})
	h.c.mu.Lock()
	h.c.records = append(h.c.records, rec)
	h.c.mu.Unlock()
	if h.c.t != nil {
		h.c.t.Helper()
		h.c.t.Log(rec.String())
	}
	return nil
}

func addAttr(m map[string]string, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			addAttr(m, prefix+a.Key+".", g)
		}
		return
	}
	m[prefix+a.Key] = fmt.Sprint(a.Value.Any())
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr(nil), h.attrs...), prefixed(h.prefix, as)...)
	return &n
}

func prefixed(prefix string, as []slog.Attr) []slog.Attr {
	if prefix == "" {
		return as
	}
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}

func (h *captureHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.prefix = h.prefix + name + "."
	return &n
}
