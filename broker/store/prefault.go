package store

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
)

// The prefaulter keeps the writer's mapping faulted in from the write position to
// prefaultAhead bytes beyond it, prefaultStep bytes per system call.
const (
	prefaultAhead = 4 << 20
	prefaultStep  = 256 << 10
)

// prefaulter faults in the pages of the commitlog writer's mapping (writerMap) ahead of
// the writer, in a goroutine of its own (MADV_POPULATE_WRITE): the page cache page is
// allocated and zeroed, its block reserved and the page mapped writable there, so that the
// writer's copy, which runs on the connection's reader and holds every later request of
// that connection back, finds the page ready. Without it a write fault on a fresh page
// costs the writer a zero-filled read-around window, and now and then 10–50 ms (measured:
// 17–67 sends of 500,000 took over 10 ms, none with the prefaulter). The same approach as
// Apache RocketMQ's warm-up of new mapped files, done continuously instead of per file.
//
// Faulting in is best effort: an error (a full disk, a kernel without
// MADV_POPULATE_WRITE) only leaves the writer to fault the pages itself, which reports
// what went wrong (writerMap). Up to prefaultAhead bytes of zeroed pages may be written
// back by a flush before the writer fills them.
type prefaulter struct {
	mu   sync.Mutex // held while faulting in; detach waits for it, so no fault outlives the mapping
	data []byte     // the writer's mapping (nil: none)
	done int64      // faulted in below this segment-local offset

	want atomic.Int64 // fault in below this segment-local offset
	pos  atomic.Int64 // the writer has written up to this segment-local offset
	kick chan struct{}
	quit chan struct{}
	wg   sync.WaitGroup

	started bool        // the goroutine runs (only the writer and close touch it)
	off     atomic.Bool // the kernel cannot do it: stop asking
}

// attach starts prefaulting data, the writer's new mapping, from the segment-local
// offset off (starting the goroutine on first use).
func (p *prefaulter) attach(data []byte, off int64) {
	if !populateSupported || p.off.Load() {
		return
	}
	if !p.started {
		p.started = true
		p.kick = make(chan struct{}, 1)
		p.quit = make(chan struct{})
		p.wg.Add(1)
		go p.run()
	}
	// want is reset before the new mapping is published: a step between the two must not
	// fault in the new mapping up to the old one's want.
	p.want.Store(0)
	p.pos.Store(off)
	p.mu.Lock()
	p.data, p.done = data, off&^(pageSize-1)
	p.mu.Unlock()
	p.ahead(off)
}

// detach stops prefaulting the current mapping, waiting for a fault-in in progress, so
// that the mapping can be removed.
func (p *prefaulter) detach() {
	if !p.started {
		return
	}
	p.mu.Lock()
	p.data = nil
	p.mu.Unlock()
}

// ahead tells the prefaulter that the writer has written up to the segment-local offset
// end. It wakes the goroutine once per prefaultStep bytes written, without waiting.
// The goroutine goes on from end when the writer has passed what it faulted in (writes
// of directWriteMin bytes or more go around the mapping and are not told here): the
// pages behind the writer are not faulted in again.
func (p *prefaulter) ahead(end int64) {
	if !p.started || p.off.Load() {
		return
	}
	p.pos.Store(end)
	w := end + prefaultAhead
	if w-p.want.Load() < prefaultStep {
		return
	}
	p.want.Store(w)
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// stop ends the goroutine (the commitlog is closing; the mapping is already detached).
func (p *prefaulter) stop() {
	if !p.started {
		return
	}
	close(p.quit)
	p.wg.Wait()
	p.started = false
}

func (p *prefaulter) run() {
	defer p.wg.Done()
	for {
		select {
		case <-p.quit:
			return
		case <-p.kick:
		}
		for p.step() {
		}
	}
}

// step faults in the next prefaultStep bytes, if some are wanted; false when there is
// nothing to do or faulting in failed.
func (p *prefaulter) step() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := min(p.want.Load(), int64(len(p.data)))
	if pos := p.pos.Load() &^ (pageSize - 1); p.done < pos {
		p.done = pos // the writer is past it: only the pages ahead of it matter
	}
	if p.data == nil || p.done >= w {
		return false
	}
	// The last step of a window ends with it (rounded up to a page), not a whole step on.
	to := min(p.done+prefaultStep, (w+pageSize-1)&^(pageSize-1), int64(len(p.data)))
	if err := populateWrite(p.data[p.done:to]); err != nil {
		if errors.Is(err, syscall.EINVAL) {
			p.off.Store(true) // before Linux 5.14
		}
		return false
	}
	p.done = to
	return true
}
