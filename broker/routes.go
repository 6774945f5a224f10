package broker

import (
	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// Where the handlers live, by concern: send.go (SEND_MESSAGE*), pull.go and longpoll.go
// (PULL_MESSAGE), sendback.go (CONSUMER_SEND_MSG_BACK), heartbeat.go (client
// membership), offsets.go and resetoffset.go (consumer offsets), query.go (messages by
// key or id), txn.go (END_TRANSACTION), lock.go (queue locks), consistency.go (group
// subscriptions), admin.go (topics, groups, whole-table reads, READ_QUEUE); the answer
// helpers they share are in answer.go.

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
	s.Handle(remoting.GetAllTopicConfig, b.handleAllTopicConfig) // admin.go
	s.Handle(wire.GroupOffsets, b.handleGroupOffsets)
	s.Handle(wire.GroupSummaries, b.handleGroupSummaries)           // admin.go
	s.Handle(remoting.DeleteSubscriptionGroup, b.handleDeleteGroup) // admin.go
}
