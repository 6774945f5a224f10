package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/kafka"
)

// newKafkaAdminCmd is "sluice admin kafka": what admin does for the Sluice broker, for a
// Kafka cluster (dead letters of groups consumed with package kafka).
func newKafkaAdminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kafka",
		Short: "Administer a Kafka cluster used through package kafka (dead letters of a group)",
		Args:  subcommandsOnly,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	def := os.Getenv("KAFKA_BROKERS")
	if def == "" {
		def = "127.0.0.1:9092"
	}
	cmd.PersistentFlags().String("brokers", def, "Kafka bootstrap address(es) host:port,host:port; the default comes from $KAFKA_BROKERS if set")
	dlq := &cobra.Command{
		Use:   "dlq",
		Short: "List and re-drive a group's dead letters (<group>.dlq)",
		Args:  subcommandsOnly,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	dlq.AddCommand(newKafkaDLQListCmd(), newKafkaDLQResendCmd())
	cmd.AddCommand(dlq)
	return cmd
}

// withKafka runs f with the --brokers addresses, bounded by ten times --timeout.
func withKafka(cmd *cobra.Command, f func(ctx context.Context, brokers []string) error) error {
	brokers, _ := cmd.Flags().GetString("brokers")
	timeout, _ := cmd.Flags().GetDuration("timeout")
	addrs := strings.FieldsFunc(brokers, func(r rune) bool { return r == ',' || r == ';' || r == ' ' })
	if len(addrs) == 0 {
		return fmt.Errorf("--brokers: at least one host:port is required")
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*timeout)
	defer cancel()
	return f(ctx, addrs)
}

func newKafkaDLQListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list --group G [--limit N] [--from PARTITION:OFFSET] [--body] [-o json]",
		Short: "List the dead letters of a Kafka consumer group, a page at a time",
		Long: fmt.Sprintf(`List the dead letters of a Kafka consumer group (topic <group>.dlq): the total, then one
page in partition, then offset order — --limit per page (default %d, at most %d), from
--from PARTITION:OFFSET (default 0:0: the first; that partition from that offset, then
every later partition from its start). The last line says which rows were shown and, when
there are more, the --from of the next page.`, kafka.DefaultDLQListLimit, kafka.MaxDLQListLimit),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			group, _ := f.GetString("group")
			body, _ := f.GetBool("body")
			limit, _ := f.GetInt("limit")
			fromFlag, _ := f.GetString("from")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			if limit < 1 || limit > kafka.MaxDLQListLimit {
				return &usageError{fmt.Errorf("--limit %d: must be 1..%d", limit, kafka.MaxDLQListLimit)}
			}
			from, err := kafka.ParseDLQCursor(fromFlag)
			if err != nil {
				return &usageError{fmt.Errorf("--from %w", err)}
			}
			return withKafka(cmd, func(ctx context.Context, brokers []string) error {
				pg, err := kafka.ListDLQPage(ctx, brokers, group, kafka.DLQListOptions{From: from, Limit: limit})
				if err != nil {
					return err
				}
				if asJSON {
					type row struct {
						Partition      int               `json:"partition"`
						Offset         int64             `json:"offset"`
						MsgID          string            `json:"msgId"`
						OriginTopic    string            `json:"originTopic"`
						Origin         string            `json:"origin"`
						Tag            string            `json:"tag,omitempty"`
						Keys           []string          `json:"keys,omitempty"`
						ReconsumeTimes int               `json:"reconsumeTimes"`
						LastError      string            `json:"lastError,omitempty"`
						Time           string            `json:"time"`
						Properties     map[string]string `json:"properties,omitempty"`
						Body           string            `json:"body,omitempty"`
					}
					v := struct {
						Group string           `json:"group"`
						Total int64            `json:"total"`
						From  kafka.DLQCursor  `json:"from"`
						Limit int              `json:"limit"`
						More  bool             `json:"more"`
						Next  *kafka.DLQCursor `json:"next,omitempty"` // the --from of the next page, when more
						Rows  []row            `json:"rows"`
					}{Group: group, Total: pg.Total, From: from, Limit: limit, More: pg.More, Rows: make([]row, 0, len(pg.Rows))}
					if pg.More {
						v.Next = &pg.Next
					}
					for _, d := range pg.Rows {
						m := d.Record.ToMessageExt()
						r := row{Partition: d.Partition, Offset: d.Offset, MsgID: d.MsgID, OriginTopic: d.OriginTopic, Origin: d.OriginLocation,
							Tag: m.Tag(), Keys: m.Keys(), ReconsumeTimes: d.ReconsumeTimes, LastError: d.LastError,
							Time: d.Time.Format(time.RFC3339Nano), Properties: m.Properties}
						if body {
							r.Body = string(m.Body)
						}
						v.Rows = append(v.Rows, r)
					}
					return printJSON(cmd, v)
				}
				out := cmd.OutOrStdout()
				if pg.Total == 0 {
					fmt.Fprintf(out, "no dead letters for group %s\n", group)
					return nil
				}
				fmt.Fprintf(out, "group %s: %d dead letter(s)\n", group, pg.Total)
				if len(pg.Rows) > 0 {
					fmt.Fprintf(out, "%9s %8s %-32s %-20s %-12s %-24s %9s %-24s %s\n", "partition", "offset", "msgId", "topic", "origin", "keys", "reconsume", "time", "last error")
				}
				for _, d := range pg.Rows {
					m := d.Record.ToMessageExt()
					fmt.Fprintf(out, "%9d %8d %-32s %-20s %-12s %-24s %9d %-24s %s\n", d.Partition, d.Offset, d.MsgID, d.OriginTopic, d.OriginLocation,
						strings.Join(m.Keys(), " "), d.ReconsumeTimes, d.Time.Format("2006-01-02 15:04:05.000"), oneLine(d.LastError))
					if body {
						fmt.Fprintf(out, "    body: %s\n", dlqBodyText(m.Body))
					}
				}
				fmt.Fprintf(out, "%d dead letter(s) shown from %s", len(pg.Rows), from)
				if len(pg.Rows) > 0 {
					last := pg.Rows[len(pg.Rows)-1]
					fmt.Fprintf(out, " to %d:%d", last.Partition, last.Offset)
				}
				fmt.Fprintf(out, " of %d", pg.Total)
				if pg.More {
					fmt.Fprintf(out, "; more: --from %s", pg.Next)
				}
				fmt.Fprintln(out)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.String("group", "", "consumer group (required)")
	f.Int("limit", kafka.DefaultDLQListLimit, "dead letters per page")
	f.String("from", "0:0", "first dead letter of the page, PARTITION:OFFSET (the last line of a page gives the next)")
	f.Bool("body", false, "print message bodies")
	f.Bool("json", false, "print JSON (the same as -o json)")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

func newKafkaDLQResendCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resend --group G [--to-original-topic]",
		Short: "Send a Kafka group's dead letters back to it (reconsume count reset)",
		Long: `Send the dead letters of a Kafka consumer group (topic <group>.dlq) back for consumption,
with the same key, body, headers and message id and a reconsume count of 0. By default they
go to the group's first retry topic (<group>.retry.1), due at once, so only this group gets
them, shown under their original topic with a full retry budget; with --to-original-topic
they go to the original topic, where every group subscribed to it gets them again. Each copy
is acknowledged by all in-sync replicas before the re-drive mark (the offsets of group
<group>.dlq-resend) moves past it, so running resend again only sends dead letters that
arrived since. A copy that cannot be sent stops the command with an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			group, _ := f.GetString("group")
			var opt kafka.ResendOptions
			opt.ToOriginalTopic, _ = f.GetBool("to-original-topic")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			return withKafka(cmd, func(ctx context.Context, brokers []string) error {
				res, err := kafka.ResendDLQ(ctx, brokers, group, opt)
				if asJSON {
					type resent struct {
						Partition int    `json:"partition"` // of <group>.dlq
						Offset    int64  `json:"offset"`
						MsgID     string `json:"msgId"`
						To        string `json:"to"` // the topic it was sent to
					}
					v := struct {
						Group   string   `json:"group"`
						Resent  []resent `json:"resent"`
						Skipped int      `json:"skipped"` // re-driven by an earlier run
						Error   string   `json:"error,omitempty"`
					}{Group: group, Resent: []resent{}, Skipped: res.Skipped}
					for _, r := range res.Resent {
						v.Resent = append(v.Resent, resent{r.Partition, r.Offset, r.MsgID, r.To})
					}
					if err != nil {
						v.Error = err.Error()
					}
					if perr := printJSON(cmd, v); perr != nil {
						return perr
					}
					return err
				}
				out := cmd.OutOrStdout()
				for _, r := range res.Resent {
					fmt.Fprintf(out, "resent %s (dead letter %d@%d) to %s\n", r.MsgID, r.Partition, r.Offset, r.To)
				}
				fmt.Fprintf(out, "%d resent, %d re-driven before\n", len(res.Resent), res.Skipped)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.String("group", "", "consumer group (required)")
	f.Bool("to-original-topic", false, "send to the original topic (every subscribed group gets them) instead of the group's retry topic")
	_ = cmd.MarkFlagRequired("group")
	return cmd
}

// oneLine escapes the control characters (and invalid UTF-8) of s as Go string escapes,
// so a handler error with a newline or a NUL keeps the table at one line per row.
func oneLine(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ' {
			q := strconv.Quote(s)
			return q[1 : len(q)-1]
		}
	}
	return s
}
