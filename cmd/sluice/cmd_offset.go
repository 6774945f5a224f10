package main

import (
	"context"
	"errors"
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
		Args:  subcommandsOnly,
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
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				offs, partialErr := a.ConsumerOffsets(ctx, group, topic)
				if partialErr != nil && !errors.As(partialErr, new(*admin.PartialError)) {
					return topicNotFound(ctx, a, topic, partialErr)
				}
				if err := checkGroup(ctx, a, group); err != nil && !errors.As(err, new(*admin.PartialError)) {
					return err
				}
				var lag int64
				for _, o := range offs {
					lag += o.Lag()
				}
				if asJSON {
					type row struct {
						Broker    string `json:"broker"`
						QueueID   int    `json:"queueId"`
						Committed int64  `json:"committed"` // -1: none
						Min       int64  `json:"min"`
						Max       int64  `json:"max"`
						Lag       int64  `json:"lag"`
					}
					v := struct {
						Group  string `json:"group"`
						Topic  string `json:"topic"`
						Lag    int64  `json:"lag"`
						Queues []row  `json:"queues"`
						completeness
					}{Group: group, Topic: topic, Lag: lag, Queues: []row{}, completeness: completenessOf(partialErr)}
					for _, o := range offs {
						v.Queues = append(v.Queues, row{o.Queue.BrokerName, o.Queue.QueueID, o.Committed, o.Min, o.Max, o.Lag()})
					}
					if err := printJSON(cmd, v); err != nil {
						return err
					}
					noteIncomplete(cmd, partialErr, "their queues are missing above and from the lag")
					return partialErr
				}
				tw := newTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "BROKER\tQUEUE\tCOMMITTED\tMIN\tMAX\tLAG")
				for _, o := range offs {
					committed := strconv.FormatInt(o.Committed, 10)
					if o.Committed < 0 {
						committed = "-"
					}
					fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\n", o.Queue.BrokerName, o.Queue.QueueID, committed, o.Min, o.Max, o.Lag())
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "total lag %d\n", lag)
				noteIncomplete(cmd, partialErr, "their queues are missing above and from the lag")
				return partialErr
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
		Use:   "reset --group G --topic T --time TIME [--yes]",
		Short: "Move a group's offsets of a topic to the first message stored at or after a time; running consumers jump there",
		Long: `Move a consumer group's offsets of a topic, on every broker of the topic, to the first
message stored at or after --time (INVOKE_BROKER_TO_RESET_OFFSET, RocketMQ request code 222).
The brokers store the new offsets and tell the group's running consumers to jump there
(RESET_CONSUMER_CLIENT_OFFSET, 220); a group with no consumer online starts there next time.

--time accepts RFC 3339 ("2026-01-02T15:04:05Z" or with an offset), a local time
"2026-01-02 15:04:05" or "2026-01-02T15:04:05", unix milliseconds, "now", "now-<duration>"
(e.g. now-30m), or "end" (the end of every queue: skip everything stored so far).

A group no broker knows (no config, offset or client) is refused (exit code 3) with the
nearest known names: a typo would otherwise store offsets for a group nobody runs. To
place a new group's offsets before its consumers first start, add --allow-new-group.

The command first states the effect (how far the group lags now, what is skipped or
consumed again) and asks on a terminal; --yes skips the question, and without a
terminal (a script) it refuses unless --yes is given (exit code 2).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			group, _ := f.GetString("group")
			topic, _ := f.GetString("topic")
			ts, _ := f.GetString("time")
			force, _ := f.GetBool("force")
			allowNew, _ := f.GetBool("allow-new-group")
			at, err := parseResetTime(ts, time.Now())
			if err != nil {
				return &usageError{err}
			}
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				if _, err := a.TopicRoute(ctx, topic); err != nil {
					return topicNotFound(ctx, a, topic, err)
				}
				if !allowNew {
					if err := checkGroup(ctx, a, group); err != nil {
						var nf *notFoundError
						if errors.As(err, &nf) {
							return fmt.Errorf("%w; nothing was reset (--allow-new-group resets a group whose consumers have not run yet)", err)
						}
						return err
					}
				}
				effect, err := resetEffect(ctx, a, group, topic, at, force)
				if err != nil {
					return err
				}
				if err := confirm(cmd, effect); err != nil {
					return err
				}
				res, err := a.ResetOffsetByTime(ctx, group, topic, at, force)
				if res != nil && (err == nil || len(res.Offsets) > 0) { // nothing to report when every broker refused
					if asJSON {
						if perr := printResetJSON(cmd, group, topic, at, res, err); perr != nil {
							return perr
						}
					} else {
						printResetResult(cmd, group, topic, at, res)
					}
					noteIncomplete(cmd, err, "their queues were not reset")
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
	f.Bool("allow-new-group", false, "reset a group no broker knows yet (its consumers have never run)")
	addYesFlag(cmd, "reset the offsets")
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

// printResetJSON prints a reset's result for -o json; err is the reset's error (a
// *admin.PartialError marks it partial).
func printResetJSON(cmd *cobra.Command, group, topic string, at time.Time, res *admin.ResetResult, err error) error {
	type row struct {
		Broker  string `json:"broker"`
		QueueID int    `json:"queueId"`
		Offset  int64  `json:"offset"`
	}
	v := struct {
		Group   string   `json:"group"`
		Topic   string   `json:"topic"`
		Time    string   `json:"time"` // RFC 3339, or "end"
		Queues  []row    `json:"queues"`
		Offline []string `json:"offline"` // brokers with no consumer of the group online
		completeness
	}{Group: group, Topic: topic, Time: "end", Queues: []row{}, Offline: res.Offline, completeness: completenessOf(err)}
	if !at.IsZero() {
		v.Time = at.Format(time.RFC3339Nano)
	}
	if v.Offline == nil {
		v.Offline = []string{}
	}
	mqs := make([]message.MessageQueue, 0, len(res.Offsets))
	for mq := range res.Offsets {
		mqs = append(mqs, mq)
	}
	sort.Slice(mqs, func(i, j int) bool { return mqs[i].Less(mqs[j]) })
	for _, mq := range mqs {
		v.Queues = append(v.Queues, row{mq.BrokerName, mq.QueueID, res.Offsets[mq]})
	}
	return printJSON(cmd, v)
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

// resetEffect states what an offset reset does: where the offsets go, what is skipped or
// consumed again, and the group's lag on the topic now.
func resetEffect(ctx context.Context, a *admin.Admin, group, topic string, at time.Time, force bool) (string, error) {
	offs, err := a.ConsumerOffsets(ctx, group, topic)
	var pe *admin.PartialError
	if err != nil && !errors.As(err, &pe) {
		return "", err
	}
	var lag int64
	queues := 0
	for _, o := range offs {
		if o.Committed >= 0 {
			lag += o.Lag()
			queues++
		}
	}
	var effect string
	if at.IsZero() {
		effect = fmt.Sprintf("skip every message of %s that %s has not consumed yet (its offsets move to the end of each queue)", topic, group)
	} else {
		effect = fmt.Sprintf("move the offsets of %s on %s to the first message stored at or after %s: messages stored before it are skipped, messages after it are consumed (again)",
			group, topic, at.UTC().Format(time.RFC3339))
	}
	effect += fmt.Sprintf("; %s lags %d message(s) on %s now (%d of %d queue(s) with offsets); running consumers of the group jump there", group, lag, topic, queues, len(offs))
	if !force {
		effect += "; offsets only move back (--force=false)"
	}
	if pe != nil {
		effect += fmt.Sprintf("; not counted: the queues of %s, which did not answer", strings.Join(pe.FailedBrokers(), ", "))
	}
	return effect, nil
}
