package broker

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/internal/addrkey"
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
	// language and version are the header fields of its last HEART_BEAT (LanguageCode
	// and the MQVersion ordinal).
	language remoting.LanguageCode
	version  int16
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
	limits        clientLimits

	mu        sync.Mutex
	consumers map[string]*consumerGroup
	producers map[string]map[uint64]*clientChannel // group -> conn id -> channel
	perConn   map[uint64]int                       // client entries (producer and consumer channels) by connection id
	connAddr  map[uint64]string                    // addrkey.Of of each connection in perConn
	perAddr   map[string]*addrUse                  // what each remote address (IPv4, IPv6 /64) made the broker keep
	entries   int                                  // client entries kept in total
	// refusedShare counts heartbeats refused (in part) for an address's share.
	refusedShare int64
	subs         int // subscriptions kept in total: every channel's own plus every group's
	// sendBackLimits: group -> the maxReconsumeTimes its clients last sent back with.
	sendBackLimits map[string]int32
	// front: the clients of front ends (frontclients.go), counted in entries, subs and
	// perAddr like the remoting ones.
	front map[frontKey]*frontClient
}

// clientLimits bound what heartbeats can make the broker keep (each <= 0: unlimited).
type clientLimits struct {
	subsPerGroup   int // maxSubscriptionsPerGroup: topics one consumer group (or one client of it) subscribes
	entriesPerConn int // maxClientEntriesPerConnection: producer and consumer groups one connection registers
	entries        int // maxClientEntries: client entries in total
	subs           int // maxSubscriptions: subscriptions kept in total
	entriesPerAddr int // maxClientEntriesPerAddress: client entries of one remote address
	subsPerAddr    int // maxSubscriptionsPerAddress: subscriptions one address's clients carry
}

// addrUse is what one remote address made the broker keep: client entries, and the
// subscriptions its channels carry (their own; each group's copy is not charged, so an
// address makes the broker keep at most twice subs).
type addrUse struct{ entries, subs int }

// ClientLimitError is the refusal of a heartbeat (or the part of it) that would make the
// broker keep more than a configured limit; Key is the broker.conf key of the limit.
type ClientLimitError struct {
	Key   string // maxSubscriptionsPerGroup, maxClientEntriesPerConnection, maxClientEntries, maxSubscriptions, maxClientEntriesPerAddress or maxSubscriptionsPerAddress
	Group string // the producer or consumer group refused
	Value int    // what keeping it would have reached
	Limit int
}

func (e *ClientLimitError) Error() string {
	return fmt.Sprintf("heartbeat for group %.128q refused: %s would be %d, limit %d", e.Group, e.Key, e.Value, e.Limit)
}

func newClientManager(notify bool, logf func(string, ...any), compile func(wire.SubscriptionData) store.Filter, limits clientLimits) *clientManager {
	return &clientManager{notifyEnabled: notify, logf: logf, compile: compile, limits: limits, consumers: map[string]*consumerGroup{},
		producers: map[string]map[uint64]*clientChannel{}, perConn: map[uint64]int{}, connAddr: map[uint64]string{}, perAddr: map[string]*addrUse{}}
}

// over reports whether value exceeds limit (<= 0: unlimited).
func over(value, limit int) bool { return limit > 0 && value > limit }

// clientCounts are the broker's own accounting of what clients made it keep.
type clientCounts struct {
	entries, subs int
	refusedShare  int64 // heartbeats refused (in part) for maxClientEntriesPerAddress or maxSubscriptionsPerAddress
}

// counts returns the client entries and subscriptions kept now.
func (m *clientManager) counts() clientCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return clientCounts{m.entries, m.subs, m.refusedShare}
}

// addEntryLocked checks that conn may register one more client entry for group and
// counts it.
func (m *clientManager) addEntryLocked(conn *remoting.Conn, group string) error {
	if err := m.entryRoomLocked(conn, group); err != nil {
		return err
	}
	id := conn.ID()
	if m.perConn[id] == 0 {
		m.connAddr[id] = addrkey.Of(conn.RemoteAddr())
	}
	m.perConn[id]++
	m.addrUseLocked(m.connAddr[id]).entries++
	m.entries++
	return nil
}

// addrUseLocked returns the use of address key, created when missing.
func (m *clientManager) addrUseLocked(key string) *addrUse {
	u := m.perAddr[key]
	if u == nil {
		u = &addrUse{}
		m.perAddr[key] = u
	}
	return u
}

// addrOfLocked returns conn's address key and what that address keeps now (nil: nothing).
func (m *clientManager) addrOfLocked(conn *remoting.Conn) (string, *addrUse) {
	key, ok := m.connAddr[conn.ID()]
	if !ok {
		key = addrkey.Of(conn.RemoteAddr())
	}
	return key, m.perAddr[key]
}

