package broker

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// subscription is a compiled subscription the pull path filters with. It is immutable
// once published in consumerGroup.subs, so pulls may use it without the lock.
type subscription struct {
	data   wire.SubscriptionData
	filter store.Filter // a *filter.TagFilter or a *filter.SQLFilter
}

// clientChannel is one client connection of a group.
type clientChannel struct {
	clientID   string
	conn       *remoting.Conn
	lastUpdate time.Time
	subs       map[string]wire.SubscriptionData // this client's own subscriptions by topic
}

// consumerGroup is the broker's view of one consumer group.
type consumerGroup struct {
	name         string
	messageModel string
	channels     map[uint64]*clientChannel // by connection id
	subs         map[string]*subscription  // by topic; the newest heartbeat wins, as in Java

	// consumeType and consumeFromWhere are from the newest heartbeat (for admin tools).
	consumeType, consumeFromWhere string
}

// clientManager tracks producer and consumer clients by connection (Java ConsumerManager
// and ProducerManager). A client is dropped when its connection closes or its last
// heartbeat is older than the expiry; the remaining consumers of its group are then told
// to rebalance with NOTIFY_CONSUMER_IDS_CHANGED (RocketMQ request code 40).
type clientManager struct {
	notifyEnabled bool
	logf          func(msg string, args ...any)
	compile       func(wire.SubscriptionData) store.Filter // subscriptions reaching heartbeat are valid

	mu        sync.Mutex
	consumers map[string]*consumerGroup
	producers map[string]map[uint64]*clientChannel // group -> conn id -> channel
	// sendBackLimits: group -> the maxReconsumeTimes its clients last sent back with.
	sendBackLimits map[string]int32
}

func newClientManager(notify bool, logf func(string, ...any), compile func(wire.SubscriptionData) store.Filter) *clientManager {
	return &clientManager{notifyEnabled: notify, logf: logf, compile: compile, consumers: map[string]*consumerGroup{},
		producers: map[string]map[uint64]*clientChannel{}}
}

// heartbeat registers the client's groups on conn. It returns the consumer groups whose
// membership or subscriptions changed (to be notified).
func (m *clientManager) heartbeat(conn *remoting.Conn, hb *wire.HeartbeatData, now time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range hb.ProducerDataSet {
		g := m.producers[p.GroupName]
		if g == nil {
			g = map[uint64]*clientChannel{}
			m.producers[p.GroupName] = g
		}
		g[conn.ID()] = &clientChannel{clientID: hb.ClientID, conn: conn, lastUpdate: now}
	}
	var changed []string
	for _, cd := range hb.ConsumerDataSet {
		g := m.consumers[cd.GroupName]
		if g == nil {
			g = &consumerGroup{name: cd.GroupName, channels: map[uint64]*clientChannel{}, subs: map[string]*subscription{}}
			m.consumers[cd.GroupName] = g
		}
		g.messageModel = cd.MessageModel
		g.consumeType, g.consumeFromWhere = cd.ConsumeType, cd.ConsumeFromWhere
		ch, known := g.channels[conn.ID()]
		if !known || ch.clientID != hb.ClientID {
			ch = &clientChannel{clientID: hb.ClientID, conn: conn}
			g.channels[conn.ID()] = ch
		}
		ch.lastUpdate = now
		subsChanged := !known
		mine := make(map[string]wire.SubscriptionData, len(cd.SubscriptionDataSet))
		for _, sd := range cd.SubscriptionDataSet {
			mine[sd.Topic] = sd
			cur, ok := g.subs[sd.Topic]
			if ok && cur.data.SubString == sd.SubString && cur.data.ExpressionType == sd.ExpressionType {
				if sd.SubVersion > cur.data.SubVersion {
					// Replace, never mutate: pulls read subscriptions without the lock.
					g.subs[sd.Topic] = &subscription{data: sd, filter: cur.filter}
				}
				continue
			}
			if ok && sd.SubVersion < cur.data.SubVersion {
				continue // an older view from another client; keep the newer one
			}
			if !ok {
				subsChanged = true
			}
			g.subs[sd.Topic] = &subscription{data: sd, filter: m.compile(sd)}
		}
		ch.subs = mine
		if subsChanged {
			changed = append(changed, g.name)
		}
	}
	return changed
}

// subscription returns the group's subscription of topic, or nil.
func (m *clientManager) subscription(group, topic string) *subscription {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.consumers[group]; g != nil {
		return g.subs[topic]
	}
	return nil
}

// consumerIDs returns the sorted client ids of a group's live consumers.
func (m *clientManager) consumerIDs(group string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.consumers[group]
	if g == nil {
		return nil
	}
	seen := map[string]bool{}
	var ids []string
	for _, ch := range g.channels {
		if !seen[ch.clientID] {
			seen[ch.clientID] = true
			ids = append(ids, ch.clientID)
		}
	}
	sort.Strings(ids)
	return ids
}

