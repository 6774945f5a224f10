package wire

import (
	"encoding/json"
	"fmt"
)

// NamespaceOrderTopicConfig is the KV-config namespace holding the per-topic
// orderTopicConf strings ("brokerName:queueNums;brokerName2:n"), key = topic name
// (Java NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG).
const NamespaceOrderTopicConfig = "ORDER_TOPIC_CONFIG"

// TopicConfig is one topic of a broker's topic table as carried in a REGISTER_BROKER
// body and kept in the broker's topics.json (Java org.apache.rocketmq.common.TopicConfig).
// The JSON field names are Java's.
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
// org.apache.rocketmq.common.DataVersion). The name server re-reads the topic table of
// a master only when the version differs from the one it has.
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
// Java RegisterBrokerBody, docs/protocol.md §3.2), e.g.
//
//	{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":1700000000000},
//	 "topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}}
//
// A Java 4.9 broker sends its whole topic table periodically and a single-topic table
// right after a topic is created; a name server therefore never deletes queue data of
// topics missing from a registration (DELETE_TOPIC_IN_NAMESRV does that).
type RegisterBrokerBody struct {
	TopicConfigSerializeWrapper TopicConfigSerializeWrapper `json:"topicConfigSerializeWrapper"`
	FilterServerList            []string                    `json:"filterServerList"` // filter server addresses, usually empty
}

// ClusterInfo is the body of GET_BROKER_CLUSTER_INFO (RocketMQ request code 106, Java
// ClusterInfo): every live broker name and the broker names of each cluster.
type ClusterInfo struct {
	BrokerAddrTable  map[string]*BrokerData `json:"brokerAddrTable"`  // broker name → BrokerData
	ClusterAddrTable map[string][]string    `json:"clusterAddrTable"` // cluster name → broker names (sorted)
}

// ParseClusterInfo decodes a GET_BROKER_CLUSTER_INFO body in either dialect (strict
// JSON, or fastjson's unquoted numeric keys, see [QuoteNumericKeys]). Missing tables
// give empty maps. Errors: text that is not ClusterInfo JSON.
func ParseClusterInfo(body []byte) (*ClusterInfo, error) {
	ci := new(ClusterInfo)
	if err := json.Unmarshal(QuoteNumericKeys(body), ci); err != nil {
		return nil, fmt.Errorf("wire: decode ClusterInfo: %w", err)
	}
	if ci.BrokerAddrTable == nil {
		ci.BrokerAddrTable = map[string]*BrokerData{}
	}
	if ci.ClusterAddrTable == nil {
		ci.ClusterAddrTable = map[string][]string{}
	}
	return ci, nil
}

// TopicList is the body of GET_ALL_TOPIC_LIST_FROM_NAMESERVER (RocketMQ request code
// 206, Java TopicList): {"topicList":[...]} (sorted by a Sluice name server).
// BrokerAddr is unused by the name server and left out when empty.
type TopicList struct {
	TopicList  []string `json:"topicList"`
	BrokerAddr string   `json:"brokerAddr,omitempty"`
}

// KVTable is the JSON form of one KV-config namespace (Java KVTable), returned as the
// REGISTER_BROKER response body for namespace ORDER_TOPIC_CONFIG: {"table":{key:value}}.
type KVTable struct {
	Table map[string]string `json:"table"`
}
