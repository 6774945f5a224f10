package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/peers"
)

// targetRocketMQ runs a workload against Apache RocketMQ and against Sluice.
const targetRocketMQ = "rocketmq"

// runVsRocketMQ runs one workload (run) against an Apache RocketMQ broker (started from
// the peers' jars, or the one at --rocketmq-namesrv) and then against a Sluice broker
// started as its own process (this binary's `broker` command), and prints both results
// (print) and the ratios sluice/rocketmq. Each broker runs alone while it is measured.
func runVsRocketMQ(ctx context.Context, o Options, s *benchSetup, what string,
	run func(context.Context, Config) (*Result, error), print func(io.Writer, *Result)) error {
	cfg := s.cfg
	cfg.ServerPid = 0 // an external Apache broker's CPU is not measured
	if len(s.cfg.NamesrvAddrs) > 0 {
		return errors.New("--namesrv with --target rocketmq: give Apache's name server as --rocketmq-namesrv; Sluice runs as its own process")
	}
	out := o.Out
	ext := o.RocketMQNamesrv
	heap := o.RocketMQHeap

	// Apache RocketMQ.
	var apache *peers.RocketMQ
	if ext != "" {
		cfg.NamesrvAddrs = splitAddrs(ext)
		fmt.Fprintf(out, "rocketmq: external, name server %v\n", cfg.NamesrvAddrs)
	} else {
		var err error
		apache, err = peers.LaunchRocketMQ(ctx, peers.RocketMQOptions{
			JVMFlags:   []string{"-Xms" + heap, "-Xmx" + heap},
			BrokerConf: map[string]string{"flushDiskType": s.flush, "mappedFileSizeCommitLog": "1073741824"},
		})
		if err != nil {
			return fmt.Errorf("start apache rocketmq: %w", err)
		}
		defer func() { _ = apache.Stop() }()
		cfg.NamesrvAddrs = []string{apache.NamesrvAddr}
		cfg.ServerPid = apache.BrokerPid()
		fmt.Fprintf(out, "rocketmq: Apache RocketMQ %s (JVM heap %s, %s) at %s, name server %s\n",
			peers.RocketMQVersion, heap, s.flush, apache.BrokerAddr, apache.NamesrvAddr)
	}
	fmt.Fprintln(out, what)
	rres, err := run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("rocketmq: %w", err)
	}
	s.bar.finish()
	print(out, rres)
	if apache != nil {
		if err := apache.Stop(); err != nil {
			return err
		}
	}

	// Sluice, in its own process (the bench's broker process).
	sl, err := StartProcess(ProcessConfig{FlushDiskType: s.flush, Command: s.command})
	if err != nil {
		return err
	}
	defer func() { _ = shutdownProcess(sl) }()
	cfg = s.cfg
	cfg.NamesrvAddrs = sl.NamesrvAddrs()
	cfg.ServerPid = sl.Pid()
	fmt.Fprintf(out, "sluice: broker process %d at %s (%s), name server %s\n", sl.Pid(), sl.Addr(), s.flush, strings.Join(sl.NamesrvAddrs(), ";"))
	fmt.Fprintln(out, what)
	sres, err := run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("sluice: %w", err)
	}
	s.bar.finish()
	print(out, sres)
	if err := shutdownProcess(sl); err != nil {
		return err
	}
	fmt.Fprintf(out, "ratio sluice/rocketmq: %.2fx msg/s", sres.MsgPerSec()/max(rres.MsgPerSec(), 1e-9))
	if rres.Latency.Count() > 0 && sres.Latency.Count() > 0 {
		fmt.Fprintf(out, ", p50 latency %.2fx, p99 latency %.2fx",
			float64(sres.Latency.Quantile(0.5))/float64(max(rres.Latency.Quantile(0.5), 1)),
			float64(sres.Latency.Quantile(0.99))/float64(max(rres.Latency.Quantile(0.99), 1)))
	}
	fmt.Fprintln(out)
	sc, ss := sres.CPUPerMessage()
	rc, rs := rres.CPUPerMessage()
	if sres.ServerPid > 0 && rres.ServerPid > 0 && rc+rs > 0 {
		fmt.Fprintf(out, "ratio sluice/rocketmq CPU per message: %.2fx total (client %.2fx, server %.2fx)\n",
			float64(sc+ss)/float64(rc+rs), float64(sc)/float64(max(rc, 1)), float64(ss)/float64(max(rs, 1)))
	}
	return nil
}

// shutdownProcess stops the bench's broker process (bounded by 20 s).
func shutdownProcess(p *Process) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return p.Shutdown(ctx)
}
