package namesrv

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Perm bits of a topic or broker (Java PermName, PROTOCOL.md §6.4). A typical topic
// has perm 6 (read|write); TBW102 has 7 (inherit|read|write).
const (
	PermInherit  = 1 // PERM_INHERIT: new topics created from this one may inherit its config
	PermWrite    = 2 // PERM_WRITE: producers may send to the queues
	PermRead     = 4 // PERM_READ: consumers may pull from the queues
	PermPriority = 8 // PERM_PRIORITY
)

// MasterID is the broker id of a master (Java MixAll.MASTER_ID). Only a master's
// registration creates or updates the topics' QueueData; slaves (id ≥ 1) only add
// entries to BrokerData.BrokerAddrs.
const MasterID int64 = 0

// NamespaceOrderTopicConfig is the KV-config namespace holding the per-topic
// orderTopicConf strings ("brokerName:queueNums;brokerName2:n"), key = topic name
// (Java NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG).
const NamespaceOrderTopicConfig = "ORDER_TOPIC_CONFIG"

// TopicConfig is one topic of a broker's topic table as carried in a
// REGISTER_BROKER body (Java org.apache.rocketmq.common.TopicConfig). The JSON field
// names are Java's.
type TopicConfig struct {
	TopicName       string `json:"topicName"`
	ReadQueueNums   int    `json:"readQueueNums"`   // number of readable queues (ids 0..n-1)
	WriteQueueNums  int    `json:"writeQueueNums"`  // number of writable queues (ids 0..n-1)
	Perm            int    `json:"perm"`            // Perm* bits; default topics use 6
	TopicFilterType string `json:"topicFilterType"` // "SINGLE_TAG" (default) or "MULTI_TAG"
	TopicSysFlag    int    `json:"topicSysFlag"`    // bit0 unit topic, bit1 unit-sub
	Order           bool   `json:"order"`           // ordered topic flag
}

// DataVersion identifies one state of a broker's topic table (Java
// org.apache.rocketmq.common.DataVersion). The name server re-reads the topic table
// of a master only when the version differs from the one it has.
type DataVersion struct {
	Timestamp int64 `json:"timestamp"` // Unix ms of the last change
	Counter   int64 `json:"counter"`   // incremented on every change
}

// TopicConfigSerializeWrapper is the topic table and its version (Java
// TopicConfigSerializeWrapper).
type TopicConfigSerializeWrapper struct {
	TopicConfigTable map[string]*TopicConfig `json:"topicConfigTable"` // key = topic name
	DataVersion      DataVersion             `json:"dataVersion"`
}

// RegisterBrokerBody is the JSON body of REGISTER_BROKER (RocketMQ request code 103,
// Java RegisterBrokerBody, PROTOCOL.md §3.2), e.g.
//
//	{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1700000000000},
//	 "topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}}
//
// A Java 4.9 broker sends its whole topic table periodically and a single-topic table
// right after a topic is created; the name server therefore never deletes queue data
// of topics missing from a registration (DELETE_TOPIC_IN_NAMESRV does that).
type RegisterBrokerBody struct {
	TopicConfigSerializeWrapper TopicConfigSerializeWrapper `json:"topicConfigSerializeWrapper"`
	FilterServerList            []string                    `json:"filterServerList"` // filter server addresses, usually empty
}

// QueueData is one broker's queues of a topic in a route (Java QueueData).
//
// JSON: brokerName, readQueueNums, writeQueueNums, perm, topicSysFlag — and the same
// flag once more as topicSynFlag, the spelling of RocketMQ ≤ 4.5 that the official Go
// client still reads (PROTOCOL.md §3.1). Marshal always writes both keys; Unmarshal
// accepts either (topicSysFlag wins when both are present).
type QueueData struct {
	BrokerName     string
	ReadQueueNums  int
	WriteQueueNums int
	Perm           int
	TopicSysFlag   int
}

type queueDataJSON struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int    `json:"readQueueNums"`
	WriteQueueNums int    `json:"writeQueueNums"`
	Perm           int    `json:"perm"`
	TopicSysFlag   *int   `json:"topicSysFlag,omitempty"`
	TopicSynFlag   *int   `json:"topicSynFlag,omitempty"`
}

// MarshalJSON writes the Java field names plus the legacy topicSynFlag key.
func (q QueueData) MarshalJSON() ([]byte, error) {
	f := q.TopicSysFlag
	return json.Marshal(queueDataJSON{
		BrokerName: q.BrokerName, ReadQueueNums: q.ReadQueueNums, WriteQueueNums: q.WriteQueueNums,
		Perm: q.Perm, TopicSysFlag: &f, TopicSynFlag: &f,
	})
}

// UnmarshalJSON reads either spelling of the sys flag.
func (q *QueueData) UnmarshalJSON(b []byte) error {
	var j queueDataJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*q = QueueData{BrokerName: j.BrokerName, ReadQueueNums: j.ReadQueueNums, WriteQueueNums: j.WriteQueueNums, Perm: j.Perm}
	switch {
	case j.TopicSysFlag != nil:
		q.TopicSysFlag = *j.TopicSysFlag
	case j.TopicSynFlag != nil:
		q.TopicSysFlag = *j.TopicSynFlag
	}
	return nil
}

