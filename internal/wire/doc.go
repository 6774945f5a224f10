// Package wire holds the RocketMQ remoting bodies and headers that both sides of the
// protocol use — Sluice's broker and name server on one side, its producer, consumer,
// admin client and their shared internal client on the other — so that each exists
// once, with one encoder and one parser (PROTOCOL.md §3):
//
//   - routes: [TopicRouteData], [QueueData], [BrokerData] (GET_ROUTEINFO_BY_TOPIC, 105),
//     parsed by [ParseTopicRouteData] in the strict and in the fastjson dialect, and the
//     queue lists producers and consumers derive from them ([PublishQueues],
//     [SubscribeQueues]);
//   - name-server bodies: [TopicConfig], [DataVersion], [RegisterBrokerBody],
//     [ClusterInfo], [TopicList], [KVTable], and the name-server requests a broker or an
//     admin tool sends ([RegisterBroker], [GetRouteInfo], [PutKVConfig], …);
//   - the heartbeat body [HeartbeatData] (HEART_BEAT, 34);
//   - the send header [SendHeader] (SEND_MESSAGE 10 with long keys, SEND_MESSAGE_V2 310
//     and SEND_BATCH_MESSAGE 320 with one-letter keys) and the pull header [PullHeader]
//     (PULL_MESSAGE, 11);
//   - the lock bodies [LockBatchBody] and [LockBatchResult] (LOCK_BATCH_MQ 41,
//     UNLOCK_BATCH_MQ 42) and [ConsumerIDList] (GET_CONSUMER_LIST_BY_GROUP, 38);
//   - admin bodies: the ResetOffsetBody ([EncodeResetOffsetBody],
//     [DecodeResetOffsetBody]), the Sluice-specific request codes [ReadQueue] and
//     [GroupSubscriptions] with [GroupSubscriptionsBody], and the subscription
//     consistency verdict [Analyze].
//
// The package imports only the standard library, message and remoting, so both the
// broker and the dependency-free SDK core may use it. JSON field names are Java's;
// where Java, the official Go client and fastjson disagree, the parsers accept every
// form a real peer sends and the encoders write the form the official Go client reads.
package wire
