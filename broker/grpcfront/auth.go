package grpcfront

import (
	"context"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/sluicemq/sluice/acl"
)

// ACL on the gRPC port: with aclEnable the broker's plain ACL (the same file, accounts
// and permissions as the remoting port) checks every call. A call is authenticated by
// the signature the RocketMQ 5 clients put in its metadata (acl.AuthenticateGRPC), then
// each RPC needs the permissions Apache RocketMQ 5 asks for it:
//
//	SendMessage, EndTransaction, RecallMessage      PUB on the topic (every message's)
//	ReceiveMessage, AckMessage, ChangeInvisible-     SUB on the topic and SUB on the group
//	  Duration, ForwardMessageToDeadLetterQueue,
//	  QueryAssignment
//	QueryRoute                                       PUB or SUB on the topic (auto-creation: PUB)
//	Heartbeat, NotifyClientTermination               SUB on the group, when one is named
//	Telemetry settings                               a producer: PUB on each topic it names;
//	                                                 a consumer: SUB on the group and its topics
//
// Refusals are answered in the response's Status (the call itself succeeds, as every
// answer of this front end): UNAUTHORIZED when the caller is not authenticated, FORBIDDEN
// when it lacks a permission. The front end keeps serving other callers.

// caller authenticates the call of ctx: nil, nil without aclEnable. An error wraps
// acl.ErrUnauthenticated (statusOf answers it UNAUTHORIZED).
func (sv *service) caller(ctx context.Context) (*acl.GRPCCaller, error) {
	v := sv.s.acl
	if v == nil {
		return nil, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	first := func(k string) string {
		if vs := md.Get(k); len(vs) > 0 {
			return vs[0]
		}
		return ""
	}
	remote := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		remote = p.Addr.String()
	}
	c, err := v.AuthenticateGRPC(remote, first(acl.GRPCAuthorizationKey), first(acl.GRPCDateTimeKey))
	if err != nil {
		sv.s.log.Debug("gRPC call refused by acl", "remote", remote, "err", err)
	}
	return c, err
}

// allow checks that c (nil: no ACL) has every resource's permission; the error wraps
// acl.ErrDenied (statusOf answers it FORBIDDEN).
func allow(c *acl.GRPCCaller, res ...acl.Resource) error {
	if c == nil {
		return nil
	}
	return c.Check(res...)
}

// publisher authenticates the call of ctx, checks the topic's name and PUB on it; it
// returns the topic's name. Every failure is a status error (statusOf).
func (sv *service) publisher(ctx context.Context, topic *v2.Resource) (string, error) {
	c, err := sv.caller(ctx)
	if err != nil {
		return "", err
	}
	name, err := checkTopic("topic", topic)
	if err != nil {
		return "", err
	}
	return name, allow(c, acl.Topic(name, acl.Pub))
}

// consumer authenticates the call of ctx, checks the group's and the topic's names and
// SUB on both; it returns the two names. The group is checked first, the topic's field
// is named topicField in a refusal.
func (sv *service) consumer(ctx context.Context, group *v2.Resource, topicField string, topic *v2.Resource) (string, string, error) {
	c, err := sv.caller(ctx)
	if err != nil {
		return "", "", err
	}
	g, err := checkGroup("group", group)
	if err != nil {
		return "", "", err
	}
	t, err := checkTopic(topicField, topic)
	if err != nil {
		return "", "", err
	}
	return g, t, allow(c, subscribe(g, t)...)
}

// member authenticates the call of ctx and, when group is not nil, checks its name and
// SUB on it (a consumer's heartbeat or termination; a producer's names no group).
func (sv *service) member(ctx context.Context, group *v2.Resource) error {
	c, err := sv.caller(ctx)
	if err != nil || group == nil {
		return err
	}
	g, err := checkGroup("group", group)
	if err != nil {
		return err
	}
	return allow(c, acl.Group(g, acl.Sub))
}

// subscribe is the resources a consumer needs on topic for group.
func subscribe(group, topic string) []acl.Resource {
	return []acl.Resource{acl.Topic(topic, acl.Sub), acl.Group(group, acl.Sub)}
}

// settingsAllowed checks a client's telemetry settings against its permissions.
func settingsAllowed(c *acl.GRPCCaller, st *v2.Settings) error {
	if c == nil {
		return nil
	}
	switch st.GetClientType() {
	case v2.ClientType_PRODUCER:
		for _, t := range st.GetPublishing().GetTopics() {
			if err := c.Check(acl.Topic(t.GetName(), acl.Pub)); err != nil {
				return err
			}
		}
	case v2.ClientType_SIMPLE_CONSUMER, v2.ClientType_PUSH_CONSUMER:
		sub := st.GetSubscription()
		if err := c.Check(acl.Group(sub.GetGroup().GetName(), acl.Sub)); err != nil {
			return err
		}
		for _, e := range sub.GetSubscriptions() {
			if err := c.Check(acl.Topic(e.GetTopic().GetName(), acl.Sub)); err != nil {
				return err
			}
		}
	}
	return nil
}