// entryRoomLocked checks that conn may register one more client entry for group: within
// the connection's limit, the total and its address's share.
func (m *clientManager) entryRoomLocked(conn *remoting.Conn, group string) error {
	if n := m.perConn[conn.ID()] + 1; over(n, m.limits.entriesPerConn) {
		return &ClientLimitError{Key: "maxClientEntriesPerConnection", Group: group, Value: n, Limit: m.limits.entriesPerConn}
	}
	if over(m.entries+1, m.limits.entries) {
		return &ClientLimitError{Key: "maxClientEntries", Group: group, Value: m.entries + 1, Limit: m.limits.entries}
	}
	n := 1
	if _, u := m.addrOfLocked(conn); u != nil {
		n += u.entries
	}
	if over(n, m.limits.entriesPerAddr) {
		return &ClientLimitError{Key: "maxClientEntriesPerAddress", Group: group, Value: n, Limit: m.limits.entriesPerAddr}
	}
	return nil
}

// dropEntryLocked forgets one client entry of conn.
func (m *clientManager) dropEntryLocked(connID uint64) {
	m.entries--
	key := m.connAddr[connID]
	if u := m.perAddr[key]; u != nil {
		if u.entries--; u.entries <= 0 && u.subs <= 0 {
			delete(m.perAddr, key)
		}
	}
	if m.perConn[connID]--; m.perConn[connID] <= 0 {
		delete(m.perConn, connID)
		delete(m.connAddr, connID)
	}
}

// chargeSubsLocked adds n (may be negative) to the subscriptions conn's address carries.
func (m *clientManager) chargeSubsLocked(connID uint64, n int) {
	key := m.connAddr[connID]
	u := m.addrUseLocked(key)
	if u.subs += n; u.entries <= 0 && u.subs <= 0 {
		delete(m.perAddr, key)
	}
}

// heldByOther reports whether a member of g other than connID subscribes topic.
func (g *consumerGroup) heldByOther(topic string, connID uint64) bool {
	for id, ch := range g.channels {
		if _, ok := ch.subs[topic]; ok && id != connID {
			return true
		}
	}
	return false
}

// forgetUnheldLocked drops the group's subscription of topic when none of its members
// subscribes it any more.
func (m *clientManager) forgetUnheldLocked(g *consumerGroup, topic string) {
	for _, ch := range g.channels {
		if _, ok := ch.subs[topic]; ok {
			return
		}
	}
	if _, ok := g.subs[topic]; ok {
		delete(g.subs, topic)
		m.subs--
	}
}

// dropConsumerLocked removes conn's channel from g, with the subscriptions only it held,
// and forgets g when no member is left.
func (m *clientManager) dropConsumerLocked(g *consumerGroup, connID uint64) {
	ch, ok := g.channels[connID]
	if !ok {
		return
	}
	delete(g.channels, connID)
	m.chargeSubsLocked(connID, -len(ch.subs))
	m.dropEntryLocked(connID)
	m.subs -= len(ch.subs)
	for topic := range ch.subs {
		m.forgetUnheldLocked(g, topic)
	}
	if len(g.channels) == 0 {
		m.subs -= len(g.subs)
		delete(m.consumers, g.name)
	}
}

