package broker

import (
	"context"
	"sort"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// handleGroupSubscriptions serves Sluice's GET_GROUP_SUBSCRIPTIONS (request code 7002,
// wire.GroupSubscriptions): the subscriptions each live client of ext
// consumerGroup sent in its last HEART_BEAT, as wire.GroupSubscriptionsBody JSON.
// Admin tools and consumers compare them (wire.Analyze) to find clients of one
// group that subscribe to different topics or tags — a group whose members disagree
// loses messages, because the broker filters a topic's pulls with one subscription per
// group. An unknown group gives an empty client list.
func (b *Broker) handleGroupSubscriptions(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	group, err := req.ExtString("consumerGroup", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	return jsonResponse(wire.GroupSubscriptionsBody{Group: group, Clients: b.clients.groupSubscriptions(group)})
}

// groupSubscriptions returns each client's own subscriptions from its last heartbeat,
// one entry per client id and protocol (of remoting clients, the most recently updated
// connection wins), with who the client is, sorted by client id then protocol.
func (m *clientManager) groupSubscriptions(group string) []wire.ClientSubscriptions {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []wire.ClientSubscriptions{}
	if g := m.consumers[group]; g != nil {
		latest := map[string]*clientChannel{}
		for _, ch := range g.channels {
			if cur := latest[ch.clientID]; cur == nil || ch.lastUpdate.After(cur.lastUpdate) {
				latest[ch.clientID] = ch
			}
		}
		for id, ch := range latest {
			cs := wire.ClientSubscriptions{ClientID: id, MessageModel: g.messageModel,
				LastHeartbeat: ch.lastUpdate.UnixMilli(), Subscriptions: []wire.Subscription{},
				Protocol: ProtocolRemoting, Language: ch.language.String(), Version: remoting.VersionName(ch.version),
				Addr: ch.conn.RemoteAddr(), ConsumeType: g.consumeType}
			for _, sd := range ch.subs {
				s := wire.Subscription{Topic: sd.Topic, SubString: sd.SubString, ExpressionType: sd.ExpressionType}
				if s.ExpressionType == "" || s.ExpressionType == "TAG" {
					s.Tags = message.ParseTagExpression(sd.SubString)
					sort.Strings(s.Tags)
				}
				cs.Subscriptions = append(cs.Subscriptions, s)
			}
			sort.Slice(cs.Subscriptions, func(i, j int) bool { return cs.Subscriptions[i].Topic < cs.Subscriptions[j].Topic })
			out = append(out, cs)
		}
	}
	for _, c := range m.frontOfGroupLocked(group) {
		out = append(out, wire.ClientSubscriptions{ClientID: c.ClientID, MessageModel: wire.MessageModelClustering,
			LastHeartbeat: c.lastUpdate.UnixMilli(), Subscriptions: append([]wire.Subscription{}, c.Subscriptions...),
			Protocol: c.Protocol, Language: c.Language, Version: c.Version, Addr: c.Addr, ConsumeType: c.ConsumeType})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ClientID != out[j].ClientID {
			return out[i].ClientID < out[j].ClientID
		}
		return out[i].Protocol < out[j].Protocol
	})
	return out
}
