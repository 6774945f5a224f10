package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/message"
)

func newMessageStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status (--id ID [--topic T] | --topic T --key K) [--group G] [-o json]",
		Short: "Show what became of a message in each consumer group: consumed, retried, dead-lettered",
		Long: `For a message (by --id as in "message get", or every message of --topic with --key)
show, for each consumer group that committed an offset on its topic (or only --group):

  STATE      consumed, not-consumed, no-offset, retrying, consumed-after-retries,
             dead-lettered, re-driven, unknown-broadcasting
  CONSUMED   the group's committed offset on the message's queue is past the message
  RETRIES    copies of it in %RETRY%<group> (one per failed consume, once its retry
             delay has passed), "+" when the newest is not consumed yet
  DLQ        copies of it in %DLQ%<group>, and whether a "dlq resend" re-drove them

Copies are found through the brokers' key index by the message's client message id
(UNIQ_KEY), or without one by its keys. Exit code 3 when no message or group matches.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			id, _ := f.GetString("id")
			topic, _ := f.GetString("topic")
			key, _ := f.GetString("key")
			group, _ := f.GetString("group")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			switch {
			case id != "" && key != "":
				return &usageError{errors.New("--id and --key: give one of them")}
			case id == "" && key == "":
				return &usageError{errors.New("--id or --topic with --key: required")}
			case key != "" && topic == "":
				return &usageError{errors.New("--key needs --topic")}
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				var ms []*message.MessageExt
				var findErr error
				if id != "" {
					ms, findErr = getMessage(ctx, a, id, topic)
					if findErr != nil && len(ms) == 0 { // with some found, findErr is a *admin.PartialError: go on
						if errors.Is(findErr, admin.ErrTopicNotExist) {
							return topicNotFound(ctx, a, topic, findErr)
						}
						if exitCode(findErr) == exitFailure { // an answer, not an outage: no such message
							return &notFoundError{findErr}
						}
						return findErr
					}
				} else {
					ms, findErr = a.FindMessages(ctx, topic, key, time.Time{}, time.Time{})
					if len(ms) == 0 {
						if findErr != nil {
							return topicNotFound(ctx, a, topic, findErr)
						}
						return &notFoundError{fmt.Errorf("no message of topic %s has key %s", topic, key)}
					}
				}
				if group != "" {
					if err := checkGroup(ctx, a, group); err != nil && !errors.As(err, new(*admin.PartialError)) {
						return err
					}
				}
				out := make([]*admin.MessageStatus, 0, len(ms))
				for _, m := range ms {
					st, err := a.MessageStatus(ctx, m, admin.MessageStatusOptions{Group: group})
					if err != nil && st == nil {
						return err
					}
					if err != nil && findErr == nil {
						findErr = err // a *admin.PartialError: print what the others answered, then say so
					}
					out = append(out, st)
				}
				if asJSON {
					if err := printJSON(cmd, struct {
						Messages []*admin.MessageStatus `json:"messages"`
						completeness
					}{out, completenessOf(findErr)}); err != nil {
						return err
					}
				} else {
					printMessageStatus(cmd.OutOrStdout(), out)
				}
				noteIncomplete(cmd, findErr, "what they hold (copies, offsets) is missing above")
				return findErr // some brokers failed the key lookup: say so after the rest
			})
		},
	}
	f := cmd.Flags()
	f.String("id", "", "offset message id, or with --topic a client message id (UNIQ_KEY)")
	f.String("topic", "", "topic of the message (with --key, or to let --id be a client message id)")
	f.String("key", "", "message key: every message of --topic with it")
	f.String("group", "", "only this consumer group (default: every group with an offset on the topic)")
	return cmd
}

func printMessageStatus(w io.Writer, sts []*admin.MessageStatus) {
	for i, st := range sts {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "message %s (offset id %s) of topic %s: broker %s, queue %d, offset %d, stored %s\n",
			st.MsgID, st.OffsetMsgID, st.Topic, st.Broker, st.QueueID, st.QueueOffset, msTime(st.StoreTimestamp))
		if len(st.Groups) == 0 {
			fmt.Fprintf(w, "no consumer group has committed an offset on topic %s\n", st.Topic)
			continue
		}
		tw := newTable(w)
		fmt.Fprintln(tw, "GROUP\tSTATE\tCONSUMED\tCOMMITTED\tRETRIES\tDLQ")
		for _, g := range st.Groups {
			committed := "-"
			if g.Committed >= 0 {
				committed = strconv.FormatInt(g.Committed, 10)
			}
			consumed := "no"
			if g.Consumed {
				consumed = "yes"
			}
			retries := strconv.Itoa(g.Retries)
			switch {
			case g.RetriesUnknown:
				retries = "? (no id or key)"
			case g.Retries > 0 && !g.LastRetryConsumed:
				retries += "+"
			}
			dlq := "-"
			if n := len(g.DeadLetters); n > 0 {
				resent := 0
				for _, d := range g.DeadLetters {
					if d.Resent {
						resent++
					}
				}
				dlq = fmt.Sprintf("%d (%d re-driven)", n, resent)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", g.Group, g.State, consumed, committed, retries, dlq)
		}
		_ = tw.Flush()
	}
	if len(sts) > 1 {
		fmt.Fprintf(w, "%d message(s)\n", len(sts))
	}
}
