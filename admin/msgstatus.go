package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// States of a message for one consumer group ([GroupMessageStatus.State]).
const (
	StateNotConsumed  = "not-consumed"           // the group's offset on the message's queue is at or before it
	StateNoOffset     = "no-offset"              // the group committed no offset on the message's queue
	StateConsumed     = "consumed"               // past it, never retried
	StateRetrying     = "retrying"               // a retry copy in %RETRY%<group> is not consumed yet
	StateRetried      = "consumed-after-retries" // every retry copy found is consumed
	StateDeadLettered = "dead-lettered"          // a copy is in %DLQ%<group> and not re-driven
	StateRedriven     = "re-driven"              // every %DLQ%<group> copy was re-driven by a DLQ resend
	StateBroadcasting = "unknown-broadcasting"   // broadcasting consumers keep their offsets themselves
)

// MessageStatusOptions select the groups [Admin.MessageStatus] reports on.
type MessageStatusOptions struct {
	// Group, when set, reports on this group only (it must be known to a broker).
	// Default: every group that committed an offset on the message's topic.
	Group string
}

// MessageStatus is what became of one message in each consumer group.
type MessageStatus struct {
	Topic          string               `json:"topic"`
	MsgID          string               `json:"msgId"` // client message id (UNIQ_KEY), else the offset id
	OffsetMsgID    string               `json:"offsetMsgId"`
	Keys           []string             `json:"keys,omitempty"`
	Broker         string               `json:"broker"`
	QueueID        int                  `json:"queueId"`
	QueueOffset    int64                `json:"queueOffset"`
	StoreTimestamp int64                `json:"storeTimestamp"`
	Groups         []GroupMessageStatus `json:"groups"` // sorted by group
}

// GroupMessageStatus is one consumer group's view of a message.
type GroupMessageStatus struct {
	Group string `json:"group"`
	// State sums the facts below up: one of the State* constants.
	State string `json:"state"`
	// Committed is the group's committed offset on the message's queue, -1 when none.
	// Consumed: Committed > the message's queue offset.
	Committed int64 `json:"committed"`
	Consumed  bool  `json:"consumed"`
	// Retries is the number of copies of the message in %RETRY%<group> (one per failed
	// consume, once its retry delay has passed), and LastRetryConsumed whether the group
	// consumed the newest of them.
	Retries           int  `json:"retries"`
	LastRetryConsumed bool `json:"lastRetryConsumed"`
	// RetriesUnknown: the message has neither a client message id nor keys, so its
	// retry and dead-letter copies cannot be looked up.
	RetriesUnknown bool `json:"retriesUnknown,omitempty"`
	// DeadLetters are its copies in %DLQ%<group>.
	DeadLetters []DeadLetterCopy `json:"deadLetters"`
}

// DeadLetterCopy is one copy of a message in a group's DLQ.
type DeadLetterCopy struct {
	Broker         string `json:"broker"`
	QueueID        int    `json:"queueId"`
	QueueOffset    int64  `json:"queueOffset"`
	StoreTimestamp int64  `json:"storeTimestamp"`
	ReconsumeTimes int32  `json:"reconsumeTimes"`
	Resent         bool   `json:"resent"` // a DLQ resend already sent it back
}

