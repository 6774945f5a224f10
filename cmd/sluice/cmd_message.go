package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicemq/sluice/config"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/message"
)

// newMessageCmd is `sluice admin message`: look messages up by offset message id
// (VIEW_MESSAGE_BY_ID) or by key through the brokers' key index (QUERY_MESSAGE).
func newMessageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "message",
		Short: "Look up messages by id or by key",
		Args:  subcommandsOnly,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newMessageGetCmd(), newMessageFindCmd(), newMessageStatusCmd())
	return cmd
}

func newMessageGetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get --id ID [--topic T] [--json]",
		Short: "Show one message by its offset message id (or, with --topic, its client message id)",
		Long: `Show one message with all its fields and its body.

--id is the offset message id a send returns ("offsetMsgId", 32 upper-case hex
digits: store host, port and commitlog offset); the broker at that address is asked
with VIEW_MESSAGE_BY_ID. With --topic, --id may also be the client message id
(UNIQ_KEY, the MsgID producers report), looked up in the key index of the topic's
brokers first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			id, _ := f.GetString("id")
			topic, _ := f.GetString("topic")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			if id == "" {
				return errors.New("--id: required")
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				ms, err := getMessage(ctx, a, id, topic)
				if err != nil && len(ms) == 0 {
					return err
				}
				// err: nil, or a *admin.PartialError (copies on a failing broker are missing)
				if asJSON {
					v := foundJSON{Key: id, Topic: topic, Messages: make([]messageView, len(ms)), completeness: completenessOf(err)}
					for i, m := range ms {
						v.Messages[i] = viewOf(m)
					}
					if perr := printJSON(cmd, v); perr != nil {
						return perr
					}
				} else if perr := printMessages(cmd.OutOrStdout(), ms, true); perr != nil {
					return perr
				}
				noteIncomplete(cmd, err, "copies they hold are missing above")
				return err
			})
		},
	}
	f := cmd.Flags()
	f.String("id", "", "offset message id, or with --topic a client message id (UNIQ_KEY) (required)")
	f.String("topic", "", "topic of the message: lets --id be a client message id")
	f.Bool("json", false, "print JSON instead of text (the same as -o json)")
	_ = cmd.MarkFlagRequired("id")
	return cmd
}

// getMessage resolves id as described in `message get --help`.
func getMessage(ctx context.Context, a *admin.Admin, id, topic string) ([]*message.MessageExt, error) {
	if topic != "" {
		ms, err := a.FindMessageByUniqKey(ctx, topic, id)
		if err != nil && len(ms) == 0 { // a broker that failed may hold it
			return nil, err
		}
		if len(ms) > 0 {
			return ms, err // err: nil, or a *admin.PartialError naming the brokers not asked
		}
	}
	// Offset ids are upper-case hex; a client id made by a Go producer has lower-case
	// digits and would decode to an address that is not a broker.
	if strings.ToUpper(id) != id {
		if topic != "" {
			return nil, fmt.Errorf("no message of topic %s has client message id %s", topic, id)
		}
		return nil, fmt.Errorf("--id %s is not an offset message id (those are upper-case hex); if it is a client message id (UNIQ_KEY), add --topic", id)
	}
	m, err := a.ViewMessage(ctx, id)
	if err != nil {
		var ce *config.Error
		if topic == "" && errors.As(err, &ce) {
			return nil, fmt.Errorf("%w; if it is a client message id (UNIQ_KEY), add --topic", err)
		}
		if topic != "" {
			return nil, fmt.Errorf("no message of topic %s has client message id %s, and as an offset message id: %w", topic, id, err)
		}
		return nil, err
	}
	return []*message.MessageExt{m}, nil
}

func newMessageFindCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "find --topic T --key K [--begin RFC3339] [--end RFC3339] [--json]",
		Short: "Find messages by key (KEYS or UNIQ_KEY) through the brokers' key index",
		Long: fmt.Sprintf(`List the messages of a topic that carry a key, asking every broker of the
