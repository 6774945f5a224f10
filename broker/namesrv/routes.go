package namesrv

import (
	"sort"
	"sync"
	"time"

	"github.com/sluicemq/sluice/internal/wire"
)

// routeTable is the name server's state, modelled on Java RouteInfoManager. All fields
// are guarded by mu (the only lock of the package; KV config lives under it too, so
// there is no lock order to respect). Methods never call out while holding mu.
type routeTable struct {
	mu sync.RWMutex
	// topicQueues: topic → broker name → queue data (from master registrations).
	topicQueues map[string]map[string]*wire.QueueData
	// brokers: broker name → wire.BrokerData (cluster, broker id → addr).
	brokers map[string]*wire.BrokerData
	// clusters: cluster name → set of broker names.
	clusters map[string]map[string]struct{}
	// live: broker addr → liveness record.
	live map[string]*liveBroker
	// filterServers: broker addr → filter server addresses.
	filterServers map[string][]string
	// kv: namespace → key → value (PUT/GET/DELETE_KV_CONFIG).
	kv map[string]map[string]string
}

// liveBroker is one entry of the live-broker table (Java BrokerLiveInfo).
type liveBroker struct {
	lastUpdate   time.Time
	dataVersion  wire.DataVersion
	connID       uint64 // remoting.Conn.ID of the connection it last registered on
	haServerAddr string
	// identity, needed to remove the broker when it expires or its connection closes
	clusterName string
	brokerName  string
	brokerID    int64
}

func newRouteTable() *routeTable {
	return &routeTable{
		topicQueues:   make(map[string]map[string]*wire.QueueData),
		brokers:       make(map[string]*wire.BrokerData),
		clusters:      make(map[string]map[string]struct{}),
		live:          make(map[string]*liveBroker),
		filterServers: make(map[string][]string),
		kv:            make(map[string]map[string]string),
	}
}

// registration is one decoded REGISTER_BROKER request.
type registration struct {
	clusterName, brokerName, brokerAddr, haServerAddr string
	brokerID                                          int64
	body                                              wire.RegisterBrokerBody
	connID                                            uint64
}

// registerResult is what REGISTER_BROKER answers.
type registerResult struct {
	haServerAddr, masterAddr string
	orderTopicConf           map[string]string
	firstRegistration        bool
}

// register applies a broker registration (Java RouteInfoManager.registerBroker).
func (t *routeTable) register(r registration, now time.Time) registerResult {
	t.mu.Lock()
	defer t.mu.Unlock()

	names := t.clusters[r.clusterName]
	if names == nil {
		names = make(map[string]struct{})
		t.clusters[r.clusterName] = names
	}
	names[r.brokerName] = struct{}{}

	bd := t.brokers[r.brokerName]
	first := bd == nil
	if bd == nil {
		bd = &wire.BrokerData{Cluster: r.clusterName, BrokerName: r.brokerName, BrokerAddrs: make(map[int64]string)}
		t.brokers[r.brokerName] = bd
	}
	// One ip:port has one id: a slave promoted to master (or the reverse) drops its old id.
	for id, addr := range bd.BrokerAddrs {
		if addr == r.brokerAddr && id != r.brokerID {
			delete(bd.BrokerAddrs, id)
		}
	}
	if old, ok := bd.BrokerAddrs[r.brokerID]; !ok || old != r.brokerAddr {
		first = true
	}
	bd.BrokerAddrs[r.brokerID] = r.brokerAddr

	version := r.body.TopicConfigSerializeWrapper.DataVersion
	if r.brokerID == wire.MasterID {
		prev := t.live[r.brokerAddr]
		if first || prev == nil || prev.dataVersion != version {
			for name, tc := range r.body.TopicConfigSerializeWrapper.TopicConfigTable {
				if tc == nil {
					continue
				}
				topic := tc.TopicName
				if topic == "" {
					topic = name
				}
				qm := t.topicQueues[topic]
				if qm == nil {
					qm = make(map[string]*wire.QueueData)
					t.topicQueues[topic] = qm
				}
				qm[r.brokerName] = &wire.QueueData{
					BrokerName:     r.brokerName,
					ReadQueueNums:  tc.ReadQueueNums,
					WriteQueueNums: tc.WriteQueueNums,
					Perm:           tc.Perm,
					TopicSysFlag:   tc.TopicSysFlag,
				}
			}
		}
	}

	t.live[r.brokerAddr] = &liveBroker{
		lastUpdate: now, dataVersion: version, connID: r.connID, haServerAddr: r.haServerAddr,
		clusterName: r.clusterName, brokerName: r.brokerName, brokerID: r.brokerID,
	}
	if len(r.body.FilterServerList) > 0 {
		t.filterServers[r.brokerAddr] = append([]string(nil), r.body.FilterServerList...)
	} else {
		delete(t.filterServers, r.brokerAddr)
	}

	res := registerResult{firstRegistration: first}
	if r.brokerID != wire.MasterID {
		if master := bd.BrokerAddrs[wire.MasterID]; master != "" {
			if ml := t.live[master]; ml != nil {
				res.haServerAddr = ml.haServerAddr
				res.masterAddr = master
			}
		}
	}
	if kv := t.kv[wire.NamespaceOrderTopicConfig]; len(kv) > 0 {
		res.orderTopicConf = make(map[string]string, len(kv))
		for k, v := range kv {
			res.orderTopicConf[k] = v
		}
	}
	return res
}

