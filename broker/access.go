package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// MaxClientIDLength is the longest client id a heartbeat or unregister may carry, in
// bytes (client ids are "ip@instance" or similar; RocketMQ sets no limit).
const MaxClientIDLength = 512

// adminCodes are the request codes that need an admin account under ACL: RocketMQ's
// Permission.ADMIN_CODE (17, 25, 200, 207, 215) plus Sluice's own admin-only calls
// (offset reset by time, 222, the admin queue reader, 7001, and the summary of every
// group with its topics, clients and lag, 7004, which the per-account filters of codes 21,
// 201 and 7003 would otherwise be read around).
var adminCodes = map[remoting.RequestCode]bool{
	remoting.UpdateAndCreateTopic:      true,
	25:                                 true, // UPDATE_BROKER_CONFIG
	200:                                true, // UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
	207:                                true, // DELETE_SUBSCRIPTIONGROUP
	remoting.DeleteTopicInBroker:       true,
	remoting.InvokeBrokerToResetOffset: true,
	wire.ReadQueue:                     true,
	wire.GroupSummaries:                true,
}

// access is what a request touches: the resources the ACL checks.
type access struct {
	admin     bool
	resources []acl.Resource
}

// nameRef is one name a request carries, with the ext field (or body field) it came from.
type nameRef struct {
	field string
	name  string
	group bool // a producer or consumer group (else a topic)
	perm  acl.Perm
	// perGroup marks a heartbeat's consumer group names: one client heartbeats every
	// consumer group of its process, so the heartbeat handler refuses an invalid group
	// alone (and names it in its answer) while registering the others; the name is not
	// validated here (the ACL check still applies to it).
	perGroup bool
}

// requestNames lists the topics and groups req names, per request code (the ext-field
// names of docs/protocol.md §3, heartbeat and lock bodies included), with the permission
// RocketMQ's PlainAccessValidator asks for each (0 = validated only). Absent optional
// fields are skipped; the handlers still refuse absent required ones.
func requestNames(req *remoting.RemotingCommand) ([]nameRef, error) {
	return appendRequestNames(nil, req)
}

