package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/brokermetrics"
	"github.com/sluicemq/sluice/broker/grpcfront"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/lifecycle"
)

func newBrokerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker (with an embedded name server unless --namesrv is given) until SIGINT/SIGTERM",
		Long: `Run a broker. Settings come from a RocketMQ-style broker.conf (-c) and are
overridden by the flags that are given. Without --namesrv (and without namesrvAddr in
the file) the broker starts an embedded name server on --namesrv-listen.

Unless the GOGC environment variable is set, the broker runs Go's garbage collector
with GOGC=400 instead of Go's default 100: its heap is small (tens of MiB) and mostly
the short-lived garbage of requests, so collecting a quarter as often costs about
30 MiB more resident memory and saves about 14% of the broker's CPU time per send
(docs/performance.md). Set GOGC (e.g. GOGC=100) to choose otherwise.`,
		Args: cobra.NoArgs,
		RunE: runBroker,
	}
	f := cmd.Flags()
	f.StringP("config", "c", "", "broker.conf file (key=value, Apache RocketMQ keys)")
	f.String("data-dir", "", "data directory (storePathRootDir); default $HOME/sluice/store")
	f.String("listen", "", "listen address ip:port (default brokerIP1:listenPort, 127.0.0.1:10911)")
	f.String("namesrv", "", "name server address(es) ip:port;ip:port; empty = embedded name server")
	f.String("namesrv-listen", "", "listen address of the embedded name server (default 127.0.0.1:9876)")
	f.String("broker-name", "", "broker name (default broker-a)")
	f.String("cluster", "", "cluster name (default DefaultCluster)")
	f.String("grpc-listen", "", "also serve the RocketMQ 5 gRPC MessagingService (v5 clients) on this ip:port (grpcListenAddr); empty = off")
	addMetricsFlags(cmd)
	f.String("console", "", "also serve the web console on this ip:port (e.g. 127.0.0.1:8080; another than loopback needs $SLUICE_CONSOLE_TOKEN); empty = off")
	f.Bool("console-read-only", false, "the --console refuses every change with 403")
	addShutdownFlag(cmd)
	return cmd
}

// brokerConfig loads -c and applies the flags that were set.
func brokerConfig(cmd *cobra.Command) (broker.Config, error) {
	f := cmd.Flags()
	var cfg broker.Config
	if path, _ := f.GetString("config"); path != "" {
		c, err := broker.LoadConfigFile(path)
		if err != nil {
			return cfg, err
		}
		cfg = c
	}
	for flag, dst := range map[string]*string{
		"data-dir":       &cfg.StorePathRootDir,
		"listen":         &cfg.ListenAddr,
		"namesrv":        &cfg.NamesrvAddr,
		"namesrv-listen": &cfg.NamesrvListenAddr,
		"broker-name":    &cfg.BrokerName,
		"cluster":        &cfg.BrokerClusterName,
		"grpc-listen":    &cfg.GrpcListenAddr,
	} {
		if f.Changed(flag) {
			*dst, _ = f.GetString(flag)
		}
	}
	if cfg.StorePathRootDir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return cfg, fmt.Errorf("--data-dir not given and no home directory: %w", err)
		}
		cfg.StorePathRootDir = filepath.Join(home, "sluice", "store")
	}
	return cfg, nil
}

// brokerGOGC is the garbage collector's GOGC the broker runs with when the GOGC
// environment variable is not set (see the command's help).
const brokerGOGC = 400

// setBrokerGC applies brokerGOGC unless the environment chose a GOGC (getenv: os.Getenv).
// It returns the GOGC in effect afterwards, for the log.
func setBrokerGC(getenv func(string) string) string {
	if v := getenv("GOGC"); v != "" {
		return v
	}
	debug.SetGCPercent(brokerGOGC)
	return strconv.Itoa(brokerGOGC)
}

func runBroker(cmd *cobra.Command, _ []string) error {
	gogc := setBrokerGC(os.Getenv)
	log, err := newLogger(cmd)
	if err != nil {
		return err
	}
	log.Info("garbage collector", "GOGC", gogc)
	cfg, err := brokerConfig(cmd)
	if err != nil {
		return err
	}
	cfg.Logger = log
	grace, _ := cmd.Flags().GetDuration("shutdown-timeout")
	if grace <= 0 {
		return fmt.Errorf("--shutdown-timeout %v: must be positive", grace)
	}
	// What the command starts stops through g, in its stages: the console and the
	// metrics endpoint (frontends) first, the broker (with its name server) last.
	g, err := newGroup(grace, log)
	if err != nil {
		return err
	}
	b, err := broker.New(cfg)
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		_ = b.Shutdown(ctx)
		return err
	}
	_ = g.AddServer("broker "+b.Name(), b)
	fmt.Fprintf(cmd.OutOrStdout(), "sluice broker %s listening on %s, name server %s, data in %s\n",
		b.Name(), b.Addr(), b.NamesrvAddr(), cfg.StorePathRootDir)
	front, err := startGrpcFront(cmd, b, log)
	if err != nil {
		return errors.Join(err, shutdownNow(g, grace))
	}
	if front != nil {
		_ = g.AddFrontend("gRPC front end", front) // front ends stop before the broker closes the store
	}
	collectors := []prometheus.Collector{brokermetrics.NewCollector(b)}
	if ns := b.EmbeddedNameServer(); ns != nil {
		collectors = append(collectors, brokermetrics.NewNameServerCollector(ns))
	}
	stopMetrics, err := startMetrics(cmd, log, collectors...)
	if err != nil {
		return errors.Join(err, shutdownNow(g, grace))
	}
	_ = g.AddFrontend("metrics", lifecycle.ShutdownFunc(stopMetrics))
	if addr, _ := cmd.Flags().GetString("console"); addr != "" {
		ro, _ := cmd.Flags().GetBool("console-read-only")
		stopConsole, bound, err := brokerConsole(console.Config{Listen: addr, ReadOnly: ro, Token: os.Getenv("SLUICE_CONSOLE_TOKEN"), Logger: log},
			b.NamesrvAddr(), collectors...)
		if err != nil {
			return errors.Join(err, shutdownNow(g, grace))
		}
		_ = g.AddFrontend("console", lifecycle.ShutdownFunc(stopConsole))
		fmt.Fprintf(cmd.OutOrStdout(), "sluice console on http://%s/\n", bound)
	}
	if err := g.Run(cmd.Context()); err != nil {
		return fmt.Errorf("broker shutdown: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "sluice broker stopped")
	return nil
}

// startGrpcFront starts the RocketMQ 5 gRPC front end when grpcListenAddr
// (--grpc-listen) is set, and returns nil when it is not. The caller registers it as a
// front end of its lifecycle group, so it stops before the broker closes the store it
// reads.
func startGrpcFront(cmd *cobra.Command, b *broker.Broker, log *slog.Logger) (*grpcfront.Server, error) {
	if b.GrpcListenAddr() == "" {
		return nil, nil
	}
	front, err := grpcfront.New(grpcfront.Config{Broker: b, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := front.Start(); err != nil {
		return nil, err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sluice broker serving RocketMQ 5 gRPC clients on %s\n", front.Addr())
	return front, nil
}
