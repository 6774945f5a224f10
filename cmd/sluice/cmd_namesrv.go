package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/broker/namesrv"
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
	ns, err := namesrv.New(namesrv.Config{ListenAddr: listen, BrokerExpiry: expiry, KVConfigPath: kv, Logger: log})
	if err != nil {
		return err
	}
	if err := ns.Start(); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "sluice name server listening on %s\n", ns.Addr())
	<-cmd.Context().Done()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := ns.Shutdown(ctx); err != nil {
		return fmt.Errorf("name server shutdown: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "sluice name server stopped")
	return nil
}
