package broker

import (
	"context"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// handleSendBack serves CONSUMER_SEND_MSG_BACK (RocketMQ request code 36): a consumer
// failed a message and hands it back for a later retry (Java
// SendMessageProcessor.asyncConsumerSendMsgBack, docs/protocol.md §3.8).
//
// The broker reads the original record at the commitlog offset and writes a copy to
// %RETRY%<group> with ReconsumeTimes+1, delayed by delayLevel (0 = let the broker choose:
// 3 + reconsume count, so 10s 30s 1m ... 2h), through the schedule service. When the
// reconsume count has reached maxReconsumeTimes (header; -1 or absent = the group's
// retryMaxTimes, 16) or delayLevel is negative, the copy goes to %DLQ%<group> at once.
func (b *Broker) handleSendBack(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseSendBackHeader(req)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	offset, group, delayLevel, maxReconsume := h.Offset, h.Group, h.DelayLevel, h.MaxReconsumeTimes
	if resp := groupError("group", group); resp != nil {
		return resp
	}
	g := b.groups.find(group)
	if g == nil {
		return errResponse(remoting.SubscriptionGroupNotExist, "subscription group not exist, %s", group)
	}
	orig, _, err := b.store.LookMessageByOffset(offset)
	if err != nil {
		return errResponse(remoting.SystemError, "look message by offset failed, %d", offset)
	}
	if resp := b.checkStoredRead(conn, req, orig.Topic); resp != nil {
		return resp
	}
	if b.cfg.BrokerPermission&permWrite == 0 {
		return errResponse(remoting.NoPermission, "the broker[%s] sending message is forbidden", b.cfg.BrokerName)
	}
	if resp := b.refuseWrite(); resp != nil { // the consumer keeps the message and retries it locally
		return resp
	}
	retryTopic := message.RetryTopic(group)
	tc, _, err := b.topics.getOrCreate(retryTopic, func() *wire.TopicConfig {
		return &wire.TopicConfig{TopicName: retryTopic, ReadQueueNums: g.RetryQueueNums, WriteQueueNums: g.RetryQueueNums,
			Perm: permRead | permWrite, TopicFilterType: "SINGLE_TAG"}
	})
	if err != nil {
		b.log.Error("persist topic config", "topic", retryTopic, "err", err)
	}
	if orig.Property(message.PropertyRetryTopic) == "" {
		orig.SetProperty(message.PropertyRetryTopic, orig.Topic)
	}
	if maxReconsume < 0 {
		maxReconsume = int32(g.RetryMaxTimes)
	} else {
		b.clients.noteSendBackLimit(group, maxReconsume) // shown by GroupSummaries
	}
	m := &message.MessageExt{
		Message:        message.Message{Topic: retryTopic, Flag: orig.Flag, Body: orig.Body, Properties: orig.Properties},
		QueueID:        randomQueue(tc.WriteQueueNums),
		SysFlag:        orig.SysFlag,
		BornTimestamp:  orig.BornTimestamp,
		BornHost:       orig.BornHost,
		StoreHost:      b.storeHost,
		StoreTimestamp: time.Now().UnixMilli(),
		ReconsumeTimes: orig.ReconsumeTimes + 1,
	}
	if m.Property(message.PropertyOriginMessageID) == "" {
		m.SetProperty(message.PropertyOriginMessageID, orig.MsgID)
	}
	m.SetProperty(message.PropertyMaxReconsumeTimes, strconv.Itoa(int(maxReconsume)))
	m.RemoveProperty(message.PropertyDelayTimeLevel)
	m.RemoveProperty(message.PropertyRealTopic)
	m.RemoveProperty(message.PropertyRealQueueID)
	if orig.ReconsumeTimes >= maxReconsume || delayLevel < 0 {
		m.Topic = b.ensureDLQ(group)
		m.QueueID = 0
		b.log.Info("message moved to the DLQ", "group", group, "topic", m.Property(message.PropertyRetryTopic),
			"msgId", m.Property(message.PropertyOriginMessageID), "reconsumeTimes", m.ReconsumeTimes)
	} else {
		if delayLevel == 0 {
			delayLevel = 3 + orig.ReconsumeTimes
		}
		m.SetDelayLevel(int(delayLevel))
	}
	tagsCode, resp := b.applyDelay(m)
	if resp != nil {
		return resp
	}
	if _, err := b.store.PutMessage(ctx, m, tagsCode); err != nil {
		return b.putError(err)
	}
	return okResponse()
}