// MessageStatus reports, for each consumer group that committed an offset on m's topic
// (or for opt.Group), whether the group consumed m (its committed offset on m's queue,
// QUERY_CONSUMER_OFFSET, is past m's queue offset), how many copies of m its consumers
// sent back to %RETRY%<group> and whether the newest one was consumed, and its copies
// in %DLQ%<group> with whether a DLQ resend re-drove them. Copies are found through the
// brokers' key index (QUERY_MESSAGE) by m's client message id (UNIQ_KEY), or without one
// by its keys and ORIGIN_MESSAGE_ID; at most 32 copies per broker are counted. m is a
// message as [Admin.ViewMessage], [Admin.FindMessages] or [Admin.FindMessageByUniqKey]
// return it. A broadcasting group keeps its offsets in its clients: its state is
// [StateBroadcasting].
//
// Errors: a [*config.Error] for a nil message or a bad group; [ErrGroupNotExist] (wrapped)
// for an opt.Group no broker knows; route, group-listing and brokers' errors (a refusal
// is a *remoting.ResponseError). When a
// broker does not answer the group listing, the status of the groups the others know is
// returned with a [*PartialError].
func (a *Admin) MessageStatus(ctx context.Context, m *message.MessageExt, opt MessageStatusOptions) (*MessageStatus, error) {
	if m == nil {
		return nil, &config.Error{Package: "admin", Field: "message", Reason: "nil"}
	}
	if opt.Group != "" {
		if err := message.ValidateGroupTopics(opt.Group); err != nil {
			return nil, &config.Error{Package: "admin", Field: "group", Reason: err.Error()}
		}
	}
	_, addrs, err := a.topicQueues(ctx, m.Topic)
	if err != nil {
		return nil, err
	}
	broker := m.BrokerName
	if broker == "" { // from an offset message id: find the broker by its address
		for name, addr := range addrs {
			if addr == m.StoreHost.String() {
				broker = name
			}
		}
		if broker == "" {
			return nil, fmt.Errorf("admin: the broker at %s that stores message %s is not in the route of %q", m.StoreHost, m.OffsetMsgID, m.Topic)
		}
	}
	st := &MessageStatus{Topic: m.Topic, MsgID: m.MsgID, OffsetMsgID: m.OffsetMsgID, Keys: m.Keys(), Broker: broker,
		QueueID: int(m.QueueID), QueueOffset: m.QueueOffset, StoreTimestamp: m.StoreTimestamp, Groups: []GroupMessageStatus{}}
	all, partialErr := a.GroupSummaries(ctx)
	if partialErr != nil && !isPartial(partialErr) {
		return nil, partialErr
	}
	var groups []GroupSummary
	for _, g := range all {
		if opt.Group != "" {
			if g.Group == opt.Group {
				groups = append(groups, g)
			}
			continue
		}
		if slices.ContainsFunc(g.Topics, func(t GroupTopicLag) bool { return t.Topic == m.Topic }) {
			groups = append(groups, g)
		}
	}
	if opt.Group != "" && len(groups) == 0 {
		if partialErr != nil { // a broker that did not answer may know it
			return nil, partialErr
		}
		return nil, fmt.Errorf("%w: %q", ErrGroupNotExist, opt.Group)
	}
	mq := message.MessageQueue{Topic: m.Topic, BrokerName: broker, QueueID: int(m.QueueID)}
	for _, g := range groups {
		gs := GroupMessageStatus{Group: g.Group, Committed: -1, DeadLetters: []DeadLetterCopy{}}
		off, found, err := a.committedOffset(ctx, g.Group, mq, addrs[broker])
		if err != nil {
			return nil, err
		}
		if found {
			gs.Committed, gs.Consumed = off, off > m.QueueOffset
		}
		if err := a.copiesOf(ctx, m, g.Group, &gs); err != nil {
			if !isPartial(err) {
				return nil, err
			}
			if partialErr == nil { // copies on a broker that did not answer are missing
				partialErr = err
			}
		}
		gs.State = messageState(gs, g.MessageModel == "BROADCASTING")
		st.Groups = append(st.Groups, gs)
	}
	return st, partialErr // nil, or a *PartialError: groups known only to a broker that did not answer are missing
}

func messageState(gs GroupMessageStatus, broadcasting bool) string {
	pending := 0
	for _, d := range gs.DeadLetters {
		if !d.Resent {
			pending++
		}
	}
	switch {
	case pending > 0:
		return StateDeadLettered
	case len(gs.DeadLetters) > 0:
		return StateRedriven
	case broadcasting && gs.Committed < 0:
		return StateBroadcasting
	case gs.Retries > 0 && !gs.LastRetryConsumed:
		return StateRetrying
	case gs.Retries > 0:
		return StateRetried
	case gs.Consumed:
		return StateConsumed
	case gs.Committed < 0:
		return StateNoOffset
	}
	return StateNotConsumed
}

