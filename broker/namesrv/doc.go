// Package namesrv is Sluice's name server.
//
// The name server speaks the RocketMQ 4.x remoting protocol (docs/protocol.md §3.1, §3.2):
// brokers register their topic tables with REGISTER_BROKER (request code 103) and
// clients, including the official RocketMQ Go client, fetch topic routes with
// GET_ROUTEINFO_BY_TOPIC (105). Routes are strict JSON with quoted map keys
// ({"0":"127.0.0.1:10911"}); every QueueData carries both topicSysFlag (Java 4.9) and
// topicSynFlag (Java ≤ 4.5, read by the Go client) and every BrokerData carries
// brokerAddrs, which the Go client parses by hand.
//
// The bodies it reads and writes (TopicConfig, DataVersion, RegisterBrokerBody,
// TopicRouteData, QueueData, BrokerData, ClusterInfo, TopicList, KVTable) and the
// requests brokers and admin tools send it (RegisterBroker, GetRouteInfo, PutKVConfig,
// …) live in the module's internal wire package, shared with the clients.
//
// Differences from the Java 4.9.8 name server: unknown request codes get
// REQUEST_CODE_NOT_SUPPORTED (Java's name server stays silent); orderTopicConf is
// served whenever the KV entry exists (Java needs orderMessageEnable=true); the
// compressed RegisterBrokerBody form is refused.
package namesrv
