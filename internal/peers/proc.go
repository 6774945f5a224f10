package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// tail keeps the last max bytes written to it (a process's output for error messages),
// and copies everything to w when w is set.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
	w   io.Writer
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	if t.w != nil {
		_, _ = t.w.Write(p)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

// proc is one child process in its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *tail
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result, set before done closes
}

// startProc starts name: argv[0] with argv[1:], in dir, with env added to the current
// environment; its stdout and stderr go to a tail buffer (and to log when not nil).
func startProc(name string, argv []string, dir string, env []string, log io.Writer) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	p := &proc{name: name, cmd: cmd, out: &tail{max: 16 << 10, w: log}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("peers: start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// diag describes the process's exit (if any) and its last output, for errors.
func (p *proc) diag() string {
	state := "running"
	if p.exited() {
		state = fmt.Sprintf("exited: %v", p.err)
	}
	return fmt.Sprintf("%s (%s); last output:\n%s", p.name, state, p.out.String())
}

// stop sends SIGTERM to the process group, waits up to grace, then SIGKILLs the group and
// waits (bounded) for the exit. Stopping a stopped process is a no-op.
func (p *proc) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	signalGroup(p.cmd, false)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	signalGroup(p.cmd, true)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("peers: %s (pid %d) did not exit 10s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// kill sends SIGKILL to the process group at once (a crash: no shutdown hook runs) and
// waits (bounded) for the exit. Killing an exited process is a no-op.
func (p *proc) kill() error {
	if p.exited() {
		return nil
	}
	signalGroup(p.cmd, true)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("peers: %s (pid %d) did not exit 10s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// waitUntil polls ready every 100 ms until it returns nil, the context ends, or one of
// procs exits; the error then carries the last error of ready and the processes' output.
func waitUntil(ctx context.Context, what string, ready func(ctx context.Context) error, procs ...*proc) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last error
	for {
		last = ready(ctx)
		if last == nil {
			return nil
		}
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("peers: %s: %s", what, p.diag())
			}
		}
		select {
		case <-ctx.Done():
			msg := ""
			for _, p := range procs {
				msg += "\n" + p.diag()
			}
			return fmt.Errorf("peers: %s: %w (last: %v)%s", what, ctx.Err(), last, msg)
		case <-t.C:
		}
	}
}

// diagOf joins the last output of each started process, for diagnostics.
func diagOf(ps ...*proc) string {
	s := ""
	for _, p := range ps {
		if p != nil {
			s += p.diag() + "\n"
		}
	}
	return s
}

// stopAll stops each started process in order (SIGTERM, then SIGKILL after 5 s, to the
// process groups) and removes dir.
func stopAll(dir string, ps ...*proc) error {
	var errs []error
	for _, p := range ps {
		if p != nil {
			errs = append(errs, p.stop(5*time.Second))
		}
	}
	errs = append(errs, os.RemoveAll(dir))
	return errors.Join(errs...)
}
