package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// The front-end API: what a second protocol front end (the RocketMQ 5 gRPC
// MessagingService of package broker/grpcfront) needs to serve clients from the same
// store, topic and group tables and with the same checks as the remoting port. The
// broker package itself stays free of gRPC: the front end imports it, and the sluice
// command wires the two together.

// RefusedError is a request the broker refuses: the remoting response code the remoting
// port answers for the same case, and the reason (naming the field and the limit).
type RefusedError struct {
	Code   remoting.ResponseCode
	Reason string
}

func (e *RefusedError) Error() string { return e.Reason }

// refused turns an error response of the remoting handlers into a *RefusedError.
func refused(resp *remoting.RemotingCommand) error {
	return &RefusedError{Code: remoting.ResponseCode(resp.Code), Reason: resp.Remark}
}

// PutMessage checks and stores one message sent through a front end, as a
// SEND_MESSAGE_V2 with the same checks (broker and topic permission, topic name,
// auto-creation from TBW102, body size, property size) and the same routing (delay
// level to the schedule service, %RETRY% past its limit to the DLQ). m.QueueID < 0 lets
// the broker pick the queue. The broker adds CLUSTER and sets the store host. A refusal
// is a *RefusedError; a store failure an error from the store.
func (b *Broker) PutMessage(ctx context.Context, m *message.MessageExt) (store.PutResult, error) {
	h := wire.SendHeader{Topic: m.Topic, DefaultTopic: message.AutoCreateTopicKey, DefaultTopicQueueNums: 4,
		QueueID: m.QueueID, SysFlag: m.SysFlag, MaxReconsumeTimes: -1}
	if _, resp := b.checkSend(&h); resp != nil {
		return store.PutResult{}, refused(resp)
	}
	m.QueueID = h.QueueID
	if len(m.Body) > b.cfg.MaxMessageSize {
		return store.PutResult{}, &RefusedError{Code: remoting.MessageIllegal,
			Reason: fmt.Sprintf("the message body size %d bytes exceeds maxMessageSize %d bytes", len(m.Body), b.cfg.MaxMessageSize)}
	}
	if len(m.Body) == 0 {
		return store.PutResult{}, &RefusedError{Code: remoting.MessageIllegal, Reason: "the message body is empty"}
	}
	if m.Properties == nil {
		m.Properties = map[string]string{}
	}
	delete(m.Properties, message.PropertyWaitStoreMsgOK)
	m.Properties[message.PropertyCluster] = b.cfg.BrokerClusterName
	if n := message.EncodedPropertiesLen(m.Properties); n > message.MaxPropertiesLength {
		return store.PutResult{}, &RefusedError{Code: remoting.MessageIllegal,
			Reason: fmt.Sprintf("the message properties length %d bytes exceeds %d bytes", n, message.MaxPropertiesLength)}
	}
	m.StoreHost = b.storeHost
	if m.Property(message.PropertyTransactionPrepared) == "true" { // a half message (txn.go)
		if resp := b.prepareHalf(m); resp != nil {
			return store.PutResult{}, refused(resp)
		}
		return b.store.PutMessage(ctx, m, message.TagHashCode(m.Tag()))
	}
	if message.IsRetryTopic(m.Topic) {
		b.routeRetry(m, -1)
	}
	tagsCode, resp := b.applyDelay(m)
	if resp != nil {
		return store.PutResult{}, refused(resp)
	}
	return b.store.PutMessage(ctx, m, tagsCode)
}

// TopicConfig returns a copy of the topic's config. With create, an unknown topic is
// auto-created as a send would create it (autoCreateTopicEnable, TBW102's queues and
// perm); a topic that does not exist and is not created is a *RefusedError with
// TOPIC_NOT_EXIST.
func (b *Broker) TopicConfig(topic string, create bool) (wire.TopicConfig, error) {
	if err := message.ValidateTopic(topic); err != nil {
		return wire.TopicConfig{}, &RefusedError{Code: remoting.SystemError, Reason: err.Error()}
	}
	if create && !message.IsSendForbiddenTopic(topic) {
		h := wire.SendHeader{Topic: topic, DefaultTopic: message.AutoCreateTopicKey, DefaultTopicQueueNums: 4}
		tc, resp := b.topicForSend(&h)
		if resp != nil {
			return wire.TopicConfig{}, refused(resp)
		}
		return *tc, nil
	}
	tc := b.topics.get(topic)
	if tc == nil {
		return wire.TopicConfig{}, &RefusedError{Code: remoting.TopicNotExist, Reason: fmt.Sprintf("topic[%s] not exist", topic)}
	}
	return *tc, nil
}

