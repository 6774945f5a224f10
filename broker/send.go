package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// sendResponse adds the ext fields every send response carries (MSG_REGION, TRACE_ON).
// The response is in list form (ExtList, room for putResponse's three fields): encoding
// it needs no map and no key sort.
func (b *Broker) sendResponse(code remoting.ResponseCode, remark string) *remoting.RemotingCommand {
	r := remoting.NewResponse(code, remark)
	r.ExtList = append(make([]remoting.ExtField, 0, 5),
		remoting.ExtField{Key: message.PropertyMsgRegion, Value: b.cfg.RegionID},
		remoting.ExtField{Key: message.PropertyTraceSwitch, Value: "true"})
	return r
}

// topicForSend finds the topic's config, auto-creating it as Java's
// TopicConfigManager.createTopicInSendMessageMethod does: from the default topic's config
// (TBW102) when it has the inherit perm, with min(requested, template) queues; retry
// topics get 1 queue. It returns an error response when the topic cannot be used.
func (b *Broker) topicForSend(h *wire.SendHeader) (*wire.TopicConfig, *remoting.RemotingCommand) {
	tc, created, err := b.topics.getOrCreate(h.Topic, func() *wire.TopicConfig {
		if message.IsRetryTopic(h.Topic) {
			return &wire.TopicConfig{TopicName: h.Topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: permRead | permWrite, TopicFilterType: "SINGLE_TAG"}
		}
		if message.IsDLQTopic(h.Topic) { // as ensureDLQ: one queue, never readable by consumers
			return &wire.TopicConfig{TopicName: h.Topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: permWrite, TopicFilterType: "SINGLE_TAG"}
		}
		if !boolOr(b.cfg.AutoCreateTopicEnable, true) {
			return nil
		}
		tmpl := b.topics.topics[h.DefaultTopic] // getOrCreate holds b.topics.mu: get() would deadlock
		if tmpl == nil || tmpl.Perm&permInherit == 0 {
			return nil
		}
		n := int(h.DefaultTopicQueueNums)
		if n <= 0 || n > tmpl.WriteQueueNums {
			n = tmpl.WriteQueueNums
		}
		return &wire.TopicConfig{TopicName: h.Topic, ReadQueueNums: n, WriteQueueNums: n,
			Perm: tmpl.Perm &^ permInherit, TopicFilterType: "SINGLE_TAG"}
	})
	if err != nil {
		b.log.Error("persist topic config", "topic", h.Topic, "err", err)
	}
	if tc == nil {
		return nil, b.sendResponse(remoting.TopicNotExist, fmt.Sprintf("topic[%s] not exist, apply first please!", h.Topic))
	}
	if created {
		b.log.Info("topic auto-created", "topic", h.Topic, "queues", tc.WriteQueueNums)
	}
	return tc, nil
}

// checkSend runs the checks shared by single and batch sends (Java
// AbstractSendMessageProcessor.msgCheck) and resolves the queue id.
func (b *Broker) checkSend(h *wire.SendHeader) (*wire.TopicConfig, *remoting.RemotingCommand) {
	if b.cfg.BrokerPermission&permWrite == 0 {
		return nil, b.sendResponse(remoting.NoPermission, fmt.Sprintf("the broker[%s] sending message is forbidden", b.cfg.BrokerName))
	}
	if resp := b.refuseWrite(); resp != nil { // diskpressure.go: disk full, diskPressurePolicy=refuseWrites
		return nil, resp
	}
	if err := message.ValidateTopic(h.Topic); err != nil {
		return nil, b.sendResponse(remoting.SystemError, err.Error())
	}
	if message.IsSendForbiddenTopic(h.Topic) {
		return nil, b.sendResponse(remoting.NoPermission, fmt.Sprintf("Sending message to topic[%s] is forbidden.", h.Topic))
	}
	tc, resp := b.topicForSend(h)
	if resp != nil {
		return nil, resp
	}
	if tc.Perm&permWrite == 0 {
		return nil, b.sendResponse(remoting.NoPermission, fmt.Sprintf("the topic[%s] sending message is forbidden", h.Topic))
	}
	if h.QueueID < 0 {
		h.QueueID = randomQueue(tc.WriteQueueNums)
	}
	if n := max(tc.ReadQueueNums, tc.WriteQueueNums); int(h.QueueID) >= n {
		return nil, b.sendResponse(remoting.SystemError, fmt.Sprintf("request queueId[%d] is illegal, topic %s has %d queues", h.QueueID, h.Topic, n))
	}
	return tc, nil
}