// appendRequestNames is requestNames appending to refs (beforeRequest passes a stack
// buffer: no allocation per send).
func appendRequestNames(refs []nameRef, req *remoting.RemotingCommand) ([]nameRef, error) {
	ext := func(k string) string { v, _ := req.Ext(k); return v } // SEND_MESSAGE(_V2) arrive in list form
	add := func(field, name string, group bool, perm acl.Perm) {
		if name != "" {
			refs = append(refs, nameRef{field: field, name: name, group: group, perm: perm})
		}
	}
	sendTo := func(gk, tk string) {
		add(gk, ext(gk), true, 0)
		t := ext(tk)
		if g, ok := cutRetry(t); ok {
			add(tk, t, false, 0) // the retry topic must be a valid topic too
			add(tk, g, true, acl.Sub)
			return
		}
		if t != "RMQ_SYS_TRACE_TOPIC" {
			add(tk, t, false, acl.Pub)
		} else {
			add(tk, t, false, 0)
		}
	}
	switch remoting.RequestCode(req.Code) {
	case remoting.SendMessage, remoting.SendReplyMessage:
		sendTo("producerGroup", "topic")
	case remoting.SendMessageV2, remoting.SendBatchMessage, remoting.SendReplyMessageV2:
		sendTo("a", "b")
	case remoting.PullMessage, remoting.QueryConsumerOffset, remoting.UpdateConsumerOffset:
		add("consumerGroup", ext("consumerGroup"), true, acl.Sub)
		add("topic", ext("topic"), false, acl.Sub)
	case remoting.QueryMessage, remoting.SearchOffsetByTimestamp, remoting.GetMaxOffset, remoting.GetMinOffset,
		remoting.GetEarliestMsgStoreTime, wire.ReadQueue:
		add("topic", ext("topic"), false, acl.Sub)
	case remoting.UpdateAndCreateTopic, remoting.DeleteTopicInBroker:
		add("topic", ext("topic"), false, 0)
	case remoting.ConsumerSendMsgBack:
		add("group", ext("group"), true, acl.Sub)
		add("originTopic", ext("originTopic"), false, 0)
	case remoting.UnregisterClient:
		add("producerGroup", ext("producerGroup"), true, 0)
		add("consumerGroup", ext("consumerGroup"), true, acl.Sub)
		if len(ext("clientID")) > MaxClientIDLength {
			return nil, &message.ValidationError{Field: "clientID", Reason: "too long", Limit: MaxClientIDLength, Value: len(ext("clientID"))}
		}
	case remoting.DeleteSubscriptionGroup:
		add("groupName", ext("groupName"), true, 0)
	case remoting.GetConsumerListByGroup, wire.GroupSubscriptions, wire.GroupOffsets:
		add("consumerGroup", ext("consumerGroup"), true, acl.Sub)
	case remoting.EndTransaction:
		add("producerGroup", ext("producerGroup"), true, 0)
	case remoting.InvokeBrokerToResetOffset:
		add("group", ext("group"), true, acl.Sub)
		add("topic", ext("topic"), false, acl.Sub)
	case remoting.HeartBeat:
		var hb wire.HeartbeatData
		if err := json.Unmarshal(req.Body, &hb); err != nil {
			return nil, fmt.Errorf("heartbeat body is not HeartbeatData JSON: %w", err)
		}
		if len(hb.ClientID) > MaxClientIDLength {
			return nil, &message.ValidationError{Field: "clientID", Reason: "too long", Limit: MaxClientIDLength, Value: len(hb.ClientID)}
		}
		for _, p := range hb.ProducerDataSet {
			add("producerDataSet.groupName", p.GroupName, true, 0)
		}
		for _, cd := range hb.ConsumerDataSet {
			add("consumerDataSet.groupName", cd.GroupName, true, acl.Sub)
			if cd.GroupName != "" {
				refs[len(refs)-1].perGroup = true
			}
			for _, sd := range cd.SubscriptionDataSet {
				if g, ok := cutRetry(sd.Topic); ok {
					add("subscriptionDataSet.topic", sd.Topic, false, 0)
					add("subscriptionDataSet.topic", g, true, acl.Sub)
					if g == cd.GroupName && g != "" {
						// The group's own retry topic: a group name too long for it is
						// refused by the handler with the group's rule (limit 120), not
						// here with the topic's (limit 127) that the user never chose.
						refs[len(refs)-2].perGroup, refs[len(refs)-1].perGroup = true, true
					}
				} else {
					add("subscriptionDataSet.topic", sd.Topic, false, acl.Sub)
				}
			}
		}
	case remoting.LockBatchMQ, remoting.UnlockBatchMQ:
		var body wire.LockBatchBody
		if err := json.Unmarshal(req.Body, &body); err != nil {
			return nil, fmt.Errorf("lock body is not JSON {consumerGroup, clientId, mqSet}: %w", err)
		}
		if len(body.ClientID) > MaxClientIDLength {
			return nil, &message.ValidationError{Field: "clientId", Reason: "too long", Limit: MaxClientIDLength, Value: len(body.ClientID)}
		}
		add("consumerGroup", body.ConsumerGroup, true, acl.Sub)
		for _, mq := range body.MQSet {
			add("mqSet.topic", mq.Topic, false, acl.Sub)
		}
	}
	for _, r := range refs {
		if r.perGroup {
			continue
		}
		limit := message.MaxTopicLength
		if r.group {
			limit = message.MaxGroupLength
		}
		if err := message.ValidateName(r.field, r.name, limit); err != nil {
			return nil, err
		}
	}
	return refs, nil
}

// maxPullBody is the largest body a PULL_MESSAGE may carry (RocketMQ pulls have none).
const maxPullBody = 4096

// bodyLimit returns the body size limit of a request code in bytes (0: checked by the
// handler, as sends are against maxMessageSize).
func (b *Broker) bodyLimit(code remoting.RequestCode) int {
	switch code {
	case remoting.SendMessage, remoting.SendMessageV2, remoting.SendBatchMessage, remoting.SendReplyMessage, remoting.SendReplyMessageV2:
		return 0
	case remoting.PullMessage:
		return maxPullBody
	}
	return b.cfg.MaxRequestBodySize
}

