package grpcfront

import (
	"context"
	"fmt"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/metadata"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/internal/wire"
)

// Registration of v5 clients with the broker's client table, so that sluice admin and
// the console list them beside the remoting clients (protocol "grpc"): a client is
// registered by its telemetry settings (type, consumer group, subscriptions or
// topics) and refreshed by its heartbeats (every 10 s from the official clients); it is
// forgotten at NotifyClientTermination, or when its heartbeats are older than the
// broker's clientChannelExpiredTimeout.

// Metadata the official clients send with every call (rocketmq-clients golang/v5
// metadata package; the Java client sends the same keys).
const (
	languageKey = "x-mq-language"       // "GO", "JAVA", ...
	versionKey  = "x-mq-client-version" // "5.1.4"
)

func firstMD(ctx context.Context, key string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// consumeTypeOf maps a v5 client type to the consume type admin tools show (as the
// Apache RocketMQ 5 proxy registers v5 consumers); "" for a producer.
func consumeTypeOf(t v2.ClientType) string {
	switch t {
	case v2.ClientType_SIMPLE_CONSUMER:
		return broker.ConsumeActively
	case v2.ClientType_PUSH_CONSUMER:
		return broker.ConsumePassively
	}
	return ""
}

// frontClient is what a call of the client tells about it (no subscriptions).
func frontClient(ctx context.Context, t v2.ClientType, group string) (broker.FrontClient, bool) {
	switch t {
	case v2.ClientType_PRODUCER:
		group = ""
	case v2.ClientType_SIMPLE_CONSUMER, v2.ClientType_PUSH_CONSUMER:
		if group == "" {
			return broker.FrontClient{}, false
		}
	default:
		return broker.FrontClient{}, false // an unspecified type (a client's recovery heartbeat): nothing to register
	}
	c := broker.FrontClient{Protocol: broker.ProtocolGRPC, ClientID: clientID(ctx), Group: group, ConsumeType: consumeTypeOf(t),
		Language: firstMD(ctx, languageKey), Version: firstMD(ctx, versionKey)}
	if ap := peerAddr(ctx); ap.IsValid() {
		c.Addr = ap.String()
	}
	return c, true
}

// registerHeartbeat refreshes the client of a Heartbeat call.
func (sv *service) registerHeartbeat(ctx context.Context, req *v2.HeartbeatRequest) {
	c, ok := frontClient(ctx, req.GetClientType(), req.GetGroup().GetName())
	if !ok {
		return
	}
	sv.register(c)
}

// registerSettings registers the client of an accepted telemetry Settings, with its
// subscriptions (a consumer) or topics (a producer).
func (sv *service) registerSettings(ctx context.Context, st *v2.Settings) {
	c, ok := frontClient(ctx, st.GetClientType(), st.GetSubscription().GetGroup().GetName())
	if !ok {
		return
	}
	if c.Language == "" {
		c.Language = st.GetUserAgent().GetLanguage().String()
	}
	if c.Version == "" {
		c.Version = st.GetUserAgent().GetVersion()
	}
	if c.Group != "" {
		c.Subscriptions = []wire.Subscription{}
		for _, e := range st.GetSubscription().GetSubscriptions() {
			s := wire.Subscription{Topic: e.GetTopic().GetName(), SubString: e.GetExpression().GetExpression(), ExpressionType: "TAG"}
			if e.GetExpression().GetType() == v2.FilterType_SQL {
				s.ExpressionType = "SQL92"
			}
			c.Subscriptions = append(c.Subscriptions, s)
		}
	} else {
		c.Topics = []string{}
		for _, t := range st.GetPublishing().GetTopics() {
			c.Topics = append(c.Topics, t.GetName())
		}
	}
	sv.register(c)
}

func (sv *service) register(c broker.FrontClient) {
	if err := sv.s.b.FrontClientHeartbeat(c); err != nil {
		// The client is served all the same; it is not listed by admin tools.
		sv.s.log.Warn("v5 client not registered for admin tools", "client", fmt.Sprintf("%.128q", c.ClientID), "group", c.Group, "remote", c.Addr, "err", err)
	}
}
