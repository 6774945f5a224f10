package peers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/admin"
)

// Apache RocketMQ 4.9 cluster modes for [RocketMQClusterOptions.Mode].
const (
	// ModeSyncMaster runs each broker group as a SYNC_MASTER and its slaves: a send is
	// answered after a slave has the message (or with FLUSH_SLAVE_TIMEOUT /
	// SLAVE_NOT_AVAILABLE).
	ModeSyncMaster = "SYNC_MASTER"
	// ModeAsyncMaster runs each group as an ASYNC_MASTER and its slaves: a send is
	// answered once the master has it; slaves copy it afterwards.
	ModeAsyncMaster = "ASYNC_MASTER"
	// ModeDLedger runs each group as a DLedger (Raft) group of DLedgerNodes brokers with
	// enableDLegerCommitLog: the group elects its master and elects a new one when the
	// master dies.
	ModeDLedger = "DLEDGER"
)

// RocketMQClusterOptions configures [LaunchRocketMQCluster]. The zero value is two
// SYNC_MASTER groups of one master and one slave each.
type RocketMQClusterOptions struct {
	// Mode is ModeSyncMaster (default), ModeAsyncMaster or ModeDLedger.
	Mode string
	// Groups is the number of broker groups (broker names broker-a, broker-b, ...):
	// 1..4. Default: 2 in master/slave modes, 1 in DLedger mode.
	Groups int
	// Slaves is the number of slaves per master in master/slave modes: 0..2.
	// Default 1.
	Slaves int
	// DLedgerNodes is the number of brokers per group in DLedger mode: 3 or 5.
	// Default 3.
	DLedgerNodes int
	// JVMFlags are given to every JVM. Default: small heaps with the serial collector (-Xms128m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1).
	JVMFlags []string
	// BrokerConf is added to (and overrides) every broker's broker.conf.
	BrokerConf map[string]string
	// NamesrvConf is added to (and overrides) the name server's namesrv.conf, e.g.
	// orderMessageEnable=true so that routes carry a topic's orderTopicConf.
	NamesrvConf map[string]string
	// Log receives every process's output as it comes (nil: kept only for errors).
	Log io.Writer
	// StartTimeout bounds the start, until every broker is registered (each group has
	// its master, and every slave in master/slave modes). Default 300 s.
	StartTimeout time.Duration
}

// ClusterBroker is one broker process of a [RocketMQCluster].
type ClusterBroker struct {
	// Name is the broker name (its group): "broker-a", "broker-b", ...
	Name string
	// ID is the configured broker id in master/slave modes (0 master, 1.. slaves); in
	// DLedger mode the node's index in its group (the elected master registers as id 0,
	// the others as their DLedger self id's number).
	ID int
	// Addr is the broker's "127.0.0.1:port".
	Addr string
	// DLedgerSelfID is the node's dLegerSelfId ("n0", "n1", ...) in DLedger mode.
	DLedgerSelfID string

	conf string
	p    *proc
}

// RocketMQCluster is an Apache RocketMQ 4.9 name server and several brokers, each a JVM
// process on free loopback ports with its own store directory. Brokers can be killed
// (SIGKILL, data kept) and started again; Stop ends everything and removes the data.
type RocketMQCluster struct {
	// NamesrvAddr is the name server's "127.0.0.1:port".
	NamesrvAddr string
	// Cluster is the brokers' cluster name ("DefaultCluster").
	Cluster string
	// Mode is the cluster's mode (ModeSyncMaster, ModeAsyncMaster, ModeDLedger).
	Mode string
	// Brokers are the broker processes, group by group (in master/slave modes the
	// master first).
	Brokers []*ClusterBroker

	dir      string
	jvm      []string
	log      io.Writer
	mu       sync.Mutex
	namesrv  *proc
	stopOnce sync.Once
	stopErr  error
}

