package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
)

func newGroupCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "Inspect consumer groups",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newGroupConsistencyCmd())
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
			asJSON, _ := cmd.Flags().GetBool("json")
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				r, err := a.GroupConsistency(ctx, group)
				if err != nil {
					return err
				}
				if asJSON {
					if err := printJSON(cmd, r); err != nil {
						return err
					}
				} else {
					printConsistency(cmd, r)
				}
				if !r.Consistent {
					return fmt.Errorf("group %s: %w", group, errInconsistent)
				}
				return nil
			})
		},
	}
	cmd.Flags().String("group", "", "consumer group (required)")
	cmd.Flags().Bool("json", false, "print the report as JSON")
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
