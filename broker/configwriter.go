package broker

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// minConfigWriteInterval is the shortest time between two writes of one config file.
const minConfigWriteInterval = 100 * time.Millisecond

// configWriter coalesces the writes of one config file (topics.json,
// subscriptionGroup.json): a change only marks the table dirty; the writer goroutine
// writes a snapshot, atomically (temp file, fsync, rename), at most once per interval —
// 100 ms, or four times the last write's duration when longer, so a large table costs a
// bounded share of one core — and Shutdown writes what is left. The table's lock is not
// held while writing, so lookups (every send) never wait for the disk.
//
// A crash loses at most the changes of the last interval; they are the broker's own
// metadata (topic and group configs), recreated by the next send or heartbeat when
// auto-creation is on.
type configWriter struct {
	name     string
	path     string
	snapshot func() any // a consistent copy of the table, taken under its read lock
	log      *slog.Logger

	kick chan struct{} // buffered 1: the table changed

	mu   sync.Mutex    // serialises writes (the loop and flush); lock order: mu, then dirtyMu
	last time.Duration // duration of the last write; guarded by mu

	dirtyMu sync.Mutex
	pending bool // a change not yet written; guarded by dirtyMu
}

func newConfigWriter(name, path string, snapshot func() any) *configWriter {
	return &configWriter{name: name, path: path, snapshot: snapshot, log: slog.Default(), kick: make(chan struct{}, 1)}
}

// markDirty records a change; it never blocks.
func (w *configWriter) markDirty() {
	w.dirtyMu.Lock()
	w.pending = true
	w.dirtyMu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// flush writes the table if it changed since the last write. Errors (e.g. a full disk)
// keep it dirty, so the next flush tries again.
func (w *configWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dirtyMu.Lock()
	pending := w.pending
	w.pending = false
	w.dirtyMu.Unlock()
	if !pending {
		return nil
	}
	start := time.Now()
	if err := writeJSONFile(w.path, w.snapshot()); err != nil {
		w.dirtyMu.Lock()
		w.pending = true
		w.dirtyMu.Unlock()
		return err
	}
	w.last = time.Since(start)
	return nil
}

// run writes changes until ctx ends (Shutdown then calls flush once more).
func (w *configWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		if err := w.flush(); err != nil {
			w.log.Error("config file not written; will retry", "file", w.name, "err", err)
		}
		w.mu.Lock()
		wait := max(minConfigWriteInterval, 4*w.last)
		w.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