// LaunchRocketMQCluster starts an Apache RocketMQ 4.9 name server and the brokers opt
// describes, all on 127.0.0.1 (the driver jar's java agent binds the remoting, HA and
// DLedger listeners to loopback: 4.9 has no bind-address setting and binds the HA port,
// listenPort+1, to the wildcard address otherwise), and waits until every broker is
// registered. Every broker has its own store directory under one temporary directory.
// A start that fails because a port was taken meanwhile is tried again on new ports
// (three tries). Errors: ErrUnavailable (wrapped) without Java or the jars; options out
// of range; a process that exits or a start past StartTimeout (with its last output).
func LaunchRocketMQCluster(ctx context.Context, opt RocketMQClusterOptions) (*RocketMQCluster, error) {
	if err := opt.setDefaults(); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		c, err := launchRocketMQCluster(ctx, opt)
		if !lostPort(err) || attempt == startAttempts || ctx.Err() != nil {
			return c, err
		}
	}
}

func (o *RocketMQClusterOptions) setDefaults() error {
	if o.Mode == "" {
		o.Mode = ModeSyncMaster
	}
	switch o.Mode {
	case ModeSyncMaster, ModeAsyncMaster:
		if o.Groups == 0 {
			o.Groups = 2
		}
		if o.Slaves == 0 {
			o.Slaves = 1
		}
		if o.Slaves < 0 || o.Slaves > 2 {
			return fmt.Errorf("peers: rocketmq cluster Slaves %d: must be 0..2", o.Slaves)
		}
	case ModeDLedger:
		if o.Groups == 0 {
			o.Groups = 1
		}
		if o.DLedgerNodes == 0 {
			o.DLedgerNodes = 3
		}
		if o.DLedgerNodes != 3 && o.DLedgerNodes != 5 {
			return fmt.Errorf("peers: rocketmq cluster DLedgerNodes %d: must be 3 or 5", o.DLedgerNodes)
		}
	default:
		return fmt.Errorf("peers: rocketmq cluster Mode %q: must be %s, %s or %s", o.Mode, ModeSyncMaster, ModeAsyncMaster, ModeDLedger)
	}
	if o.Groups < 1 || o.Groups > 4 {
		return fmt.Errorf("peers: rocketmq cluster Groups %d: must be 1..4", o.Groups)
	}
	if o.JVMFlags == nil {
		o.JVMFlags = slices.Clone(testJVMFlags)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 300 * time.Second
	}
	return nil
}

