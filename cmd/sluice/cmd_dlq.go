package main

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
)

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List and re-drive a consumer group's dead letters (%DLQ%<group>)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDLQListCmd(), newDLQResendCmd())
	return cmd
}

func newDLQListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list --group G [--from N] [--max N] [--body] [--json]",
		Short: "List the dead letters of a consumer group",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			group, _ := f.GetString("group")
			var opt admin.DLQListOptions
			opt.FromOffset, _ = f.GetInt64("from")
			opt.Max, _ = f.GetInt("max")
			body, _ := f.GetBool("body")
			asJSON, _ := f.GetBool("json")
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				l, err := a.ListDLQ(ctx, group, opt)
				if err != nil {
					return err
				}
				if asJSON {
					type row struct {
						Broker         string            `json:"broker"`
						QueueID        int               `json:"queueId"`
						QueueOffset    int64             `json:"queueOffset"`
						MsgID          string            `json:"msgId"`
						OriginTopic    string            `json:"originTopic"`
						Tag            string            `json:"tag,omitempty"`
						Keys           []string          `json:"keys,omitempty"`
						ReconsumeTimes int32             `json:"reconsumeTimes"`
						StoreTime      string            `json:"storeTime"`
						Resent         bool              `json:"resent"`
						Properties     map[string]string `json:"properties,omitempty"`
						Body           string            `json:"body,omitempty"`
					}
					rows := make([]row, 0, len(l))
					for _, d := range l {
						r := row{Broker: d.Queue.BrokerName, QueueID: d.Queue.QueueID, QueueOffset: d.QueueOffset, MsgID: d.Message.MsgID,
							OriginTopic: d.OriginTopic, Tag: d.Message.Tag(), Keys: d.Message.Keys(), ReconsumeTimes: d.Message.ReconsumeTimes,
							StoreTime: time.UnixMilli(d.Message.StoreTimestamp).Format(time.RFC3339Nano), Resent: d.Resent, Properties: d.Message.Properties}
						if body {
							r.Body = string(d.Message.Body)
						}
						rows = append(rows, r)
					}
					return printJSON(cmd, rows)
				}
				out := cmd.OutOrStdout()
				if len(l) == 0 {
					fmt.Fprintf(out, "no dead letters for group %s\n", group)
					return nil
				}
				fmt.Fprintf(out, "%-12s %5s %8s %-32s %-20s %-12s %-24s %9s %-24s %s\n", "broker", "queue", "offset", "msgId", "topic", "tag", "keys", "reconsume", "stored", "resent")
				for _, d := range l {
					m := d.Message
					fmt.Fprintf(out, "%-12s %5d %8d %-32s %-20s %-12s %-24s %9d %-24s %t\n", d.Queue.BrokerName, d.Queue.QueueID, d.QueueOffset,
						m.MsgID, d.OriginTopic, m.Tag(), strings.Join(m.Keys(), " "), m.ReconsumeTimes,
						time.UnixMilli(m.StoreTimestamp).Format("2006-01-02 15:04:05.000"), d.Resent)
					if body {
						fmt.Fprintf(out, "    body: %s\n", dlqBodyText(m.Body))
					}
				}
				fmt.Fprintf(out, "%d dead letter(s)\n", len(l))
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.String("group", "", "consumer group (required)")
	f.Int64("from", 0, "first DLQ queue offset")
	f.Int("max", admin.DefaultDLQListMax, fmt.Sprintf("most messages to list (1..%d)", admin.MaxDLQListMax))
	f.Bool("body", false, "print message bodies")
	f.Bool("json", false, "print JSON")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

// dlqBodyText returns b as text when it is valid UTF-8 (at most 200 runes), else a hex
// preview.
func dlqBodyText(b []byte) string {
	if utf8.Valid(b) {
		s := string(b)
		if utf8.RuneCountInString(s) > 200 {
			return string([]rune(s)[:200]) + fmt.Sprintf("... (%d bytes)", len(b))
		}
		return s
	}
	if len(b) > 64 {
		return fmt.Sprintf("%x... (%d bytes, binary)", b[:64], len(b))
	}
	return fmt.Sprintf("%x (binary)", b)
}

func newDLQResendCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resend --group G [--from N] [--include-resent] [--max N] [--to-original-topic]",
		Short: "Send dead letters back to the group (keys kept, reconsume count reset)",
		Long: `Send the dead letters of a consumer group back for consumption, as new messages with the
same body, tag, keys, message id and user properties and a reconsume count of 0; the
group's consumers then get them with a full retry budget, shown under their original
topic. By default they go to the group's retry topic (%RETRY%<group>), so only this group
gets them; with --to-original-topic they go to the original topic, where every group
subscribed to it gets them again (other groups would apply them twice). The re-drive
mark (the group's offset of its DLQ queue) moves past each message sent, so running
resend again only sends dead letters that arrived since. A message that cannot be sent
stops the re-drive of its DLQ queue and makes the command fail.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			group, _ := f.GetString("group")
			var opt admin.DLQResendOptions
			opt.FromOffset, _ = f.GetInt64("from")
			opt.IncludeResent, _ = f.GetBool("include-resent")
			opt.Max, _ = f.GetInt("max")
			opt.ToOriginalTopic, _ = f.GetBool("to-original-topic")
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				res, err := a.ResendDLQ(ctx, group, opt)
				if res != nil {
					out := cmd.OutOrStdout()
					for _, r := range res.Resent {
						fmt.Fprintf(out, "resent %s (DLQ %s#%d offset %d) to %s queue %s#%d offset %d, keys %s\n", r.MsgID, r.DLQ.BrokerName, r.DLQ.QueueID,
							r.DLQOffset, r.Topic, r.Destination.BrokerName, r.Destination.QueueID, r.QueueOffset, strings.Join(r.Keys, " "))
					}
					for _, e := range res.Failed {
						fmt.Fprintf(out, "FAILED %s (DLQ %s#%d offset %d): %v\n", e.MsgID, e.DLQ.BrokerName, e.DLQ.QueueID, e.DLQOffset, e.Err)
					}
					fmt.Fprintf(out, "%d resent, %d failed\n", len(res.Resent), len(res.Failed))
				}
				return err
			})
		},
	}
	f := cmd.Flags()
	f.String("group", "", "consumer group (required)")
	f.Int64("from", 0, "first DLQ queue offset to consider")
	f.Bool("include-resent", false, "also resend dead letters resent before (from --from on)")
	f.Int("max", 0, "most messages to resend (0 = all)")
	f.Bool("to-original-topic", false, "send to the original topic (every subscribed group gets them) instead of the group's retry topic")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}
