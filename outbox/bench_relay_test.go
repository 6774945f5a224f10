package outbox_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/sqltest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/kafka"
	"github.com/sluicemq/sluice/outbox"
	"github.com/sluicemq/sluice/producer"
)

// Relay throughput, old path (one SendFunc call per row, Concurrency at once) against the
// batch path (RelayConfig.SendBatch); -count repeats each sub-benchmark back to back, so
// alternate old and new with a loop of single runs:
//
//	for i in 1 2 3; do go test -run '^$' -bench 'BenchmarkRelayProcess|BenchmarkRelayKafka' -benchtime 20000x ./outbox/; done
//
// BenchmarkRelayProcess runs the Sluice broker (with its name server) as a child process
// of the test binary, so relay and broker do not share a process (they share the
// machine). Each reports msg/s, and the CPU time per message of the benchmark's process
// (relay, database driver; for SQLite the database too) and, for the child broker, of
// the broker process.

const benchTopic = "OutboxBench"

// envBrokerDir makes the test binary a broker child (TestMain → runChild, role "broker"):
// it serves on the ports of envBrokerAddrs ("broker,namesrv") over this directory, prints
// "ready" and stops when its stdin closes.
const (
	envBrokerDir   = "SLUICE_OUTBOX_CHILD_BROKER_DIR"
	envBrokerAddrs = "SLUICE_OUTBOX_CHILD_BROKER_ADDRS"
)

func runBrokerChild() error {
	addrs := strings.Split(os.Getenv(envBrokerAddrs), ",")
	if len(addrs) != 2 {
		return fmt.Errorf("%s=%q: want broker,namesrv", envBrokerAddrs, os.Getenv(envBrokerAddrs))
	}
	b, stop, err := broker.StartEphemeral(broker.Config{ListenAddr: addrs[0], NamesrvListenAddr: addrs[1],
		StorePathRootDir: os.Getenv(envBrokerDir), Logger: testkit.Quiet()})
	if err != nil {
		return err
	}
	fmt.Println("ready", b.NamesrvAddr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return stop(ctx)
}

// brokerProcess is a Sluice broker child process.
type brokerProcess struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	namesrv string
}

func startBrokerProcess(b *testing.B) *brokerProcess {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), envChild+"=broker", envBrokerDir+"="+b.TempDir(),
		envBrokerAddrs+"="+fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", sqltest.FreePort(b), sqltest.FreePort(b)))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &brokerProcess{cmd: cmd, stdin: stdin}
	b.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				b.Errorf("broker process: %v", err)
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			b.Errorf("broker process did not stop in 60 s; killed")
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				line <- strings.TrimPrefix(sc.Text(), "ready ")
			}
		}
		close(line)
	}()
	select {
	case ns, ok := <-line:
		if !ok {
			b.Fatal("broker process exited before it was ready")
		}
		p.namesrv = ns
	case <-time.After(60 * time.Second):
		b.Fatal("broker process not ready in 60 s")
	}
	adm, err := admin.New(admin.Config{NamesrvAddrs: []string{p.namesrv}, Logger: testkit.Quiet()})
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, admin.TopicSpec{Topic: benchTopic, Queues: 8}); err != nil {
		b.Fatal(err)
	}
	if _, err := adm.WaitTopicRoute(ctx, benchTopic); err != nil {
		b.Fatal(err)
	}
	return p
}

// cpu returns the user+system CPU time the process has used (pid 0: this one).
func cpu(b *testing.B, pid int) time.Duration {
	if pid == 0 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name (which is in parentheses): utime is the 14th field
	// of the line, stime the 15th, in clock ticks (100 per second on Linux).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// relayRun drains b.N rows (256-byte bodies, 1,000 order keys, filled outside the timer)
// with one relay (Start; claims of 500, or $SLUICE_OUTBOX_BENCH_BATCH) and reports msg/s
// and CPU per message.
func relayRun(b *testing.B, tg *sqltest.Target, brokerPID int, mod func(*outbox.RelayConfig)) {
	ob := newOutbox(b, tg)
	fill(b, tg, ob, b.N, 1000, benchTopic)
	r := newRelay(b, ob, nil, func(c *outbox.RelayConfig) {
		c.BatchSize = 500
		if v, err := strconv.Atoi(os.Getenv("SLUICE_OUTBOX_BENCH_BATCH")); err == nil && v > 0 {
			c.BatchSize = v
		}
		c.PollInterval = 5 * time.Millisecond
		c.Logger = testkit.Quiet()
		mod(c)
	})
	b.ResetTimer()
	cpu0, bcpu0 := cpu(b, 0), time.Duration(0)
	if brokerPID != 0 {
		bcpu0 = cpu(b, brokerPID)
	}
	t0 := time.Now()
	if err := r.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	testkit.WaitFor(b, 10*time.Minute, func() bool { return r.Counters().Sent >= uint64(b.N) },
		func() string { return fmt.Sprintf("counters %+v of %d rows", r.Counters(), b.N) })
	el := time.Since(t0)
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "msg/s")
	b.ReportMetric(float64((cpu(b, 0)-cpu0).Microseconds())/float64(b.N), "relay-cpu-µs/msg")
	if brokerPID != 0 {
		b.ReportMetric(float64((cpu(b, brokerPID)-bcpu0).Microseconds())/float64(b.N), "broker-cpu-µs/msg")
	}
	b.ReportMetric(float64(r.Counters().Failed), "failed-sends")
}

// BenchmarkRelayProcess: one relay to a Sluice broker in its own process, through the
// producer (hash selector by sharding key): "each" is the per-row path (Send, 64 at
// once; the relay as it was), "batch" the batch path (SendBatch: producer.SendEach).
func BenchmarkRelayProcess(b *testing.B) {
	benchTargets(b, func(b *testing.B, tg *sqltest.Target) {
		bp := startBrokerProcess(b)
		p, err := producer.New(producer.Config{NamesrvAddrs: []string{bp.namesrv}, Selector: producer.HashSelector(), Logger: testkit.Quiet()})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		testkit.ShutdownOnCleanup(b, p.Shutdown)
		pid := bp.cmd.Process.Pid
		b.Run("each", func(b *testing.B) {
			relayRun(b, tg, pid, func(c *outbox.RelayConfig) { c.Send = p.SendFunc(); c.Concurrency = 64 })
		})
		b.Run("batch", func(b *testing.B) {
			relayRun(b, tg, pid, func(c *outbox.RelayConfig) { c.SendBatch = p.SendEach })
		})

	})
}

// BenchmarkRelayKafka: one relay to Kafka (kfake, in the test's process) through the Kafka
// producer: "each" the per-row path (Send, 64 at once), "async" the batch path
// (SendBatch: outbox.AsyncBatch(Producer.SendAsync)).
func BenchmarkRelayKafka(b *testing.B) {
	benchTargets(b, func(b *testing.B, tg *sqltest.Target) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, benchTopic))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		p, err := kafka.NewProducer(kafka.ProducerConfig{Brokers: c.ListenAddrs(), Logger: testkit.Quiet()})
		if err != nil {
			b.Fatal(err)
		}
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Start(sctx); err != nil {
			b.Fatal(err)
		}
		testkit.ShutdownOnCleanup(b, p.Shutdown)
		b.Run("each", func(b *testing.B) {
			relayRun(b, tg, 0, func(c *outbox.RelayConfig) { c.Send = p.SendFunc(); c.Concurrency = 64 })
		})
		b.Run("async", func(b *testing.B) {
			relayRun(b, tg, 0, func(c *outbox.RelayConfig) { c.SendBatch = outbox.AsyncBatch(p.SendAsync) })
		})

	})
}
