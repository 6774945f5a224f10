package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Whole-table reads (one request per master broker, whatever the number of topics or
// groups) for listings such as the web console's.

// TopicInfo is a topic as the master brokers hold it ([Admin.TopicConfigs]).
type TopicInfo struct {
	Topic       string
	ReadQueues  int      // summed over the brokers holding it
	WriteQueues int      // summed over the brokers holding it
	Perm        int      // the permission bits of the first broker (wire.Perm*)
	Order       bool     // ordered topic flag on any broker
	Brokers     []string // broker names holding it, sorted
	// System marks the brokers' own topics: system topics (message.IsSystemTopic),
	// %RETRY% and %DLQ% topics, and the topics named after a cluster or a broker.
	System bool
}

// GroupInfo is a consumer group as the master brokers hold it ([Admin.ConsumerGroups]).
type GroupInfo struct {
	Group         string
	RetryMaxTimes int      // consume retries before the DLQ (the first broker's setting)
	Brokers       []string // broker names holding its config, sorted
}

// eachMaster calls f for every master broker of the cluster; it returns the joined
// errors when no broker answered, and a [*PartialError] naming the failing brokers when
// some did (the callers return what the others answered with it: never a silent
// partial result).
func (a *Admin) eachMaster(ctx context.Context, f func(b Broker) error) error {
	ci, err := a.ClusterInfo(ctx)
	if err != nil {
		return err
	}
	brokers := masters(ci, "")
	if len(brokers) == 0 {
		return a.noBrokerError()
	}
	var errs []error
	for _, b := range brokers {
		if err := f(b); err != nil {
			errs = append(errs, err)
		}
	}
	return partial(len(brokers)-len(errs), errs)
}

// call invokes code on broker b and returns the body of a SUCCESS answer.
func (a *Admin) call(ctx context.Context, b Broker, code remoting.RequestCode, ext map[string]string) ([]byte, error) {
	resp, err := a.invoke(ctx, b.Name, b.Addr, code, ext, nil)
	if err != nil {
		return nil, err
	}
	if resp.ResponseCode() == remoting.RequestCodeNotSupported {
		return nil, fmt.Errorf("%w: %w", ErrNotSupported, resp.ResponseErrFor(code, b.Name, b.Addr))
	}
	if err := resp.ResponseErrFor(code, b.Name, b.Addr); err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// TopicConfigs returns every topic of every master broker (GET_ALL_TOPIC_CONFIG,
// RocketMQ request code 21, one request per broker), merged by name and sorted,
// system topics included. Errors: [ErrNoBroker], cluster-info errors, and the brokers'
// errors joined when none answered; when some did, what they answered with a
// [*PartialError] naming the others.
func (a *Admin) TopicConfigs(ctx context.Context) ([]TopicInfo, error) {
	byName := map[string]*TopicInfo{}
	own := map[string]bool{} // cluster and broker names
	err := a.eachMaster(ctx, func(b Broker) error {
		own[b.Cluster], own[b.Name] = true, true
		body, err := a.call(ctx, b, remoting.GetAllTopicConfig, nil)
		if err != nil {
			return err
		}
		var w wire.TopicConfigSerializeWrapper
		if err := json.Unmarshal(body, &w); err != nil {
			return brokerFailed(b.Name, b.Addr, fmt.Errorf("bad topic table: %w", err))
		}
		for name, tc := range w.TopicConfigTable {
			if tc == nil {
				continue
			}
			t := byName[name]
			if t == nil {
				t = &TopicInfo{Topic: name, Perm: tc.Perm}
				byName[name] = t
			}
			t.ReadQueues += tc.ReadQueueNums
			t.WriteQueues += tc.WriteQueueNums
			t.Order = t.Order || tc.Order
			t.Brokers = append(t.Brokers, b.Name)
		}
		return nil
	})
	if err != nil && !isPartial(err) {
		return nil, err
	}
	out := make([]TopicInfo, 0, len(byName))
	for _, t := range byName {
		sort.Strings(t.Brokers)
		t.System = own[t.Topic] || message.IsSystemTopic(t.Topic) || message.IsRetryTopic(t.Topic) || message.IsDLQTopic(t.Topic)
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out, err // err: nil or a *PartialError
}

// ConsumerGroups returns every consumer group configured on a master broker
// (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RocketMQ request code 201, one request per broker),
// merged by name and sorted. Errors as [Admin.TopicConfigs].
func (a *Admin) ConsumerGroups(ctx context.Context) ([]GroupInfo, error) {
	byName := map[string]*GroupInfo{}
	err := a.eachMaster(ctx, func(b Broker) error {
		body, err := a.call(ctx, b, remoting.GetAllSubscriptionGroupConfig, nil)
		if err != nil {
			return err
		}
		var w struct {
			SubscriptionGroupTable map[string]*struct {
				GroupName     string `json:"groupName"`
				RetryMaxTimes int    `json:"retryMaxTimes"`
			} `json:"subscriptionGroupTable"`
		}
		if err := json.Unmarshal(body, &w); err != nil {
			return brokerFailed(b.Name, b.Addr, fmt.Errorf("bad group table: %w", err))
		}
		for name, g := range w.SubscriptionGroupTable {
			gi := byName[name]
			if gi == nil {
				gi = &GroupInfo{Group: name}
				if g != nil {
					gi.RetryMaxTimes = g.RetryMaxTimes
				}
				byName[name] = gi
			}
			gi.Brokers = append(gi.Brokers, b.Name)
		}
		return nil
	})
	if err != nil && !isPartial(err) {
		return nil, err
	}
	out := make([]GroupInfo, 0, len(byName))
	for _, g := range byName {
		sort.Strings(g.Brokers)
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, err // err: nil or a *PartialError
}

// GroupOffsets returns every queue offset a consumer group has committed, on every
// master broker, with each queue's min and max offsets (Sluice request code 7003,
// wire.GroupOffsets, one request per broker) — the group's lag on all its topics,
// %RETRY%<group> included — sorted by topic, broker and queue. Errors: a
// [*config.Error] for an empty group, [ErrNoBroker], and the brokers' errors joined when
// none answered ([ErrNotSupported] wrapped for brokers that are not Sluice); when some
// did, their offsets with a [*PartialError] naming the others.
func (a *Admin) GroupOffsets(ctx context.Context, group string) ([]QueueOffset, error) {
	if group == "" {
		return nil, &config.Error{Package: "admin", Field: "group", Reason: "a consumer group is required"}
	}
	var out []QueueOffset
	err := a.eachMaster(ctx, func(b Broker) error {
		body, err := a.call(ctx, b, wire.GroupOffsets, map[string]string{"consumerGroup": group})
		if err != nil {
			return err
		}
		var w wire.GroupOffsetsBody
		if err := json.Unmarshal(body, &w); err != nil {
			return brokerFailed(b.Name, b.Addr, fmt.Errorf("bad offsets: %w", err))
		}
		for _, q := range w.Queues {
			out = append(out, QueueOffset{Queue: message.MessageQueue{Topic: q.Topic, BrokerName: b.Name, QueueID: int(q.QueueID)},
				BrokerAddr: b.Addr, Committed: q.Committed, Min: q.Min, Max: q.Max})
		}
		return nil
	})
	if err != nil && !isPartial(err) {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Queue.Less(out[j].Queue) })
	return out, err // err: nil or a *PartialError
}

// MaxMessagesByTime bounds [Admin.MessagesByTime]'s max.
const MaxMessagesByTime = 1000

// MessagesByTime returns the first max messages of topic stored in [begin, end] over all
// its queues, read from every queue of its route from the offset of begin
// (SEARCH_OFFSET_BY_TIMESTAMP, RocketMQ request code 29) with READ_QUEUE (7001), bodies
// decompressed, sorted by store time. Each queue is read until a message stored after
// end, its end, or max messages of its own; at most 2*max messages are held at once.
// Ask for one more than you show to learn whether the range holds more.
// Errors: a [*config.Error] for a bad topic, an end before begin or a max outside
// 1..MaxMessagesByTime; route errors; broker errors (a refusal is a
// *remoting.ResponseError).
func (a *Admin) MessagesByTime(ctx context.Context, topic string, begin, end time.Time, max int) ([]*message.MessageExt, error) {
	if err := message.ValidateTopic(topic); err != nil {
		return nil, &config.Error{Package: "admin", Field: "topic", Reason: err.Error()}
	}
	if end.Before(begin) {
		return nil, &config.Error{Package: "admin", Field: "end", Reason: "before begin"}
	}
	if max < 1 || max > MaxMessagesByTime {
		return nil, &config.Error{Package: "admin", Field: "max", Reason: fmt.Sprintf("%d is outside 1..%d", max, MaxMessagesByTime)}
	}
	mqs, addrs, err := a.topicQueues(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []*message.MessageExt
	byTime := func() {
		sort.SliceStable(out, func(i, j int) bool { return out[i].StoreTimestamp < out[j].StoreTimestamp })
	}
	for _, mq := range mqs {
		addr := addrs[mq.BrokerName]
		off, err := a.int64Call(ctx, mq.BrokerName, addr, remoting.SearchOffsetByTimestamp, map[string]string{
			"topic": topic, "queueId": strconv.Itoa(mq.QueueID), "timestamp": strconv.FormatInt(begin.UnixMilli(), 10)}, "offset")
		if err != nil {
			return nil, err
		}
		if len(out) > max { // keep the earliest max of the queues read so far
			byTime()
			out = out[:max]
		}
		limit := len(out) + max // this queue's own max
	queue:
		for len(out) < limit {
			r, err := a.ReadQueue(ctx, mq, addr, off, readBatch)
			if err != nil {
				return nil, err
			}
			if len(r.Messages) == 0 {
				break
			}
			for _, m := range r.Messages {
				if m.StoreTimestamp > end.UnixMilli() || len(out) >= limit {
					break queue
				}
				if m.StoreTimestamp >= begin.UnixMilli() {
					if m.SysFlag&message.SysFlagCompressed != 0 {
						if body, err := message.Inflate(m.Body); err == nil {
							m.Body = body
							m.SysFlag &^= message.SysFlagCompressed
						}
					}
					out = append(out, m)
				}
			}
			if r.NextOffset <= off {
				break
			}
			off = r.NextOffset
		}
	}
	byTime()
	return out[:min(len(out), max)], nil
}

// QueueOffsets returns every queue of topic (from its route) with its min and max offsets
// (GET_MIN_OFFSET 31 and GET_MAX_OFFSET 30, two requests per queue); Committed is -1.
// Errors: a [*config.Error] for a bad topic, route errors (wrapping
// [wire.ErrTopicNotExist] for an unknown topic), broker errors (a refusal is a
// *remoting.ResponseError): joined when no broker answered, else in a [*PartialError]
// returned with the queues of the brokers that did.
func (a *Admin) QueueOffsets(ctx context.Context, topic string) ([]QueueOffset, error) {
	if err := message.ValidateTopic(topic); err != nil {
		return nil, &config.Error{Package: "admin", Field: "topic", Reason: err.Error()}
	}
	mqs, addrs, err := a.topicQueues(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make([]QueueOffset, 0, len(mqs))
	failed := map[string]error{} // broker name → its first error: its other queues are skipped
	for _, mq := range mqs {
		if failed[mq.BrokerName] != nil {
			continue
		}
		addr := addrs[mq.BrokerName]
		ext := map[string]string{"topic": topic, "queueId": strconv.Itoa(mq.QueueID)}
		qo := QueueOffset{Queue: mq, BrokerAddr: addr, Committed: -1}
		if qo.Max, err = a.int64Call(ctx, mq.BrokerName, addr, remoting.GetMaxOffset, ext, "offset"); err == nil {
			qo.Min, err = a.int64Call(ctx, mq.BrokerName, addr, remoting.GetMinOffset, ext, "offset")
		}
		if err != nil {
			failed[mq.BrokerName] = err
			continue
		}
		out = append(out, qo)
	}
	if err := brokersPartial(len(addrs), failed); err != nil {
		if !isPartial(err) {
			return nil, err
		}
		return slices.DeleteFunc(out, func(q QueueOffset) bool { return failed[q.Queue.BrokerName] != nil }), err
	}
	return out, nil
}
