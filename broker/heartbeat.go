package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/internal/addrkey"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Client membership requests: HEART_BEAT, UNREGISTER_CLIENT, CHECK_CLIENT_CONFIG and
// GET_CONSUMER_LIST_BY_GROUP (the table of clients they keep is clients.go).

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
			b.logRefusal(conn, "consumer group refused in heartbeat", "group", fmt.Sprintf("%.128q", cd.GroupName), "groupBytes", len(cd.GroupName),
				"client", fmt.Sprintf("%.128q", hb.ClientID), "reason", fmt.Sprintf("%.300s", resp.Remark))
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
				b.logRefusal(conn, "subscription refused in heartbeat", "group", cd.GroupName, "topic", sd.Topic,
					"client", fmt.Sprintf("%.128q", hb.ClientID), "reason", fmt.Sprintf("%.300s", resp.Remark))
				if refused == nil {
					refused = resp
				}
				continue
			}
			kept = append(kept, sd)
		}
		cd.SubscriptionDataSet = kept
	}
	changed, err := b.clients.heartbeat(conn, hb, req.Language, req.Version, time.Now())
	if err != nil {
		b.counters.RefusedLimits.Add(1)
		b.logRefusal(conn, "heartbeat group refused: client limit", "client", fmt.Sprintf("%.128q", hb.ClientID), "err", err)
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
	return okResponse()
}

// refusalLogInterval is how often a refused heartbeat from one remote address (an IPv4
// address or an IPv6 /64) is logged at most: the first refusal is logged at warn, and
// the next ones within the interval are only counted; the next line after it carries
// "suppressed", how many were not logged since the previous one. A client repeating a
// refused heartbeat thus writes one line a minute, not one per attempt.
const refusalLogInterval = time.Minute

// refusalLogKeys is how many remote addresses logRefusal keeps; the addresses beyond
// share one entry (lograte.New), so at most refusalLogKeys+1 lines are written per
// interval.
const refusalLogKeys = 1024

// logRefusal logs a refused heartbeat at warn with the remote address and args, unless
// one from the same address was logged within refusalLogInterval (refusalLog).
func (b *Broker) logRefusal(conn *remoting.Conn, msg string, args ...any) {
	ok, suppressed := b.refusalLog.Allow(addrkey.Of(conn.RemoteAddr()), time.Now())
	if !ok {
		return
	}
	b.log.Warn(msg, append(args, "remote", conn.RemoteAddr(), "suppressed", suppressed)...)
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
	return okResponse()
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
	return okResponse()
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
	return jsonResponse(wire.ConsumerIDList{ConsumerIDList: ids})
}
