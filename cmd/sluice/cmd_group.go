package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/internal/suggest"
)

func newGroupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List, inspect and delete consumer groups",
		Args:  subcommandsOnly,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newGroupConsistencyCmd(), newGroupListCmd(), newGroupClientsCmd(), newGroupDeleteCmd())
	return cmd
}

// groupJSON is one group of `group list -o json`.
type groupJSON struct {
	Group                   string   `json:"group"`
	Lag                     int64    `json:"lag"`                     // messages not consumed (%DLQ% queues left out)
	LagSeconds              int64    `json:"lagSeconds"`              // how long the oldest of them has waited
	Clients                 int      `json:"clients"`                 // client ids online
	MessageModel            string   `json:"messageModel"`            // CLUSTERING or BROADCASTING, "" offline
	ConsumeType             string   `json:"consumeType"`             // CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull)
	Protocols               []string `json:"protocols"`               // of the clients online: "grpc" (RocketMQ 5), "remoting" (4.x)
	Configured              bool     `json:"configured"`              // false: the group only committed offsets
	RetryMaxTimes           int      `json:"retryMaxTimes"`           // the broker config's retry budget
	ClientMaxReconsumeTimes int      `json:"clientMaxReconsumeTimes"` // what its clients send; -1 unknown
	Topics                  int      `json:"topics"`
	LagUnknown              bool     `json:"lagUnknown"` // a broker that is not Sluice holds it: its part of the lag is not read
}

// groupsJSON is `group list -o json`.
type groupsJSON struct {
	Groups []groupJSON `json:"groups"`
	completeness
}

func newGroupListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [--sort lag|age|clients|group] [--filter TEXT] [-o json]",
		Short: "List consumer groups with their lag (messages and time), clients, consume mode and retries before the DLQ",
		Long: `List every consumer group the brokers know — with a subscription config, with committed
offsets only, or with clients online — largest lag first (--sort to change). LAG is the
messages not consumed yet (dead-letter queues left out), WAITING how long the oldest of
them has been stored, RETRIES the maxReconsumeTimes the group's clients send with failed
messages (the broker config's default, marked "(default)", until one has). PROTOCOL is
how the clients online speak: remoting (RocketMQ 4.x clients), grpc (RocketMQ 5 clients
on a broker's gRPC port; a SimpleConsumer shows as pull, a PushConsumer as push).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sortBy, _ := cmd.Flags().GetString("sort")
			filter, _ := cmd.Flags().GetString("filter")
			if !slices.Contains([]string{"lag", "age", "clients", "group"}, sortBy) {
				return &usageError{fmt.Errorf("--sort %q: want lag, age, clients or group%s", sortBy, didYouMean(suggest.Nearest(sortBy, []string{"lag", "age", "clients", "group"})))}
			}
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				all, err := a.GroupSummaries(ctx)
				if err != nil && !errors.As(err, new(*admin.PartialError)) {
					return err
				}
				partialErr := err // some brokers did not answer: print the others', then say so
				now := time.Now()
				rows := all[:0]
				for _, g := range all {
					if filter == "" || strings.Contains(strings.ToLower(g.Group), strings.ToLower(filter)) {
						rows = append(rows, g)
					}
				}
				slices.SortStableFunc(rows, func(x, y admin.GroupSummary) int {
					switch sortBy {
					case "lag":
						return cmpDesc(x.Lag, y.Lag)
					case "age":
						return cmpDesc(int64(x.LagAge(now)), int64(y.LagAge(now)))
					case "clients":
						return cmpDesc(int64(x.Clients), int64(y.Clients))
					}
					return strings.Compare(x.Group, y.Group)
				})
				if asJSON {
					out := groupsJSON{Groups: make([]groupJSON, 0, len(rows)), completeness: completenessOf(partialErr)}
					for _, g := range rows {
						out.Groups = append(out.Groups, groupJSON{Group: g.Group, Lag: g.Lag, LagSeconds: int64(g.LagAge(now).Seconds()), Clients: g.Clients,
							MessageModel: g.MessageModel, ConsumeType: g.ConsumeType, Protocols: orEmpty(g.Protocols), Configured: g.Configured, RetryMaxTimes: g.RetryMaxTimes,
							ClientMaxReconsumeTimes: g.ClientMaxReconsumeTimes, Topics: len(g.Topics), LagUnknown: g.LagUnknown})
					}
					if err := printJSON(cmd, out); err != nil {
						return err
					}
					noteIncomplete(cmd, partialErr, missingAbove)
					return partialErr
				}
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "GROUP\tLAG\tWAITING\tCLIENTS\tMODE\tPROTOCOL\tSTATE\tRETRIES")
				for _, g := range rows {
					waiting := "-"
					if age := g.LagAge(now); age > 0 {
						waiting = age.Truncate(time.Second).String()
					}
					mode := strings.TrimSpace(map[string]string{"CONSUME_PASSIVELY": "push", "CONSUME_ACTIVELY": "pull"}[g.ConsumeType] + " " + strings.ToLower(g.MessageModel))
					if mode == "" {
						mode = "-"
					}
					state := "online"
					switch {
					case g.Clients > 0:
					case !g.Configured:
						state = "offsets-only"
					default:
						state = "offline"
					}
					retries := "-"
					switch {
					case g.ClientMaxReconsumeTimes >= 0:
						retries = strconv.Itoa(g.ClientMaxReconsumeTimes)
					case g.Configured:
						retries = strconv.Itoa(g.RetryMaxTimes) + " (default)"
					}
					lag := strconv.FormatInt(g.Lag, 10)
					if g.LagUnknown { // a broker that is not Sluice holds it: its part is not read
						lag += "+?"
					}
					protocol := strings.Join(g.Protocols, "+")
					if protocol == "" {
						protocol = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", g.Group, lag, waiting, g.Clients, mode, protocol, state, retries)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d consumer group(s)\n", len(rows))
				noteIncomplete(cmd, partialErr, missingAbove)
				return partialErr
			})
		},
	}
	cmd.Flags().String("sort", "lag", "order: lag, age (oldest unconsumed), clients (largest first) or group (by name)")
	cmd.Flags().String("filter", "", "only groups whose name contains this (case-insensitive)")
	return cmd
}

// orEmpty returns s, or an empty slice for nil (JSON [] rather than null).
func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// groupClientJSON is one client of `group clients -o json`.
// groupClientsJSON is `group clients -o json`.
type groupClientsJSON struct {
	Group   string            `json:"group"`
	Clients []groupClientJSON `json:"clients"`
	completeness
}

type groupClientJSON struct {
	ClientID      string   `json:"clientId"`
	Protocol      string   `json:"protocol"`    // remoting or grpc
	Language      string   `json:"language"`    // GO, JAVA, ...
	Version       string   `json:"version"`     // V4_9_7 (remoting, MQVersion), 5.1.4 (a v5 client)
	Addr          string   `json:"addr"`        // ip:port as the broker sees it
	ConsumeType   string   `json:"consumeType"` // CONSUME_PASSIVELY (push) or CONSUME_ACTIVELY (pull; a v5 SimpleConsumer)
	MessageModel  string   `json:"messageModel"`
	LastHeartbeat int64    `json:"lastHeartbeat"` // unix ms
	Subscriptions []string `json:"subscriptions"` // "topic expression", sorted by topic
}

func newGroupClientsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "clients --group G [-o json]",
		Short: "List the clients of a consumer group online: id, protocol, language, version, address, subscriptions",
		Long: `List the clients of a consumer group that every master broker has online (its consumer
connections): RocketMQ 4.x clients (protocol remoting, from their HEART_BEAT) and
RocketMQ 5 clients on a broker's gRPC port (protocol grpc, from their heartbeats and
settings), with the language and version each states, its address, how it consumes
(push; pull, which a v5 SimpleConsumer is) and its subscriptions.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			group, _ := cmd.Flags().GetString("group")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				r, err := a.GroupConsistency(ctx, group)
				if err != nil && r == nil {
					return err
				}
				partialErr := err
				subsOf := func(c admin.ClientSubscriptions) []string {
					out := []string{}
					for _, s := range c.Subscriptions {
						expr := s.SubString
						if s.ExpressionType == "SQL92" {
							expr = "SQL92:" + expr
						}
						out = append(out, s.Topic+" "+expr)
					}
					return out
				}
				if asJSON {
					out := groupClientsJSON{Group: group, Clients: make([]groupClientJSON, 0, len(r.Clients)), completeness: completenessOf(partialErr)}
					for _, c := range r.Clients {
						out.Clients = append(out.Clients, groupClientJSON{ClientID: c.ClientID, Protocol: c.Protocol, Language: c.Language, Version: c.Version,
							Addr: c.Addr, ConsumeType: c.ConsumeType, MessageModel: c.MessageModel, LastHeartbeat: c.LastHeartbeat, Subscriptions: subsOf(c)})
					}
					if err := printJSON(cmd, out); err != nil {
						return err
					}
					return partialErr
				}
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "CLIENT\tPROTOCOL\tLANGUAGE\tVERSION\tADDRESS\tMODE\tLAST HEARTBEAT\tSUBSCRIPTIONS")
				dash := func(s string) string {
					if s == "" {
						return "-"
					}
					return s
				}
				for _, c := range r.Clients {
					mode := strings.TrimSpace(map[string]string{"CONSUME_PASSIVELY": "push", "CONSUME_ACTIVELY": "pull"}[c.ConsumeType] + " " + strings.ToLower(c.MessageModel))
					subs := strings.Join(subsOf(c), ", ")
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ClientID, dash(c.Protocol), dash(c.Language), dash(c.Version), dash(c.Addr),
						dash(mode), time.UnixMilli(c.LastHeartbeat).UTC().Format(time.DateTime), dash(subs))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%d client(s) of group %s online\n", len(r.Clients), group)
				noteIncomplete(cmd, partialErr, "their clients are not listed")
				return partialErr
			})
		},
	}
	cmd.Flags().String("group", "", "consumer group (required)")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func cmpDesc(x, y int64) int {
	switch {
	case x > y:
		return -1
	case x < y:
		return 1
	}
	return 0
}

func newGroupDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "delete --group G [--yes]",
		Short: "Delete a consumer group: its subscription config and committed offsets on every broker",
		Long: `Delete a consumer group from every master broker (DELETE_SUBSCRIPTIONGROUP): its
subscription config and every offset it committed. Its %RETRY% and %DLQ% topics and
their messages stay (delete them with "topic delete"). Brokers refuse while clients of
the group are online. The command states what it would delete and asks on a terminal;
--yes skips the question, and without a terminal it refuses unless --yes is given
(exit code 2). A group no broker knows is refused (exit code 3) with the nearest names.
When some brokers fail, it is deleted from the others, a line on stderr names those that
failed and the exit code is 5.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			group, _ := cmd.Flags().GetString("group")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				all, listErr := a.GroupSummaries(ctx)
				var pe *admin.PartialError
				if listErr != nil && !errors.As(listErr, &pe) {
					return listErr
				}
				i := slices.IndexFunc(all, func(g admin.GroupSummary) bool { return g.Group == group })
				if i < 0 {
					if pe != nil { // a broker that did not answer may hold it
						return fmt.Errorf("consumer group %q is on none of the brokers that answered; nothing was deleted: %w", group, listErr)
					}
					return checkGroup(ctx, a, group)
				}
				g := all[i]
				effect := fmt.Sprintf("delete consumer group %s from %s: its config and its offsets on %d topic(s) (lag %d); its %%RETRY%% and %%DLQ%% topics stay",
					group, strings.Join(g.Brokers, ", "), len(g.Topics), g.Lag)
				if pe != nil {
					effect += fmt.Sprintf(" (%s did not answer: if they hold the group, it stays there)", strings.Join(pe.FailedBrokers(), ", "))
				}
				if err := confirm(cmd, effect); err != nil {
					return err
				}
				deleted, err := a.DeleteGroup(ctx, group)
				if err != nil && !errors.As(err, new(*admin.PartialError)) {
					return err
				}
				// Whole, or a *admin.PartialError: say where it was deleted and where not.
				names := make([]string, len(deleted))
				for i, b := range deleted {
					names[i] = b.Name
				}
				if asJSON {
					if perr := printJSON(cmd, struct {
						Group       string   `json:"group"`
						DeletedFrom []string `json:"deletedFrom"` // brokers that deleted it
						completeness
					}{group, names, completenessOf(err)}); perr != nil {
						return perr
					}
				} else if len(names) > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "deleted consumer group %s (config and offsets on %s)\n", group, strings.Join(names, ", "))
				}
				noteIncomplete(cmd, err, "if they hold the group it stays there: delete it again once they answer")
				return err
			})
		},
	}
	cmd.Flags().String("group", "", "consumer group (required)")
	addYesFlag(cmd, "delete the group")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

// errInconsistent makes `group consistency` exit non-zero for an inconsistent group.
var errInconsistent = errors.New("the group's clients subscribe differently")

func newGroupConsistencyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "consistency --group G [--json]",
		Short: "Check that all clients of a consumer group subscribe to the same topics and tags",
		Long: `Ask every master broker for the subscriptions each live client of the group sent in its
