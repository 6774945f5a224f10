package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// sendHeader is the custom header of SEND_MESSAGE (10, long key names) and
// SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (310 / 320, one-letter keys), PROTOCOL §3.3.
type sendHeader struct {
	producerGroup         string
	topic                 string
	defaultTopic          string
	defaultTopicQueueNums int32
	queueID               int32
	sysFlag               int32
	bornTimestamp         int64
	flag                  int32
	properties            string
	reconsumeTimes        int32
	maxReconsumeTimes     int32 // -1 when absent
	batch                 bool
}

// sendHeaderKeys lists the V1 key and the V2 key of each field, in sendHeader order.
var sendHeaderKeys = [...][2]string{
	{"producerGroup", "a"}, {"topic", "b"}, {"defaultTopic", "c"}, {"defaultTopicQueueNums", "d"},
	{"queueId", "e"}, {"sysFlag", "f"}, {"bornTimestamp", "g"}, {"flag", "h"}, {"properties", "i"},
	{"reconsumeTimes", "j"}, {"unitMode", "k"}, {"maxReconsumeTimes", "l"}, {"batch", "m"},
}

func parseSendHeader(req *remoting.RemotingCommand, v2 bool) (*sendHeader, error) {
	k := func(i int) string {
		if v2 {
			return sendHeaderKeys[i][1]
		}
		return sendHeaderKeys[i][0]
	}
	h := &sendHeader{maxReconsumeTimes: -1}
	var err error
	str := func(i int, required bool) string {
		if err != nil {
			return ""
		}
		var s string
		s, err = req.ExtString(k(i), required)
		return s
	}
	i32 := func(i int, required bool) int32 {
		if err != nil {
			return 0
		}
		var n int32
		n, err = req.ExtInt32(k(i), required)
		return n
	}
	h.producerGroup = str(0, true)
	h.topic = str(1, true)
	h.defaultTopic = str(2, true)
	h.defaultTopicQueueNums = i32(3, true)
	h.queueID = i32(4, true)
	h.sysFlag = i32(5, true)
	if err == nil {
		h.bornTimestamp, err = req.ExtInt64(k(6), true)
	}
	h.flag = i32(7, true)
	h.properties = str(8, false)
	h.reconsumeTimes = i32(9, false)
	if err == nil {
		if _, ok := req.ExtFields[k(11)]; ok {
			h.maxReconsumeTimes = i32(11, false)
		}
	}
	if err == nil {
		h.batch, err = req.ExtBool(k(12))
	}
	return h, err
}

// errResponse builds an error response with a formatted remark.
func errResponse(code remoting.ResponseCode, format string, args ...any) *remoting.RemotingCommand {
	return remoting.NewResponse(code, fmt.Sprintf(format, args...))
}

// sendResponse adds the ext fields every send response carries (MSG_REGION, TRACE_ON).
func (b *Broker) sendResponse(code remoting.ResponseCode, remark string) *remoting.RemotingCommand {
	r := remoting.NewResponse(code, remark)
	r.SetExt(message.PropertyMsgRegion, b.cfg.RegionID).SetExt(message.PropertyTraceSwitch, "true")
	return r
}

// topicForSend finds the topic's config, auto-creating it as Java's
// TopicConfigManager.createTopicInSendMessageMethod does: from the default topic's config
// (TBW102) when it has the inherit perm, with min(requested, template) queues; retry
// topics get 1 queue. It returns an error response when the topic cannot be used.
func (b *Broker) topicForSend(h *sendHeader) (*wire.TopicConfig, *remoting.RemotingCommand) {
	tc, created, err := b.topics.getOrCreate(h.topic, func() *wire.TopicConfig {
		if message.IsRetryTopic(h.topic) {
			return &wire.TopicConfig{TopicName: h.topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: permRead | permWrite, TopicFilterType: "SINGLE_TAG"}
		}
		if message.IsDLQTopic(h.topic) { // as ensureDLQ: one queue, never readable by consumers
			return &wire.TopicConfig{TopicName: h.topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: permWrite, TopicFilterType: "SINGLE_TAG"}
		}
		if !boolOr(b.cfg.AutoCreateTopicEnable, true) {
			return nil
		}
		tmpl := b.topics.topics[h.defaultTopic] // getOrCreate holds b.topics.mu: get() would deadlock
		if tmpl == nil || tmpl.Perm&permInherit == 0 {
			return nil
		}
		n := int(h.defaultTopicQueueNums)
		if n <= 0 || n > tmpl.WriteQueueNums {
			n = tmpl.WriteQueueNums
		}
		return &wire.TopicConfig{TopicName: h.topic, ReadQueueNums: n, WriteQueueNums: n,
			Perm: tmpl.Perm &^ permInherit, TopicFilterType: "SINGLE_TAG"}
	})
	if err != nil {
		b.log.Error("persist topic config", "topic", h.topic, "err", err)
	}
	if tc == nil {
		return nil, b.sendResponse(remoting.TopicNotExist, fmt.Sprintf("topic[%s] not exist, apply first please!", h.topic))
	}
	if created {
		b.log.Info("topic auto-created", "topic", h.topic, "queues", tc.WriteQueueNums)
	}
	return tc, nil
}

