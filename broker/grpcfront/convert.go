package grpcfront

import (
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Stored property names of the v5 system properties that have no 4.x field (Apache
// RocketMQ's MessageConst names, so that stores and tools agree).
const (
	propertyShardingKey    = "__SHARDINGKEY"    // message_group
	propertyTraceContext   = "TRACE_CONTEXT"    // trace_context
	propertyTimerDeliverMS = "TIMER_DELIVER_MS" // delivery_timestamp
	propertyTimerDelaySec  = "TIMER_DELAY_SEC"
	propertyTimerDelayMS   = "TIMER_DELAY_MS"
)

// TransactionProducerGroup is the producer group (PGROUP) of the half messages v5
// producers send: v5 producers have no group; the broker's transaction check asks a v5
// producer that publishes the message's topic.
const TransactionProducerGroup = "SLUICE_V5_PRODUCER"

// Limits of a v5 message (Apache RocketMQ's proxy defaults).
const (
	maxMessageGroupLen   = 64
	maxUserPropertyCount = 128
	maxUserPropertyBytes = 16 << 10
	maxTagLen            = 1024 // a tag is hashed into the consume queue; keep it short
	maxKeyLen            = 1024
)

// systemProperties are stored property names a user property may not use.
var systemProperties = map[string]bool{
	message.PropertyKeys: true, message.PropertyTags: true, message.PropertyWaitStoreMsgOK: true,
	message.PropertyDelayTimeLevel: true, message.PropertyRetryTopic: true, message.PropertyRealTopic: true,
	message.PropertyRealQueueID: true, message.PropertyTransactionPrepared: true, message.PropertyProducerGroup: true,
	message.PropertyMinOffset: true, message.PropertyMaxOffset: true, message.PropertyOriginMessageID: true,
	message.PropertyReconsumeTime: true, message.PropertyMsgRegion: true, message.PropertyTraceSwitch: true,
	message.PropertyUniqClientMessageIDKeyIdx: true, message.PropertyMaxReconsumeTimes: true,
	message.PropertyConsumeStartTimestamp: true, message.PropertyTransactionPreparedQueueOffset: true,
	message.PropertyTransactionCheckTimes: true, message.PropertyCheckImmunityTimeInSeconds: true,
	message.PropertyCluster: true, message.PropertyMessageType: true, message.PropertyShardingKey: true,
	message.PropertyTransactionID: true,
	propertyShardingKey:           true, propertyTraceContext: true, propertyTimerDeliverMS: true,
	propertyTimerDelaySec: true, propertyTimerDelayMS: true,
}

// statusError is a refusal with a v5 status code and a message naming the field.
type statusError struct {
	code v2.Code
	msg  string
}

func (e *statusError) Error() string { return e.msg }

func refuse(code v2.Code, format string, args ...any) *statusError {
	return &statusError{code: code, msg: fmt.Sprintf(format, args...)}
}

func okStatus() *v2.Status { return &v2.Status{Code: v2.Code_OK, Message: "OK"} }

func statusOf(err error) *v2.Status {
	if err == nil {
		return okStatus()
	}
	if se, ok := err.(*statusError); ok {
		return &v2.Status{Code: se.code, Message: se.msg}
	}
	if r, ok := broker.IsRefused(err); ok {
		return &v2.Status{Code: codeOfRefusal(r), Message: r.Reason}
	}
	switch {
	case errors.Is(err, acl.ErrUnauthenticated):
		return &v2.Status{Code: v2.Code_UNAUTHORIZED, Message: err.Error()}
	case errors.Is(err, acl.ErrDenied):
		return &v2.Status{Code: v2.Code_FORBIDDEN, Message: err.Error()}
	}
	return &v2.Status{Code: v2.Code_INTERNAL_SERVER_ERROR, Message: err.Error()}
}

// codeOfRefusal maps the broker's remoting refusal codes to v5 status codes.
func codeOfRefusal(r *broker.RefusedError) v2.Code {
	switch r.Code {
	case remoting.TopicNotExist:
		return v2.Code_TOPIC_NOT_FOUND
	case remoting.SubscriptionGroupNotExist:
		return v2.Code_CONSUMER_GROUP_NOT_FOUND
	case remoting.NoPermission:
		return v2.Code_FORBIDDEN
	case remoting.MessageIllegal:
		if strings.Contains(r.Reason, "body size") {
			return v2.Code_MESSAGE_BODY_TOO_LARGE
		}
		if strings.Contains(r.Reason, "properties") {
			return v2.Code_MESSAGE_PROPERTIES_TOO_LARGE
		}
		return v2.Code_BAD_REQUEST
	case remoting.ServiceNotAvailable, remoting.SystemBusy:
		return v2.Code_TOO_MANY_REQUESTS
	case remoting.SubscriptionParseFailed:
		return v2.Code_ILLEGAL_FILTER_EXPRESSION
	case remoting.TransactionFailed:
		return v2.Code_PRECONDITION_FAILED // the transaction already ended the other way
	}
	return v2.Code_INTERNAL_SERVER_ERROR
}

// checkResource checks a topic or group resource: present, no namespace (Sluice has
// none), a valid name.
func checkTopic(field string, r *v2.Resource) (string, error) {
	if r == nil || r.GetName() == "" {
		return "", refuse(v2.Code_ILLEGAL_TOPIC, "%s: required", field)
	}
	if r.GetResourceNamespace() != "" {
		return "", refuse(v2.Code_BAD_REQUEST, "%s.resource_namespace %q: namespaces are not supported by this broker", field, r.GetResourceNamespace())
	}
	if err := message.ValidateTopic(r.GetName()); err != nil {
		return "", refuse(v2.Code_ILLEGAL_TOPIC, "%s: %v", field, err)
	}
	return r.GetName(), nil
}

func checkGroup(field string, r *v2.Resource) (string, error) {
	if r == nil || r.GetName() == "" {
		return "", refuse(v2.Code_ILLEGAL_CONSUMER_GROUP, "%s: required", field)
	}
	if r.GetResourceNamespace() != "" {
		return "", refuse(v2.Code_BAD_REQUEST, "%s.resource_namespace %q: namespaces are not supported by this broker", field, r.GetResourceNamespace())
	}
	if err := message.ValidateGroupTopics(r.GetName()); err != nil {
		return "", refuse(v2.Code_ILLEGAL_CONSUMER_GROUP, "%s: %v", field, err)
	}
	return r.GetName(), nil
}

// cleanText reports whether s has no control characters and is valid UTF-8.
func cleanText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// toStored checks one v5 message of a SendMessage request and builds the message to
// store. maxBody is the broker's maxMessageSize; bornHost the client's address.
func toStored(i int, m *v2.Message, maxBody int, bornHost netip.AddrPort) (*message.MessageExt, error) {
	f := fmt.Sprintf("messages[%d]", i)
	if m == nil {
		return nil, refuse(v2.Code_BAD_REQUEST, "%s: required", f)
	}
	topic, err := checkTopic(f+".topic", m.GetTopic())
	if err != nil {
		return nil, err
	}
	if message.IsSendForbiddenTopic(topic) || message.IsRetryTopic(topic) || message.IsDLQTopic(topic) {
		return nil, refuse(v2.Code_ILLEGAL_TOPIC, "%s.topic %q: sending to a system, retry or DLQ topic is forbidden", f, topic)
	}
	if len(m.GetBody()) == 0 {
		return nil, refuse(v2.Code_MESSAGE_BODY_EMPTY, "%s.body: empty", f)
	}
	if len(m.GetBody()) > maxBody {
		return nil, refuse(v2.Code_MESSAGE_BODY_TOO_LARGE, "%s.body: %d bytes exceeds the broker's maxMessageSize %d bytes", f, len(m.GetBody()), maxBody)
	}
	sp := m.GetSystemProperties()
	if sp == nil {
		return nil, refuse(v2.Code_BAD_REQUEST, "%s.system_properties: required", f)
	}
	if sp.GetBodyEncoding() == v2.Encoding_GZIP {
		return nil, refuse(v2.Code_BAD_REQUEST, "%s.system_properties.body_encoding: GZIP bodies are not supported; send IDENTITY", f)
	}
	id := sp.GetMessageId()
	if id == "" || len(id) > 128 || !cleanText(id) || strings.ContainsAny(id, " \x01\x02") {
		return nil, refuse(v2.Code_ILLEGAL_MESSAGE_ID, "%s.system_properties.message_id %q: required, at most 128 characters, no spaces or control characters", f, clip(id))
	}
	props := make(map[string]string, len(m.GetUserProperties())+6)
	if len(m.GetUserProperties()) > maxUserPropertyCount {
		return nil, refuse(v2.Code_MESSAGE_PROPERTIES_TOO_LARGE, "%s.user_properties: %d properties, more than %d", f, len(m.GetUserProperties()), maxUserPropertyCount)
	}
	size := 0
	for k, v := range m.GetUserProperties() {
		if k == "" || !cleanText(k) || !cleanText(v) {
			return nil, refuse(v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "%s.user_properties[%q]: keys must be non-empty and keys and values free of control characters", f, clip(k))
		}
		if systemProperties[k] {
			return nil, refuse(v2.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, "%s.user_properties[%q]: the name is reserved for a system property", f, k)
		}
		size += len(k) + len(v)
		props[k] = v
	}
	if size > maxUserPropertyBytes {
		return nil, refuse(v2.Code_MESSAGE_PROPERTIES_TOO_LARGE, "%s.user_properties: %d bytes, more than %d", f, size, maxUserPropertyBytes)
	}
	if sp.Tag != nil {
		tag := sp.GetTag()
		if strings.TrimSpace(tag) == "" || strings.Contains(tag, "|") || len(tag) > maxTagLen || !cleanText(tag) {
			return nil, refuse(v2.Code_ILLEGAL_MESSAGE_TAG, "%s.system_properties.tag %q: must not be blank, contain '|' or control characters, or exceed %d bytes", f, clip(tag), maxTagLen)
		}
		props[message.PropertyTags] = tag
	}
	if keys := sp.GetKeys(); len(keys) > 0 {
		for j, k := range keys {
			if strings.TrimSpace(k) == "" || strings.ContainsRune(k, ' ') || len(k) > maxKeyLen || !cleanText(k) {
				return nil, refuse(v2.Code_ILLEGAL_MESSAGE_KEY, "%s.system_properties.keys[%d] %q: must not be blank, contain spaces or control characters, or exceed %d bytes", f, j, clip(k), maxKeyLen)
			}
		}
		props[message.PropertyKeys] = strings.Join(keys, message.KeySeparator)
	}
	props[message.PropertyUniqClientMessageIDKeyIdx] = id
	if tc := sp.GetTraceContext(); tc != "" && cleanText(tc) && len(tc) <= 1024 {
		props[propertyTraceContext] = tc
	}
	switch sp.GetMessageType() {
	case v2.MessageType_NORMAL, v2.MessageType_MESSAGE_TYPE_UNSPECIFIED:
		if sp.MessageGroup != nil || sp.DeliveryTimestamp != nil {
			return nil, refuse(v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "%s.system_properties: a NORMAL message has no message_group or delivery_timestamp", f)
		}
	case v2.MessageType_FIFO:
		g := sp.GetMessageGroup()
		if strings.TrimSpace(g) == "" || len(g) > maxMessageGroupLen || !cleanText(g) {
			return nil, refuse(v2.Code_ILLEGAL_MESSAGE_GROUP, "%s.system_properties.message_group %q: a FIFO message needs a message group of 1 to %d characters without control characters", f, clip(g), maxMessageGroupLen)
		}
		if sp.DeliveryTimestamp != nil {
			return nil, refuse(v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "%s.system_properties.delivery_timestamp: a FIFO message cannot be delayed", f)
		}
		props[propertyShardingKey] = g
	case v2.MessageType_DELAY:
		dt := sp.GetDeliveryTimestamp()
		if dt == nil || !dt.IsValid() {
			return nil, refuse(v2.Code_ILLEGAL_DELIVERY_TIME, "%s.system_properties.delivery_timestamp: a DELAY message needs a valid delivery time", f)
		}
		if sp.MessageGroup != nil {
			return nil, refuse(v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "%s.system_properties.message_group: a DELAY message has no message group", f)
		}
		at := dt.AsTime()
		if at.After(time.Now().Add(broker.MaxTimerDelay)) {
			return nil, refuse(v2.Code_ILLEGAL_DELIVERY_TIME, "%s.system_properties.delivery_timestamp %s: more than %v ahead", f, at.UTC().Format(time.RFC3339), broker.MaxTimerDelay)
		}
		props[propertyTimerDeliverMS] = strconv.FormatInt(at.UnixMilli(), 10)
	case v2.MessageType_TRANSACTION:
		if sp.MessageGroup != nil || sp.DeliveryTimestamp != nil {
			return nil, refuse(v2.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "%s.system_properties: a TRANSACTION message has no message_group or delivery_timestamp", f)
		}
		props[message.PropertyTransactionPrepared] = "true"
		props[message.PropertyProducerGroup] = TransactionProducerGroup
	default:
		return nil, refuse(v2.Code_BAD_REQUEST, "%s.system_properties.message_type: %v is not supported", f, sp.GetMessageType())
	}
	born := time.Now().UnixMilli()
	if bt := sp.GetBornTimestamp(); bt != nil && bt.IsValid() {
		born = bt.AsTime().UnixMilli()
	}
	return &message.MessageExt{
		Message:       message.Message{Topic: topic, Body: m.GetBody(), Properties: props},
		QueueID:       -1,
		BornTimestamp: born,
		BornHost:      bornHost,
	}, nil
}

// clip shortens a value quoted in a refusal.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// messageType is the v5 type of a stored message.
func messageType(m *message.MessageExt) v2.MessageType {
	switch {
	case m.Property(propertyShardingKey) != "":
		return v2.MessageType_FIFO
	case m.Property(propertyTimerDeliverMS) != "" || m.Property(propertyTimerDelaySec) != "" ||
		m.Property(propertyTimerDelayMS) != "" || m.DelayLevel() > 0:
		return v2.MessageType_DELAY
	case m.Property(message.PropertyTransactionPrepared) == "true":
		return v2.MessageType_TRANSACTION
	}
	return v2.MessageType_NORMAL
}

// messageID is the id a v5 client sees: the client-assigned UNIQ_KEY, else the stored
// (offset) message id.
func messageID(m *message.MessageExt) string {
	if id := m.Property(message.PropertyUniqClientMessageIDKeyIdx); id != "" {
		return id
	}
	return m.MsgID
}

// toV5 builds the v5 message of a delivery.
func toV5(m *message.MessageExt, handle string, attempt int32, invisible time.Duration) *v2.Message {
	user := make(map[string]string, len(m.Properties))
	for k, v := range m.Properties {
		if !systemProperties[k] {
			user[k] = v
		}
	}
	sp := &v2.SystemProperties{
		MessageId:         messageID(m),
		BodyDigest:        &v2.Digest{Type: v2.DigestType_CRC32, Checksum: strings.ToUpper(strconv.FormatInt(int64(crc32.ChecksumIEEE(m.Body)), 16))},
		BodyEncoding:      v2.Encoding_IDENTITY,
		MessageType:       messageType(m),
		BornTimestamp:     timestamppb.New(time.UnixMilli(m.BornTimestamp)),
		BornHost:          m.BornHost.String(),
		StoreTimestamp:    timestamppb.New(time.UnixMilli(m.StoreTimestamp)),
		StoreHost:         m.StoreHost.String(),
		QueueId:           m.QueueID,
		QueueOffset:       &m.QueueOffset,
		ReceiptHandle:     &handle,
		InvisibleDuration: durationpb.New(invisible),
		DeliveryAttempt:   &attempt,
	}
	if tag := m.Tag(); tag != "" {
		sp.Tag = &tag
	}
	if keys := m.Property(message.PropertyKeys); keys != "" {
		sp.Keys = strings.Fields(keys)
	}
	if g := m.Property(propertyShardingKey); g != "" {
		sp.MessageGroup = &g
	}
	if tc := m.Property(propertyTraceContext); tc != "" {
		sp.TraceContext = &tc
	}
	if ms, err := strconv.ParseInt(m.Property(propertyTimerDeliverMS), 10, 64); err == nil {
		sp.DeliveryTimestamp = timestamppb.New(time.UnixMilli(ms))
	}
	return &v2.Message{Topic: &v2.Resource{Name: m.Topic}, UserProperties: user, SystemProperties: sp, Body: m.Body}
}
