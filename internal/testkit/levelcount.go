package testkit

import (
	"context"
	"log/slog"
	"sync"
)

// LevelCounter is a slog handler that keeps the records at or above a level (their
// message and attributes, as LogCapture does) and drops the others, for tests that count
// what a component writes at warn under an attack without printing every debug line.
// Safe for concurrent use.
type LevelCounter struct {
	min     slog.Level
	mu      sync.Mutex
	records []LogRecord
}

// CountLogs returns a counter of the records at min or above and a logger writing to it.
func CountLogs(min slog.Level) (*LevelCounter, *slog.Logger) {
	c := &LevelCounter{min: min}
	return c, slog.New(&levelHandler{c: c})
}

// Records returns a copy of the records kept so far.
func (c *LevelCounter) Records() []LogRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]LogRecord(nil), c.records...)
}

type levelHandler struct {
	c     *LevelCounter
	attrs []slog.Attr
}

func (h *levelHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.c.min }

func (h *levelHandler) Handle(_ context.Context, r slog.Record) error {
	rec := LogRecord{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		addAttr(rec.Attrs, "", a)
	}
	r.Attrs(func(a slog.Attr) bool { addAttr(rec.Attrs, "", a); return true })
	h.c.mu.Lock()
	h.c.records = append(h.c.records, rec)
	h.c.mu.Unlock()
	return nil
}

func (h *levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &levelHandler{c: h.c, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

// WithGroup is not needed by the components counted; attributes keep their plain names.
func (h *levelHandler) WithGroup(string) slog.Handler { return h }
