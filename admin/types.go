package admin

import "github.com/sluicemq/sluice/internal/wire"

// Route and cluster bodies the admin returns, named here so that callers outside this
// module can use them; they are the wire types the broker and name server speak
// (docs/protocol.md §3.1, §3.2).
type (
	// TopicRouteData is a topic's route as GET_ROUTEINFO_BY_TOPIC (105) returns it.
	TopicRouteData = wire.TopicRouteData
	// QueueData is one broker's queues of a topic in a route.
	QueueData = wire.QueueData
	// BrokerData is one broker name (master id 0 and slaves) and its addresses.
	BrokerData = wire.BrokerData
	// ClusterInfo is the body of GET_BROKER_CLUSTER_INFO (106).
	ClusterInfo = wire.ClusterInfo
)

// Topic permission bits (Java PermName, docs/protocol.md §6.4) for [TopicSpec.Perm].
const (
	PermInherit = wire.PermInherit // 1: new topics may be auto-created from this one
	PermWrite   = wire.PermWrite   // 2: producers may send
	PermRead    = wire.PermRead    // 4: consumers may pull
)

// ErrTopicNotExist is wrapped by route lookups when the name server has no route for
// the topic (response code 17 TOPIC_NOT_EXIST).
var ErrTopicNotExist = wire.ErrTopicNotExist
