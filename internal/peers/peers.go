// Package peers runs the real systems Sluice is compared with — Apache RocketMQ 4.9 (name
// server + broker), Apache RocketMQ 5.3 (name server + proxy in LOCAL mode with its
// broker), the RocketMQ Java clients 4.9 and 5.x (through small driver programs) and
// Apache Kafka 4 in KRaft mode — as child JVM processes on free loopback ports, for tests
// and for `sluice bench --target rocketmq`.
//
// The jars come from Maven Central through the repository's own descriptors: run
// `bash .ci/peers`, which fills [Dir] (SLUICE_PEERS_DIR, default
// $HOME/.cache/sluice-peers). Without Java or the jars the Launch functions return an
// error wrapping [ErrUnavailable], and the test helpers of package peertest
// (StartRocketMQ, StartKafka, JavaDriver) skip the test with a message saying how to
// fetch them. This package imports no test code: the sluice binary links it.
//
// Every process runs in its own process group and is killed with its group on Stop (and,
// on Linux, when the process that started it dies); each peer's data lives in a
// temporary directory removed on Stop.
package peers

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrUnavailable is wrapped by the error of a Start function when Java or a peer's jars
// are missing; run `bash .ci/peers` to fetch them.
var ErrUnavailable = errors.New("peers: " + SkipMessage)

// SkipMessage says what a skipped peer test needs; the test helpers skip with
// ErrUnavailable's message, which holds it.
const SkipMessage = "needs Java and the peer jars: run bash .ci/peers"

// Versions of the peers, as pinned in internal/peers/maven and internal/peers/javadriver.
const (
	RocketMQVersion  = "4.9.7" // Apache RocketMQ name server, broker and Java client
	RocketMQ5Version = "5.3.3" // Apache RocketMQ name server, broker and proxy (LOCAL mode)
	Client5Version   = "5.0.8" // the official RocketMQ 5 Java client (gRPC), in driver5
	KafkaVersion     = "4.1.0" // Apache Kafka server (KRaft) and clients
)

// Dir is the peers' cache directory: $SLUICE_PEERS_DIR, or $HOME/.cache/sluice-peers.
func Dir() string {
	if d := os.Getenv("SLUICE_PEERS_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "sluice-peers")
	}
	return filepath.Join(home, ".cache", "sluice-peers")
}

// javaPath finds the java launcher: $JAVA_HOME/bin/java, else java on PATH.
func javaPath() (string, error) {
	if h := os.Getenv("JAVA_HOME"); h != "" {
		p := filepath.Join(h, "bin", "java")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("%w (no java on PATH)", ErrUnavailable)
	}
	return p, nil
}

// classPath returns the class path "<dir>/<part>/lib/*" (plus extra entries first), or an
// error wrapping ErrUnavailable when that folder holds no jar.
func classPath(part string, extra ...string) (string, error) {
	lib := filepath.Join(Dir(), part, "lib")
	jars, _ := filepath.Glob(filepath.Join(lib, "*.jar"))
	if len(jars) == 0 {
		return "", fmt.Errorf("%w (no jars in %s)", ErrUnavailable, lib)
	}
	cp := ""
	for _, e := range extra {
		if _, err := os.Stat(e); err != nil {
			return "", fmt.Errorf("%w (missing %s)", ErrUnavailable, e)
		}
		cp += e + string(os.PathListSeparator)
	}
	return cp + filepath.Join(lib, "*"), nil
}

// serverParts is what a launcher of the Apache servers in dist (a folder under [Dir])
// needs: the java launcher, the class path, and the loopback agent (the driver's jar,
// which keeps the servers' listeners on loopback). Errors wrap ErrUnavailable when one
// is missing.
func serverParts(dist string) (java, cp, agent string, err error) {
	if java, err = javaPath(); err != nil {
		return "", "", "", err
	}
	if cp, err = classPath(dist); err != nil {
		return "", "", "", err
	}
	agent = driverJar()
	if _, err := os.Stat(agent); err != nil {
		return "", "", "", fmt.Errorf("%w (missing %s)", ErrUnavailable, agent)
	}
	return java, cp, agent, nil
}

// driverJar is the Java driver's jar (also the loopback agent).
func driverJar() string { return filepath.Join(Dir(), "driver", "driver.jar") }

// driver5Jar is the jar of the Java driver for RocketMQ 5 clients.
func driver5Jar() string { return filepath.Join(Dir(), "driver5", "driver5.jar") }

// Available reports whether Java and the jars of part ("rocketmq", "rocketmq5", "kafka",
// "driver" or "driver5")
// are there: nil, or an error wrapping ErrUnavailable that says what is missing.
func Available(part string) error {
	if _, err := javaPath(); err != nil {
		return err
	}
	var extra []string
	switch part {
	case "rocketmq", "rocketmq5", "driver":
		extra = append(extra, driverJar()) // the loopback agent
	case "driver5":
		extra = append(extra, driver5Jar())
	}
	_, err := classPath(part, extra...)
	return err
}

// Peer ports are picked at random in [portLow, portHigh), below Linux's default range of
// ephemeral ports (32768-60999): a JVM binds its ports seconds after they were chosen,
// and a port from the ephemeral range may be taken meanwhile as the local port of some
// outgoing connection. A peer that still loses a port is started again on new ones
// (startAttempts).
const (
	portLow       = 20000
	portHigh      = 32000
	startAttempts = 3
)

// freePorts returns n distinct free TCP ports on 127.0.0.1 (held open together while
// chosen, then released).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for try := 0; len(ports) < n; try++ {
		addr := "127.0.0.1:0"
		if try < 500 {
			addr = "127.0.0.1:" + strconv.Itoa(portLow+mrand.IntN(portHigh-portLow))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if try < 500 {
				continue
			}
			return nil, fmt.Errorf("peers: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lostPort reports whether a start failed because a process could not bind its port.
func lostPort(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Address already in use")
}

// freeTriple returns a port p such that p-2, p and p+1 are free on 127.0.0.1: the
// RocketMQ 4.9 broker listens on listenPort, on listenPort-2 (its "fast" channel, which
// it derives and cannot be told) and, here, on listenPort+1 for HA.
func freeTriple() (int, error) {
	for try := 0; try < 100; try++ {
		ps, err := freePorts(1)
		if err != nil {
			return 0, err
		}
		p := ps[0]
		if p < 1026 || p > 65533 {
			continue
		}
		ok := true
		var ls []net.Listener
		for _, q := range []int{p - 2, p, p + 1} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			_ = l.Close()
		}
		if ok {
			return p, nil
		}
	}
	return 0, errors.New("peers: no three free loopback ports p-2, p, p+1 after 100 tries")
}