// unregister removes the client's groups on conn (UNREGISTER_CLIENT, code 35) and returns
// the consumer groups that lost a member.
func (m *clientManager) unregister(conn *remoting.Conn, clientID, producerGroup, consumerGroup string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if producerGroup != "" {
		delete(m.producers[producerGroup], conn.ID())
	}
	if g := m.consumers[consumerGroup]; g != nil {
		if ch, ok := g.channels[conn.ID()]; ok && (clientID == "" || ch.clientID == clientID) {
			delete(g.channels, conn.ID())
			m.pruneLocked(g)
			return []string{consumerGroup}
		}
	}
	return nil
}

// member names one client of a consumer group.
type member struct{ group, clientID string }

// removeConn drops everything registered on conn and returns the consumer groups that
// lost a member, and the members it removed.
func (m *clientManager) removeConn(connID uint64) ([]string, []member) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.producers {
		delete(g, connID)
	}
	var changed []string
	var gone []member
	for _, g := range m.consumers {
		if ch, ok := g.channels[connID]; ok {
			delete(g.channels, connID)
			changed = append(changed, g.name)
			gone = append(gone, member{g.name, ch.clientID})
			m.pruneLocked(g)
		}
	}
	return changed, gone
}

// pruneLocked forgets a group with no members left.
func (m *clientManager) pruneLocked(g *consumerGroup) {
	if len(g.channels) == 0 {
		delete(m.consumers, g.name)
	}
}

// expire drops clients whose last heartbeat is older than maxAge, closes their
// connections, and returns the consumer groups that lost a member.
func (m *clientManager) expire(now time.Time, maxAge time.Duration) []string {
	var stale []*remoting.Conn
	m.mu.Lock()
	var changed []string
	for _, g := range m.consumers {
		lost := false
		for id, ch := range g.channels {
			if now.Sub(ch.lastUpdate) > maxAge {
				delete(g.channels, id)
				stale = append(stale, ch.conn)
				lost = true
			}
		}
		if lost {
			changed = append(changed, g.name)
			m.pruneLocked(g)
		}
	}
	for _, g := range m.producers {
		for id, ch := range g {
			if now.Sub(ch.lastUpdate) > maxAge {
				delete(g, id)
				stale = append(stale, ch.conn)
			}
		}
	}
	m.mu.Unlock()
	for _, c := range stale {
		m.logf("client heartbeat expired; closing its connection", "remote", c.RemoteAddr())
		_ = c.Close()
	}
	return changed
}

// notify sends NOTIFY_CONSUMER_IDS_CHANGED (RocketMQ request code 40, one-way, ext
// consumerGroup) to every connection of each group, so its consumers rebalance.
func (m *clientManager) notify(ctx context.Context, groups []string) {
	if !m.notifyEnabled || len(groups) == 0 {
		return
	}
	type target struct {
		group string
		conn  *remoting.Conn
	}
	var targets []target
	m.mu.Lock()
	for _, name := range groups {
		if g := m.consumers[name]; g != nil {
			for _, ch := range g.channels {
				targets = append(targets, target{name, ch.conn})
			}
		}
	}
	m.mu.Unlock()
	for _, t := range targets {
		req := remoting.NewRequest(remoting.NotifyConsumerIDsChanged, map[string]string{"consumerGroup": t.group}, nil)
		if err := t.conn.InvokeOneway(ctx, req); err != nil {
			m.logf("notify consumer ids changed failed", "group", t.group, "remote", t.conn.RemoteAddr(), "err", err)
		}
	}
}

// producerConn returns a live connection of a producer group, or nil (used for
// transaction check-back).
func (m *clientManager) producerConn(group string) *remoting.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ch := range m.producers[group] {
		return ch.conn
	}
	return nil
}

// noteSendBackLimit records the maxReconsumeTimes a client of group sent with
// CONSUMER_SEND_MSG_BACK (what decides when its messages go to the DLQ).
func (m *clientManager) noteSendBackLimit(group string, limit int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sendBackLimits == nil {
		m.sendBackLimits = map[string]int32{}
	}
	m.sendBackLimits[group] = limit
}

// groupClients is what the broker knows of a group's online clients.
type groupClients struct {
	clients                                     int
	messageModel, consumeType, consumeFromWhere string
	lastHeartbeat                               int64
	sendBackLimit                               int32 // -1: none sent
}

// summaries returns, per consumer group known to the client manager, its online
// clients and recorded send-back limit.
func (m *clientManager) summaries() map[string]groupClients {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]groupClients{}
	for name, g := range m.consumers {
		ids := map[string]bool{}
		gc := groupClients{messageModel: g.messageModel, consumeType: g.consumeType, consumeFromWhere: g.consumeFromWhere, sendBackLimit: -1}
		for _, ch := range g.channels {
			ids[ch.clientID] = true
			gc.lastHeartbeat = max(gc.lastHeartbeat, ch.lastUpdate.UnixMilli())
		}
		gc.clients = len(ids)
		if gc.clients == 0 {
			gc.messageModel, gc.consumeType, gc.consumeFromWhere = "", "", ""
		}
		out[name] = gc
	}
	for name, l := range m.sendBackLimits {
		gc, ok := out[name]
		if !ok {
			gc = groupClients{}
		}
		gc.sendBackLimit = l
		out[name] = gc
	}
	return out
}

// online reports how many client connections of group are registered.
func (m *clientManager) online(group string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.consumers[group]; g != nil {
		return len(g.channels)
	}
	return 0
}