topic's route with QUERY_MESSAGE (up to %d per broker, the newest), optionally
within a store-time range (RFC 3339, e.g. 2024-05-01T10:00:00Z; both ends
inclusive). Use "sluice admin message get --id" with an OFFSET_MSG_ID for the body.`, admin.MaxFindMessages),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			topic, _ := f.GetString("topic")
			key, _ := f.GetString("key")
			asJSON, err := jsonOutput(cmd)
			if err != nil {
				return err
			}
			var begin, end time.Time
			for _, tf := range []struct {
				name string
				dst  *time.Time
			}{{"begin", &begin}, {"end", &end}} {
				s, _ := f.GetString(tf.name)
				if s == "" {
					continue
				}
				t, err := time.Parse(time.RFC3339, s)
				if err != nil {
					return fmt.Errorf("--%s %q: not an RFC 3339 time such as 2024-05-01T10:00:00Z", tf.name, s)
				}
				*tf.dst = t
			}
			return withAdmin(cmd, func(ctx context.Context, a *admin.Admin) error {
				ms, err := a.FindMessages(ctx, topic, key, begin, end)
				if len(ms) == 0 && err != nil {
					return topicNotFound(ctx, a, topic, err)
				}
				if asJSON {
					v := foundJSON{topic, key, make([]messageView, len(ms)), completenessOf(err)}
					for i, m := range ms {
						v.Messages[i] = viewOf(m)
					}
					if perr := printJSON(cmd, v); perr != nil {
						return perr
					}
				} else {
					if perr := printMessages(cmd.OutOrStdout(), ms, false); perr != nil {
						return perr
					}
					fmt.Fprintf(cmd.OutOrStdout(), "found %d message(s) of topic %s with key %s\n", len(ms), topic, key)
				}
				noteIncomplete(cmd, err, "their messages are missing above")
				return err // some brokers failed: say so after what the others returned
			})
		},
	}
	f := cmd.Flags()
	f.String("topic", "", "topic (required)")
	f.String("key", "", "message key (one of KEYS) or client message id (UNIQ_KEY) (required)")
	f.String("begin", "", "earliest store time, RFC 3339 (default: the beginning)")
	f.String("end", "", "latest store time, RFC 3339 (default: no limit)")
	f.Bool("json", false, "print JSON (all fields and bodies) instead of a table (the same as -o json)")
	_ = cmd.MarkFlagRequired("topic")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// foundJSON is `message find -o json` and `message get -o json`: the messages found, and
// which brokers did not answer (partial). Key is the key found by, or get's --id.
type foundJSON struct {
	Topic    string        `json:"topic,omitempty"`
	Key      string        `json:"key"`
	Messages []messageView `json:"messages"`
	completeness
}

// messageView is the JSON form of a message printed by `admin message`.
type messageView struct {
	Broker          string            `json:"broker,omitempty"`
	Topic           string            `json:"topic"`
	MsgID           string            `json:"msgId"`
	OffsetMsgID     string            `json:"offsetMsgId"`
	QueueID         int32             `json:"queueId"`
	QueueOffset     int64             `json:"queueOffset"`
	CommitLogOffset int64             `json:"commitLogOffset"`
	StoreTimestamp  int64             `json:"storeTimestamp"`
	StoreHost       string            `json:"storeHost"`
	BornTimestamp   int64             `json:"bornTimestamp"`
	BornHost        string            `json:"bornHost"`
	Tags            string            `json:"tags,omitempty"`
	Keys            []string          `json:"keys,omitempty"`
	ReconsumeTimes  int32             `json:"reconsumeTimes"`
	SysFlag         int32             `json:"sysFlag"`
	Properties      map[string]string `json:"properties"`
	Body            string            `json:"body"`
	BodyEncoding    string            `json:"bodyEncoding"` // "utf8" or "base64"
}

func viewOf(m *message.MessageExt) messageView {
	body, enc := string(m.Body), "utf8"
	if !printable(m.Body) {
		body, enc = base64.StdEncoding.EncodeToString(m.Body), "base64"
	}
	return messageView{
		Broker: m.BrokerName, Topic: m.Topic, MsgID: m.MsgID, OffsetMsgID: m.OffsetMsgID, QueueID: m.QueueID,
		QueueOffset: m.QueueOffset, CommitLogOffset: m.CommitLogOffset, StoreTimestamp: m.StoreTimestamp,
		StoreHost: m.StoreHost.String(), BornTimestamp: m.BornTimestamp, BornHost: m.BornHost.String(), Tags: m.Tag(),
		Keys: m.Keys(), ReconsumeTimes: m.ReconsumeTimes, SysFlag: m.SysFlag, Properties: m.Properties,
		Body: body, BodyEncoding: enc,
	}
}

// printable reports whether b is UTF-8 text without control characters other than
// tab and newlines.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return false
		}
	}
	return true
}

func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// printMessages prints ms as full text blocks (detail) or as a table.
func printMessages(w io.Writer, ms []*message.MessageExt, detail bool) error {
	if !detail {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tBROKER\tQUEUE\tQUEUE_OFFSET\tSTORE_TIME\tOFFSET_MSG_ID\tMSG_ID\tTAGS\tKEYS")
		for i, m := range ms {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", i+1, m.BrokerName, m.QueueID, m.QueueOffset,
				msTime(m.StoreTimestamp), m.OffsetMsgID, m.MsgID, m.Tag(), strings.Join(m.Keys(), " "))
		}
		return tw.Flush()
	}
	for i, m := range ms {
		if i > 0 {
			fmt.Fprintln(w)
		}
		v := viewOf(m)
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
		row := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
		if v.Broker != "" {
			row("Broker", v.Broker)
		}
		row("Topic", v.Topic)
		row("MsgID", v.MsgID)
		row("OffsetMsgID", v.OffsetMsgID)
		row("QueueID", v.QueueID)
		row("QueueOffset", v.QueueOffset)
		row("CommitLogOffset", v.CommitLogOffset)
		row("StoreTime", msTime(v.StoreTimestamp))
		row("StoreHost", v.StoreHost)
		row("BornTime", msTime(v.BornTimestamp))
		row("BornHost", v.BornHost)
		row("Tags", v.Tags)
		row("Keys", strings.Join(v.Keys, " "))
		row("ReconsumeTimes", v.ReconsumeTimes)
		row("SysFlag", v.SysFlag)
		names := make([]string, 0, len(v.Properties))
		for k := range v.Properties {
			names = append(names, k)
		}
		slices.Sort(names)
		props := make([]string, len(names))
		for j, k := range names {
			props[j] = k + "=" + v.Properties[k]
		}
		row("Properties", strings.Join(props, " "))
		row(fmt.Sprintf("Body (%d bytes, %s)", len(m.Body), v.BodyEncoding), v.Body)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}
