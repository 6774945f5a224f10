package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/broker/acl"
	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// registerProcessors installs one handler per request code. Codes not listed are
// answered REQUEST_CODE_NOT_SUPPORTED (3) by the remoting server.
func (b *Broker) registerProcessors() {
	s := b.server
	// Sends run on the connection's reader (no goroutine per request). Under ASYNC_FLUSH
	// they are answered as soon as they are stored; under SYNC_FLUSH the store queues the
	// answer on its flusher, which sends it once the group commit's fsync covers the
	// message (no goroutine or timer waits per send).
	if ft, _ := store.ParseFlushDiskType(b.cfg.FlushDiskType); ft == store.SyncFlush {
		s.HandleAsync(remoting.SendMessage, b.timedSendAsync(b.handleSendAsync(false))) // timed*: statsnapshot.go
		s.HandleAsync(remoting.SendMessageV2, b.timedSendAsync(b.handleSendAsync(true)))
		s.HandleAsync(remoting.SendBatchMessage, b.timedSendAsync(b.handleSendBatchAsync))
	} else {
		s.HandleInlineGroup(remoting.SendMessage, b.handleSendGroup(false)) // timed and counted per send inside
		s.HandleInlineGroup(remoting.SendMessageV2, b.handleSendGroup(true))
		s.HandleInline(remoting.SendBatchMessage, b.timedSend(b.handleSendBatch))
	}
	s.HandleAsync(remoting.PullMessage, b.timedPull(b.handlePull)) // first lookup on the reader; held pulls in a goroutine
	s.Handle(remoting.ConsumerSendMsgBack, b.handleSendBack)
	s.Handle(remoting.HeartBeat, b.handleHeartbeat)
	s.Handle(remoting.UnregisterClient, b.handleUnregisterClient)
	s.Handle(remoting.CheckClientConfig, b.handleCheckClientConfig)
	s.Handle(remoting.GetConsumerListByGroup, b.handleConsumerList)
	s.Handle(remoting.QueryConsumerOffset, b.handleQueryOffset)
	s.Handle(remoting.UpdateConsumerOffset, b.handleUpdateOffset)
	s.Handle(remoting.GetMaxOffset, b.handleQueueOffset(func(t string, q int32) int64 { return b.store.MaxOffset(t, q) }))
	s.Handle(remoting.GetMinOffset, b.handleQueueOffset(func(t string, q int32) int64 { return b.store.MinOffset(t, q) }))
	s.Handle(remoting.SearchOffsetByTimestamp, b.handleSearchOffset)
	s.Handle(remoting.GetEarliestMsgStoreTime, b.handleEarliestTime)
	s.Handle(remoting.ViewMessageByID, b.handleViewMessage)
	s.Handle(remoting.QueryMessage, b.handleQueryMessage) // query.go: key index lookups
	s.Handle(remoting.UpdateAndCreateTopic, b.handleCreateTopic)
	s.Handle(remoting.DeleteTopicInBroker, b.handleDeleteTopic)
	s.Handle(remoting.GetAllSubscriptionGroupConfig, b.handleAllGroups)
	s.Handle(remoting.EndTransaction, b.handleEndTransaction)
	s.Handle(remoting.LockBatchMQ, b.handleLockBatch)
	s.Handle(remoting.UnlockBatchMQ, b.handleUnlockBatch)
	s.Handle(remoting.InvokeBrokerToResetOffset, b.handleResetOffset)
	s.Handle(wire.GroupSubscriptions, b.handleGroupSubscriptions)
	s.Handle(wire.ReadQueue, b.handleAdminReadQueue)
	s.Handle(remoting.GetAllTopicConfig, b.handleAllTopicConfig) // consoleread.go
	s.Handle(wire.GroupOffsets, b.handleGroupOffsets)
	s.Handle(wire.GroupSummaries, b.handleGroupSummaries)           // consoleread.go
	s.Handle(remoting.DeleteSubscriptionGroup, b.handleDeleteGroup) // consoleread.go
}

