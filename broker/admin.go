package broker

import (
	"context"
	"sort"
	"strings"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Admin requests: creating and deleting topics and groups, reading any queue for an
// admin tool (READ_QUEUE), and whole-table reads for admin tools and the web console:
// one round trip per broker, so a page over 10,000 topics or 1,000 groups does not cost
// one request per row.

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
	return jsonResponse(wire.TopicConfigSerializeWrapper{TopicConfigTable: topics, DataVersion: version})
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
		g.LastHeartbeat, g.ClientMaxReconsumeTimes, g.Protocols = c.lastHeartbeat, c.sendBackLimit, c.protocols
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
	return jsonResponse(body)
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
	hadLimit := b.clients.forgetSendBackLimit(group) // else GroupSummaries would still list it
	if !hadConfig && !hadOffsets && !hadLimit {
		return errResponse(remoting.SubscriptionGroupNotExist, "subscription group [%s] does not exist", group)
	}
	if err := b.offsets.persist(); err != nil {
		b.log.Error("persist consumer offsets", "err", err)
	}
	b.log.Info("consumer group deleted", "group", group, "config", hadConfig, "offsets", hadOffsets)
	return okResponse()
}

// handleCreateTopic serves UPDATE_AND_CREATE_TOPIC (17) and registers the change with
// the name servers.
func (b *Broker) handleCreateTopic(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	topic, err := req.ExtString("topic", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if err := message.ValidateTopic(topic); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if b.isSystemTopic(topic) {
		return errResponse(remoting.SystemError, "the topic[%s] is conflict with system topic", topic)
	}
	tc := wire.TopicConfig{TopicName: topic, Perm: permRead | permWrite, TopicFilterType: "SINGLE_TAG"}
	var r, w, perm, sys int32
	if r, err = req.ExtInt32("readQueueNums", true); err == nil {
		if w, err = req.ExtInt32("writeQueueNums", true); err == nil {
			if perm, err = req.ExtInt32("perm", false); err == nil {
				sys, err = req.ExtInt32("topicSysFlag", false)
			}
		}
	}
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if r < 1 || w < 1 || r > 1024 || w > 1024 {
		return errResponse(remoting.SystemError, "readQueueNums %d / writeQueueNums %d: each must be 1..1024", r, w)
	}
	tc.ReadQueueNums, tc.WriteQueueNums, tc.TopicSysFlag = int(r), int(w), int(sys)
	if perm != 0 {
		tc.Perm = int(perm)
	}
	if ft, _ := req.ExtString("topicFilterType", false); ft != "" {
		tc.TopicFilterType = ft
	}
	tc.Order, _ = req.ExtBool("order")
	if err := b.topics.put(tc); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	b.log.Info("topic created or updated", "topic", topic, "read", r, "write", w, "perm", tc.Perm, "order", tc.Order)
	return okResponse()
}

// handleDeleteTopic serves DELETE_TOPIC_IN_BROKER (215): removes the topic's config,
// consume queues and offsets.
func (b *Broker) handleDeleteTopic(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	topic, err := req.ExtString("topic", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	if b.isSystemTopic(topic) {
		return errResponse(remoting.SystemError, "the topic[%s] is a system topic and cannot be deleted", topic)
	}
	if err := b.topics.remove(topic); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	b.offsets.removeTopic(topic)
	b.traffic.forgetTopic(topic) // its metric series end
	if err := b.store.DeleteTopic(topic); err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	return okResponse()
}

// handleAllGroups serves GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201). With aclEnable it
// lists only the groups the caller has a permission on (all for an admin account
// without entries), as GET_ALL_TOPIC_CONFIG does.
func (b *Broker) handleAllGroups(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	snap := b.groups.snapshot()
	if b.acl != nil {
		may, err := b.acl.Permits(conn.RemoteAddr(), req)
		if err != nil {
			return errResponse(remoting.SystemError, "%v", err)
		}
		for name := range snap.SubscriptionGroupTable {
			if !may(acl.Group(name, acl.Any)) {
				delete(snap.SubscriptionGroupTable, name)
			}
		}
	}
	return jsonResponse(snap)
}

// isSystemTopic reports whether topic belongs to the broker: the system topics, and the
// topics named after the cluster and the broker (as Java's TopicConfigManager creates).
func (b *Broker) isSystemTopic(topic string) bool {
	return message.IsSystemTopic(topic) || topic == b.cfg.BrokerClusterName || topic == b.cfg.BrokerName
}

// handleAdminReadQueue serves Sluice's READ_QUEUE (request code 7001,
// wire.ReadQueue): it reads stored messages of any queue for an admin tool — in
// particular %DLQ%<group>, which is write-only so that normal consumers' pulls are
// refused (NO_PERMISSION). There is no group, subscription or permission check, no long
// polling and no offset commit. Request ext: topic, queueId, offset, maxMsgNums (at most
// 32, like a pull). The answer is a PULL_MESSAGE response (codes 0/19/20/21 and the four
// offset ext fields; docs/protocol.md §3.4).
func (b *Broker) handleAdminReadQueue(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseReadQueueHeader(req)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	n := h.MaxMsgNums
	if n <= 0 || n > maxPullMessages {
		n = maxPullMessages
	}
	res, err := b.store.GetMessage(h.Topic, h.QueueID, h.Offset, int(n), maxPullBytes, nil)
	if err != nil {
		return errResponse(remoting.SystemError, "get message: %v", err)
	}
	return pullResponse(h.Offset, res)
}