// queryDataVersion implements QUERY_DATA_VERSION (322): it reports whether version
// differs from the stored one and, when it does not and the query came on the
// connection the broker last registered on (connID, 0: none), refreshes the broker's
// last-update time. stored is nil when the broker is not live.
func (t *routeTable) queryDataVersion(brokerAddr string, version wire.DataVersion, connID uint64, now time.Time) (changed bool, stored *wire.DataVersion) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lb := t.live[brokerAddr]
	if lb == nil {
		return true, nil
	}
	v := lb.dataVersion
	if v != version {
		return true, &v
	}
	if connID != 0 && connID == lb.connID {
		lb.lastUpdate = now
	}
	return false, &v
}

// removeBroker removes the broker with the given address and id (Java
// unregisterBroker / onChannelDestroy). When the last address of a broker name goes,
// the broker name leaves its cluster and its queue data leaves every topic (topics
// left without queue data are deleted). It reports whether anything was removed.
func (t *routeTable) removeBroker(clusterName, brokerName, brokerAddr string, brokerID int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.removeBrokerLocked(clusterName, brokerName, brokerAddr, brokerID)
}

func (t *routeTable) removeBrokerLocked(clusterName, brokerName, brokerAddr string, brokerID int64) bool {
	removed := false
	if _, ok := t.live[brokerAddr]; ok {
		delete(t.live, brokerAddr)
		removed = true
	}
	delete(t.filterServers, brokerAddr)
	bd := t.brokers[brokerName]
	if bd == nil {
		return removed
	}
	if addr, ok := bd.BrokerAddrs[brokerID]; ok && addr == brokerAddr {
		delete(bd.BrokerAddrs, brokerID)
		removed = true
	}
	if len(bd.BrokerAddrs) > 0 {
		return removed
	}
	delete(t.brokers, brokerName)
	for _, c := range []string{clusterName, bd.Cluster} {
		if names := t.clusters[c]; names != nil {
			delete(names, brokerName)
			if len(names) == 0 {
				delete(t.clusters, c)
			}
		}
	}
	for topic, qm := range t.topicQueues {
		delete(qm, brokerName)
		if len(qm) == 0 {
			delete(t.topicQueues, topic)
		}
	}
	return true
}

// removedBroker identifies a broker dropped by expiry or connection close.
type removedBroker struct {
	addr, name, cluster string
	id                  int64
}