// GroupConfig returns a copy of the consumer group's config, creating it when
// autoCreateSubscriptionGroup is on; an unknown group that may not be created (or whose
// %RETRY%/%DLQ% topics would be invalid) is a *RefusedError with
// SUBSCRIPTION_GROUP_NOT_EXIST.
func (b *Broker) GroupConfig(group string) (SubscriptionGroupConfig, error) {
	if err := message.ValidateGroupTopics(group); err != nil {
		return SubscriptionGroupConfig{}, &RefusedError{Code: remoting.SystemError, Reason: "group: " + err.Error()}
	}
	g := b.groups.find(group)
	if g == nil {
		return SubscriptionGroupConfig{}, &RefusedError{Code: remoting.SubscriptionGroupNotExist,
			Reason: fmt.Sprintf("subscription group not exist, %s", group)}
	}
	return *g, nil
}

// ReadMessages reads up to max messages of topic/queueID from queue offset offset that f
// matches (nil: all), decoded with their bodies decompressed, and the store's lookup
// result (status, next offset, min and max offsets).
func (b *Broker) ReadMessages(topic string, queueID int32, offset int64, max int, f store.Filter) ([]*message.MessageExt, store.GetResult, error) {
	res, err := b.store.GetMessage(topic, queueID, offset, max, 0, f)
	if err != nil {
		return nil, res, err
	}
	msgs := make([]*message.MessageExt, 0, len(res.Records))
	for _, rec := range res.Records {
		m, _, err := message.DecodeRecord(rec, message.DecodeOptions{Decompress: true})
		if err != nil {
			return nil, res, fmt.Errorf("decode stored record of %s/%d: %w", topic, queueID, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, res, nil
}

// QueueOffsets returns a queue's first available offset and its next offset to be
// written.
func (b *Broker) QueueOffsets(topic string, queueID int32) (minOffset, maxOffset int64) {
	return b.store.MinOffset(topic, queueID), b.store.MaxOffset(topic, queueID)
}

// CommitOffset records a group's consume offset of a queue, as UPDATE_CONSUMER_OFFSET
// does (persisted every flushConsumerOffsetInterval and at shutdown).
func (b *Broker) CommitOffset(group, topic string, queueID int32, offset int64) {
	b.offsets.commit(group, topic, queueID, offset)
}

// QueryOffset returns a group's committed consume offset of a queue and whether there
// is one.
func (b *Broker) QueryOffset(group, topic string, queueID int32) (int64, bool) {
	return b.offsets.query(group, topic, queueID)
}

// WatchQueue returns a channel closed at the next message stored in topic/queueID that f
// matches (nil: any), and a cancel that forgets the watch; call it when done waiting.
// Watch before reading, so that a message stored in between still wakes the caller.
func (b *Broker) WatchQueue(topic string, queueID int32, f store.Filter) (<-chan struct{}, func()) {
	return b.arrivals.watch(topic, queueID, f)
}

// SubscriptionFilter compiles a subscription expression: type "" or "TAG" a tag
// expression ("*", "a || b"), "SQL92" a property filter (enablePropertyFilter). A
// refused expression is a *RefusedError naming why.
func (b *Broker) SubscriptionFilter(expr, exprType string) (store.Filter, error) {
	f, resp := b.subscriptionFilter(expr, exprType)
	if resp != nil {
		return nil, refused(resp)
	}
	return f, nil
}

// DeadLetter writes a copy of orig, a message of a consumer group that used up its
// delivery attempts, to %DLQ%<group>, as a 4.x consumer's last send-back does: the copy
// keeps body, flag and properties, gets RETRY_TOPIC (the original topic) and
// ORIGIN_MESSAGE_ID (the original message id) unless already set, and ReconsumeTimes
// reconsumeTimes.
func (b *Broker) DeadLetter(ctx context.Context, group string, orig *message.MessageExt, reconsumeTimes int32) (store.PutResult, error) {
	if err := message.ValidateGroupTopics(group); err != nil {
		return store.PutResult{}, &RefusedError{Code: remoting.SystemError, Reason: "group: " + err.Error()}
	}
	props := make(map[string]string, len(orig.Properties)+2)
	for k, v := range orig.Properties {
		props[k] = v
	}
	m := &message.MessageExt{
		Message:        message.Message{Topic: b.ensureDLQ(group), Flag: orig.Flag, Body: orig.Body, Properties: props},
		SysFlag:        orig.SysFlag &^ message.SysFlagCompressed, // orig's body was decompressed when read
		BornTimestamp:  orig.BornTimestamp,
		BornHost:       orig.BornHost,
		StoreHost:      b.storeHost,
		StoreTimestamp: time.Now().UnixMilli(),
		ReconsumeTimes: reconsumeTimes,
	}
	if m.Property(message.PropertyRetryTopic) == "" {
		m.SetProperty(message.PropertyRetryTopic, orig.Topic)
	}
	if m.Property(message.PropertyOriginMessageID) == "" {
		id := orig.Property(message.PropertyUniqClientMessageIDKeyIdx)
		if id == "" {
			id = orig.MsgID
		}
		m.SetProperty(message.PropertyOriginMessageID, id)
	}
	m.SetProperty(message.PropertyMaxReconsumeTimes, strconv.Itoa(int(reconsumeTimes)))
	m.RemoveProperty(message.PropertyDelayTimeLevel)
	return b.store.PutMessage(ctx, m, message.TagHashCode(m.Tag()))
}

// StoreHost is the address the broker writes into stored records as their store host.
func (b *Broker) StoreHost() netip.AddrPort { return b.storeHost }

// ClusterName is the broker's cluster (brokerClusterName).
func (b *Broker) ClusterName() string { return b.cfg.BrokerClusterName }

// MaxMessageSize is the largest message body the broker accepts (maxMessageSize).
func (b *Broker) MaxMessageSize() int { return b.cfg.MaxMessageSize }

// GrpcListenAddr is the grpcListenAddr key: where the gRPC front end listens ("": off).
func (b *Broker) GrpcListenAddr() string { return b.cfg.GrpcListenAddr }

// ACL is the broker's plain ACL (aclEnable; nil without): the same accounts and
// permissions, reloaded with the file, for a front end to check its callers against.
func (b *Broker) ACL() *acl.Validator { return b.acl }

// ServerTLS is the TLS configuration the remoting port serves with tlsEnable (nil
// without), for a front end to serve the same certificate.
func (b *Broker) ServerTLS() (*tls.Config, error) {
	server, _, err := b.cfg.tlsConfigs()
	return server, err
}

// IsRefused reports whether err is a *RefusedError and returns it.
func IsRefused(err error) (*RefusedError, bool) {
	var r *RefusedError
	ok := errors.As(err, &r)
	return r, ok
}

// EndTransaction commits or rolls back the half message at commitLogOffset (queue offset
// tranStateTableOffset in the half topic) of producerGroup, as END_TRANSACTION does.
// A refusal (no such half message, already ended otherwise) is a *RefusedError.
func (b *Broker) EndTransaction(ctx context.Context, producerGroup string, tranStateTableOffset, commitLogOffset int64, commit, fromCheck bool) error {
	decision := int32(txnRollback)
	if commit {
		decision = txnCommit
	}
	req := remoting.NewRequest(remoting.EndTransaction, wire.EndTransactionHeader{ProducerGroup: producerGroup,
		TranStateTableOffset: tranStateTableOffset, CommitLogOffset: commitLogOffset, CommitOrRollback: decision,
		FromTransactionCheck: fromCheck}.Ext(), nil)
	if resp := b.handleEndTransaction(ctx, nil, req); resp != nil && resp.Code != int16(remoting.Success) {
		return refused(resp)
	}
	return nil
}

// TransactionChecker asks a front end's producer about a half message whose producer
// group has no remoting producer connected; it reports whether it asked.
type TransactionChecker func(ctx context.Context, half *message.MessageExt) bool

// SetTransactionChecker installs the front end's transaction checker (nil: none).
func (b *Broker) SetTransactionChecker(f TransactionChecker) {
	if f == nil {
		b.txnChecker.Store(nil)
		return
	}
	b.txnChecker.Store(&f)
}