// heartbeat registers the client's groups on conn (lang and version are the request's
// header fields). It returns the consumer groups whose
// membership or subscriptions changed (to be notified), and the first refusal
// (*ClientLimitError) of a group that would have taken the broker over a client limit;
// that group is left as it was, the others are registered.
func (m *clientManager) heartbeat(conn *remoting.Conn, hb *wire.HeartbeatData, lang remoting.LanguageCode, version int16, now time.Time) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var refused error
	shareRefused := false
	refuse := func(err error) {
		if refused == nil {
			refused = err
		}
		if e, ok := err.(*ClientLimitError); ok && (e.Key == "maxClientEntriesPerAddress" || e.Key == "maxSubscriptionsPerAddress") {
			shareRefused = true
		}
	}
	defer func() {
		if shareRefused {
			m.refusedShare++
		}
	}()
	for _, p := range hb.ProducerDataSet {
		g := m.producers[p.GroupName]
		if ch, ok := g[conn.ID()]; ok {
			ch.clientID, ch.lastUpdate, ch.language, ch.version = hb.ClientID, now, lang, version
			continue
		}
		if err := m.addEntryLocked(conn, p.GroupName); err != nil {
			refuse(err)
			continue
		}
		if g == nil {
			g = map[uint64]*clientChannel{}
			m.producers[p.GroupName] = g
		}
		g[conn.ID()] = &clientChannel{clientID: hb.ClientID, conn: conn, lastUpdate: now, language: lang, version: version}
	}
	var changed []string
	for _, cd := range hb.ConsumerDataSet {
		hint := len(cd.SubscriptionDataSet)
		if m.limits.subsPerGroup > 0 {
			hint = min(hint, m.limits.subsPerGroup+1)
		}
		mine := make(map[string]wire.SubscriptionData, hint)
		for _, sd := range cd.SubscriptionDataSet {
			mine[sd.Topic] = sd
			if over(len(mine), m.limits.subsPerGroup) {
				break
			}
		}
		if over(len(mine), m.limits.subsPerGroup) {
			refuse(&ClientLimitError{Key: "maxSubscriptionsPerGroup", Group: cd.GroupName, Value: len(cd.SubscriptionDataSet), Limit: m.limits.subsPerGroup})
			continue
		}
		g := m.consumers[cd.GroupName]
		var ch *clientChannel
		if g != nil {
			ch = g.channels[conn.ID()]
		}
		if ch == nil {
			if err := m.entryRoomLocked(conn, cd.GroupName); err != nil {
				refuse(err)
				continue
			}
		}
		// What keeping this client's subscriptions adds: its own, and the group's new topics.
		groupSubs, added := 0, 0
		if g != nil {
			groupSubs = len(g.subs)
		}
		for topic := range mine {
			if g == nil || g.subs[topic] == nil {
				added++
			}
		}
		dropped := 0 // topics this client leaves that no other member subscribes
		if ch != nil {
			for topic := range ch.subs {
				if _, still := mine[topic]; !still && !g.heldByOther(topic, conn.ID()) {
					dropped++
				}
			}
		}
		if n := groupSubs + added - dropped; over(n, m.limits.subsPerGroup) {
			refuse(&ClientLimitError{Key: "maxSubscriptionsPerGroup", Group: cd.GroupName, Value: n, Limit: m.limits.subsPerGroup})
			continue
		}
		delta := len(mine) + added - dropped
		if ch != nil {
			delta -= len(ch.subs)
		}
		if over(m.subs+delta, m.limits.subs) {
			refuse(&ClientLimitError{Key: "maxSubscriptions", Group: cd.GroupName, Value: m.subs + delta, Limit: m.limits.subs})
			continue
		}
		own := len(mine) // this client's own subscriptions, charged to its address
		if ch != nil {
			own -= len(ch.subs)
		}
		if _, u := m.addrOfLocked(conn); own > 0 {
			n := own
			if u != nil {
				n += u.subs
			}
			if over(n, m.limits.subsPerAddr) {
				refuse(&ClientLimitError{Key: "maxSubscriptionsPerAddress", Group: cd.GroupName, Value: n, Limit: m.limits.subsPerAddr})
				continue
			}
		}
		if ch == nil {
			if err := m.addEntryLocked(conn, cd.GroupName); err != nil {
				refuse(err)
				continue
			}
		}
		if g == nil {
			g = &consumerGroup{name: cd.GroupName, channels: map[uint64]*clientChannel{}, subs: map[string]*subscription{}}
			m.consumers[cd.GroupName] = g
		}
		g.messageModel = cd.MessageModel
		g.consumeType, g.consumeFromWhere = cd.ConsumeType, cd.ConsumeFromWhere
		known := ch != nil
		if !known || ch.clientID != hb.ClientID {
			old := ch
			ch = &clientChannel{clientID: hb.ClientID, conn: conn}
			if old != nil {
				ch.subs = old.subs
			}
			g.channels[conn.ID()] = ch
		}
		ch.lastUpdate, ch.language, ch.version = now, lang, version
		subsChanged := !known
		for _, sd := range mine {
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
				m.subs++
			}
			g.subs[sd.Topic] = &subscription{data: sd, filter: m.compile(sd)}
		}
		m.subs += len(mine) - len(ch.subs)
		m.chargeSubsLocked(conn.ID(), len(mine)-len(ch.subs))
		old := ch.subs
		ch.subs = mine
		for topic := range old {
			if _, still := mine[topic]; !still {
				m.forgetUnheldLocked(g, topic)
			}
		}
		if subsChanged {
			changed = append(changed, g.name)
		}
	}
	return changed, refused
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
		m.dropProducerLocked(producerGroup, conn.ID())
	}
	if g := m.consumers[consumerGroup]; g != nil {
		if ch, ok := g.channels[conn.ID()]; ok && (clientID == "" || ch.clientID == clientID) {
			m.dropConsumerLocked(g, conn.ID())
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
	var changed []string
	var gone []member
	if m.perConn[connID] == 0 {
		return nil, nil // nothing registered on this connection
	}
	for name := range m.producers {
		m.dropProducerLocked(name, connID)
	}
	for _, g := range m.consumers {
		if ch, ok := g.channels[connID]; ok {
			changed = append(changed, g.name)
			gone = append(gone, member{g.name, ch.clientID})
			m.dropConsumerLocked(g, connID)
		}
	}
	return changed, gone
}

// dropProducerLocked removes conn's channel of a producer group, and the group when it
// has no channel left.
func (m *clientManager) dropProducerLocked(group string, connID uint64) {
	g := m.producers[group]
	if _, ok := g[connID]; !ok {
		return
	}
	delete(g, connID)
	m.dropEntryLocked(connID)
	if len(g) == 0 {
		delete(m.producers, group)
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
				m.dropConsumerLocked(g, id)
				stale = append(stale, ch.conn)
				lost = true
			}
		}
		if lost {
			changed = append(changed, g.name)
		}
	}
	for name, g := range m.producers {
		for id, ch := range g {
			if now.Sub(ch.lastUpdate) > maxAge {
				m.dropProducerLocked(name, id)
				stale = append(stale, ch.conn)
			}
		}
	}
	m.expireFrontLocked(now, maxAge)
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

