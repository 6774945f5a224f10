package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/console"
	"github.com/sluicemq/sluice/lifecycle"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/remoting"
	"github.com/sluicemq/sluice/retrytask"
)

func newConsoleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console for a cluster until SIGINT/SIGTERM",
		Long: `Serve the web console: cluster and brokers, topics, consumer groups and their lag,
messages, dead letters, and throughput/lag charts from the brokers' --metrics endpoints.

It listens on loopback (127.0.0.1:8080) by default; another address needs --token or
--basic-auth. The token can also come from $SLUICE_CONSOLE_TOKEN. --read-only refuses
every change (create/delete topic, reset offset, re-drive dead letters or outbox rows)
with 403. --outbox-dialect (with $SLUICE_OUTBOX_DSN) adds the transactional outbox page.`,
		Args: cobra.NoArgs,
		RunE: runConsole,
	}
	f := cmd.Flags()
	f.String("namesrv", "", "name server address(es) ip:port;ip:port (required)")
	f.String("listen", console.DefaultListen, "listen address ip:port")
	f.String("token", "", "require this access token (bearer header or the /login form); default $SLUICE_CONSOLE_TOKEN")
	f.String("basic-auth", "", "require HTTP basic auth user:password")
	f.Bool("read-only", false, "refuse every change with 403")
	f.StringSlice("metrics-url", nil, "a broker's metrics endpoint for the charts, e.g. http://127.0.0.1:9100/metrics (repeatable)")
	f.Int("page-size", console.DefaultPageSize, "rows per listing page")
	f.String("access-key", os.Getenv("SLUICE_ACCESS_KEY"), "ACL access key the console signs its requests with (with $SLUICE_SECRET_KEY); default $SLUICE_ACCESS_KEY")
	f.String("redis", "", "Redis address ip:port of the Park middleware: adds the parked-sends page (pending, scheduled, dead, resend now)")
	f.String("park-namespace", retrytask.DefaultNamespace, "the Park namespace (sluice:park:{NS}:...) shown with --redis")
	addConsoleOutboxFlags(cmd)
	addShutdownFlag(cmd)
	return cmd
}

