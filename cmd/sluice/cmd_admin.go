package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/remoting"
)

func newAdminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Administer topics, offsets, dead letters, messages and groups through the name server(s)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	def := os.Getenv("NAMESRV_ADDR")
	if def == "" {
		def = namesrv.DefaultListenAddr
	}
	pf := cmd.PersistentFlags()
	pf.String("namesrv", def, "name server address(es) ip:port;ip:port; the default comes from $NAMESRV_ADDR if set")
	pf.Duration("timeout", admin.DefaultTimeout, "timeout of each request")
	pf.Bool("tls", false, "talk TLS to the name servers and brokers (certificates verified against the system roots or --tls-ca)")
	pf.String("tls-ca", "", "PEM bundle to verify the servers' certificates with (implies --tls)")
	pf.Bool("tls-insecure", false, "with --tls, do not verify the servers' certificates (as the official Go client's WithTls)")
	pf.String("access-key", os.Getenv("SLUICE_ACCESS_KEY"), "ACL access key (RocketMQ plain ACL); requests are signed when it and the secret key are set; default $SLUICE_ACCESS_KEY")
	pf.String("secret-key", "", "ACL secret key; default $SLUICE_SECRET_KEY (prefer the variable: flags show in process lists)")
	topic := &cobra.Command{
		Use:   "topic",
		Short: "Create, list, inspect and delete topics",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	topic.AddCommand(newTopicCreateCmd(), newTopicListCmd(), newTopicRouteCmd(), newTopicDeleteCmd())
	cmd.AddCommand(topic, newClusterCmd())
	cmd.AddCommand(newOffsetCmd(), newDLQCmd(), newGroupCmd())
	cmd.AddCommand(newMessageCmd())    // cmd_message.go: message get / find
	cmd.AddCommand(newKafkaAdminCmd()) // cmd_kafka.go: kafka dlq list / resend

	cmd.AddCommand(newOutboxAdminCmd()) // cmd_outbox.go: outbox list / redrive
	return cmd
}

// withAdmin opens an admin client from --namesrv/--timeout, runs f and closes it.
func withAdmin(cmd *cobra.Command, f func(ctx context.Context, a *admin.Admin) error) error {
	addrs, _ := cmd.Flags().GetString("namesrv")
	timeout, _ := cmd.Flags().GetDuration("timeout")
	ak, _ := cmd.Flags().GetString("access-key")
	sk, _ := cmd.Flags().GetString("secret-key")
	if sk == "" {
		sk = os.Getenv("SLUICE_SECRET_KEY")
	}
	if (ak == "") != (sk == "") {
		return fmt.Errorf("--access-key and --secret-key (or $SLUICE_ACCESS_KEY and $SLUICE_SECRET_KEY) go together")
	}
	tlsCfg, err := adminTLS(cmd)
	if err != nil {
		return err
	}
	a, err := admin.New(admin.Config{NamesrvAddrs: splitAddrs(addrs), Timeout: timeout, Logger: discardLogger(),
		Credentials: remoting.Credentials{AccessKey: ak, SecretKey: sk}, TLS: tlsCfg})
	if err != nil {
		return err
	}
	defer a.Close()
	return f(cmd.Context(), a)
}

// adminTLS builds the client TLS config of --tls, --tls-ca and --tls-insecure (nil: plain
// TCP).
func adminTLS(cmd *cobra.Command) (*tls.Config, error) {
	on, _ := cmd.Flags().GetBool("tls")
	ca, _ := cmd.Flags().GetString("tls-ca")
	insecure, _ := cmd.Flags().GetBool("tls-insecure")
	if !on && ca == "" {
		if insecure {
			return nil, errors.New("--tls-insecure needs --tls")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in the file", ca)
		}
	}
	return cfg, nil
}

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTopicCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create --topic T [--queues N] [--order]",
		Short: "Create or update a topic on every master broker (UPDATE_AND_CREATE_TOPIC)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			var spec admin.TopicSpec
			spec.Topic, _ = f.GetString("topic")
			spec.Queues, _ = f.GetInt("queues")
			spec.Order, _ = f.GetBool("order")
			spec.Perm, _ = f.GetInt("perm")
			spec.Cluster, _ = f.GetString("cluster")
			wait, _ := f.GetDuration("wait")
			if spec.Queues <= 0 {
				return fmt.Errorf("--queues %d: must be 1..%d", spec.Queues, admin.MaxQueues)
			}
			if spec.Perm <= 0 {
				return fmt.Errorf("--perm %d: must be a combination of 4 (read), 2 (write), 1 (inherit)", spec.Perm)
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				res, err := a.CreateTopic(ctx, spec)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				names := make([]string, 0, len(res.Brokers))
				for _, b := range res.Brokers {
					fmt.Fprintf(out, "created topic %s on %s (%s, cluster %s): %d queues, perm %d, order %t\n",
						spec.Topic, b.Name, b.Addr, b.Cluster, spec.Queues, spec.Perm, spec.Order)
					names = append(names, b.Name)
				}
				if res.OrderTopicConf != "" {
					fmt.Fprintf(out, "order config %s\n", res.OrderTopicConf)
				}
				if wait <= 0 {
					return nil
				}
				wctx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				if _, err := a.WaitTopicRoute(wctx, spec.Topic, names...); err != nil {
					return fmt.Errorf("topic created but its route is not complete yet: %w", err)
				}
				fmt.Fprintf(out, "route of %s is published\n", spec.Topic)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.String("topic", "", "topic name (required)")
	f.Int("queues", admin.DefaultQueues, "read and write queue count per broker")
	f.Bool("order", false, "ordered topic: also write the order config to the name server(s)")
	f.Int("perm", admin.DefaultPerm, "permission: 6 read+write, 4 read-only, 2 write-only")
	f.String("cluster", "", "only the brokers of this cluster (default: every cluster)")
	f.Duration("wait", 5*time.Second, "wait this long for the route to show every broker (0 = do not wait)")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

func newTopicListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every topic that has a route (one per line)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				topics, err := a.ListTopics(ctx)
				if err != nil {
					return err
				}
				if len(topics) > 0 {
					fmt.Fprintln(cmd.OutOrStdout(), strings.Join(topics, "\n"))
				}
				return nil
			})
		},
	}
}

func newTopicRouteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "route --topic T",
		Short: "Print a topic's route as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topic, _ := cmd.Flags().GetString("topic")
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				r, err := a.TopicRoute(ctx, topic)
				if errors.Is(err, admin.ErrTopicNotExist) {
					return fmt.Errorf("topic %q has no route", topic)
				}
				if err != nil {
					return err
				}
				return printJSON(cmd, r)
			})
		},
	}
	cmd.Flags().String("topic", "", "topic name (required)")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

func newTopicDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete --topic T",
		Short: "Delete a topic from its brokers and the name server(s)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topic, _ := cmd.Flags().GetString("topic")
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				if err := a.DeleteTopic(ctx, topic); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "deleted topic %s\n", topic)
				return nil
			})
		},
	}
	cmd.Flags().String("topic", "", "topic name (required)")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

func newClusterCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cluster",
		Short: "Print the clusters and brokers the name server knows as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				ci, err := a.ClusterInfo(ctx)
				if err != nil {
					return err
				}
				return printJSON(cmd, ci)
			})
		},
	}
}