// checkSend runs the checks shared by single and batch sends (Java
// AbstractSendMessageProcessor.msgCheck) and resolves the queue id.
func (b *Broker) checkSend(h *sendHeader) (*wire.TopicConfig, *remoting.RemotingCommand) {
	if b.cfg.BrokerPermission&permWrite == 0 {
		return nil, b.sendResponse(remoting.NoPermission, fmt.Sprintf("the broker[%s] sending message is forbidden", b.cfg.BrokerName))
	}
	if resp := b.refuseWrite(); resp != nil { // diskpressure.go: disk full, diskPressurePolicy=refuseWrites
		return nil, resp
	}
	if err := message.ValidateTopic(h.topic); err != nil {
		return nil, b.sendResponse(remoting.SystemError, err.Error())
	}
	if message.IsSendForbiddenTopic(h.topic) {
		return nil, b.sendResponse(remoting.NoPermission, fmt.Sprintf("Sending message to topic[%s] is forbidden.", h.topic))
	}
	tc, resp := b.topicForSend(h)
	if resp != nil {
		return nil, resp
	}
	if tc.Perm&permWrite == 0 {
		return nil, b.sendResponse(remoting.NoPermission, fmt.Sprintf("the topic[%s] sending message is forbidden", h.topic))
	}
	if h.queueID < 0 {
		h.queueID = randomQueue(tc.WriteQueueNums)
	}
	if n := max(tc.ReadQueueNums, tc.WriteQueueNums); int(h.queueID) >= n {
		return nil, b.sendResponse(remoting.SystemError, fmt.Sprintf("request queueId[%d] is illegal, topic %s has %d queues", h.queueID, h.topic, n))
	}
	return tc, nil
}

// handleSend serves SEND_MESSAGE (10) and SEND_MESSAGE_V2 (310).
func (b *Broker) handleSend(v2 bool) remoting.Handler {
	return func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		h, err := parseSendHeader(req, v2)
		if err != nil {
			return b.sendResponse(remoting.SystemError, err.Error())
		}
		if _, resp := b.checkSend(h); resp != nil {
			return resp
		}
		if len(req.Body) > b.cfg.MaxMessageSize {
			return b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("the message body size %d bytes exceeds maxMessageSize %d bytes", len(req.Body), b.cfg.MaxMessageSize))
		}
		if len(h.properties) > message.MaxPropertiesLength {
			return b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("the message properties length %d bytes exceeds %d bytes", len(h.properties), message.MaxPropertiesLength))
		}
		props := message.UnmarshalProperties(h.properties)
		if props == nil {
			props = map[string]string{}
		}
		delete(props, message.PropertyWaitStoreMsgOK)
		props[message.PropertyCluster] = b.cfg.BrokerClusterName
		m := &message.MessageExt{
			Message:        message.Message{Topic: h.topic, Flag: h.flag, Body: req.Body, Properties: props},
			QueueID:        h.queueID,
			SysFlag:        h.sysFlag,
			BornTimestamp:  h.bornTimestamp,
			BornHost:       hostOf(conn.RemoteAddr()),
			StoreHost:      b.storeHost,
			ReconsumeTimes: h.reconsumeTimes,
		}
		if props[message.PropertyTransactionPrepared] == "true" {
			if resp := b.prepareHalf(m); resp != nil {
				return resp
			}
			return b.put(ctx, m, message.TagHashCode(m.Tag()), h.queueID)
		}
		if message.IsRetryTopic(h.topic) {
			b.routeRetry(m, h.maxReconsumeTimes)
		}
		queueID := m.QueueID // the producer's queue, also for a delayed message parked in SCHEDULE_TOPIC_XXXX
		tagsCode, resp := b.applyDelay(m)
		if resp != nil {
			return resp
		}
		return b.put(ctx, m, tagsCode, queueID)
	}
}

// routeRetry sends a message for a %RETRY% topic whose reconsume count reached its
// maximum to the group's DLQ instead (Java handleRetryAndDLQ).
func (b *Broker) routeRetry(m *message.MessageExt, maxReconsume int32) {
	group := strings.TrimPrefix(m.Topic, message.RetryGroupTopicPrefix)
	limit := int32(16)
	if g := b.groups.find(group); g != nil {
		limit = int32(g.RetryMaxTimes)
	}
	if maxReconsume >= 0 {
		limit = maxReconsume
	}
	if m.ReconsumeTimes < limit {
		return
	}
	m.Topic = b.ensureDLQ(group)
	m.QueueID = 0
	m.RemoveProperty(message.PropertyDelayTimeLevel)
}

// ensureDLQ creates %DLQ%<group> on first use: 1 queue, write-only, so normal consumers
// never read it (admin tools read it through the store).
func (b *Broker) ensureDLQ(group string) string {
	topic := message.DLQTopic(group)
	_, _, err := b.topics.getOrCreate(topic, func() *wire.TopicConfig {
		return &wire.TopicConfig{TopicName: topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: permWrite, TopicFilterType: "SINGLE_TAG"}
	})
	if err != nil {
		b.log.Error("persist topic config", "topic", topic, "err", err)
	}
	return topic
}

