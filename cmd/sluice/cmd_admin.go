package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/suggest"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

func newAdminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Administer topics, offsets, dead letters, messages and groups through the name server(s)",
		Args:  subcommandsOnly,
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
	pf.Bool("signature-v2", os.Getenv("SLUICE_SIGNATURE_V2") == "true", "sign with Sluice's signature v2 (request code, time and nonce covered; Sluice brokers only); default $SLUICE_SIGNATURE_V2=true")
	addOutputFlag(cmd)
	topic := &cobra.Command{
		Use:   "topic",
		Short: "Create, list, inspect and delete topics",
		Args:  subcommandsOnly,
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
	v2, _ := cmd.Flags().GetBool("signature-v2")
	tlsCfg, err := adminTLS(cmd)
	if err != nil {
		return err
	}
	a, err := admin.New(admin.Config{NamesrvAddrs: splitAddrs(addrs), Timeout: timeout, Logger: discardLogger(),
		Credentials: remoting.Credentials{AccessKey: ak, SecretKey: sk, SignatureV2: v2}, TLS: tlsCfg})
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

// topicNotFound turns a "no such topic" error into one naming the nearest topics the
// name server knows (exit code 3); other errors pass.
func topicNotFound(ctx context.Context, a *admin.Admin, topic string, err error) error {
	if !errors.Is(err, admin.ErrTopicNotExist) {
		return err
	}
	all, lerr := a.ListTopics(ctx)
	if lerr != nil {
		return &notFoundError{fmt.Errorf("topic %q does not exist", topic)}
	}
	return &notFoundError{fmt.Errorf("topic %q does not exist%s", topic, didYouMean(suggest.Nearest(topic, all)))}
}

// checkGroup refuses a consumer group no broker knows, naming the nearest known groups
// (exit code 3): a typo must not leave offsets behind or read as "nothing there".
func checkGroup(ctx context.Context, a *admin.Admin, group string) error {
	all, err := a.GroupSummaries(ctx)
	names := make([]string, 0, len(all))
	for _, g := range all {
		if g.Group == group {
			return nil // known to a broker that answered
		}
		names = append(names, g.Group)
	}
	if err != nil { // none answered, or one that did not may know the group
		return err
	}
	return &notFoundError{fmt.Errorf("consumer group %q: %w (no config, offset or client on any broker)%s", group, admin.ErrGroupNotExist, didYouMean(suggest.Nearest(group, names)))}
}

// created is one topic of `topic create -o json`.
type created struct {
	Topic          string         `json:"topic"`
	Brokers        []admin.Broker `json:"brokers"`
	OrderTopicConf string         `json:"orderTopicConf,omitempty"`
	RoutePublished bool           `json:"routePublished"`
}

// createdJSON is `topic create -o json`: the topics created, in order, and whether the
// last one is on only some brokers.
type createdJSON struct {
	Topics []created `json:"topics"`
	completeness
}

func newTopicCreateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create --topic T[,T2,...] [--queues N] [--order]",
		Short: "Create or update topics on every master broker (UPDATE_AND_CREATE_TOPIC)",
		Long: `Create or update topics on every master broker. --topic takes one name or several
separated by commas (a topic name cannot contain one); with several, a progress bar is
drawn on a terminal's stderr, and the first failure stops the run (the topics before it
exist).`,
		Args: cobra.NoArgs,
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
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			topics := strings.Split(spec.Topic, ",")
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				out := cmd.OutOrStdout()
				done := []created{}
				var bar *progressbar.ProgressBar
				if len(topics) > 1 && showsProgress(cmd.ErrOrStderr()) {
					bar = progressbar.NewOptions(len(topics), progressbar.OptionSetWriter(cmd.ErrOrStderr()),
						progressbar.OptionSetDescription("creating topics"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
				}
				for _, topic := range topics {
					spec.Topic = strings.TrimSpace(topic)
					res, err := a.CreateTopic(ctx, spec)
					if err != nil {
						if res != nil { // some brokers accepted it: say which
							if asJSON {
								done = append(done, created{Topic: spec.Topic, Brokers: res.Brokers})
								if perr := printJSON(cmd, createdJSON{Topics: done, completeness: completenessOf(err)}); perr != nil {
									return perr
								}
							} else {
								for _, b := range res.Brokers {
									fmt.Fprintf(out, "created topic %s on %s (%s, cluster %s): %d queues, perm %d, order %t\n",
										spec.Topic, b.Name, b.Addr, b.Cluster, spec.Queues, spec.Perm, spec.Order)
								}
							}
							noteIncomplete(cmd, err, "the topic was not created on them")
						}
						if len(topics) > 1 {
							err = fmt.Errorf("topic %s (%d of %d created before it): %w", spec.Topic, len(done), len(topics), err)
						}
						return err
					}
					c := created{Topic: spec.Topic, Brokers: res.Brokers, OrderTopicConf: res.OrderTopicConf}
					names := make([]string, 0, len(res.Brokers))
					for _, b := range res.Brokers {
						if !asJSON {
							fmt.Fprintf(out, "created topic %s on %s (%s, cluster %s): %d queues, perm %d, order %t\n",
								spec.Topic, b.Name, b.Addr, b.Cluster, spec.Queues, spec.Perm, spec.Order)
						}
						names = append(names, b.Name)
					}
					if res.OrderTopicConf != "" && !asJSON {
						fmt.Fprintf(out, "order config %s\n", res.OrderTopicConf)
					}
					if wait > 0 {
						wctx, cancel := context.WithTimeout(ctx, wait)
						_, err := a.WaitTopicRoute(wctx, spec.Topic, names...)
						cancel()
						if err != nil {
							return fmt.Errorf("topic %s created but its route is not complete yet: %w", spec.Topic, err)
						}
						c.RoutePublished = true
						if !asJSON {
							fmt.Fprintf(out, "route of %s is published\n", spec.Topic)
						}
					}
					done = append(done, c)
					if bar != nil {
						_ = bar.Add(1)
					}
				}
				if asJSON {
					return printJSON(cmd, createdJSON{Topics: done, completeness: completenessOf(nil)})
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.String("topic", "", "topic name, or several separated by commas (required)")
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
		Short: "List every topic that has a route (one per line; -o json: an array)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				topics, err := a.ListTopics(ctx)
				if err != nil {
					return err
				}
				if asJSON {
					if topics == nil {
						topics = []string{}
					}
					return printJSON(cmd, topics)
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
		Short: "Print a topic's route: its brokers and queues (-o json: the route as the name server answers it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topic, _ := cmd.Flags().GetString("topic")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				r, err := a.TopicRoute(ctx, topic)
				if err != nil {
					return topicNotFound(ctx, a, topic, err)
				}
				if asJSON {
					return printJSON(cmd, r)
				}
				addrs := map[string]string{}
				for _, bd := range r.BrokerDatas {
					addrs[bd.BrokerName] = bd.MasterAddr()
				}
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "BROKER\tMASTER\tREAD_QUEUES\tWRITE_QUEUES\tPERM")
				for _, q := range r.QueueDatas {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", q.BrokerName, addrs[q.BrokerName], q.ReadQueueNums, q.WriteQueueNums, q.Perm)
				}
				if r.OrderTopicConf != "" {
					fmt.Fprintf(tw, "order config\t%s\n", r.OrderTopicConf)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().String("topic", "", "topic name (required)")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

func newTopicDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete --topic T [--yes]",
		Short: "Delete a topic from its brokers and the name server(s): its messages and every group's offsets on it go",
		Long: `Delete a topic from every broker of its route (DELETE_TOPIC_IN_BROKER) and its route and
order config from the name server(s). The command first states what goes — the brokers,
the messages stored and the consumer groups with offsets on it — and asks on a terminal;
--yes skips the question, and without a terminal (a script) it refuses unless --yes is
given (exit code 2). A topic no broker holds is refused (exit code 3) with the nearest
names. When some brokers of its route fail, it is deleted from the others, a line on
stderr names those that failed, the route stays (run the command again once they
answer) and the exit code is 5.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			topic, _ := cmd.Flags().GetString("topic")
			if err := message.ValidateTopic(topic); err != nil {
				return &config.Error{Package: "admin", Field: "Topic", Reason: err.Error()}
			}
			if message.IsSystemTopic(topic) {
				return &config.Error{Package: "admin", Field: "Topic", Reason: fmt.Sprintf("%s is a system topic and cannot be deleted", topic)}
			}
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				effect, err := topicDeleteEffect(ctx, a, topic)
				if err != nil {
					return topicNotFound(ctx, a, topic, err)
				}
				if err := confirm(cmd, effect); err != nil {
					return err
				}
				deleted, err := a.DeleteTopic(ctx, topic)
				if err != nil && len(deleted) == 0 {
					return topicNotFound(ctx, a, topic, err)
				}
				// Whole, or a *admin.PartialError: some brokers deleted it, say which and which not.
				names := make([]string, len(deleted))
				for i, b := range deleted {
					names[i] = b.Name
				}
				if asJSON {
					if perr := printJSON(cmd, struct {
						Topic        string   `json:"topic"`
						DeletedFrom  []string `json:"deletedFrom"`  // brokers that deleted it
						RouteDeleted bool     `json:"routeDeleted"` // the name servers dropped its route
						completeness
					}{topic, names, err == nil, completenessOf(err)}); perr != nil {
						return perr
					}
				} else if len(names) > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "deleted topic %s from %s\n", topic, strings.Join(names, ", "))
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "deleted topic %s\n", topic)
				}
				noteIncomplete(cmd, err, "the topic and its route stay there: delete it again once they answer")
				return err
			})
		},
	}
	cmd.Flags().String("topic", "", "topic name (required)")
	addYesFlag(cmd, "delete the topic")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

// topicDeleteEffect states what deleting topic removes: its brokers, the messages stored
// and the groups with offsets on it. A topic no broker holds wraps admin.ErrTopicNotExist.
func topicDeleteEffect(ctx context.Context, a *admin.Admin, topic string) (string, error) {
	r, err := a.TopicRoute(ctx, topic)
	if err != nil && !errors.Is(err, admin.ErrTopicNotExist) {
		return "", err
	}
	if r == nil { // no route: delete only what a broker still holds
		all, err := a.TopicConfigs(ctx)
		if err != nil {
			return "", err
		}
		i := slices.IndexFunc(all, func(t admin.TopicInfo) bool { return t.Topic == topic })
		if i < 0 {
			return "", fmt.Errorf("delete topic %q: %w", topic, admin.ErrTopicNotExist)
		}
		return fmt.Sprintf("delete topic %s from %s (it has no route yet) with its messages", topic, strings.Join(all[i].Brokers, ", ")), nil
	}
	var brokers []string
	for _, bd := range r.BrokerDatas {
		brokers = append(brokers, bd.BrokerName)
	}
	sort.Strings(brokers)
	qs, qerr := a.QueueOffsets(ctx, topic)
	if qerr != nil && !errors.As(qerr, new(*admin.PartialError)) {
		return "", qerr
	}
	var stored int64
	for _, q := range qs {
		stored += q.Max - q.Min
	}
	groups, gerr := a.GroupSummaries(ctx)
	if gerr != nil && !errors.As(gerr, new(*admin.PartialError)) {
		return "", gerr
	}
	var users []string
	for _, g := range groups {
		if slices.ContainsFunc(g.Topics, func(t admin.GroupTopicLag) bool { return t.Topic == topic }) {
			users = append(users, g.Group)
		}
	}
	effect := fmt.Sprintf("delete topic %s from %s: %d queue(s), %d message(s) stored", topic, strings.Join(brokers, ", "), len(qs), stored)
	if len(users) > 0 {
		effect += fmt.Sprintf(", offsets of %d consumer group(s) (%s)", len(users), strings.Join(users, ", "))
	}
	var pe *admin.PartialError
	if errors.As(qerr, &pe) {
		effect += fmt.Sprintf(" (not counted: the messages and groups of %s, which did not answer; the topic stays there until it answers)", strings.Join(pe.FailedBrokers(), ", "))
	} else if errors.As(gerr, &pe) {
		effect += fmt.Sprintf(" (not counted: the groups of %s, which did not answer)", strings.Join(pe.FailedBrokers(), ", "))
	}
	return effect, nil
}

func newClusterCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cluster",
		Short: "List the clusters and brokers the name server knows (-o json: as the name server answers)",
		Long: `List the clusters and the brokers registered with the name server, one address per
line, and whether each answers now (STATUS: ok, or the error): a name server keeps a
stopped broker's registration until it expires. A name server that knows no broker, or
brokers none of which answers, is an error (exit code 4); some answering and some not
is exit code 5, with the ones that did not named.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				ci, err := a.ClusterInfo(ctx)
				if err != nil {
					return err
				}
				if len(ci.BrokerAddrTable) == 0 {
					if asJSON {
						if err := printJSON(cmd, clusterJSON{ci, completenessOf(nil)}); err != nil {
							return err
						}
					}
					addrs, _ := cmd.Flags().GetString("namesrv")
					return fmt.Errorf("%w registered with name server %s (brokers stopped or unreachable)", admin.ErrNoBroker, addrs)
				}
				probes, perr := a.ProbeBrokers(ctx)
				if perr != nil && probes == nil {
					return perr
				}
				if asJSON {
					if err := printJSON(cmd, clusterJSON{ci, completenessOf(perr)}); err != nil {
						return err
					}
				} else {
					printCluster(cmd.OutOrStdout(), ci, probes)
				}
				noteIncomplete(cmd, perr, "they are marked UNREACHABLE above")
				if perr != nil && !errors.As(perr, new(*admin.PartialError)) {
					return fmt.Errorf("no registered broker answers: %w", perr)
				}
				return perr
			})
		},
	}
}