// removeWhere removes every live broker for which match returns true.
func (t *routeTable) removeWhere(match func(addr string, lb *liveBroker) bool) []removedBroker {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []removedBroker
	for addr, lb := range t.live {
		if !match(addr, lb) {
			continue
		}
		t.removeBrokerLocked(lb.clusterName, lb.brokerName, addr, lb.brokerID)
		out = append(out, removedBroker{addr: addr, name: lb.brokerName, cluster: lb.clusterName, id: lb.brokerID})
	}
	return out
}

// route builds the route of topic (Java pickupTopicRouteData); ok is false unless the
// topic has queue data and at least one of its broker names has broker data.
func (t *routeTable) route(topic string) (*wire.TopicRouteData, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	qm := t.topicQueues[topic]
	if len(qm) == 0 {
		return nil, false
	}
	r := &wire.TopicRouteData{
		QueueDatas:        make([]wire.QueueData, 0, len(qm)),
		BrokerDatas:       make([]wire.BrokerData, 0, len(qm)),
		FilterServerTable: map[string][]string{},
	}
	for _, name := range sortedKeys(qm) {
		r.QueueDatas = append(r.QueueDatas, *qm[name])
		bd := t.brokers[name]
		if bd == nil {
			continue
		}
		c := bd.Clone()
		r.BrokerDatas = append(r.BrokerDatas, c)
		for _, addr := range c.BrokerAddrs {
			if fs := t.filterServers[addr]; len(fs) > 0 {
				r.FilterServerTable[addr] = append([]string(nil), fs...)
			}
		}
	}
	if len(r.BrokerDatas) == 0 {
		return nil, false
	}
	r.OrderTopicConf = t.kv[wire.NamespaceOrderTopicConfig][topic]
	return r, true
}

// clusterInfo returns a deep copy of the broker and cluster tables.
func (t *routeTable) clusterInfo() *wire.ClusterInfo {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ci := &wire.ClusterInfo{
		BrokerAddrTable:  make(map[string]*wire.BrokerData, len(t.brokers)),
		ClusterAddrTable: make(map[string][]string, len(t.clusters)),
	}
	for name, bd := range t.brokers {
		c := bd.Clone()
		ci.BrokerAddrTable[name] = &c
	}
	for c, names := range t.clusters {
		ci.ClusterAddrTable[c] = sortedKeys(names)
	}
	return ci
}

// topics returns every topic with queue data, sorted.
func (t *routeTable) topics() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return sortedKeys(t.topicQueues)
}

// deleteTopic removes the topic's queue data; with a cluster name only the queue
// data of that cluster's broker names. It reports whether the topic existed.
func (t *routeTable) deleteTopic(topic, clusterName string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	qm, ok := t.topicQueues[topic]
	if !ok {
		return false
	}
	if clusterName == "" {
		delete(t.topicQueues, topic)
		return true
	}
	for name := range t.clusters[clusterName] {
		delete(qm, name)
	}
	if len(qm) == 0 {
		delete(t.topicQueues, topic)
	}
	return true
}

func (t *routeTable) putKV(ns, key, value string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.kv[ns]
	if m == nil {
		m = make(map[string]string)
		t.kv[ns] = m
	}
	m[key] = value
}

func (t *routeTable) getKV(ns, key string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	v, ok := t.kv[ns][key]
	return v, ok
}

func (t *routeTable) deleteKV(ns, key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.kv[ns]
	if _, ok := m[key]; !ok {
		return false
	}
	delete(m, key)
	if len(m) == 0 {
		delete(t.kv, ns)
	}
	return true
}

// kvSnapshot returns a deep copy of the KV config (for persisting it).
func (t *routeTable) kvSnapshot() map[string]map[string]string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]map[string]string, len(t.kv))
	for ns, m := range t.kv {
		c := make(map[string]string, len(m))
		for k, v := range m {
			c[k] = v
		}
		out[ns] = c
	}
	return out
}

// liveBrokerAddrs returns the addresses of the live brokers, sorted (for tests and logs).
func (t *routeTable) liveBrokerAddrs() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]string, 0, len(t.live))
	for a := range t.live {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}