// handleHeartbeat serves HEART_BEAT (34): registers the client's producer and consumer
// groups, creates %RETRY%<group> for clustering consumer groups, and tells a group's
// consumers to rebalance when its membership or subscriptions changed.
func (b *Broker) handleHeartbeat(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	hb, err := wire.ParseHeartbeat(req.Body)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	// A group the broker refuses (a name its %RETRY% topic cannot have, a group that does
	// not exist) is left out and the answer names it; the client's other groups are still
	// registered. (One client instance heartbeats every consumer group of its process: one
	// bad group name must not stop the others from consuming.)
	var refused *remoting.RemotingCommand
	groups := hb.ConsumerDataSet[:0]
	for _, cd := range hb.ConsumerDataSet {
		resp := groupError("consumerDataSet.groupName", cd.GroupName)
		if resp == nil && b.groups.find(cd.GroupName) == nil {
			resp = errResponse(remoting.SubscriptionGroupNotExist, "subscription group [%s] does not exist", cd.GroupName)
		}
		if resp != nil {
			// A name can be up to the body limit long: log its first 128 bytes only.
			b.log.Warn("consumer group refused in heartbeat", "group", fmt.Sprintf("%.128q", cd.GroupName), "groupBytes", len(cd.GroupName),
				"client", hb.ClientID, "reason", fmt.Sprintf("%.300s", resp.Remark))
			if refused == nil {
				refused = resp
			}
			continue
		}
		groups = append(groups, cd)
	}
	hb.ConsumerDataSet = groups
	var createdRetry map[string]*wire.TopicConfig
	for _, cd := range hb.ConsumerDataSet {
		if cd.MessageModel != wire.MessageModelBroadcasting {
			retry := message.RetryTopic(cd.GroupName)
			tc, created, err := b.topics.getOrCreate(retry, func() *wire.TopicConfig {
				return &wire.TopicConfig{TopicName: retry, ReadQueueNums: 1, WriteQueueNums: 1, Perm: permRead | permWrite, TopicFilterType: "SINGLE_TAG"}
			})
			if err != nil {
				b.log.Error("persist topic config", "topic", retry, "err", err)
			}
			if created {
				if createdRetry == nil {
					createdRetry = make(map[string]*wire.TopicConfig)
				}
				c := *tc
				createdRetry[retry] = &c
			}
		}
	}
	if len(createdRetry) > 0 {
		// Register the new %RETRY% topics before answering, as Java does: the client
		// rebalances right after this answer and looks the retry topic's route up. They
		// are registered here even when the register loop already took the change.
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		b.register(rctx, createdRetry, b.topics.currentVersion(), false)
		cancel()
	}
	// Subscriptions the broker refuses (SQL92 while enablePropertyFilter is off, a
	// malformed expression) are left out; the rest of the heartbeat is registered, and the
	// answer names what was refused.
	for i := range hb.ConsumerDataSet {
		cd := &hb.ConsumerDataSet[i]
		kept := cd.SubscriptionDataSet[:0]
		for _, sd := range cd.SubscriptionDataSet {
			if _, resp := b.subscriptionFilter(sd.SubString, sd.ExpressionType); resp != nil {
				b.log.Warn("subscription refused", "group", cd.GroupName, "topic", sd.Topic, "client", hb.ClientID, "reason", resp.Remark)
				if refused == nil {
					refused = resp
				}
				continue
			}
			kept = append(kept, sd)
		}
		cd.SubscriptionDataSet = kept
	}
	changed, err := b.clients.heartbeat(conn, hb, time.Now())
	if err != nil {
		b.counters.RefusedLimits.Add(1)
		b.log.Warn("heartbeat group refused: client limit", "client", fmt.Sprintf("%.128q", hb.ClientID), "remote", conn.RemoteAddr(), "err", err)
		if refused == nil {
			refused = errResponse(remoting.SystemError, "%v", err)
		}
	}
	if len(changed) > 0 {
		// Notify after answering: the client is waiting for this response.
		b.notifyLater(changed)
	}
	if refused != nil {
		return refused
	}
	return remoting.NewResponse(remoting.Success, "")
}

// handleCheckClientConfig serves CHECK_CLIENT_CONFIG (46), which the Java client sends
// to every broker at start for each subscription that is not by tag (Java
// CheckClientRequestBody: clientId, group, subscriptionData): SUCCESS when the broker can
// serve the subscription, else the answer a heartbeat with it would get (SYSTEM_ERROR
// while enablePropertyFilter is off, SUBSCRIPTION_PARSE_FAILED for a malformed
// expression), which fails the client's start as in Apache RocketMQ.
func (b *Broker) handleCheckClientConfig(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	var body struct {
		ClientID         string                `json:"clientId"`
		Group            string                `json:"group"`
		SubscriptionData wire.SubscriptionData `json:"subscriptionData"`
	}
	if err := json.Unmarshal(req.Body, &body); err != nil {
		return errResponse(remoting.SystemError, "check client config body is not CheckClientRequestBody JSON: %v", err)
	}
	sd := body.SubscriptionData
	if _, resp := b.subscriptionFilter(sd.SubString, sd.ExpressionType); resp != nil {
		return resp
	}
	return remoting.NewResponse(remoting.Success, "")
}