// sendSysFlagBits are the sysFlag bits a producer may set: compressed, multi-tags,
// TRANSACTION_PREPARED, the compression type and the IPv6 host bits (which the store
// recomputes from the addresses).
const sendSysFlagBits = message.SysFlagCompressed | message.SysFlagMultiTags | message.SysFlagTransactionPrepared |
	message.SysFlagTransactionCommit | message.SysFlagBornHostV6 | message.SysFlagStoreHostV6 | message.SysFlagCompressionMask

// checkSendSysFlag returns why a producer's sysFlag cannot be stored as sent ("" when it
// can), so that no message is answered SEND_OK and then never reaches a consume queue:
// unknown bits (RocketMQ 5 INNER_BATCH 0x80, NEED_UNWRAP 0x40, ...), COMMIT or ROLLBACK
// (only END_TRANSACTION decides a transaction), TRANSACTION_PREPARED without the TRAN_MSG
// property (it would be stored as a half message nobody checks), and compression types other than zlib (LZ4 0x100, ZSTD
// 0x200), which Sluice consumers cannot decompress.
func checkSendSysFlag(sysFlag int32, tranMsg bool) string {
	if extra := sysFlag &^ sendSysFlagBits; extra != 0 {
		return fmt.Sprintf("sysFlag %#x has bits %#x a producer may not set", sysFlag, extra)
	}
	switch message.TransactionType(sysFlag) {
	case message.SysFlagTransactionCommit, message.SysFlagTransactionRollback:
		return fmt.Sprintf("sysFlag %#x marks a transaction committed or rolled back: only END_TRANSACTION decides a transaction", sysFlag)
	case message.SysFlagTransactionPrepared:
		if !tranMsg {
			return fmt.Sprintf("sysFlag %#x has TRANSACTION_PREPARED (0x4) but property TRAN_MSG is not true", sysFlag)
		}
	}
	if ct := sysFlag & message.SysFlagCompressionMask; ct != 0 && ct != 0x300 {
		return fmt.Sprintf("sysFlag %#x names compression type %#x; only zlib (0 or 0x300) is supported", sysFlag, ct)
	}
	return ""
}

// handleSendGroup serves SEND_MESSAGE (10) and SEND_MESSAGE_V2 (310) under ASYNC_FLUSH,
// answering when the messages are stored. It runs on the connection's reader and takes
// a run of sends read together (remoting.Server.HandleInlineGroup): the messages that
// pass the checks are stored with one store.PutGroup, so a burst of sends costs one
// commitlog write and one publication instead of one each. Each send is answered as if
// it had come alone, and is timed and counted as timedSend does (its latency is the
// run's).
func (b *Broker) handleSendGroup(v2 bool) remoting.GroupHandler {
	return func(ctx context.Context, conn *remoting.Conn, reqs []*remoting.RemotingCommand, resps []*remoting.RemotingCommand) {
		start := time.Now()
		g := sendGroups.Get().(*sendGroup)
		defer g.release()
		for i, req := range reqs {
			g.sizes = append(g.sizes, int64(len(req.Body)))
			m, tagsCode, queueID, resp := b.prepareSend(conn, req, v2)
			if resp != nil {
				resps[i] = resp
				continue
			}
			g.msgs = append(g.msgs, m)
			g.codes = append(g.codes, tagsCode)
			g.queueIDs = append(g.queueIDs, queueID)
			g.idx = append(g.idx, i)
		}
		if n := len(g.msgs); n > 0 {
			g.results = append(g.results, make([]store.PutResult, n)...)
			g.errs = append(g.errs, make([]error, n)...)
			b.store.PutGroup(ctx, g.msgs, g.codes, g.results, g.errs)
			for j, i := range g.idx {
				if g.errs[j] != nil {
					resps[i] = b.putError(g.errs[j])
				} else {
					resps[i] = b.putResponse(g.results[j], g.queueIDs[j])
				}
			}
		}
		for i, req := range reqs {
			req.ReleaseBody() // the store copied the bodies; nothing keeps the messages
			b.recordSend(req, resps[i], start, g.sizes[i])
		}
	}
}

