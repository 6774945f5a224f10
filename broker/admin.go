package broker

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/sluicemq/sluice/broker/acl"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// Whole-table reads for admin tools and the web console: one round trip per broker, so a
// page over 10,000 topics or 1,000 groups does not cost one request per row.

// handleAllTopicConfig serves GET_ALL_TOPIC_CONFIG (RocketMQ request code 21): the
// broker's topic table as TopicConfigSerializeWrapper JSON
// ({"topicConfigTable":{name:config},"dataVersion":{...}}), as the Java broker answers.
// With aclEnable it lists only the topics the caller has a permission on (PUB or SUB;
// a %RETRY% topic through its group): an admin account without entries sees them all.
// (RocketMQ 4.9 lists every topic to any signed account.)
func (b *Broker) handleAllTopicConfig(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	topics, version := b.topics.snapshot()
	if b.acl != nil {
		may, err := b.acl.Permits(conn.RemoteAddr(), req)
		if err != nil {
			return errResponse(remoting.SystemError, "%v", err)
		}
		for name := range topics {
			res := acl.Topic(name, acl.Any)
			if g, ok := cutRetry(name); ok {
				res = acl.Group(g, acl.Any)
			}
			if !may(res) {
				delete(topics, name)
			}
		}
	}
	r := remoting.NewResponse(remoting.Success, "")
	r.Body, _ = json.Marshal(wire.TopicConfigSerializeWrapper{TopicConfigTable: topics, DataVersion: version})
	return r
}

// handleGroupOffsets serves Sluice's GroupOffsets (request code 7003,
// wire.GroupOffsets): every committed offset of ext consumerGroup with each
// queue's min and max offsets.
func (b *Broker) handleGroupOffsets(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	group, err := req.ExtString("consumerGroup", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	body := wire.GroupOffsetsBody{Group: group, Queues: []wire.GroupQueueOffset{}}
	b.offsets.mu.Lock()
	for k, qs := range b.offsets.table {
		i := strings.LastIndexByte(k, '@')
		if i < 0 || k[i+1:] != group {
			continue
		}
		for q, off := range qs {
			body.Queues = append(body.Queues, wire.GroupQueueOffset{Topic: k[:i], QueueID: q, Committed: off})
		}
	}
	b.offsets.mu.Unlock()
	for i := range body.Queues {
		q := &body.Queues[i]
		q.Min, q.Max = b.store.MinOffset(q.Topic, q.QueueID), b.store.MaxOffset(q.Topic, q.QueueID)
	}
	sort.Slice(body.Queues, func(i, j int) bool {
		x, y := body.Queues[i], body.Queues[j]
		if x.Topic != y.Topic {
			return x.Topic < y.Topic
		}
		return x.QueueID < y.QueueID
	})
	r := remoting.NewResponse(remoting.Success, "")
	r.Body, _ = json.Marshal(body)
	return r
}

// handleGroupSummaries serves Sluice's GroupSummaries (request code 7004,
// wire.GroupSummaries): every consumer group with a config, committed offsets or clients
// online, with its lag per topic (and the store time of its oldest unconsumed message)
// and its clients.
func (b *Broker) handleGroupSummaries(_ context.Context, _ *remoting.Conn, _ *remoting.RemotingCommand) *remoting.RemotingCommand {
	byName := map[string]*wire.GroupSummary{}
	get := func(name string) *wire.GroupSummary {
		g := byName[name]
		if g == nil {
			g = &wire.GroupSummary{Group: name, ClientMaxReconsumeTimes: -1, Topics: []wire.GroupTopicLag{}}
			byName[name] = g
		}
		return g
	}
	for name, c := range b.groups.snapshot().SubscriptionGroupTable {
		g := get(name)
		g.Configured, g.RetryMaxTimes = true, c.RetryMaxTimes
	}
	for name, c := range b.clients.summaries() {
		g := get(name)
		g.Clients, g.MessageModel, g.ConsumeType, g.ConsumeFromWhere = c.clients, c.messageModel, c.consumeType, c.consumeFromWhere
		g.LastHeartbeat, g.ClientMaxReconsumeTimes = c.lastHeartbeat, c.sendBackLimit
	}
	type committed struct {
		group, topic string
		queue        int32
		offset       int64
	}
	var offs []committed
	b.offsets.mu.Lock()
	for k, qs := range b.offsets.table {
		i := strings.LastIndexByte(k, '@')
		if i < 0 {
			continue
		}
		for q, off := range qs {
			offs = append(offs, committed{k[i+1:], k[:i], q, off})
		}
	}
	b.offsets.mu.Unlock()
	lags := map[[2]string]*wire.GroupTopicLag{}
	for _, c := range offs {
		l := lags[[2]string{c.group, c.topic}]
		if l == nil {
			l = &wire.GroupTopicLag{Topic: c.topic}
			lags[[2]string{c.group, c.topic}] = l
		}
		l.Queues++
		maxOff := b.store.MaxOffset(c.topic, c.queue)
		if lag := maxOff - max(c.offset, b.store.MinOffset(c.topic, c.queue)); lag > 0 {
			l.Lag += lag
			if ts, err := b.store.MessageTimeAt(c.topic, c.queue, c.offset); err == nil && (l.OldestUnconsumed == 0 || ts < l.OldestUnconsumed) {
				l.OldestUnconsumed = ts
			}
		}
	}
	for k, l := range lags {
		g := get(k[0])
		g.Topics = append(g.Topics, *l)
	}
	body := wire.GroupSummariesBody{Groups: make([]wire.GroupSummary, 0, len(byName))}
	for _, g := range byName {
		sort.Slice(g.Topics, func(i, j int) bool { return g.Topics[i].Topic < g.Topics[j].Topic })
		body.Groups = append(body.Groups, *g)
	}
	sort.Slice(body.Groups, func(i, j int) bool { return body.Groups[i].Group < body.Groups[j].Group })
	r := remoting.NewResponse(remoting.Success, "")
	r.Body, _ = json.Marshal(body)
	return r
}

// handleDeleteGroup serves DELETE_SUBSCRIPTIONGROUP (RocketMQ request code 207, ext
// groupName): the group's subscription group config and every offset it committed
// (%RETRY%<group> included) are removed. Its %RETRY% and %DLQ% topics and their messages
// stay (delete them as topics). A group with clients online is refused (SYSTEM_ERROR
// naming them): they would re-create it at their next heartbeat. Answers
// SUBSCRIPTION_GROUP_NOT_EXIST (26) for a group the broker does not know.
func (b *Broker) handleDeleteGroup(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	group, err := req.ExtString("groupName", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if n := b.clients.online(group); n > 0 {
		return errResponse(remoting.SystemError, "consumer group %s has %d client connection(s) online: stop its consumers first", group, n)
	}
	hadConfig := b.groups.remove(group)
	hadOffsets := b.offsets.removeGroup(group)
	if !hadConfig && !hadOffsets {
		return errResponse(remoting.SubscriptionGroupNotExist, "subscription group [%s] does not exist", group)
	}
	if err := b.offsets.persist(); err != nil {
		b.log.Error("persist consumer offsets", "err", err)
	}
	b.log.Info("consumer group deleted", "group", group, "config", hadConfig, "offsets", hadOffsets)
	return remoting.NewResponse(remoting.Success, "")
}