// cutRetry returns the group of a %RETRY%<group> topic. "%RETRY%" alone names no group
// and is not a retry topic here: it is checked as the plain topic it is (the empty group
// would skip the ACL check).
func cutRetry(topic string) (string, bool) {
	if !message.IsRetryTopic(topic) || len(topic) == len(message.RetryGroupTopicPrefix) {
		return "", false
	}
	return topic[len(message.RetryGroupTopicPrefix):], true
}

// beforeRequest runs before every request handler (remoting ServerConfig.Before): it
// validates every topic and group name the request carries (SYSTEM_ERROR naming the
// field and the limit) and, with aclEnable, checks the caller's access (SYSTEM_ERROR with
// the reason, as RocketMQ answers an AclException).
func (b *Broker) beforeRequest(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	code := remoting.RequestCode(req.Code)
	if limit := b.bodyLimit(code); limit > 0 && len(req.Body) > limit {
		b.counters.RefusedLimits.Add(1)
		return errResponse(remoting.SystemError, "request body of %d bytes is too large for request code %d (limit %d bytes)", len(req.Body), req.Code, limit)
	}
	var buf [4]nameRef
	refs, err := appendRequestNames(buf[:0], req)
	if err != nil {
		b.counters.RefusedNames.Add(1)
		var ve *message.ValidationError
		if errors.As(err, &ve) && (code == remoting.SendMessage || code == remoting.SendMessageV2 || code == remoting.SendBatchMessage) {
			return b.sendResponse(remoting.SystemError, err.Error())
		}
		return errResponse(remoting.SystemError, "%v", err)
	}
	v := b.acl
	if v == nil {
		return nil
	}
	res := make([]acl.Resource, 0, len(refs))
	for _, r := range refs {
		switch {
		case r.perm == 0:
		case r.group:
			res = append(res, acl.Group(r.name, r.perm))
		default:
			res = append(res, acl.Topic(r.name, r.perm))
		}
	}
	if err := v.Check(conn.RemoteAddr(), req, adminCodes[code], res); err != nil {
		b.counters.RefusedACL.Add(1)
		b.log.Debug("request refused by acl", "code", req.Code, "remote", conn.RemoteAddr(), "err", err)
		return errResponse(remoting.SystemError, "%v", err)
	}
	return nil
}

// checkStoredRead checks, with aclEnable, that the caller of req may read a stored
// message of topic: SUB on the topic, or on the group of a %RETRY%<group> topic.
// VIEW_MESSAGE_BY_ID (33) and CONSUMER_SEND_MSG_BACK (36) name a commitlog offset, not a
// topic, so the topic is known only once the message is read; without this check an
// account could read any message by its offset, or send it back into its own group's
// retry topic and pull it there (RocketMQ 4.9.8 does not check either). nil: allowed.
func (b *Broker) checkStoredRead(conn *remoting.Conn, req *remoting.RemotingCommand, topic string) *remoting.RemotingCommand {
	return b.checkStoredAccess(conn, req, topic, acl.Sub)
}

// checkStoredAccess checks, with aclEnable, that the caller of req has perm on topic, a
// topic known only from a stored message (for a %RETRY%<group> topic: perm on the
// group). END_TRANSACTION (37) names only a producer group; the half message's real
// topic needs PUB. nil: allowed.
func (b *Broker) checkStoredAccess(conn *remoting.Conn, req *remoting.RemotingCommand, topic string, perm acl.Perm) *remoting.RemotingCommand {
	if b.acl == nil {
		return nil
	}
	res := acl.Topic(topic, perm)
	if g, ok := cutRetry(topic); ok {
		res = acl.Group(g, perm)
	}
	if err := b.acl.Check(conn.RemoteAddr(), req, false, []acl.Resource{res}); err != nil {
		b.counters.RefusedACL.Add(1)
		b.log.Debug("request refused by acl", "code", req.Code, "remote", conn.RemoteAddr(), "topic", topic, "err", err)
		return errResponse(remoting.SystemError, "%v", err)
	}
	return nil
}
