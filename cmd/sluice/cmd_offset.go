package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/message"
)

func newOffsetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "offset",
		Short: "Show and reset consumer group offsets",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newOffsetShowCmd(), newOffsetResetCmd())
	return cmd
}

func newOffsetShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show --group G --topic T",
		Short: "Print a group's committed offset, the queue's min/max offsets and the lag of every queue of a topic",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			group, _ := cmd.Flags().GetString("group")
			topic, _ := cmd.Flags().GetString("topic")
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				offs, err := a.ConsumerOffsets(ctx, group, topic)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "%-20s %5s %12s %12s %12s %10s\n", "broker", "queue", "committed", "min", "max", "lag")
				var lag int64
				for _, o := range offs {
					committed := strconv.FormatInt(o.Committed, 10)
					if o.Committed < 0 {
						committed = "-"
					}
					fmt.Fprintf(out, "%-20s %5d %12s %12d %12d %10d\n", o.Queue.BrokerName, o.Queue.QueueID, committed, o.Min, o.Max, o.Lag())
					lag += o.Lag()
				}
				fmt.Fprintf(out, "total lag %d\n", lag)
				return nil
			})
		},
	}
	cmd.Flags().String("group", "", "consumer group (required)")
	cmd.Flags().String("topic", "", "topic (required)")
	_ = cmd.MarkFlagRequired("group")
	_ = cmd.MarkFlagRequired("topic")
	return cmd
}

func newOffsetResetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reset --group G --topic T --time TIME",
		Short: "Move a group's offsets of a topic to the first message stored at or after a time; running consumers jump there",
		Long: `Move a consumer group's offsets of a topic, on every broker of the topic, to the first
message stored at or after --time (INVOKE_BROKER_TO_RESET_OFFSET, RocketMQ request code 222).
The brokers store the new offsets and tell the group's running consumers to jump there
(RESET_CONSUMER_CLIENT_OFFSET, 220); a group with no consumer online starts there next time.

--time accepts RFC 3339 ("2026-01-02T15:04:05Z" or with an offset), a local time
"2026-01-02 15:04:05" or "2026-01-02T15:04:05", unix milliseconds, "now", "now-<duration>"
(e.g. now-30m), or "end" (the end of every queue: skip everything stored so far).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			group, _ := f.GetString("group")
			topic, _ := f.GetString("topic")
			ts, _ := f.GetString("time")
			force, _ := f.GetBool("force")
			at, err := parseResetTime(ts, time.Now())
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				res, err := a.ResetOffsetByTime(ctx, group, topic, at, force)
				if res != nil && (err == nil || len(res.Offsets) > 0) { // nothing to report when every broker refused
					printResetResult(cmd, group, topic, at, res)
				}
				return err
			})
		},
	}
	f := cmd.Flags()
	f.String("group", "", "consumer group (required)")
	f.String("topic", "", "topic (required)")
	f.String("time", "", "point in time (required; see the long help for the formats)")
	f.Bool("force", true, "also move offsets forward; --force=false only moves them back")
	_ = cmd.MarkFlagRequired("group")
	_ = cmd.MarkFlagRequired("topic")
	_ = cmd.MarkFlagRequired("time")
	return cmd
}

func printResetResult(cmd *cobra.Command, group, topic string, at time.Time, res *admin.ResetResult) {
	out := cmd.OutOrStdout()
	when := "the end of the queues"
	if !at.IsZero() {
		when = at.Format(time.RFC3339Nano)
	}
	fmt.Fprintf(out, "reset group %s, topic %s to %s\n", group, topic, when)
	mqs := make([]message.MessageQueue, 0, len(res.Offsets))
	for mq := range res.Offsets {
		mqs = append(mqs, mq)
	}
	sort.Slice(mqs, func(i, j int) bool { return mqs[i].Less(mqs[j]) })
	for _, mq := range mqs {
		fmt.Fprintf(out, "  %s queue %d -> %d\n", mq.BrokerName, mq.QueueID, res.Offsets[mq])
	}
	if len(res.Offline) > 0 {
		fmt.Fprintf(out, "no consumer online on %s: the next consumer starts at these offsets\n", strings.Join(res.Offline, ", "))
	}
}

// parseResetTime reads --time; "end" gives the zero time.
func parseResetTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "end":
		return time.Time{}, nil
	case s == "now":
		return now, nil
	case strings.HasPrefix(s, "now-"):
		d, err := time.ParseDuration(s[len("now-"):])
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("--time %q: want now-<duration> such as now-30m", s)
		}
		return now.Add(-d), nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return time.Time{}, fmt.Errorf("--time %q: unix milliseconds must not be negative", s)
		}
		return time.UnixMilli(ms), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02 15:04:05.000"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("--time %q: want RFC 3339, \"2006-01-02 15:04:05\" (local), unix milliseconds, now, now-<duration> or end", s)
}
