package peers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// RocketMQ5JVMFlags are the heap and compiler flags of the name server and the proxy JVM
// (which, in LOCAL mode, runs the broker too) by default: sized for a 2-core CI machine
// running other tests, the serial collector and the C1 compiler only. The broker in the
// proxy's JVM needs more heap than 4.9's (its timer wheel, POP and the gRPC server).
var (
	RocketMQ5NamesrvFlags = []string{"-Xms64m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}
	RocketMQ5ProxyFlags   = []string{"-Xms192m", "-Xmx384m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}
)

// RocketMQ5Options configures [LaunchRocketMQ5]. The zero value is usable.
type RocketMQ5Options struct {
	// BrokerConf is added to (and overrides) the broker.conf the launcher writes; keys
	// are Apache RocketMQ 5.3 broker settings. The launcher sets brokerClusterName
	// (DefaultCluster), brokerName (broker-a), brokerId, brokerIP1 (127.0.0.1),
	// listenPort, haListenPort, namesrvAddr, storePathRootDir, storePathCommitLog,
	// autoCreateTopicEnable (true) and mappedFileSizeCommitLog (64 MiB).
	BrokerConf map[string]string
	// StoreConfigFiles are written into <storePathRootDir>/config before the start, by
	// file name: e.g. "topics.json" (topics with their message.type attribute) and
	// "subscriptionGroup.json" (groups, consumeMessageOrderly for FIFO), which the
	// broker loads at start.
	StoreConfigFiles map[string]string
	// ProxyConf is added to (and overrides) the proxy's rmq-proxy.json; keys are Apache
	// RocketMQ 5.3 proxy settings (e.g. minInvisibleTimeMillsForRecv). The launcher sets
	// rocketMQClusterName, namesrvAddr, grpcServerPort, remotingListenPort and proxyMode
	// (local).
	ProxyConf map[string]any
	// ProxyJVMFlags replace RocketMQ5ProxyFlags for the proxy's JVM (which runs the
	// broker too) when not nil: a benchmark gives it a larger heap and the JIT's full
	// compiler.
	ProxyJVMFlags []string
	// Log receives both processes' output as it comes (nil: kept only for errors).
	Log io.Writer
	// StartTimeout bounds the start, until the proxy's gRPC port accepts connections
	// and the broker is registered. Default 120 s.
	StartTimeout time.Duration
}

// RocketMQ5 is an Apache RocketMQ 5.3 name server and a proxy in LOCAL mode (the proxy
// and one master broker in one JVM), on free loopback ports. Stop ends them and removes
// their data.
type RocketMQ5 struct {
	// NamesrvAddr is the name server's "127.0.0.1:port".
	NamesrvAddr string
	// BrokerAddr is the broker's remoting "127.0.0.1:port".
	BrokerAddr string
	// GRPCAddr is the proxy's gRPC endpoint, "127.0.0.1:port": where RocketMQ 5 clients
	// connect.
	GRPCAddr string

	dir      string
	namesrv  *proc
	proxy    *proc
	stopOnce sync.Once
	stopErr  error
}

// LaunchRocketMQ5 starts an Apache RocketMQ 5.3 name server and a proxy in LOCAL mode
// (org.apache.rocketmq.proxy.ProxyStartup -pm local, which starts the broker in its JVM)
// as two JVM processes in their own process groups, on free 127.0.0.1 ports (loopback
// only, through the driver jar's java agent), over a new temporary directory, and waits
// until the broker is registered and the gRPC port accepts connections. A start that
// fails because a port was taken meanwhile is tried again on new ports (three tries).
// Errors: ErrUnavailable (wrapped) without Java or the jars (bash .ci/peers); a process
// that exits or a start that exceeds StartTimeout (with the processes' last output).
func LaunchRocketMQ5(ctx context.Context, opt RocketMQ5Options) (*RocketMQ5, error) {
	for attempt := 1; ; attempt++ {
		r, err := launchRocketMQ5(ctx, opt)
		if !lostPort(err) || attempt == startAttempts || ctx.Err() != nil {
			return r, err
		}
	}
}

func launchRocketMQ5(ctx context.Context, opt RocketMQ5Options) (*RocketMQ5, error) {
	java, cp, agent, err := serverParts("rocketmq5")
	if err != nil {
		return nil, err
	}
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = 120 * time.Second
	}
	dir, err := os.MkdirTemp("", "sluice-peer-rocketmq5-")
	if err != nil {
		return nil, err
	}
	r := &RocketMQ5{dir: dir}
	ok := false
	defer func() {
		if !ok {
			_ = r.Stop()
		}
	}()
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(filepath.Join(store, "config"), 0o755); err != nil {
		return nil, err
	}
	for name, content := range opt.StoreConfigFiles {
		if name != filepath.Base(name) {
			return nil, fmt.Errorf("peers: StoreConfigFiles name %q must be a plain file name", name)
		}
		if err := os.WriteFile(filepath.Join(store, "config", name), []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(3) // name server, proxy gRPC, proxy remoting
	if err != nil {
		return nil, err
	}
	bPort, err := freeTriple() // broker: listenPort-2 (fast), listenPort, listenPort+1 (HA)
	if err != nil {
		return nil, err
	}
	r.NamesrvAddr = "127.0.0.1:" + strconv.Itoa(ports[0])
	r.GRPCAddr = "127.0.0.1:" + strconv.Itoa(ports[1])
	r.BrokerAddr = "127.0.0.1:" + strconv.Itoa(bPort)
	conf := map[string]string{
		"brokerClusterName":       "DefaultCluster",
		"brokerName":              "broker-a",
		"brokerId":                "0",
		"brokerIP1":               "127.0.0.1",
		"listenPort":              strconv.Itoa(bPort),
		"haListenPort":            strconv.Itoa(bPort + 1),
		"namesrvAddr":             r.NamesrvAddr,
		"storePathRootDir":        store,
		"storePathCommitLog":      filepath.Join(store, "commitlog"),
		"autoCreateTopicEnable":   "true",
		"mappedFileSizeCommitLog": strconv.Itoa(64 << 20),
	}
	for k, v := range opt.BrokerConf {
		conf[k] = v
	}
	if err := writeProps(filepath.Join(dir, "broker.conf"), conf); err != nil {
		return nil, err
	}
	if err := writeProps(filepath.Join(dir, "namesrv.conf"), map[string]string{"listenPort": strconv.Itoa(ports[0])}); err != nil {
		return nil, err
	}
	pconf := map[string]any{"rocketMQClusterName": conf["brokerClusterName"], "namesrvAddr": r.NamesrvAddr,
		"grpcServerPort": ports[1], "remotingListenPort": ports[2], "proxyMode": "local"}
	for k, v := range opt.ProxyConf {
		pconf[k] = v
	}
	proxyConf, err := json.Marshal(pconf)
	if err != nil {
		return nil, fmt.Errorf("peers: ProxyConf: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rmq-proxy.json"), proxyConf, 0o644); err != nil {
		return nil, err
	}
	jvm := func(flags []string) []string {
		a := append([]string{java}, flags...)
		a = append(a, javaOpens...)
		return append(a, "-javaagent:"+agent, "-Duser.home="+filepath.Join(dir, "home"),
			"-Drocketmq.home.dir="+dir, "-Drocketmq.client.logRoot="+filepath.Join(dir, "logs"), "-cp", cp)
	}
	env := []string{"ROCKETMQ_HOME=" + dir}
	nsArgs := append(jvm(RocketMQ5NamesrvFlags), "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", filepath.Join(dir, "namesrv.conf"))
	if r.namesrv, err = startProc("rocketmq 5 name server", nsArgs, dir, env, opt.Log); err != nil {
		return nil, err
	}
	pxFlags := RocketMQ5ProxyFlags
	if opt.ProxyJVMFlags != nil {
		pxFlags = opt.ProxyJVMFlags
	}
	pxArgs := append(jvm(pxFlags), "org.apache.rocketmq.proxy.ProxyStartup",
		"-pm", "local", "-pc", filepath.Join(dir, "rmq-proxy.json"), "-bc", filepath.Join(dir, "broker.conf"))
	if r.proxy, err = startProc("rocketmq 5 proxy+broker", pxArgs, dir, env, opt.Log); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()
	if err := waitRegistered(ctx, r.NamesrvAddr, conf["brokerName"], r.BrokerAddr, r.namesrv, r.proxy); err != nil {
		return nil, err
	}
	if err := waitUntil(ctx, "proxy gRPC port", func(ctx context.Context) error {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", r.GRPCAddr)
		if err != nil {
			return err
		}
		return c.Close()
	}, r.namesrv, r.proxy); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// Dir is the temporary directory holding the configuration, logs and store.
func (r *RocketMQ5) Dir() string { return r.dir }

// ProxyPid is the process id of the proxy's JVM (proxy and broker), for CPU accounting.
func (r *RocketMQ5) ProxyPid() int { return r.proxy.cmd.Process.Pid }

// Output returns the last output of the name server and the proxy, for diagnostics.
func (r *RocketMQ5) Output() string {
	return diagOf(r.namesrv, r.proxy)
}

// Stop kills both processes (SIGTERM, then SIGKILL after 5 s, to the process groups)
// and removes the temporary directory. It is safe to call more than once.
func (r *RocketMQ5) Stop() error {
	r.stopOnce.Do(func() {
		r.stopErr = stopAll(r.dir, r.proxy, r.namesrv)
	})
	return r.stopErr
}
