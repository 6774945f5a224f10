package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/broker/brokermetrics"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/lifecycle"
)

func newNamesrvCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "namesrv",
		Short: "Run a name server until SIGINT/SIGTERM",
		Args:  cobra.NoArgs,
		RunE:  runNamesrv,
	}
	f := cmd.Flags()
	f.String("listen", namesrv.DefaultListenAddr, "listen address ip:port (port 0 = a free port)")
	f.Duration("broker-expiry", namesrv.DefaultBrokerExpiry, "drop a broker that has not registered for this long")
	f.String("kv-config", "", "JSON file persisting the KV config (order topic configs); empty = memory only")
	f.String("tls-cert", "", "PEM certificate to serve TLS with (with --tls-key); empty = plain TCP")
	f.String("tls-key", "", "PEM private key of --tls-cert")
	f.String("acl-file", "", "RocketMQ plain_acl.yml: registration, unregistration, topic deletion and KV writes then need an admin account's signature (reloaded on change); empty = open")
	addMetricsFlags(cmd)
	addShutdownFlag(cmd)
	return cmd
}

func runNamesrv(cmd *cobra.Command, _ []string) error {
	log, err := newLogger(cmd)
	if err != nil {
		return err
	}
	f := cmd.Flags()
	listen, _ := f.GetString("listen")
	expiry, _ := f.GetDuration("broker-expiry")
	kv, _ := f.GetString("kv-config")
	grace, _ := f.GetDuration("shutdown-timeout")
	if grace <= 0 {
		return fmt.Errorf("--shutdown-timeout %v: must be positive", grace)
	}
	cfg := namesrv.Config{ListenAddr: listen, BrokerExpiry: expiry, KVConfigPath: kv, Logger: log}
	cert, _ := f.GetString("tls-cert")
	key, _ := f.GetString("tls-key")
	if (cert == "") != (key == "") {
		return fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.TLS = &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
	}
	// What the command starts stops through g: the metrics endpoint first, then the name
	// server with its ACL file watcher.
	g, err := newGroup(grace, log)
	if err != nil {
		return err
	}
	if path, _ := f.GetString("acl-file"); path != "" {
		if cfg.ACL, err = acl.Load(path, log); err != nil {
			return fmt.Errorf("--acl-file: %w", err)
		}
		wctx, stopWatch := context.WithCancel(cmd.Context())
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			cfg.ACL.Watch(wctx, time.Second)
		}()
		_ = g.AddServer("acl file watcher", lifecycle.ShutdownFunc(func(context.Context) error {
			stopWatch()
			<-watched
			return nil
		}))
	}
	ns, err := namesrv.New(cfg)
	if err != nil {
		return errors.Join(err, shutdownNow(g, grace))
	}
	if err := ns.Start(); err != nil {
		return errors.Join(err, shutdownNow(g, grace))
	}
	_ = g.AddServer("name server", ns)
	fmt.Fprintf(cmd.OutOrStdout(), "sluice name server listening on %s\n", ns.Addr())
	stopMetrics, err := startMetrics(cmd, log, brokermetrics.NewNameServerCollector(ns))
	if err != nil {
		return errors.Join(err, shutdownNow(g, grace))
	}
	_ = g.AddFrontend("metrics", lifecycle.ShutdownFunc(stopMetrics))
	if err := g.Run(cmd.Context()); err != nil {
		return fmt.Errorf("name server shutdown: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "sluice name server stopped")
	return nil
}
