package peers

import (
	"os"
	"os/exec"
	"path/filepath"
)

// DriverArgv returns the command line that runs the Java driver (internal/peers/javadriver:
// the RocketMQ 4.9 Java client as a command-line program) with home as the JVM's
// user.home and the client's log root: java, its JVM flags, -cp, the class path and the
// main class, to which the caller appends the driver's arguments. The error wraps
// [ErrUnavailable] when Java or the driver's jars are absent.
func DriverArgv(home string) ([]string, error) {
	java, err := javaPath()
	if err != nil {
		return nil, err
	}
	cp, err := classPath("driver", driverJar())
	if err != nil {
		return nil, err
	}
	return []string{java, "-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Duser.home=" + home, "-Drocketmq.client.logRoot=" + filepath.Join(home, "logs"), "-cp", cp, "io.sluicemq.peers.Driver"}, nil
}

// Driver5Argv returns the command line that runs the Java driver for RocketMQ 5 clients
// (internal/peers/javadriver5: the official Java client 5.x, gRPC, as a command-line
// program) with home as the JVM's user.home (where the client writes its logs): java, its
// JVM flags, -cp, the class path and the main class, to which the caller appends the
// command and its arguments (see Driver5.java). The error wraps [ErrUnavailable] when Java
// or the driver's jars are absent.
func Driver5Argv(home string) ([]string, error) {
	java, err := javaPath()
	if err != nil {
		return nil, err
	}
	cp, err := classPath("driver5", driver5Jar())
	if err != nil {
		return nil, err
	}
	return []string{java, "-Xms32m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Duser.home=" + home, "-Drocketmq.log.root=" + filepath.Join(home, "logs"), "-cp", cp, "io.sluicemq.peers5.Driver5"}, nil
}

// Command returns the command argv[0] argv[1:] with this process's environment, set up
// as every peer process runs: in its own process group (so [KillGroup] reaches its whole
// tree) and, on Linux, killed when this process dies.
func Command(argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	setProcAttr(cmd)
	return cmd
}

// KillGroup sends SIGKILL to the process group of cmd, a started [Command] (on systems
// without process groups it kills the process alone).
func KillGroup(cmd *exec.Cmd) { signalGroup(cmd, true) }

// Tail is an io.Writer that keeps the last bytes written to it (a process's output, for
// error messages). Safe for concurrent use.
type Tail = tail

// NewTail returns a Tail keeping the last max bytes.
func NewTail(max int) *Tail { return &tail{max: max} }
