package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
)

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List and re-drive a consumer group's dead letters (%DLQ%<group>)",
		Args:  subcommandsOnly,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDLQListCmd(), newDLQResendCmd())
	return cmd
}

// dlqRow is one dead letter in `dlq list -o json`.
type dlqRow struct {
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

// dlqPage is `dlq list -o json`: the total, which rows these are, and the rows.
type dlqPage struct {
	Group       string   `json:"group"`
	Total       int64    `json:"total"`   // dead letters stored
	Pending     int64    `json:"pending"` // of those, not re-driven yet
	NewestFirst bool     `json:"newestFirst"`
	From        int      `json:"from"` // 1-based position of the first row in the order; 0 when none
	To          int      `json:"to"`
	More        bool     `json:"more"` // rows after these
	Rows        []dlqRow `json:"rows"`
	completeness
}

func newDLQListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list --group G [--limit N] [--page P | --all] [--oldest] [--from OFFSET] [--body] [-o json]",
		Short: "List the dead letters of a consumer group, newest first, with their total",
		Long: fmt.Sprintf(`List the dead letters of a consumer group: the total and how many are not re-driven
yet, then one page of them — newest first (--oldest: oldest first), --limit per page
(default %d), page --page (default 1), or every one with --all (at most %d). The last
line says which rows were shown and how to get the next page. A group no broker knows
is an error (exit code 3) naming the nearest known groups; an unreachable cluster is an
error (exit code 4), never "no dead letters". When some brokers answer and some do not,
the others' dead letters are listed and counted, a line on stderr names the brokers that
failed, -o json says "partial": true with "failedBrokers", and the exit code is 5.`, admin.DefaultDLQListMax, admin.MaxDLQListMax),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			group, _ := f.GetString("group")
			from, _ := f.GetInt64("from")
			limit, _ := f.GetInt("limit")
			page, _ := f.GetInt("page")
			all, _ := f.GetBool("all")
			oldest, _ := f.GetBool("oldest")
			body, _ := f.GetBool("body")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			if f.Changed("max") { // the older name of --limit
				limit, _ = f.GetInt("max")
			}
			if limit < 1 || limit > admin.MaxDLQListMax {
				return &usageError{fmt.Errorf("--limit %d: must be 1..%d", limit, admin.MaxDLQListMax)}
			}
			if page < 1 {
				return &usageError{fmt.Errorf("--page %d: must be 1 or more", page)}
			}
			if all && f.Changed("page") {
				return &usageError{fmt.Errorf("--all and --page go separately")}
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				if err := checkGroup(ctx, a, group); err != nil {
					return err
				}
				// Some brokers may fail (a *admin.PartialError): list the others' dead
				// letters, then say so.
				count, partialErr := a.CountDLQ(ctx, group)
				if partialErr != nil && !errors.As(partialErr, new(*admin.PartialError)) {
					return partialErr
				}
				opt := admin.DLQListOptions{FromOffset: from, Max: limit, Skip: (page - 1) * limit, NewestFirst: !oldest}
				if all {
					opt.Skip, opt.Max = 0, int(min(max(count.Total, 1), admin.MaxDLQListMax))
				}
				if opt.Skip+opt.Max > admin.MaxDLQListMax {
					return &usageError{fmt.Errorf("--page %d of --limit %d reaches past the %d dead letters one listing reads; use --from OFFSET", page, limit, admin.MaxDLQListMax)}
				}
				l, err := a.ListDLQ(ctx, group, opt)
				if err != nil && !errors.As(err, new(*admin.PartialError)) {
					return err
				}
				if err != nil {
					partialErr = err
				}
				p := dlqPage{Group: group, Total: count.Total, Pending: count.Pending, NewestFirst: !oldest, Rows: []dlqRow{},
					completeness: completenessOf(partialErr)}
				if len(l) > 0 {
					p.From, p.To = opt.Skip+1, opt.Skip+len(l)
				}
				p.More = from == 0 && int64(opt.Skip+len(l)) < count.Total
				if asJSON {
					for _, d := range l {
						r := dlqRow{Broker: d.Queue.BrokerName, QueueID: d.Queue.QueueID, QueueOffset: d.QueueOffset, MsgID: d.Message.MsgID,
							OriginTopic: d.OriginTopic, Tag: d.Message.Tag(), Keys: d.Message.Keys(), ReconsumeTimes: d.Message.ReconsumeTimes,
							StoreTime: time.UnixMilli(d.Message.StoreTimestamp).Format(time.RFC3339Nano), Resent: d.Resent, Properties: d.Message.Properties}
						if body {
							r.Body = string(d.Message.Body)
						}
						p.Rows = append(p.Rows, r)
					}
					if err := printJSON(cmd, p); err != nil {
						return err
					}
					noteIncomplete(cmd, partialErr, dlqMissing)
					return partialErr
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "group %s: %d dead letter(s), %d not re-driven yet\n", group, count.Total, count.Pending)
				if len(l) == 0 {
					noteIncomplete(cmd, partialErr, dlqMissing)
					return partialErr
				}
				tw := newTable(out)
				fmt.Fprintln(tw, "BROKER\tQUEUE\tOFFSET\tMSG_ID\tTOPIC\tTAG\tKEYS\tRECONSUMED\tSTORED\tRESENT")
				for _, d := range l {
					m := d.Message
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\t%t\n", d.Queue.BrokerName, d.Queue.QueueID, d.QueueOffset,
						m.MsgID, d.OriginTopic, m.Tag(), strings.Join(m.Keys(), " "), m.ReconsumeTimes,
						time.UnixMilli(m.StoreTimestamp).Format("2006-01-02 15:04:05.000"), d.Resent)
					if body {
						fmt.Fprintf(tw, "\tbody: %s\n", dlqBodyText(m.Body))
					}
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				order := "newest first"
				if oldest {
					order = "oldest first"
				}
				fmt.Fprintf(out, "%d dead letter(s) shown: %d–%d of %d, %s", len(l), p.From, p.To, count.Total, order)
				if p.More {
					fmt.Fprintf(out, "; more: --page %d (or --all)", page+1)
				}
				fmt.Fprintln(out)
				noteIncomplete(cmd, partialErr, dlqMissing)
				return partialErr
			})
		},
	}
	f := cmd.Flags()
	f.String("group", "", "consumer group (required)")
	f.Int64("from", 0, "skip dead letters below this DLQ queue offset")
	f.Int("limit", admin.DefaultDLQListMax, fmt.Sprintf("dead letters per page (1..%d)", admin.MaxDLQListMax))
	f.Int("max", admin.DefaultDLQListMax, "the older name of --limit")
	_ = f.MarkHidden("max")
	f.Int("page", 1, "page to print (1 = the newest, or the oldest with --oldest)")
	f.Bool("all", false, fmt.Sprintf("print every dead letter (at most %d)", admin.MaxDLQListMax))
	f.Bool("oldest", false, "oldest first")
	f.Bool("body", false, "print message bodies")
	f.Bool("json", false, "print JSON (the same as -o json)")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

