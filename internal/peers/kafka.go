package peers

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// KafkaOptions configures [LaunchKafka]. The zero value is usable.
type KafkaOptions struct {
	// Nodes is the number of combined controller+broker nodes: 1 (default) or 3.
	Nodes int
	// JVMFlags are given to each JVM. Default: small heaps with the serial collector (-Xms128m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1).
	JVMFlags []string
	// ServerConf is added to (and overrides) each node's server.properties.
	ServerConf map[string]string
	// Log receives the processes' output as it comes (nil: kept only for errors).
	Log io.Writer
	// StartTimeout bounds the start, until every node is listed in the cluster's
	// metadata. Default 120 s.
	StartTimeout time.Duration
}

// Kafka is an Apache Kafka 4 cluster in KRaft mode: Nodes combined controller+broker
// JVM processes on free loopback ports. Stop ends them and removes their data.
type Kafka struct {
	// Brokers are the nodes' client listeners, "127.0.0.1:port", node i+1 at index i.
	Brokers []string

	dir      string
	java     []string // java + flags + class path, before the main class
	confs    []string // each node's server.properties
	mu       sync.Mutex
	nodes    []*proc
	stopOnce sync.Once
	stopErr  error
	log      io.Writer
}

// log4j2Conf sends Kafka's warnings and errors to stdout.
const log4j2Conf = `status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %-5level %c{1} - %m%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = OUT
`

// LaunchKafka formats and starts an Apache Kafka 4 KRaft cluster of opt.Nodes combined
// controller+broker nodes (a static controller quorum) on free 127.0.0.1 ports over a new
// temporary directory, and waits until the metadata lists every node. Replication
// defaults follow the node count (offsets and transaction topics replicated
// min(3, nodes) times, min.insync.replicas 1). A start that fails because a port was
// taken meanwhile is tried again on new ports (three tries). Errors: ErrUnavailable (wrapped) without
// Java or the jars; Nodes not 1..3; a node that exits or a start past StartTimeout (with
// the processes' last output).
func LaunchKafka(ctx context.Context, opt KafkaOptions) (*Kafka, error) {
	for attempt := 1; ; attempt++ {
		k, err := launchKafka(ctx, opt)
		if !lostPort(err) || attempt == startAttempts || ctx.Err() != nil {
			return k, err
		}
	}
}