// clusterJSON is `cluster -o json`: what the name server answers, and which registered
// brokers did not answer their probe.
type clusterJSON struct {
	*admin.ClusterInfo
	completeness
}

// printCluster prints one row per broker address: cluster, broker, role, address and
// whether it answered its probe.
func printCluster(w io.Writer, ci *admin.ClusterInfo, probes []admin.BrokerProbe) {
	status := map[string]string{}
	for _, p := range probes {
		status[p.Addr] = "ok"
		if p.Err != nil {
			cause := p.Err // the broker is in the row already: print what went wrong
			if u := errors.Unwrap(p.Err); u != nil {
				cause = u
			}
			status[p.Addr] = "UNREACHABLE: " + cause.Error()
		}
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "CLUSTER\tBROKER\tROLE\tADDRESS\tSTATUS")
	clusters := make([]string, 0, len(ci.ClusterAddrTable))
	for c := range ci.ClusterAddrTable {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	for _, c := range clusters {
		names := append([]string(nil), ci.ClusterAddrTable[c]...)
		sort.Strings(names)
		for _, n := range names {
			bd := ci.BrokerAddrTable[n]
			if bd == nil {
				fmt.Fprintf(tw, "%s\t%s\t-\t(no address)\t-\n", c, n)
				continue
			}
			ids := make([]int64, 0, len(bd.BrokerAddrs))
			for id := range bd.BrokerAddrs {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				role := "master"
				if id != 0 {
					role = "slave " + strconv.FormatInt(id, 10)
				}
				st := status[bd.BrokerAddrs[id]]
				if st == "" {
					st = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c, n, role, bd.BrokerAddrs[id], st)
			}
		}
	}
	_ = tw.Flush()
}