// handleUnregisterClient serves UNREGISTER_CLIENT (35).
func (b *Broker) handleUnregisterClient(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	clientID, err := req.ExtString("clientID", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	pg, _ := req.ExtString("producerGroup", false)
	cg, _ := req.ExtString("consumerGroup", false)
	if changed := b.clients.unregister(conn, clientID, pg, cg); len(changed) > 0 {
		b.notifyLater(changed)
	}
	return remoting.NewResponse(remoting.Success, "")
}

// handleConsumerList serves GET_CONSUMER_LIST_BY_GROUP (38): {"consumerIdList":[...]}
// with the client ids exactly as the clients sent them in heartbeats.
func (b *Broker) handleConsumerList(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	group, err := req.ExtString("consumerGroup", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	ids := b.clients.consumerIDs(group)
	if len(ids) == 0 {
		return errResponse(remoting.SystemError, "no consumer for this group, %s", group)
	}
	r := remoting.NewResponse(remoting.Success, "")
	r.Body, _ = json.Marshal(wire.ConsumerIDList{ConsumerIDList: ids})
	return r
}

// handleQueryOffset serves QUERY_CONSUMER_OFFSET (14). With no committed offset it
// answers QUERY_NOT_FOUND (22) and the client starts where its consumeFromWhere says.
// (Java answers 0 instead for a "young" queue whose first message is still in memory;
// Sluice leaves the choice to the client, so a new group with CONSUME_FROM_LAST_OFFSET
// always starts at the end.)
func (b *Broker) handleQueryOffset(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseConsumerOffsetHeader(req, false)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	off, ok := b.offsets.query(h.ConsumerGroup, h.Topic, h.QueueID)
	if !ok {
		return errResponse(remoting.QueryNotFound, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
	}
	return remoting.NewResponse(remoting.Success, "").SetExt("offset", strconv.FormatInt(off, 10))
}

// handleUpdateOffset serves UPDATE_CONSUMER_OFFSET (15).
func (b *Broker) handleUpdateOffset(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseConsumerOffsetHeader(req, true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	b.offsets.commit(h.ConsumerGroup, h.Topic, h.QueueID, h.CommitOffset)
	return remoting.NewResponse(remoting.Success, "")
}

// handleQueueOffset serves GET_MAX_OFFSET (30) and GET_MIN_OFFSET (31): ext "offset".
func (b *Broker) handleQueueOffset(get func(string, int32) int64) remoting.Handler {
	return func(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		h, err := wire.ParseQueueHeader(req, false)
		if err != nil {
			return errResponse(remoting.SystemError, "%v", err)
		}
		return remoting.NewResponse(remoting.Success, "").SetExt("offset", strconv.FormatInt(get(h.Topic, h.QueueID), 10))
	}
}

// handleSearchOffset serves SEARCH_OFFSET_BY_TIMESTAMP (29): ext "offset".
func (b *Broker) handleSearchOffset(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseQueueHeader(req, true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	return remoting.NewResponse(remoting.Success, "").SetExt("offset", strconv.FormatInt(b.store.OffsetByTimestamp(h.Topic, h.QueueID, h.Timestamp), 10))
}

// handleEarliestTime serves GET_EARLIEST_MSG_STORETIME (32): ext "timestamp" (ms).
func (b *Broker) handleEarliestTime(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseQueueHeader(req, false)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	ts, err := b.store.EarliestMessageTime(h.Topic, h.QueueID)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	return remoting.NewResponse(remoting.Success, "").SetExt("timestamp", strconv.FormatInt(ts, 10))
}

// handleViewMessage serves VIEW_MESSAGE_BY_ID (33): ext "offset" is a commitlog offset;
// the body is the raw record.
func (b *Broker) handleViewMessage(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	off, err := req.ExtInt64("offset", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	m, raw, err := b.store.LookMessageByOffset(off)
	if err != nil {
		return errResponse(remoting.SystemError, "can not find message by the offset, %d", off)
	}
	if resp := b.checkStoredRead(conn, req, m.Topic); resp != nil {
		return resp
	}
	r := remoting.NewResponse(remoting.Success, "")
	r.Body = raw
	return r
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
	return remoting.NewResponse(remoting.Success, "")
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
	return remoting.NewResponse(remoting.Success, "")
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
	r := remoting.NewResponse(remoting.Success, "")
	r.Body, _ = json.Marshal(snap)
	return r
}

// isSystemTopic reports whether topic belongs to the broker: the system topics, and the
// topics named after the cluster and the broker (as Java's TopicConfigManager creates).
func (b *Broker) isSystemTopic(topic string) bool {
	return message.IsSystemTopic(topic) || topic == b.cfg.BrokerClusterName || topic == b.cfg.BrokerName
}