// BrokerData is one broker name (a master and its slaves) in a route or cluster info
// (Java BrokerData). BrokerAddrs maps broker id → "ip:port"; id 0 ([MasterID]) is the
// master. It is always written, as an object with quoted keys ({"0":"127.0.0.1:10911"}),
// never omitted: the official Go client slices its raw text and panics if it is missing.
type BrokerData struct {
	Cluster     string           `json:"cluster"`
	BrokerName  string           `json:"brokerName"`
	BrokerAddrs map[int64]string `json:"brokerAddrs"`
}

// MasterAddr returns the master's address (id 0), or "" if the broker has no master.
func (b *BrokerData) MasterAddr() string { return b.BrokerAddrs[MasterID] }

// MarshalJSON writes brokerAddrs as {} when the map is nil.
func (b BrokerData) MarshalJSON() ([]byte, error) {
	type plain BrokerData
	if b.BrokerAddrs == nil {
		b.BrokerAddrs = map[int64]string{}
	}
	return json.Marshal(plain(b))
}

func (b *BrokerData) clone() *BrokerData {
	c := &BrokerData{Cluster: b.Cluster, BrokerName: b.BrokerName, BrokerAddrs: make(map[int64]string, len(b.BrokerAddrs))}
	for id, a := range b.BrokerAddrs {
		c.BrokerAddrs[id] = a
	}
	return c
}

// TopicRouteData is the body of a successful GET_ROUTEINFO_BY_TOPIC (RocketMQ request
// code 105) response (Java TopicRouteData, PROTOCOL.md §3.1). QueueDatas and BrokerDatas
// are always written as arrays (never null).
type TopicRouteData struct {
	// OrderTopicConf is "brokerName:queueNums;brokerName2:n" for ordered topics, from
	// the KV namespace ORDER_TOPIC_CONFIG; "" (and left out of the JSON) otherwise.
	OrderTopicConf string `json:"orderTopicConf,omitempty"`
	// QueueDatas holds one entry per broker name serving the topic, sorted by broker name.
	QueueDatas []*QueueData `json:"queueDatas"`
	// BrokerDatas holds one entry per broker name in QueueDatas, sorted by broker name.
	BrokerDatas []*BrokerData `json:"brokerDatas"`
	// FilterServerTable maps a broker address to its filter servers; usually empty.
	FilterServerTable map[string][]string `json:"filterServerTable"`
}

// MarshalJSON writes nil slices and maps as [] and {}.
func (r TopicRouteData) MarshalJSON() ([]byte, error) {
	type plain TopicRouteData
	if r.QueueDatas == nil {
		r.QueueDatas = []*QueueData{}
	}
	if r.BrokerDatas == nil {
		r.BrokerDatas = []*BrokerData{}
	}
	if r.FilterServerTable == nil {
		r.FilterServerTable = map[string][]string{}
	}
	return json.Marshal(plain(r))
}

// BrokerData returns the route's BrokerData for brokerName, or nil.
func (r *TopicRouteData) BrokerData(brokerName string) *BrokerData {
	for _, b := range r.BrokerDatas {
		if b.BrokerName == brokerName {
			return b
		}
	}
	return nil
}

// ClusterInfo is the body of GET_BROKER_CLUSTER_INFO (RocketMQ request code 106, Java
// ClusterInfo): every live broker name and the broker names of each cluster.
type ClusterInfo struct {
	BrokerAddrTable  map[string]*BrokerData `json:"brokerAddrTable"`  // broker name → BrokerData
	ClusterAddrTable map[string][]string    `json:"clusterAddrTable"` // cluster name → broker names (sorted)
}

// TopicList is the body of GET_ALL_TOPIC_LIST_FROM_NAMESERVER (RocketMQ request code
// 206, Java TopicList): {"topicList":[...]} (sorted). BrokerAddr is unused by the name
// server and left out when empty.
type TopicList struct {
	TopicList  []string `json:"topicList"`
	BrokerAddr string   `json:"brokerAddr,omitempty"`
}

// KVTable is the JSON form of one KV-config namespace (Java KVTable), returned as the
// REGISTER_BROKER response body for namespace ORDER_TOPIC_CONFIG: {"table":{key:value}}.
type KVTable struct {
	Table map[string]string `json:"table"`
}

// ParseOrderTopicConf parses an orderTopicConf string "brokerName:n;brokerName2:m"
// into (broker name, write queue count) pairs in the given order. An empty string
// gives an empty result. An entry without ":" or with a count that is not a
// positive decimal int is an error naming the entry.
func ParseOrderTopicConf(s string) ([]OrderTopicEntry, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ";")
	out := make([]OrderTopicEntry, 0, len(parts))
	for _, p := range parts {
		name, num, ok := strings.Cut(p, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("namesrv: orderTopicConf entry %q: want brokerName:queueNums", p)
		}
		n, err := strconv.Atoi(num)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("namesrv: orderTopicConf entry %q: queue count must be a positive int", p)
		}
		out = append(out, OrderTopicEntry{BrokerName: name, QueueNums: n})
	}
	return out, nil
}

// OrderTopicEntry is one "brokerName:queueNums" item of an orderTopicConf string.
type OrderTopicEntry struct {
	BrokerName string
	QueueNums  int
}

// FormatOrderTopicConf is the inverse of [ParseOrderTopicConf].
func FormatOrderTopicConf(entries []OrderTopicEntry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(e.BrokerName)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.QueueNums))
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