func launchKafka(ctx context.Context, opt KafkaOptions) (*Kafka, error) {
	if opt.Nodes == 0 {
		opt.Nodes = 1
	}
	if opt.Nodes < 1 || opt.Nodes > 3 {
		return nil, fmt.Errorf("peers: kafka Nodes %d: must be 1..3", opt.Nodes)
	}
	java, err := javaPath()
	if err != nil {
		return nil, err
	}
	cp, err := classPath("kafka")
	if err != nil {
		return nil, err
	}
	if opt.JVMFlags == nil {
		opt.JVMFlags = slices.Clone(testJVMFlags)
	}
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = 120 * time.Second
	}
	dir, err := os.MkdirTemp("", "sluice-peer-kafka-")
	if err != nil {
		return nil, err
	}
	k := &Kafka{dir: dir, log: opt.Log, nodes: make([]*proc, opt.Nodes)}
	ok := false
	defer func() {
		if !ok {
			_ = k.Stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, "log4j2.properties"), []byte(log4j2Conf), 0o644); err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * opt.Nodes)
	if err != nil {
		return nil, err
	}
	var voters []string
	for i := 0; i < opt.Nodes; i++ {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, ports[2*i+1]))
		k.Brokers = append(k.Brokers, "127.0.0.1:"+strconv.Itoa(ports[2*i]))
	}
	rf := strconv.Itoa(min(3, opt.Nodes))
	k.java = append(append([]string{java}, opt.JVMFlags...),
		"-Dlog4j2.configurationFile="+filepath.Join(dir, "log4j2.properties"), "-cp", cp)
	clusterID, err := kafkaClusterID()
	if err != nil {
		return nil, err
	}
	for i := 0; i < opt.Nodes; i++ {
		conf := map[string]string{
			"process.roles":                                    "broker,controller",
			"node.id":                                          strconv.Itoa(i + 1),
			"controller.quorum.voters":                         strings.Join(voters, ","),
			"listeners":                                        fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", ports[2*i], ports[2*i+1]),
			"advertised.listeners":                             fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", ports[2*i]),
			"controller.listener.names":                        "CONTROLLER",
			"inter.broker.listener.name":                       "PLAINTEXT",
			"listener.security.protocol.map":                   "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"log.dirs":                                         filepath.Join(dir, fmt.Sprintf("node%d", i+1)),
			"num.partitions":                                   "1",
			"default.replication.factor":                       rf,
			"min.insync.replicas":                              "1",
			"offsets.topic.replication.factor":                 rf,
			"offsets.topic.num.partitions":                     "5",
			"transaction.state.log.replication.factor":         rf,
			"transaction.state.log.min.isr":                    "1",
			"transaction.state.log.num.partitions":             "5",
			"share.coordinator.state.topic.replication.factor": rf,
			"share.coordinator.state.topic.min.isr":            "1",
			"group.initial.rebalance.delay.ms":                 "0",
			"auto.create.topics.enable":                        "true",
			"num.network.threads":                              "2",
			"num.io.threads":                                   "2",
			"log.segment.bytes":                                strconv.Itoa(16 << 20),
		}
		for key, v := range opt.ServerConf {
			conf[key] = v
		}
		path := filepath.Join(dir, fmt.Sprintf("server%d.properties", i+1))
		if err := writeProps(path, conf); err != nil {
			return nil, err
		}
		k.confs = append(k.confs, path)
	}
	// Format every node's log directory (kafka-storage format); the nodes share the
	// cluster id. The formats run in parallel: each is a JVM start.
	errs := make([]error, opt.Nodes)
	var wg sync.WaitGroup
	for i := range k.confs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			// --cluster-id=ID (one argument): kafkaClusterID never starts with "-", and
			// this form could not be mistaken for an option even if it did.
			args := append(append([]string{}, k.java...), "kafka.tools.StorageTool", "format", "--cluster-id="+clusterID, "-c", k.confs[i])
			p, err := startProc(fmt.Sprintf("kafka storage format node %d", i+1), args, dir, nil, opt.Log)
			if err != nil {
				errs[i] = err
				return
			}
			select {
			case <-p.done:
				if p.err != nil {
					errs[i] = fmt.Errorf("peers: %s", p.diag())
				}
			case <-ctx.Done():
				_ = p.stop(time.Second)
				errs[i] = ctx.Err()
			}
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i := range k.confs {
		if err := k.startNode(i); err != nil {
			return nil, err
		}
	}
	if err := k.WaitReady(ctx, opt.StartTimeout); err != nil {
		return nil, err
	}
	ok = true
	return k, nil
}

// kafkaClusterID returns a new KRaft cluster id as `kafka-storage random-uuid` prints
// it (Kafka's Uuid.randomUuid, org.apache.kafka.common.Uuid): a version-4, variant-2
// random UUID in URL-safe base64 without padding (22 characters), never the reserved
// all-zero or ...01 ids and never one whose text starts with "-". The last rule
// matters: kafka-storage's argument parser takes "-t -abc..." for a missing value
// ("argument --cluster-id/-t: expected one argument"), which happened for 1 start in
// 64 when the id was 16 plain random bytes.
func kafkaClusterID() (string, error) {
	for i := 0; i < 1000; i++ { // P(1000 rejections) = 64^-1000: never
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("peers: kafka cluster id: %w", err)
		}
		b[6] = b[6]&0x0f | 0x40 // version 4
		b[8] = b[8]&0x3f | 0x80 // variant 2 (RFC 4122)
		id := base64.RawURLEncoding.EncodeToString(b[:])
		if !strings.HasPrefix(id, "-") {
			return id, nil // version bits set: never the reserved 0 or 1 id
		}
	}
	return "", errors.New("peers: kafka cluster id: every random id started with \"-\"")
}