// copiesOf fills gs's retry and dead-letter copies of m. When a broker of the retry or
// DLQ topic does not answer, the copies the others hold are filled in and a
// [*PartialError] is returned.
func (a *Admin) copiesOf(ctx context.Context, m *message.MessageExt, group string, gs *GroupMessageStatus) error {
	var partialErr error // the first *PartialError of a lookup
	uniq := m.UniqKey()
	keys := m.Keys()
	if uniq == "" && len(keys) == 0 {
		gs.RetriesUnknown = true
		return nil
	}
	find := func(topic string) ([]*message.MessageExt, error) {
		var out []*message.MessageExt
		if uniq != "" {
			ms, err := a.FindMessageByUniqKey(ctx, topic, uniq)
			if err != nil && !isPartial(err) {
				return nil, err
			}
			if err != nil && partialErr == nil {
				partialErr = err
			}
			out = ms
		} else {
			seen := map[string]bool{}
			for _, k := range keys {
				ms, err := a.FindMessages(ctx, topic, k, time.Time{}, time.Time{})
				if err != nil && !isPartial(err) {
					return nil, err
				}
				if err != nil && partialErr == nil {
					partialErr = err
				}
				for _, c := range ms {
					if c.Property(message.PropertyOriginMessageID) == m.OffsetMsgID && !seen[c.OffsetMsgID] {
						seen[c.OffsetMsgID] = true
						out = append(out, c)
					}
				}
			}
		}
		// A copy carries its original topic in RETRY_TOPIC; the group may consume
		// other topics whose messages share the key.
		out = slices.DeleteFunc(out, func(c *message.MessageExt) bool {
			rt := c.Property(message.PropertyRetryTopic)
			return rt != "" && rt != m.Topic
		})
		return out, nil
	}
	retries, err := find(message.RetryTopic(group))
	if err != nil && !errors.Is(err, ErrTopicNotExist) {
		return err
	}
	gs.Retries = len(retries)
	if len(retries) > 0 {
		last := retries[len(retries)-1] // sorted by store time
		_, addrs, err := a.topicQueues(ctx, last.Topic)
		if err != nil {
			return err
		}
		off, found, err := a.committedOffset(ctx, group, message.MessageQueue{Topic: last.Topic, BrokerName: last.BrokerName, QueueID: int(last.QueueID)}, addrs[last.BrokerName])
		if err != nil {
			return err
		}
		gs.LastRetryConsumed = found && off > last.QueueOffset
	}
	dead, err := find(message.DLQTopic(group))
	if err != nil && !errors.Is(err, ErrTopicNotExist) {
		return err
	}
	if len(dead) > 0 {
		_, addrs, err := a.topicQueues(ctx, message.DLQTopic(group))
		if err != nil {
			return err
		}
		for _, d := range dead {
			dq := message.MessageQueue{Topic: d.Topic, BrokerName: d.BrokerName, QueueID: int(d.QueueID)}
			mark, err := a.redriveMark(ctx, group, dq, addrs[d.BrokerName])
			if err != nil {
				return err
			}
			gs.DeadLetters = append(gs.DeadLetters, DeadLetterCopy{Broker: d.BrokerName, QueueID: int(d.QueueID), QueueOffset: d.QueueOffset,
				StoreTimestamp: d.StoreTimestamp, ReconsumeTimes: d.ReconsumeTimes, Resent: d.QueueOffset < mark})
		}
		sort.SliceStable(gs.DeadLetters, func(i, j int) bool { return gs.DeadLetters[i].StoreTimestamp < gs.DeadLetters[j].StoreTimestamp })
	}
	return partialErr
}

// committedOffset returns group's committed offset of mq (QUERY_CONSUMER_OFFSET, 14);
// found is false when the group has none there.
func (a *Admin) committedOffset(ctx context.Context, group string, mq message.MessageQueue, addr string) (off int64, found bool, err error) {
	if addr == "" {
		return 0, false, fmt.Errorf("admin: broker %q is not in the route of %q", mq.BrokerName, mq.Topic)
	}
	ext := wire.ConsumerOffsetHeader{ConsumerGroup: group, Topic: mq.Topic, QueueID: int32(mq.QueueID)}.Ext(false)
	resp, err := a.invoke(ctx, mq.BrokerName, addr, remoting.QueryConsumerOffset, ext, nil)
	if err != nil {
		return 0, false, err
	}
	switch resp.ResponseCode() {
	case remoting.Success:
		off, err := resp.ExtInt64("offset", true)
		if err != nil {
			return 0, false, brokerFailed(mq.BrokerName, addr, err)
		}
		return off, true, nil
	case remoting.QueryNotFound:
		return 0, false, nil
	}
	return 0, false, resp.ResponseErrFor(remoting.QueryConsumerOffset, mq.BrokerName, addr)
}