// forgetSendBackLimit drops group's recorded send-back limit (the group was deleted)
// and reports whether there was one.
func (m *clientManager) forgetSendBackLimit(group string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, had := m.sendBackLimits[group]
	delete(m.sendBackLimits, group)
	return had
}

// groupClients is what the broker knows of a group's online clients.
type groupClients struct {
	clients                                     int
	messageModel, consumeType, consumeFromWhere string
	lastHeartbeat                               int64
	sendBackLimit                               int32    // -1: none sent
	protocols                                   []string // of the clients online, sorted
}

// summaries returns, per consumer group known to the client manager, its online
// clients (remoting and front-end ones) and recorded send-back limit. The consume mode
// is the remoting clients' when the group has some, else the newest front-end client's
// (CLUSTERING, its consume type, CONSUME_FROM_LAST_OFFSET, as the Apache RocketMQ 5
// proxy registers v5 consumers).
func (m *clientManager) summaries() map[string]groupClients {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]groupClients{}
	ids := map[string]map[string]bool{} // group -> client ids online
	for name, g := range m.consumers {
		gc := groupClients{messageModel: g.messageModel, consumeType: g.consumeType, consumeFromWhere: g.consumeFromWhere, sendBackLimit: -1}
		set := map[string]bool{}
		for _, ch := range g.channels {
			set[ch.clientID] = true
			gc.lastHeartbeat = max(gc.lastHeartbeat, ch.lastUpdate.UnixMilli())
		}
		if len(set) == 0 {
			gc.messageModel, gc.consumeType, gc.consumeFromWhere = "", "", ""
		} else {
			gc.protocols = []string{ProtocolRemoting}
		}
		ids[name] = set
		out[name] = gc
	}
	var newest map[string]time.Time // group -> the newest front-end heartbeat seen
	for k, c := range m.front {
		if k.group == "" {
			continue // a producer
		}
		gc, ok := out[k.group]
		if !ok {
			gc = groupClients{sendBackLimit: -1}
			ids[k.group] = map[string]bool{}
		}
		ids[k.group][k.protocol+"\x00"+k.clientID] = true
		if !slices.Contains(gc.protocols, k.protocol) {
			gc.protocols = append(gc.protocols, k.protocol)
			sort.Strings(gc.protocols)
		}
		gc.lastHeartbeat = max(gc.lastHeartbeat, c.lastUpdate.UnixMilli())
		if !slices.Contains(gc.protocols, ProtocolRemoting) {
			if newest == nil {
				newest = map[string]time.Time{}
			}
			if c.lastUpdate.After(newest[k.group]) || gc.consumeType == "" {
				newest[k.group] = c.lastUpdate
				gc.messageModel, gc.consumeType, gc.consumeFromWhere = wire.MessageModelClustering, c.ConsumeType, "CONSUME_FROM_LAST_OFFSET"
			}
		}
		out[k.group] = gc
	}
	for name, set := range ids {
		gc := out[name]
		gc.clients = len(set)
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

// online reports how many client connections of group are registered (remoting
// connections and front-end clients).
func (m *clientManager) online(group string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := len(m.frontOfGroupLocked(group))
	if g := m.consumers[group]; g != nil {
		n += len(g.channels)
	}
	return n
}