func runConsole(cmd *cobra.Command, _ []string) error {
	log, err := newLogger(cmd)
	if err != nil {
		return err
	}
	f := cmd.Flags()
	ns, _ := f.GetString("namesrv")
	if ns == "" {
		return errors.New(`required flag "namesrv" not set`)
	}
	cfg := console.Config{Logger: log}
	cfg.Listen, _ = f.GetString("listen")
	cfg.Token, _ = f.GetString("token")
	if cfg.Token == "" {
		cfg.Token = os.Getenv("SLUICE_CONSOLE_TOKEN")
	}
	if ba, _ := f.GetString("basic-auth"); ba != "" {
		u, p, ok := strings.Cut(ba, ":")
		if !ok || u == "" || p == "" {
			return fmt.Errorf("--basic-auth: want user:password")
		}
		cfg.BasicAuthUser, cfg.BasicAuthPassword = u, p
	}
	cfg.ReadOnly, _ = f.GetBool("read-only")
	cfg.PageSize, _ = f.GetInt("page-size")
	urls, _ := f.GetStringSlice("metrics-url")
	for _, u := range urls {
		cfg.Metrics = append(cfg.Metrics, console.ScrapeURL(u))
	}
	grace, _ := f.GetDuration("shutdown-timeout")
	if grace <= 0 {
		return fmt.Errorf("--shutdown-timeout %v: must be positive", grace)
	}
	ak, _ := f.GetString("access-key")
	creds := remoting.Credentials{AccessKey: ak, SecretKey: os.Getenv("SLUICE_SECRET_KEY")}
	if (creds.AccessKey == "") != (creds.SecretKey == "") {
		return fmt.Errorf("--access-key (or $SLUICE_ACCESS_KEY) and $SLUICE_SECRET_KEY go together")
	}
	// The console (a frontend) stops first, then the parked-sends resender it drives
	// (retry task, its producer, the Redis client).
	g, err := newGroup(grace, log)
	if err != nil {
		return err
	}
	a, err := admin.New(admin.Config{NamesrvAddrs: splitAddrs(ns), Logger: log, Credentials: creds})
	if err != nil {
		return err
	}
	defer a.Close()
	cfg.Admin = a
	var closeOutbox func() error
	if cfg.Outboxes, closeOutbox, err = consoleOutboxes(cmd.Context(), cmd); err != nil {
		return err
	}
	defer closeOutbox()
	stopParked := func(context.Context) error { return nil }
	if addr, _ := f.GetString("redis"); addr != "" {
		nsp, _ := f.GetString("park-namespace")
		if cfg.Parked, stopParked, err = parkedTask(addr, nsp, ns, creds, log); err != nil {
			return err
		}
	}
	stop, addr, err := startConsole(cfg)
	if err != nil {
		return errors.Join(err, stopParked(context.Background()))
	}
	_ = g.AddFrontend("console", lifecycle.ShutdownFunc(stop))
	_ = g.AddRetryTask("parked-sends resender", lifecycle.ShutdownFunc(stopParked))
	fmt.Fprintf(cmd.OutOrStdout(), "sluice console on http://%s/\n", addr)
	if err := g.Run(cmd.Context()); err != nil {
		return fmt.Errorf("console shutdown: %w", err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "sluice console stopped")
	return nil
}

// parkedTask builds the resender the parked-sends page uses: a Redis client, a producer
// (group SLUICE_CONSOLE_RESEND) whose raw send resends, and a retrytask.Task.
func parkedTask(redisAddr, namespace, namesrvAddr string, creds remoting.Credentials, log *slog.Logger) (*retrytask.Task, func(context.Context) error, error) {
	rc := redis.NewClient(&redis.Options{Addr: redisAddr})
	p, err := producer.New(producer.Config{NamesrvAddrs: splitAddrs(namesrvAddr), Group: "SLUICE_CONSOLE_RESEND", Logger: log, Credentials: creds})
	if err == nil {
		err = p.Start(context.Background())
	}
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	t, err := retrytask.New(retrytask.Config{Client: rc, Namespace: namespace, Send: p.SendFunc(), Logger: log})
	if err != nil {
		_ = p.Shutdown(context.Background())
		rc.Close()
		return nil, nil, err
	}
	return t, func(ctx context.Context) error {
		return errors.Join(t.Shutdown(ctx), p.Shutdown(ctx), rc.Close())
	}, nil
}

// startConsole creates and starts a console; it returns its stop function and address.
func startConsole(cfg console.Config) (func(context.Context) error, string, error) {
	c, err := console.New(cfg)
	if err != nil {
		return nil, "", err
	}
	if err := c.Start(); err != nil {
		return nil, "", err
	}
	return c.Shutdown, c.Addr(), nil
}

// brokerConsole starts the console of `sluice broker --console ADDR`: cfg plus an admin
// client on the broker's name servers and charts from the broker's own collectors (no
// scrape).
func brokerConsole(cfg console.Config, namesrvAddr string, collectors ...prometheus.Collector) (func(context.Context) error, string, error) {
	a, err := admin.New(admin.Config{NamesrvAddrs: splitAddrs(namesrvAddr), Logger: cfg.Logger})
	if err != nil {
		return nil, "", err
	}
	reg := prometheus.NewRegistry()
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			a.Close()
			return nil, "", err
		}
	}
	cfg.Admin, cfg.Metrics = a, []prometheus.Gatherer{reg}
	stop, bound, err := startConsole(cfg)
	if err != nil {
		a.Close()
		return nil, "", err
	}
	return func(ctx context.Context) error { return errors.Join(stop(ctx), a.Close()) }, bound, nil
}
