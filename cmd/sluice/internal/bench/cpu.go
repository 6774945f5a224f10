package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU time is the figure that holds on a noisy machine: wall-clock throughput moves with
// whatever else runs, the CPU a message costs much less. A run samples the benchmark's
// own process (getrusage) and the server's (/proc/<pid>/stat) before and after its timed
// window; Result reports the differences.

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. Linux has
// used 100 on every architecture Go supports for user space (sysconf(_SC_CLK_TCK)),
// and reading it otherwise needs cgo.
const clockTicks = 100

// SelfCPU returns the user plus system CPU time this process has used so far.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU returns the user plus system CPU time process pid has used so far, from
// /proc/<pid>/stat (fields 14 and 15, in clock ticks of 10 ms). Errors: no such process
// or no /proc (not Linux).
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: cpu of process %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces: count fields
	// after its closing parenthesis, where field 3 (state) is the first.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("bench: cpu of process %d: malformed stat line", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: cpu of process %d: stat line has %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("bench: cpu of process %d: %w", pid, err)
	}
	return time.Duration(utime+stime) * (time.Second / clockTicks), nil
}

// ProcessMemory returns the resident set size of process pid now and its peak over the
// process's life, in bytes (VmRSS and VmHWM of /proc/<pid>/status: anonymous memory and
// the file pages the process has mapped, not the page cache it reads and writes through
// system calls). Errors: no such process or no /proc.
func ProcessMemory(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("bench: memory of process %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, perr := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(val), "kB")), 10, 64)
		if perr != nil {
			return 0, 0, fmt.Errorf("bench: memory of process %d: %s: %w", pid, name, perr)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("bench: memory of process %d: %w", pid, err)
	}
	return rss, peak, nil
}

// PidListening returns the id of the process that listens on TCP port (IPv4 or IPv6),
// found through /proc/net/tcp{,6} and the processes' socket descriptors. Errors: no
// listener on that port, or one this user cannot see (another user's process).
func PidListening(port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local_address rem_address st ... inode (field 10)
			if len(fs) < 10 || fs[3] != "0A" { // 0A = TCP_LISTEN
				continue
			}
			j := strings.LastIndexByte(fs[1], ':')
			if p, err := strconv.ParseInt(fs[1][j+1:], 16, 32); err == nil && int(p) == port {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("bench: nothing listens on port %d", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd")
	for _, fdDir := range procs {
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && inodes[l] {
				return strconv.Atoi(filepath.Base(filepath.Dir(fdDir)))
			}
		}
	}
	return 0, fmt.Errorf("bench: the listener on port %d belongs to no process this user can see", port)
}

// cpuMeter samples the client's and (when pid > 0) a server process's CPU time.
type cpuMeter struct {
	pid            int
	client, server time.Duration
	serverErr      error
}

// start takes the first sample.
func (m *cpuMeter) start(pid int) {
	m.pid = pid
	m.client = SelfCPU()
	if pid > 0 {
		m.server, m.serverErr = ProcessCPU(pid)
	}
}

// stop takes the second sample and stores the differences in r.
func (m *cpuMeter) stop(r *Result) {
	if r == nil {
		return
	}
	r.ClientCPU = SelfCPU() - m.client
	if m.pid > 0 && m.serverErr == nil {
		if s, err := ProcessCPU(m.pid); err == nil {
			r.ServerCPU = s - m.server
			r.ServerPid = m.pid
		}
		r.ServerRSS, r.ServerPeakRSS, _ = ProcessMemory(m.pid)
	}
}