func launchRocketMQCluster(ctx context.Context, opt RocketMQClusterOptions) (*RocketMQCluster, error) {
	java, cp, agent, err := serverParts("rocketmq")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-peer-rocketmq-cluster-")
	if err != nil {
		return nil, err
	}
	c := &RocketMQCluster{dir: dir, Cluster: "DefaultCluster", Mode: opt.Mode, log: opt.Log}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
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
	nsPort, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	c.NamesrvAddr = "127.0.0.1:" + strconv.Itoa(nsPort[0])
	nsConf := map[string]string{"listenPort": strconv.Itoa(nsPort[0])}
	for k, v := range opt.NamesrvConf {
		nsConf[k] = v
	}
	if err := writeProps(filepath.Join(dir, "namesrv.conf"), nsConf); err != nil {
		return nil, err
	}

	perGroup := 1 + opt.Slaves
	if opt.Mode == ModeDLedger {
		perGroup = opt.DLedgerNodes
	}
	used := map[int]bool{}
	for g := 0; g < opt.Groups; g++ {
		name := "broker-" + string(rune('a'+g))
		var peers []string
		var group []*ClusterBroker
		for i := 0; i < perGroup; i++ {
			port, err := freeTripleAvoiding(used)
			if err != nil {
				return nil, err
			}
			b := &ClusterBroker{Name: name, ID: i, Addr: "127.0.0.1:" + strconv.Itoa(port)}
			home := filepath.Join(dir, fmt.Sprintf("%s-%d", name, i))
			conf := map[string]string{
				"brokerClusterName":       c.Cluster,
				"brokerName":              name,
				"brokerIP1":               "127.0.0.1",
				"brokerIP2":               "127.0.0.1", // the HA address masters register for their slaves
				"listenPort":              strconv.Itoa(port),
				"haListenPort":            strconv.Itoa(port + 1), // 4.9 sets listenPort+1 whatever is configured
				"namesrvAddr":             c.NamesrvAddr,
				"storePathRootDir":        filepath.Join(home, "store"),
				"storePathCommitLog":      filepath.Join(home, "store", "commitlog"),
				"autoCreateTopicEnable":   "true",
				"enablePropertyFilter":    "true",
				"slaveReadEnable":         "true",
				"mappedFileSizeCommitLog": strconv.Itoa(64 << 20),
				"flushDiskType":           "ASYNC_FLUSH",
			}
			if opt.Mode == ModeDLedger {
				dport, err := freeAvoiding(used)
				if err != nil {
					return nil, err
				}
				b.DLedgerSelfID = "n" + strconv.Itoa(i)
				peers = append(peers, fmt.Sprintf("%s-127.0.0.1:%d", b.DLedgerSelfID, dport))
				conf["enableDLegerCommitLog"] = "true"
				conf["dLegerGroup"] = name
				conf["dLegerSelfId"] = b.DLedgerSelfID
				conf["storePathRootDir"] = filepath.Join(home, "store")
			} else {
				conf["brokerId"] = strconv.Itoa(i)
				if i == 0 {
					conf["brokerRole"] = opt.Mode
				} else {
					conf["brokerRole"] = "SLAVE"
				}
			}
			for k, v := range opt.BrokerConf {
				conf[k] = v
			}
			b.conf = filepath.Join(dir, fmt.Sprintf("%s-%d.conf", name, i))
			if err := writeProps(b.conf, conf); err != nil {
				return nil, err
			}
			group = append(group, b)
		}
		if opt.Mode == ModeDLedger {
			for _, b := range group {
				if err := appendProps(b.conf, map[string]string{"dLegerPeers": strings.Join(peers, ";")}); err != nil {
					return nil, err
				}
			}
		}
		c.Brokers = append(c.Brokers, group...)
	}

	c.jvm = append([]string{java}, opt.JVMFlags...)
	c.jvm = append(c.jvm, javaOpens...)
	c.jvm = append(c.jvm, "-javaagent:"+agent, "-Duser.home="+filepath.Join(dir, "home"),
		"-Drocketmq.home.dir="+dir, "-Drocketmq.client.logRoot="+filepath.Join(dir, "logs"), "-cp", cp)
	nsArgs := append(append([]string{}, c.jvm...), "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", filepath.Join(dir, "namesrv.conf"))
	if c.namesrv, err = startProc("rocketmq name server", nsArgs, dir, nil, opt.Log); err != nil {
		return nil, err
	}
	for i := range c.Brokers {
		if err := c.startBroker(i); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()
	if err := c.waitAll(wctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// freeTripleAvoiding is freeTriple that also skips ports already given out in used
// (the ports are only bound once the JVMs start), and records the three it returns.
func freeTripleAvoiding(used map[int]bool) (int, error) {
	for try := 0; try < 50; try++ {
		p, err := freeTriple()
		if err != nil {
			return 0, err
		}
		if used[p-2] || used[p] || used[p+1] {
			continue
		}
		used[p-2], used[p], used[p+1] = true, true, true
		return p, nil
	}
	return 0, errors.New("peers: no unused free port triple after 50 tries")
}

// freeAvoiding returns one free port not in used and records it.
func freeAvoiding(used map[int]bool) (int, error) {
	for try := 0; try < 50; try++ {
		ps, err := freePorts(1)
		if err != nil {
			return 0, err
		}
		if !used[ps[0]] {
			used[ps[0]] = true
			return ps[0], nil
		}
	}
	return 0, errors.New("peers: no unused free port after 50 tries")
}

// appendProps adds m's keys to an existing properties file.
func appendProps(path string, m map[string]string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	for k, v := range m {
		if _, err := fmt.Fprintf(f, "%s=%s\n", k, v); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

func (c *RocketMQCluster) startBroker(i int) error {
	b := c.Brokers[i]
	args := append(append([]string{}, c.jvm...), "org.apache.rocketmq.broker.BrokerStartup", "-c", b.conf)
	p, err := startProc(fmt.Sprintf("rocketmq broker %s/%d (%s)", b.Name, b.ID, b.Addr), args, c.dir, nil, c.log)
	if err != nil {
		return err
	}
	c.mu.Lock()
	b.p = p
	c.mu.Unlock()
	return nil
}

// running returns the processes that have not been killed or stopped, name server first.
func (c *RocketMQCluster) running() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ps []*proc
	if c.namesrv != nil {
		ps = append(ps, c.namesrv)
	}
	for _, b := range c.Brokers {
		if b.p != nil {
			ps = append(ps, b.p)
		}
	}
	return ps
}

// admin returns an admin client of the cluster's name server (closed by the caller).
func (c *RocketMQCluster) admin() (*admin.Admin, error) {
	return admin.New(admin.Config{NamesrvAddrs: []string{c.NamesrvAddr}, Timeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// waitAll waits until the name server lists a master for every group and, in
// master/slave modes, every running broker at its id.
func (c *RocketMQCluster) waitAll(ctx context.Context) error {
	adm, err := c.admin()
	if err != nil {
		return err
	}
	defer func() { _ = adm.Close() }()
	return waitUntil(ctx, "cluster registration", func(ctx context.Context) error {
		ci, err := adm.ClusterInfo(ctx)
		if err != nil {
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, b := range c.Brokers {
			bd := ci.BrokerAddrTable[b.Name]
			if bd == nil || bd.BrokerAddrs[0] == "" {
				return fmt.Errorf("no master of %s registered yet", b.Name)
			}
			if c.Mode == ModeDLedger || b.p == nil {
				continue
			}
			if bd.BrokerAddrs[int64(b.ID)] != b.Addr {
				return fmt.Errorf("broker %s/%d (%s) not registered yet", b.Name, b.ID, b.Addr)
			}
		}
		if c.Mode == ModeDLedger {
			// every running node registered, as master (id 0) or follower (another id)
			for _, b := range c.Brokers {
				if b.p == nil {
					continue
				}
				found := false
				for _, a := range ci.BrokerAddrTable[b.Name].BrokerAddrs {
					found = found || a == b.Addr
				}
				if !found {
					return fmt.Errorf("dledger node %s/%s (%s) not registered yet", b.Name, b.DLedgerSelfID, b.Addr)
				}
			}
		}
		return nil
	}, c.running()...)
}

// MasterAddr returns the address the name server lists as brokerName's master (id 0), or
// "" when it lists none.
func (c *RocketMQCluster) MasterAddr(ctx context.Context, brokerName string) (string, error) {
	adm, err := c.admin()
	if err != nil {
		return "", err
	}
	defer func() { _ = adm.Close() }()
	ci, err := adm.ClusterInfo(ctx)
	if err != nil {
		return "", err
	}
	if bd := ci.BrokerAddrTable[brokerName]; bd != nil {
		return bd.BrokerAddrs[0], nil
	}
	return "", nil
}

// WaitMaster waits (at most timeout) until the name server lists a master of brokerName
// at an address other than not ("" accepts any) and returns the index in Brokers of that
// master.
func (c *RocketMQCluster) WaitMaster(ctx context.Context, brokerName, not string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	adm, err := c.admin()
	if err != nil {
		return -1, err
	}
	defer func() { _ = adm.Close() }()
	idx := -1
	err = waitUntil(ctx, "master of "+brokerName, func(ctx context.Context) error {
		ci, err := adm.ClusterInfo(ctx)
		if err != nil {
			return err
		}
		bd := ci.BrokerAddrTable[brokerName]
		if bd == nil || bd.BrokerAddrs[0] == "" || bd.BrokerAddrs[0] == not {
			return fmt.Errorf("no new master of %s listed", brokerName)
		}
		for i, b := range c.Brokers {
			if b.Addr == bd.BrokerAddrs[0] {
				idx = i
				return nil
			}
		}
		return fmt.Errorf("master %s of %s is no broker of this cluster", bd.BrokerAddrs[0], brokerName)
	}, c.namesrv)
	return idx, err
}

// Kill kills broker i (index in Brokers) with SIGKILL to its process group, as a crash,
// and keeps its store so [RocketMQCluster.Restart] brings it back. Killing a killed
// broker is a no-op.
func (c *RocketMQCluster) Kill(i int) error {
	c.mu.Lock()
	if i < 0 || i >= len(c.Brokers) {
		c.mu.Unlock()
		return fmt.Errorf("peers: rocketmq cluster broker %d: out of range 0..%d", i, len(c.Brokers)-1)
	}
	p := c.Brokers[i].p
	c.Brokers[i].p = nil
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.kill()
}

// Restart starts broker i again after [RocketMQCluster.Kill] (a running broker is left
// alone) once the name server has dropped its old registration, and waits (at most timeout) until every running broker is registered again.
func (c *RocketMQCluster) Restart(ctx context.Context, i int, timeout time.Duration) error {
	c.mu.Lock()
	if i < 0 || i >= len(c.Brokers) {
		c.mu.Unlock()
		return fmt.Errorf("peers: rocketmq cluster broker %d: out of range 0..%d", i, len(c.Brokers)-1)
	}
	running := c.Brokers[i].p != nil
	b := c.Brokers[i]
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !running {
		// The name server drops a killed broker when its connection closes; until then
		// the old registration would pass for the new process's.
		if err := c.waitUnlisted(ctx, b.Name, b.Addr); err != nil {
			return err
		}
		if err := c.startBroker(i); err != nil {
			return err
		}
	}
	return c.waitAll(ctx)
}

// waitUnlisted waits until the name server lists addr under brokerName no more.
func (c *RocketMQCluster) waitUnlisted(ctx context.Context, brokerName, addr string) error {
	adm, err := c.admin()
	if err != nil {
		return err
	}
	defer func() { _ = adm.Close() }()
	return waitUntil(ctx, "killed broker unlisted", func(ctx context.Context) error {
		ci, err := adm.ClusterInfo(ctx)
		if err != nil {
			return err
		}
		if bd := ci.BrokerAddrTable[brokerName]; bd != nil {
			for _, a := range bd.BrokerAddrs {
				if a == addr {
					return fmt.Errorf("%s still listed under %s", addr, brokerName)
				}
			}
		}
		return nil
	}, c.namesrv)
}

// Pid returns broker i's process id, or 0 when it is killed.
func (c *RocketMQCluster) Pid(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i < 0 || i >= len(c.Brokers) || c.Brokers[i].p == nil {
		return 0
	}
	return c.Brokers[i].p.cmd.Process.Pid
}

// Dir is the temporary directory holding the configurations, logs and stores.
func (c *RocketMQCluster) Dir() string { return c.dir }

// Output returns the running processes' last output, for diagnostics.
func (c *RocketMQCluster) Output() string {
	s := ""
	for _, p := range c.running() {
		s += p.diag() + "\n"
	}
	return s
}

// Stop kills every process (SIGTERM, SIGKILL after 5 s, to the process groups; the
// brokers at once, then the name server) and removes the temporary directory. It is safe to call more than once.
func (c *RocketMQCluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		c.mu.Lock()
		var ps []*proc
		for _, b := range c.Brokers {
			if b.p != nil {
				ps = append(ps, b.p)
				b.p = nil
			}
		}
		ns := c.namesrv
		c.namesrv = nil
		c.mu.Unlock()
		perr := make([]error, len(ps))
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				perr[i] = p.stop(5 * time.Second)
			}()
		}
		wg.Wait()
		errs = append(errs, perr...)
		if ns != nil {
			errs = append(errs, ns.stop(5*time.Second))
		}
		errs = append(errs, os.RemoveAll(c.dir))
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}
