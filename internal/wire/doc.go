// Package wire holds the RocketMQ remoting bodies and headers that both sides of the
// protocol use — Sluice's broker and name server on one side, its producer, consumer,
// admin client and their shared internal client on the other — so that each exists
// once, with one encoder and one parser (docs/protocol.md §3):
//
//   - routes: [TopicRouteData], [QueueData], [BrokerData] (GET_ROUTEINFO_BY_TOPIC, 105),
//     parsed by [ParseTopicRouteData] in the strict and in the fastjson dialect, and the
//     queue lists producers and consumers derive from them ([PublishQueues],
//     [SubscribeQueues]);
//   - name-server bodies: [TopicConfig], [DataVersion], [RegisterBrokerBody] (JSON, or
//     RocketMQ's compressed form: [EncodeCompressedRegisterBody],
//     [DecodeCompressedRegisterBody]), [ClusterInfo], [TopicList], [KVTable], and the
//     name-server requests a broker or an
//     admin tool sends ([RegisterBroker], [GetRouteInfo], [PutKVConfig], …);
//   - the heartbeat body [HeartbeatData] (HEART_BEAT, 34);
//   - request and response headers, each with an Ext (or SetExt) encoder and a Parse
//     function: [SendHeader] (SEND_MESSAGE 10 with long keys, SEND_MESSAGE_V2 310 and
//     SEND_BATCH_MESSAGE 320 with one-letter keys),
//     [PullHeader] and [PullResponseHeader] (PULL_MESSAGE, 11), [SendBackHeader]
//     (CONSUMER_SEND_MSG_BACK, 36), [EndTransactionHeader] (37) and
//     [CheckTransactionStateHeader] (39), [ConsumerOffsetHeader] (14, 15),
//     [QueueHeader] (29-32), [ResetOffsetHeader] (220, 222) and [ReadQueueHeader]
//     (Sluice's 7001);
//   - the lock bodies [LockBatchBody] and [LockBatchResult] (LOCK_BATCH_MQ 41,
//     UNLOCK_BATCH_MQ 42) and [ConsumerIDList] (GET_CONSUMER_LIST_BY_GROUP, 38);
//   - admin bodies: the ResetOffsetBody ([EncodeResetOffsetBody],
//     [DecodeResetOffsetBody]), the Sluice-specific request codes [ReadQueue] and
//     [GroupSubscriptions] with [GroupSubscriptionsBody], and the subscription
//     consistency verdict [Analyze].
//
// Parsers never panic on peer input: a body or header they cannot use gives a typed
// error naming the field ([*remoting.HeaderError], [*RouteError], or an error wrapping
// a sentinel such as [ErrBadLockBody]); each has a fuzz target or table test. The
// package imports only the standard library, message and remoting, so both the broker
// and the dependency-free SDK core may use it. JSON field names are Java's;
// where Java, the official Go client and fastjson disagree, the parsers accept every
// form a real peer sends and the encoders write the form the official Go client reads.
package wire
