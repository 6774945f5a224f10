package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Where the bench's own Sluice broker runs (sluice bench --broker).
const (
	BrokerProcess  = "process"  // a child "sluice broker" process: every server in its own process
	BrokerEmbedded = "embedded" // inside the benchmark's process (client and broker share CPUs and GC)
)

// ProcessConfig configures a Sluice broker run as its own process, so that a benchmark
// compares like with like: every server in a process of its own, the client in the
// benchmark's.
type ProcessConfig struct {
	// Binary is the sluice executable to run as "Binary broker ...". Default: the
	// running executable (os.Executable), which is right for the sluice CLI.
	Binary string
	// Dir is the data directory. Default: a new temporary directory, removed by Shutdown.
	Dir string
	// FlushDiskType is AsyncFlush or SyncFlush. Default: AsyncFlush.
	FlushDiskType string
	// StartTimeout bounds the wait for the broker's "listening" line. Default: 30 s.
	StartTimeout time.Duration
	// GRPC also serves the RocketMQ 5 gRPC front end (--grpc-listen 127.0.0.1:0), for
	// RocketMQ 5 clients; Process.GRPCAddr is its address.
	GRPC bool
	// Command builds the command for the given arguments (starting with "broker").
	// Default: exec.Command(Binary, args...). Tests use it to run their own binary in a
	// child mode.
	Command func(args []string) *exec.Cmd
}

// Process is a Sluice broker (with its embedded name server) running as a child process
// on free loopback ports.
type Process struct {
	cmd     *exec.Cmd
	dir     string
	ownsDir bool
	addr    string
	namesrv string
	grpc    string
	waited  chan error
}

// listeningLine matches the line `sluice broker` prints once it serves:
// "sluice broker <name> listening on <addr>, name server <addrs>, data in <dir>".
var listeningLine = regexp.MustCompile(`^sluice broker \S+ listening on (\S+), name server (\S+), data in `)

// grpcLine matches the line `sluice broker --grpc-listen` prints once the gRPC front end
// serves.
var grpcLine = regexp.MustCompile(`^sluice broker serving RocketMQ 5 gRPC clients on (\S+)$`)

// StartProcess runs "sluice broker" as a child process with a broker.conf it writes
// (listen and name server on 127.0.0.1:0, the flush type, the data directory), and
// returns once the broker prints that it is listening. Errors: an unknown flush type,
// a binary that cannot be started, and a broker that exits or stays silent past
// StartTimeout (its output is included).
func StartProcess(cfg ProcessConfig) (*Process, error) {
	if cfg.FlushDiskType == "" {
		cfg.FlushDiskType = AsyncFlush
	}
	if cfg.FlushDiskType != AsyncFlush && cfg.FlushDiskType != SyncFlush {
		return nil, fmt.Errorf("bench: flush disk type %q: want %s or %s", cfg.FlushDiskType, AsyncFlush, SyncFlush)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.Binary == "" && cfg.Command == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench: find the sluice executable: %w", err)
		}
		cfg.Binary = exe
	}
	p := &Process{dir: cfg.Dir, waited: make(chan error, 1)}
	if p.dir == "" {
		d, err := os.MkdirTemp("", "sluice-bench-proc-")
		if err != nil {
			return nil, fmt.Errorf("bench: temporary data directory: %w", err)
		}
		p.dir, p.ownsDir = d, true
	}
	conf := fmt.Sprintf("flushDiskType=%s\n", cfg.FlushDiskType)
	confPath := p.dir + "/broker.conf"
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		p.removeDir()
		return nil, fmt.Errorf("bench: write broker.conf: %w", err)
	}
	args := []string{"broker", "-c", confPath, "--data-dir", p.dir + "/store",
		"--listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0", "--log-level", "error"}
	if cfg.GRPC {
		args = append(args, "--grpc-listen", "127.0.0.1:0")
	}
	if cfg.Command != nil {
		p.cmd = cfg.Command(args)
	} else {
		p.cmd = exec.Command(cfg.Binary, args...)
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		p.removeDir()
		return nil, fmt.Errorf("bench: broker stdout: %w", err)
	}
	var stderr strings.Builder
	p.cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
	if err := p.cmd.Start(); err != nil {
		p.removeDir()
		return nil, fmt.Errorf("bench: start %s broker: %w", cfg.Binary, err)
	}
	found := make(chan [3]string, 1)
	go func() { // owned by the child: ends when the child's stdout closes
		sc := bufio.NewScanner(stdout)
		var a [3]string
		sent := false
		for sc.Scan() {
			if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
				a[0], a[1] = m[1], m[2]
			}
			if m := grpcLine.FindStringSubmatch(sc.Text()); m != nil {
				a[2] = m[1]
			}
			if !sent && a[0] != "" && (!cfg.GRPC || a[2] != "") {
				found <- a
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.waited <- p.cmd.Wait()
	}()
	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	select {
	case a := <-found:
		p.addr, p.namesrv, p.grpc = a[0], a[1], a[2]
		return p, nil
	case err := <-p.waited:
		p.waited <- err
		p.removeDir()
		return nil, fmt.Errorf("bench: broker process exited before listening (%v): %s", err, stderr.String())
	case <-timer.C:
		_ = p.Shutdown(context.Background())
		return nil, fmt.Errorf("bench: broker process not listening after %v: %s", cfg.StartTimeout, stderr.String())
	}
}

// Pid returns the broker process's id (for CPU accounting).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Addr returns the broker's listen address.
func (p *Process) Addr() string { return p.addr }

// GRPCAddr returns the gRPC front end's address ("" without ProcessConfig.GRPC).
func (p *Process) GRPCAddr() string { return p.grpc }

// NamesrvAddrs returns the embedded name server's address(es).
func (p *Process) NamesrvAddrs() []string { return strings.Split(p.namesrv, ";") }

// Dir returns the data directory.
func (p *Process) Dir() string { return p.dir }

// Shutdown sends SIGTERM and waits for the process until ctx ends, then kills its
// process group; it removes the data directory if StartProcess made it. It returns nil
// for a clean exit and the exit error otherwise.
func (p *Process) Shutdown(ctx context.Context) error {
	defer p.removeDir()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.waited:
		p.waited <- err
		return exitErr(err)
	case <-ctx.Done():
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		err := <-p.waited
		p.waited <- err
		return errors.Join(ctx.Err(), exitErr(err))
	}
}

func exitErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("bench: broker process: %w", err)
}

func (p *Process) removeDir() {
	if p.ownsDir {
		_ = os.RemoveAll(p.dir)
	}
}

// limitedWriter keeps at most n bytes of what is written to it (the rest is dropped).
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		_, _ = l.w.Write(b[:k])
		l.n -= k
	}
	return len(b), nil
}