// dlqMissing is what noteIncomplete says for `dlq list`.
const dlqMissing = "their dead letters are missing above and from the counts"

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
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				if err := checkGroup(ctx, a, group); err != nil {
					return err
				}
				if showsProgress(cmd.ErrOrStderr()) {
					count, err := a.CountDLQ(ctx, group) // of the brokers that answer: the others are skipped below too
					if err != nil && !errors.As(err, new(*admin.PartialError)) {
						return err
					}
					total := count.Pending
					if opt.IncludeResent {
						total = count.Total
					}
					if opt.Max > 0 {
						total = min(total, int64(opt.Max))
					}
					bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
						progressbar.OptionSetDescription("re-driving"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
					opt.Progress = func(resent, failed int) { _ = bar.Set(resent + failed) }
					defer bar.Finish()
				}
				res, err := a.ResendDLQ(ctx, group, opt)
				if res != nil && asJSON {
					type failed struct {
						admin.DLQResendError
						Error string `json:"error"`
					}
					v := struct {
						Resent []admin.ResentMessage `json:"resent"`
						Failed []failed              `json:"failed"`
						completeness
					}{Resent: res.Resent, Failed: []failed{}, completeness: completenessOf(err)}
					if v.Resent == nil {
						v.Resent = []admin.ResentMessage{}
					}
					for _, f := range res.Failed {
						v.Failed = append(v.Failed, failed{f, f.Err.Error()})
					}
					if perr := printJSON(cmd, v); perr != nil {
						return perr
					}
				} else if res != nil {
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
				noteIncomplete(cmd, err, "their dead letters were not re-driven: run resend again once they answer")
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