// sendGroup is the scratch of one handleSendGroup call, recycled through sendGroups.
type sendGroup struct {
	msgs     []*message.MessageExt
	codes    []int64
	queueIDs []int32
	idx      []int // idx[j]: the request of msgs[j]
	results  []store.PutResult
	errs     []error
	sizes    []int64 // body size of each request
}

var sendGroups = sync.Pool{New: func() any { return new(sendGroup) }}

// release clears g (so that it keeps no message alive) and returns it to sendGroups.
func (g *sendGroup) release() {
	clear(g.msgs)
	clear(g.results)
	clear(g.errs)
	g.msgs, g.codes, g.queueIDs, g.idx = g.msgs[:0], g.codes[:0], g.queueIDs[:0], g.idx[:0]
	g.results, g.errs, g.sizes = g.results[:0], g.errs[:0], g.sizes[:0]
	sendGroups.Put(g)
}

// handleSendAsync serves SEND_MESSAGE(_V2) under SYNC_FLUSH (remoting.Server.HandleAsync): the store
// queues the answer on its flusher, which sends it once the group commit's fsync covers
// the message, so no goroutine or timer waits per send.
func (b *Broker) handleSendAsync(v2 bool) remoting.AsyncHandler {
	return func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand, reply func(*remoting.RemotingCommand)) {
		m, tagsCode, queueID, resp := b.prepareSend(conn, req, v2)
		if resp != nil {
			reply(resp)
			return
		}
		b.store.PutMessageAsync(ctx, m, tagsCode, func(res store.PutResult, err error) {
			if err != nil {
				reply(b.putError(err))
				return
			}
			reply(b.putResponse(res, queueID))
		})
		req.ReleaseBody() // written before PutMessageAsync returns; the answer needs only res
	}
}

// prepareSend checks a SEND_MESSAGE(_V2) request and builds the message to store, its
// consume-queue tags code and the queue to name in the answer; or the error response.
func (b *Broker) prepareSend(conn *remoting.Conn, req *remoting.RemotingCommand, v2 bool) (*message.MessageExt, int64, int32, *remoting.RemotingCommand) {
	h, err := wire.ParseSendHeader(req, v2)
	if err != nil {
		return nil, 0, 0, b.sendResponse(remoting.SystemError, err.Error())
	}
	if _, resp := b.checkSend(&h); resp != nil {
		return nil, 0, 0, resp
	}
	if len(req.Body) > b.cfg.MaxMessageSize {
		return nil, 0, 0, b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("the message body size %d bytes exceeds maxMessageSize %d bytes", len(req.Body), b.cfg.MaxMessageSize))
	}
	if len(req.Body) == 0 {
		return nil, 0, 0, b.sendResponse(remoting.MessageIllegal, "the message body is empty")
	}
	if len(h.Properties) > message.MaxPropertiesLength {
		return nil, 0, 0, b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("the message properties length %d bytes exceeds %d bytes", len(h.Properties), message.MaxPropertiesLength))
	}
	props := message.UnmarshalProperties(h.Properties)
	if props == nil {
		props = map[string]string{}
	}
	if why := checkSendSysFlag(h.SysFlag, props[message.PropertyTransactionPrepared] == "true"); why != "" {
		return nil, 0, 0, b.sendResponse(remoting.MessageIllegal, why)
	}
	if err := b.checkDelayLevel(props[message.PropertyDelayTimeLevel]); err != nil {
		return nil, 0, 0, b.sendResponse(remoting.MessageIllegal, err.Error())
	}
	delete(props, message.PropertyWaitStoreMsgOK)
	props[message.PropertyCluster] = b.cfg.BrokerClusterName
	m := &message.MessageExt{
		Message:        message.Message{Topic: h.Topic, Flag: h.Flag, Body: req.Body, Properties: props},
		QueueID:        h.QueueID,
		SysFlag:        h.SysFlag,
		BornTimestamp:  h.BornTimestamp,
		BornHost:       hostOf(conn.RemoteAddr()),
		StoreHost:      b.storeHost,
		ReconsumeTimes: h.ReconsumeTimes,
	}
	if props[message.PropertyTransactionPrepared] == "true" {
		if resp := b.prepareHalf(m); resp != nil {
			return nil, 0, 0, resp
		}
		return m, message.TagHashCode(m.Tag()), h.QueueID, nil
	}
	if message.IsRetryTopic(h.Topic) {
		b.routeRetry(m, h.MaxReconsumeTimes)
	}
	queueID := m.QueueID // the producer's queue, also for a delayed message parked in SCHEDULE_TOPIC_XXXX
	tagsCode, resp := b.applyDelay(m)
	if resp != nil {
		return nil, 0, 0, resp
	}
	return m, tagsCode, queueID, nil
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

