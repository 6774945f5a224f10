package peers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/admin"
)

// javaOpens are the JVM flags Apache RocketMQ 4.9 needs on Java 17: its store unmaps
// memory-mapped files through the JDK's internal DirectBuffer cleaner by reflection
// (org.apache.rocketmq.store.MappedFile.clean), which Java 17 refuses without them
// (InaccessibleObjectException at shutdown and when it deletes or swaps a file).
var javaOpens = []string{
	"--add-opens=java.base/java.nio=ALL-UNNAMED",
	"--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
	"--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
	"--add-opens=java.base/java.lang=ALL-UNNAMED",
	"--add-opens=java.base/java.util=ALL-UNNAMED",
	// A broker restarted after SIGKILL destroys its unclean index file at load
	// (IndexService.load → MappedFile.clean), which calls jdk.internal.ref.Cleaner.clean:
	// without this it fails to start (InaccessibleObjectException, exit 253).
	"--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
}

// testJVMFlags are the JVM flags the test helpers use: small heaps (-Xms128m -Xmx256m),
// the serial collector and the C1 compiler only, which start fastest and use the least
// CPU on a small machine.
var testJVMFlags = []string{"-Xms128m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}

// RocketMQOptions configures [LaunchRocketMQ]. The zero value is usable.
type RocketMQOptions struct {
	// JVMFlags are given to both JVMs (heap, collector). Default: small heaps with the serial collector (-Xms128m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1).
	JVMFlags []string
	// BrokerConf is added to (and overrides) the broker.conf the launcher writes; keys
	// are Apache RocketMQ 4.9 broker settings. The launcher sets brokerClusterName
	// (DefaultCluster), brokerName (broker-a), brokerId, brokerIP1 (127.0.0.1),
	// listenPort, haListenPort, namesrvAddr, storePathRootDir, storePathCommitLog,
	// autoCreateTopicEnable (true), enablePropertyFilter (true) and
	// mappedFileSizeCommitLog (64 MiB).
	BrokerConf map[string]string
	// ConfFiles are written into the RocketMQ home's conf directory before the start,
	// by file name: e.g. "plain_acl.yml" with BrokerConf aclEnable=true (the broker reads
	// its ACL accounts from <home>/conf/plain_acl.yml). Default: none.
	ConfFiles map[string]string
	// Log receives both processes' output as it comes (nil: kept only for errors).
	Log io.Writer
	// StartTimeout bounds the start, until the broker is registered. Default 90 s.
	StartTimeout time.Duration
}

// RocketMQ is an Apache RocketMQ name server and one master broker, each a JVM process,
// on free loopback ports. Stop ends them and removes their data.
type RocketMQ struct {
	// NamesrvAddr is the name server's "127.0.0.1:port".
	NamesrvAddr string
	// BrokerAddr is the broker's "127.0.0.1:port".
	BrokerAddr string
	// BrokerName and Cluster are what the broker registers as ("broker-a",
	// "DefaultCluster" unless BrokerConf says otherwise).
	BrokerName, Cluster string

	dir      string
	namesrv  *proc
	broker   *proc
	stopOnce sync.Once
	stopErr  error
}

// logbackConf is the logging setup both JVMs load from <home>/conf (RocketMQ 4.9
// requires the files): warnings and errors to stdout.
const logbackConf = `<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{30} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="OUT"/></root>
</configuration>
`

// LaunchRocketMQ starts an Apache RocketMQ 4.9 name server and broker as two JVM processes
// in their own process groups, on free 127.0.0.1 ports (both listen on loopback only,
// through the driver jar's java agent), over a new temporary directory, and waits until
// the broker is registered with the name server (a GET_BROKER_CLUSTER_INFO query through
// package admin). A start that fails because a port was taken meanwhile is tried again
// on new ports (three tries). Errors: ErrUnavailable (wrapped) without Java or the jars; a process
// that exits or a start that exceeds StartTimeout (with the processes' last output).
func LaunchRocketMQ(ctx context.Context, opt RocketMQOptions) (*RocketMQ, error) {
	for attempt := 1; ; attempt++ {
		r, err := launchRocketMQ(ctx, opt)
		if !lostPort(err) || attempt == startAttempts || ctx.Err() != nil {
			return r, err
		}
	}
}

func launchRocketMQ(ctx context.Context, opt RocketMQOptions) (*RocketMQ, error) {
	java, cp, agent, err := serverParts("rocketmq")
	if err != nil {
		return nil, err
	}
	if opt.JVMFlags == nil {
		opt.JVMFlags = slices.Clone(testJVMFlags)
	}
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = 90 * time.Second
	}
	dir, err := os.MkdirTemp("", "sluice-peer-rocketmq-")
	if err != nil {
		return nil, err
	}
	r := &RocketMQ{dir: dir}
	ok := false
	defer func() {
		if !ok {
			_ = r.Stop()
		}
	}()
	if err := os.MkdirAll(filepath.Join(dir, "conf"), 0o755); err != nil {
		return nil, err
	}
	for _, f := range []string{"logback_namesrv.xml", "logback_broker.xml", "logback_tools.xml"} {
		if err := os.WriteFile(filepath.Join(dir, "conf", f), []byte(logbackConf), 0o644); err != nil {
			return nil, err
		}
	}
	for name, content := range opt.ConfFiles {
		if name != filepath.Base(name) {
			return nil, fmt.Errorf("peers: ConfFiles name %q must be a plain file name", name)
		}
		if err := os.WriteFile(filepath.Join(dir, "conf", name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	nsPort, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	bPort, err := freeTriple()
	if err != nil {
		return nil, err
	}
	r.NamesrvAddr = "127.0.0.1:" + strconv.Itoa(nsPort[0])
	r.BrokerAddr = "127.0.0.1:" + strconv.Itoa(bPort)
	conf := map[string]string{
		"brokerClusterName":       "DefaultCluster",
		"brokerName":              "broker-a",
		"brokerId":                "0",
		"brokerIP1":               "127.0.0.1",
		"listenPort":              strconv.Itoa(bPort),
		"haListenPort":            strconv.Itoa(bPort + 1),
		"namesrvAddr":             r.NamesrvAddr,
		"storePathRootDir":        filepath.Join(dir, "store"),
		"storePathCommitLog":      filepath.Join(dir, "store", "commitlog"),
		"autoCreateTopicEnable":   "true",
		"enablePropertyFilter":    "true",
		"mappedFileSizeCommitLog": strconv.Itoa(64 << 20),
	}
	for k, v := range opt.BrokerConf {
		conf[k] = v
	}
	r.BrokerName, r.Cluster = conf["brokerName"], conf["brokerClusterName"]
	if err := writeProps(filepath.Join(dir, "broker.conf"), conf); err != nil {
		return nil, err
	}
	if err := writeProps(filepath.Join(dir, "namesrv.conf"), map[string]string{"listenPort": strconv.Itoa(nsPort[0])}); err != nil {
		return nil, err
	}
	jvm := append([]string{java}, opt.JVMFlags...)
	jvm = append(jvm, javaOpens...)
	jvm = append(jvm, "-javaagent:"+agent, "-Duser.home="+filepath.Join(dir, "home"),
		"-Drocketmq.home.dir="+dir, "-Drocketmq.client.logRoot="+filepath.Join(dir, "logs"), "-cp", cp)
	nsArgs := append(append([]string{}, jvm...), "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", filepath.Join(dir, "namesrv.conf"))
	if r.namesrv, err = startProc("rocketmq name server", nsArgs, dir, nil, opt.Log); err != nil {
		return nil, err
	}
	brArgs := append(append([]string{}, jvm...), "org.apache.rocketmq.broker.BrokerStartup", "-c", filepath.Join(dir, "broker.conf"))
	if r.broker, err = startProc("rocketmq broker", brArgs, dir, nil, opt.Log); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()
	if err := waitRegistered(ctx, r.NamesrvAddr, r.BrokerName, r.BrokerAddr, r.namesrv, r.broker); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// WaitRegistered polls the name server at namesrvAddr (GET_BROKER_CLUSTER_INFO through
// package admin, every 100 ms) until brokerName's master is registered at brokerAddr
// (any address when brokerAddr is ""), or ctx ends.
func WaitRegistered(ctx context.Context, namesrvAddr, brokerName, brokerAddr string) error {
	return waitRegistered(ctx, namesrvAddr, brokerName, brokerAddr)
}

func waitRegistered(ctx context.Context, namesrvAddr, brokerName, brokerAddr string, procs ...*proc) error {
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{namesrvAddr}, Timeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer func() { _ = adm.Close() }()
	return waitUntil(ctx, "broker registration", func(ctx context.Context) error {
		ci, err := adm.ClusterInfo(ctx)
		if err != nil {
			return err
		}
		bd := ci.BrokerAddrTable[brokerName]
		if bd == nil || bd.BrokerAddrs[0] == "" || (brokerAddr != "" && bd.BrokerAddrs[0] != brokerAddr) {
			return fmt.Errorf("broker %s not registered yet", brokerName)
		}
		return nil
	}, procs...)
}

// writeProps writes a Java properties file, keys sorted.
func writeProps(path string, m map[string]string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, m[k])
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Dir is the temporary directory holding the configuration, logs and store.
func (r *RocketMQ) Dir() string { return r.dir }

// BrokerPid is the broker JVM's process id (for CPU accounting).
func (r *RocketMQ) BrokerPid() int { return r.broker.cmd.Process.Pid }

// Output returns the last output of the name server and the broker, for diagnostics.
func (r *RocketMQ) Output() string {
	return diagOf(r.namesrv, r.broker)
}

// Stop kills both processes (SIGTERM, then SIGKILL after 5 s, to the process groups)
// and removes the temporary directory. It is safe to call more than once.
func (r *RocketMQ) Stop() error {
	r.stopOnce.Do(func() {
		r.stopErr = stopAll(r.dir, r.broker, r.namesrv)
	})
	return r.stopErr
}
