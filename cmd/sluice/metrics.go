package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/broker/brokermetrics"
)

// addMetricsFlags adds --metrics and --pprof (broker and namesrv).
func addMetricsFlags(cmd *cobra.Command) {
	cmd.Flags().String("metrics", "", "serve Prometheus metrics on this ip:port at /metrics (e.g. 127.0.0.1:9100); empty = off")
	cmd.Flags().Bool("pprof", false, "also serve net/http/pprof under /debug/pprof/ on the --metrics listener")
}

// startMetrics starts the metrics listener when --metrics is set; it returns a stop
// function (a no-op when metrics are off).
func startMetrics(cmd *cobra.Command, log *slog.Logger, cs ...prometheus.Collector) (func(context.Context) error, error) {
	addr, _ := cmd.Flags().GetString("metrics")
	pprof, _ := cmd.Flags().GetBool("pprof")
	if addr == "" {
		if pprof {
			return nil, fmt.Errorf("--pprof needs --metrics (the listener it is served on)")
		}
		return func(context.Context) error { return nil }, nil
	}
	s, err := brokermetrics.Start(brokermetrics.Config{Addr: addr, Pprof: pprof, Collectors: cs, Logger: log})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "metrics on http://%s/metrics\n", s.Addr())
	return s.Shutdown, nil
}