// Values of Config.DelayLevelOutOfRange.
const (
	DelayLevelRefuse = "refuse" // a DELAY outside 0..len(messageDelayLevel) is MESSAGE_ILLEGAL
	DelayLevelClamp  = "clamp"  // as Apache RocketMQ: above the table is the last level, below 1 none
)

// checkDelayLevel checks a send's DELAY property (absent: ""): with
// delayLevelOutOfRange=refuse it must be an integer in 0..len(messageDelayLevel).
func (b *Broker) checkDelayLevel(v string) error {
	if v == "" || b.cfg.DelayLevelOutOfRange == DelayLevelClamp {
		return nil
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= len(b.delayLevels) {
		return nil
	}
	return &message.ValidationError{Field: "properties." + message.PropertyDelayTimeLevel,
		Reason: fmt.Sprintf("%.32q is not a delay level: must be an integer in 0..%d (0: no delay; the broker's messageDelayLevel has %d levels)",
			v, len(b.delayLevels), len(b.delayLevels))}
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
	if _, resp := b.parkTimer(m); resp != nil { // timer.go: TIMER_DELIVER_MS, TIMER_DELAY_SEC/MS
		return 0, resp
	}
	return message.TagHashCode(m.Tag()), nil
}

// putError answers a failed put. A message the store cannot encode (its properties over
// 32767 bytes once the broker added its own, such as CLUSTER or a delayed message's
// REAL_TOPIC and REAL_QID: a *message.ValidationError) is MESSAGE_ILLEGAL, as Apache
// RocketMQ answers PROPERTIES_SIZE_EXCEEDED, so that producers do not retry it.
func (b *Broker) putError(err error) *remoting.RemotingCommand {
	var ve *message.ValidationError
	switch {
	case errors.Is(err, store.ErrMessageTooLarge), errors.As(err, &ve):
		return b.sendResponse(remoting.MessageIllegal, err.Error())
	case errors.Is(err, store.ErrClosed):
		return b.sendResponse(remoting.ServiceNotAvailable, "the message store is closed")
	case errors.Is(err, store.ErrDiskFull):
		return b.sendResponse(remoting.ServiceNotAvailable, "service not available now: the broker's disk is full ("+err.Error()+")")
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
	r.ExtList = append(r.ExtList,
		remoting.ExtField{Key: "msgId", Value: strings.Join(res.OffsetMsgIDs, ",")},
		remoting.ExtField{Key: "queueId", Value: strconv.Itoa(int(queueID))},
		remoting.ExtField{Key: "queueOffset", Value: strconv.FormatInt(res.QueueOffset, 10)})
	return r
}

// handleSendBatch serves SEND_BATCH_MESSAGE (320): the body holds several messages of one
// topic (docs/protocol.md §4.5); they are stored in one append with consecutive queue offsets.
func (b *Broker) handleSendBatch(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	msgs, codes, queueID, resp := b.prepareBatch(conn, req)
	if resp != nil {
		return resp
	}
	res, err := b.store.PutMessages(ctx, msgs, codes)
	req.ReleaseBody() // the store copied the bodies; nothing keeps msgs
	if err != nil {
		return b.putError(err)
	}
	return b.putResponse(res, queueID)
}

// handleSendBatchAsync is handleSendBatch for SYNC_FLUSH, answering as handleSendAsync.
func (b *Broker) handleSendBatchAsync(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand, reply func(*remoting.RemotingCommand)) {
	msgs, codes, queueID, resp := b.prepareBatch(conn, req)
	if resp != nil {
		reply(resp)
		return
	}
	b.store.PutMessagesAsync(ctx, msgs, codes, func(res store.PutResult, err error) {
		if err != nil {
			reply(b.putError(err))
			return
		}
		reply(b.putResponse(res, queueID))
	})
	req.ReleaseBody() // written before PutMessagesAsync returns; the answer needs only res
}

// prepareBatch checks a SEND_BATCH_MESSAGE request and builds the messages to store with
// their tags codes and the queue to name in the answer; or the error response.
func (b *Broker) prepareBatch(conn *remoting.Conn, req *remoting.RemotingCommand) ([]*message.MessageExt, []int64, int32, *remoting.RemotingCommand) {
	h, err := wire.ParseSendHeader(req, true)
	if err != nil {
		return nil, nil, 0, b.sendResponse(remoting.SystemError, err.Error())
	}
	if _, resp := b.checkSend(&h); resp != nil {
		return nil, nil, 0, resp
	}
	if message.IsRetryTopic(h.Topic) || message.IsDLQTopic(h.Topic) {
		return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, "batch messages cannot be sent to retry or DLQ topics")
	}
	if len(req.Body) > b.cfg.MaxMessageSize {
		return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("the batch body size %d bytes exceeds maxMessageSize %d bytes", len(req.Body), b.cfg.MaxMessageSize))
	}
	items, err := message.DecodeBatch(req.Body)
	if err != nil {
		return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, err.Error())
	}
	if len(items) == 0 {
		return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, "empty batch")
	}
	if why := checkSendSysFlag(h.SysFlag, false); why != "" {
		return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, why)
	}
	// Empty bodies first, before allocating per item: a body of bare 22-byte record
	// headers is refused without building a message for each.
	for i, it := range items {
		if len(it.Body) == 0 {
			return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("batch message %d: the message body is empty", i))
		}
	}
	outer := message.UnmarshalProperties(h.Properties)
	// An item's encoded properties are at most its raw string (parsing only drops pieces)
	// plus the batch's own and CLUSTER, each with a separator: below the limit, no message
	// needs measuring.
	added := message.EncodedPropertiesLen(outer) + 1 + len(message.PropertyCluster) + 1 + len(b.cfg.BrokerClusterName) + 1
	bornHost := hostOf(conn.RemoteAddr())
	exts := make([]message.MessageExt, len(items)) // one allocation for the batch's messages
	msgs := make([]*message.MessageExt, len(items))
	codes := make([]int64, len(items))
	for i, it := range items {
		props := message.UnmarshalProperties(it.Properties)
		if props == nil {
			props = make(map[string]string, len(outer)+1)
		}
		for k, v := range outer {
			props[k] = v
		}
		delete(props, message.PropertyWaitStoreMsgOK)
		props[message.PropertyCluster] = b.cfg.BrokerClusterName
		if d := props[message.PropertyDelayTimeLevel]; d != "" && d != "0" {
			return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("batch message %d has a delay level: batches cannot be delayed", i))
		}
		if props[message.PropertyTransactionPrepared] == "true" {
			return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("batch message %d is transactional: batches cannot be", i))
		}
		if len(it.Properties)+added > message.MaxPropertiesLength && message.EncodedPropertiesLen(props) > message.MaxPropertiesLength {
			return nil, nil, 0, b.sendResponse(remoting.MessageIllegal, fmt.Sprintf("batch message %d properties exceed %d bytes", i, message.MaxPropertiesLength))
		}
		exts[i] = message.MessageExt{
			Message:        message.Message{Topic: h.Topic, Flag: it.Flag, Body: it.Body, Properties: props},
			QueueID:        h.QueueID,
			SysFlag:        h.SysFlag,
			BornTimestamp:  h.BornTimestamp,
			BornHost:       bornHost,
			StoreHost:      b.storeHost,
			ReconsumeTimes: h.ReconsumeTimes,
		}
		msgs[i] = &exts[i]
		codes[i] = message.TagHashCode(props[message.PropertyTags])
	}
	return msgs, codes, h.QueueID, nil
}