// applyDelay returns the consume-queue tag code for m; a message with a delay level is
// parked in SCHEDULE_TOPIC_XXXX first (see scheduler), and its tag code is its delivery
// time. A delay level on a DLQ message is dropped.
func (b *Broker) applyDelay(m *message.MessageExt) (int64, *remoting.RemotingCommand) {
	if level := m.DelayLevel(); level > 0 {
		if message.IsDLQTopic(m.Topic) {
			m.RemoveProperty(message.PropertyDelayTimeLevel)
		} else {
			return b.sched.park(m, level), nil
		}
	}
	return message.TagHashCode(m.Tag()), nil
}

// put appends one message and builds the send response, which names queueID (the queue
// the producer chose, as Java answers, even when the message was parked elsewhere).
func (b *Broker) put(ctx context.Context, m *message.MessageExt, tagsCode int64, queueID int32) *remoting.RemotingCommand {
	res, err := b.store.PutMessage(ctx, m, tagsCode)
	if err != nil {
		return b.putError(err)
	}
	return b.putResponse(res, queueID)
}

func (b *Broker) putError(err error) *remoting.RemotingCommand {
	switch {
	case errors.Is(err, store.ErrMessageTooLarge):
		return b.sendResponse(remoting.MessageIllegal, err.Error())
	case errors.Is(err, store.ErrClosed):
		return b.sendResponse(remoting.ServiceNotAvailable, "the message store is closed")
	}
	b.log.Error("put message", "err", err)
	return b.sendResponse(remoting.SystemError, "put message failed: "+err.Error())
}

func (b *Broker) putResponse(res store.PutResult, queueID int32) *remoting.RemotingCommand {
	code := remoting.Success
	if res.Status == store.PutFlushDiskTimeout {
		code = remoting.FlushDiskTimeout
	}
	r := b.sendResponse(code, "")
	r.SetExt("msgId", strings.Join(res.OffsetMsgIDs, ","))
	r.SetExt("queueId", strconv.Itoa(int(queueID)))
	r.SetExt("queueOffset", strconv.FormatInt(res.QueueOffset, 10))
	return r
}

// handleSendBatch serves SEND_BATCH_MESSAGE (320): the body holds several messages of one
// topic (PROTOCOL §4.5); they are stored in one append with consecutive queue offsets.
func (b *Broker) handleSendBatch(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := parseSendHeader(req, true)
	if err != nil {
		return b.sendResponse(remoting.SystemError, err.Error())
	}
	if _, resp := b.checkSend(h); resp != nil {
		return resp
	}
	if message.IsRetryTopic(h.topic) || message.IsDLQTopic(h.topic) {
		return b.sendResponse(remoting.MessageIllegal, "batch messages cannot be sent to retry or DLQ topics")
	}
	if len(req.Body) > b.cfg.MaxMessageSize {
		return b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("the batch body size %d bytes exceeds maxMessageSize %d bytes", len(req.Body), b.cfg.MaxMessageSize))
	}
	items, err := message.DecodeBatch(req.Body)
	if err != nil {
		return b.sendResponse(remoting.MessageIllegal, err.Error())
	}
	if len(items) == 0 {
		return b.sendResponse(remoting.MessageIllegal, "empty batch")
	}
	outer := message.UnmarshalProperties(h.properties)
	msgs := make([]*message.MessageExt, len(items))
	codes := make([]int64, len(items))
	for i, it := range items {
		props := message.UnmarshalProperties(it.Properties)
		if props == nil {
			props = map[string]string{}
		}
		for k, v := range outer {
			props[k] = v
		}
		delete(props, message.PropertyWaitStoreMsgOK)
		props[message.PropertyCluster] = b.cfg.BrokerClusterName
		if props[message.PropertyDelayTimeLevel] != "" && props[message.PropertyDelayTimeLevel] != "0" {
			return b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("batch message %d has a delay level: batches cannot be delayed", i))
		}
		if props[message.PropertyTransactionPrepared] == "true" {
			return b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("batch message %d is transactional: batches cannot be", i))
		}
		if len(message.MarshalProperties(props)) > message.MaxPropertiesLength {
			return b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("batch message %d properties exceed %d bytes", i, message.MaxPropertiesLength))
		}
		msgs[i] = &message.MessageExt{
			Message:        message.Message{Topic: h.topic, Flag: it.Flag, Body: it.Body, Properties: props},
			QueueID:        h.queueID,
			SysFlag:        h.sysFlag,
			BornTimestamp:  h.bornTimestamp,
			BornHost:       hostOf(conn.RemoteAddr()),
			StoreHost:      b.storeHost,
			ReconsumeTimes: h.reconsumeTimes,
		}
		codes[i] = message.TagHashCode(props[message.PropertyTags])
	}
	res, err := b.store.PutMessages(ctx, msgs, codes)
	if err != nil {
		return b.putError(err)
	}
	return b.putResponse(res, h.queueID)
}