last heartbeat and compare them (%RETRY% topics left out). Clients of one group that
subscribe differently lose messages: a broker filters a topic's pulls with one
subscription per group. Exits with an error when the group is inconsistent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			group, _ := cmd.Flags().GetString("group")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				r, err := a.GroupConsistency(ctx, group)
				if err != nil && r == nil {
					return err
				}
				partialErr := err
				if asJSON {
					if err := printJSON(cmd, struct {
						*admin.SubscriptionReport
						completeness
					}{r, completenessOf(partialErr)}); err != nil {
						return err
					}
				} else {
					printConsistency(cmd, r)
				}
				noteIncomplete(cmd, partialErr, "their clients are missing above")
				if partialErr != nil {
					return partialErr
				}
				if !r.Consistent {
					return fmt.Errorf("group %s: %w", group, errInconsistent)
				}
				return nil
			})
		},
	}
	cmd.Flags().String("group", "", "consumer group (required)")
	cmd.Flags().Bool("json", false, "print the report as JSON (the same as -o json)")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func printConsistency(cmd *cobra.Command, r *admin.SubscriptionReport) {
	out := cmd.OutOrStdout()
	switch {
	case len(r.Clients) == 0:
		fmt.Fprintf(out, "group %s has no client online\n", r.Group)
		return
	case r.Consistent:
		fmt.Fprintf(out, "group %s is consistent: %d client(s) subscribe alike\n", r.Group, len(r.Clients))
	default:
		fmt.Fprintf(out, "group %s is NOT consistent: %d clients in %d different subscription sets\n", r.Group, len(r.Clients), len(r.Sets))
	}
	for i, s := range r.Sets {
		fmt.Fprintf(out, "set %d: %s\n", i+1, strings.Join(s.Clients, ", "))
		topics := make([]string, 0, len(s.Subscriptions))
		for t := range s.Subscriptions {
			topics = append(topics, t)
		}
		sort.Strings(topics)
		for _, t := range topics {
			fmt.Fprintf(out, "  %s: %s\n", t, s.Subscriptions[t])
		}
	}
	for _, d := range r.Differences {
		fmt.Fprintf(out, "differs: %s\n", d)
	}
}