func (k *Kafka) startNode(i int) error {
	args := append(append([]string{}, k.java...), "kafka.Kafka", k.confs[i])
	p, err := startProc(fmt.Sprintf("kafka node %d", i+1), args, k.dir, nil, k.log)
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.nodes[i] = p
	k.mu.Unlock()
	return nil
}

// running returns the processes of the nodes that have not been stopped.
func (k *Kafka) running() []*proc {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ps []*proc
	for _, p := range k.nodes {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// WaitReady waits (at most timeout) until a running node answers a metadata request
// listing every running node. Errors: a node exited, or the timeout passed (with the
// nodes' last output).
func (k *Kafka) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tr := &kafkago.Transport{} // its own connection pools, closed on return (the default transport's live forever)
	defer tr.CloseIdleConnections()
	return waitUntil(ctx, "kafka metadata", func(ctx context.Context) error {
		want := map[string]bool{}
		k.mu.Lock()
		for i, p := range k.nodes {
			if p != nil {
				want[k.Brokers[i]] = true
			}
		}
		k.mu.Unlock()
		var last error = errors.New("no running node")
		for addr := range want {
			rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
			md, err := (&kafkago.Client{Addr: kafkago.TCP(addr), Transport: tr}).Metadata(rctx, &kafkago.MetadataRequest{})
			rcancel()
			if err != nil {
				last = err
				continue
			}
			seen := 0
			for _, b := range md.Brokers {
				if want[fmt.Sprintf("%s:%d", b.Host, b.Port)] {
					seen++
				}
			}
			if seen == len(want) {
				return nil
			}
			last = fmt.Errorf("metadata from %s lists %d of %d running nodes", addr, seen, len(want))
		}
		return last
	}, k.running()...)
}

// StopNode kills node i (0-based; SIGKILL to its process group, as a crash) and leaves
// its data, so [Kafka.StartNode] can bring it back.
func (k *Kafka) StopNode(i int) error {
	k.mu.Lock()
	if i < 0 || i >= len(k.nodes) {
		k.mu.Unlock()
		return fmt.Errorf("peers: kafka node %d: out of range 0..%d", i, len(k.nodes)-1)
	}
	p := k.nodes[i]
	k.nodes[i] = nil
	k.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.kill() // SIGKILL alone, as a crash (no SIGTERM first: no shutdown hook runs)
}

// StartNode starts node i again after [Kafka.StopNode] and waits (at most timeout) until
// the cluster lists it. A running node is left alone.
func (k *Kafka) StartNode(ctx context.Context, i int, timeout time.Duration) error {
	k.mu.Lock()
	if i < 0 || i >= len(k.nodes) {
		k.mu.Unlock()
		return fmt.Errorf("peers: kafka node %d: out of range 0..%d", i, len(k.nodes)-1)
	}
	running := k.nodes[i] != nil
	k.mu.Unlock()
	if !running {
		if err := k.startNode(i); err != nil {
			return err
		}
	}
	return k.WaitReady(ctx, timeout)
}

// Output returns the nodes' last output, for diagnostics.
func (k *Kafka) Output() string {
	s := ""
	for _, p := range k.running() {
		s += p.diag() + "\n"
	}
	return s
}

// Stop kills every node (SIGTERM, SIGKILL after 5 s, to the process groups) and removes
// the temporary directory. It is safe to call more than once.
func (k *Kafka) Stop() error {
	k.stopOnce.Do(func() {
		var errs []error
		for i := range k.nodes {
			errs = append(errs, k.StopNodeGraceful(i))
		}
		errs = append(errs, os.RemoveAll(k.dir))
		k.stopErr = errors.Join(errs...)
	})
	return k.stopErr
}

// StopNodeGraceful stops node i with SIGTERM (SIGKILL after 5 s) and leaves its data.
func (k *Kafka) StopNodeGraceful(i int) error {
	k.mu.Lock()
	if i < 0 || i >= len(k.nodes) {
		k.mu.Unlock()
		return fmt.Errorf("peers: kafka node %d: out of range 0..%d", i, len(k.nodes)-1)
	}
	p := k.nodes[i]
	k.nodes[i] = nil
	k.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.stop(5 * time.Second)
}
