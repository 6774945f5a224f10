package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Subscription-consistency types, shared with the broker and the consumer.
type (
	// SubscriptionReport is the verdict of [Admin.GroupConsistency]: whether every
	// client of the group subscribes to the same topics with the same tags, the clients
	// partitioned by identical subscriptions, and the differences.
	SubscriptionReport = wire.Report
	// ClientSubscriptions is what one client of a group subscribes to.
	ClientSubscriptions = wire.ClientSubscriptions
	// SubscriptionDifference is one way two clients subscribe differently.
	SubscriptionDifference = wire.Difference
)

// ErrNotSupported is wrapped when no broker answered a Sluice-specific request (an
// Apache RocketMQ broker answers REQUEST_CODE_NOT_SUPPORTED, 3).
var ErrNotSupported = errors.New("admin: no broker supports the request")

// GroupConsistency checks that the clients of a consumer group subscribe alike. It asks
// every master broker (GET_BROKER_CLUSTER_INFO) for the subscriptions each live client
// of the group sent in its last heartbeat (GROUP_SUBSCRIPTIONS, Sluice request code
// 7002), keeps each client's newest view, and compares them
// ignoring %RETRY% topics. A group with no client online is consistent with no sets.
// Errors: a [*config.Error] for an empty group, [ErrNoBroker], [ErrNotSupported]
// (wrapped) when no broker knows the request, an error per broker that failed
// otherwise (a refusal is a *remoting.ResponseError), joined when none answered; when
// some did, the report of those with a [*PartialError] naming the others.
func (a *Admin) GroupConsistency(ctx context.Context, group string) (*SubscriptionReport, error) {
	if group == "" {
		return nil, &config.Error{Package: "admin", Field: "group", Reason: "a consumer group is required"}
	}
	ci, err := a.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	brokers := masters(ci, "")
	if len(brokers) == 0 {
		return nil, a.noBrokerError()
	}
	clients := map[string]wire.ClientSubscriptions{}
	answered := 0
	var errs []error
	for _, b := range brokers {
		resp, err := a.invoke(ctx, b.Name, b.Addr, wire.GroupSubscriptions, map[string]string{"consumerGroup": group}, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if resp.ResponseCode() == remoting.RequestCodeNotSupported {
			errs = append(errs, fmt.Errorf("%w: %w", ErrNotSupported, resp.ResponseErrFor(wire.GroupSubscriptions, b.Name, b.Addr)))
			continue
		}
		if err := resp.ResponseErrFor(wire.GroupSubscriptions, b.Name, b.Addr); err != nil {
			errs = append(errs, err)
			continue
		}
		var body wire.GroupSubscriptionsBody
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			errs = append(errs, brokerFailed(b.Name, b.Addr, fmt.Errorf("bad body: %w", err)))
			continue
		}
		answered++
		for _, c := range body.Clients {
			if cur, ok := clients[c.ClientID]; !ok || c.LastHeartbeat > cur.LastHeartbeat {
				clients[c.ClientID] = c
			}
		}
	}
	if answered == 0 {
		return nil, errors.Join(errs...)
	}
	list := make([]wire.ClientSubscriptions, 0, len(clients))
	for _, c := range clients {
		list = append(list, c)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].ClientID < list[j].ClientID })
	r := wire.Analyze(group, list)
	return &r, partial(answered, errs)
}

// GroupSummary is a consumer group over all master brokers ([Admin.GroupSummaries]).
type GroupSummary struct {
	Group string
	// Configured: some broker holds a subscription group config for it; a group that only
	// committed offsets (or only has clients online) is listed too.
	Configured bool
	// RetryMaxTimes is the config's retry budget (the first broker's), used for clients
	// that send none; 0 without config.
	RetryMaxTimes int
	// ClientMaxReconsumeTimes is the maxReconsumeTimes the group's clients last sent with
	// their failed messages — the retries a message really gets before the DLQ; -1 when
	// no broker has seen one since it started.
	ClientMaxReconsumeTimes int
	// Clients is the number of the group's client ids online (the most any broker sees);
	// MessageModel (CLUSTERING, BROADCASTING), ConsumeType (CONSUME_PASSIVELY = push,
	// CONSUME_ACTIVELY = pull) and ConsumeFromWhere are from their heartbeats.
	Clients                                     int
	MessageModel, ConsumeType, ConsumeFromWhere string
	LastHeartbeat                               int64 // unix ms, newest; 0 when none
	// Protocols are the protocols of the clients online over all brokers, sorted:
	// "remoting" (RocketMQ 4.x clients), "grpc" (RocketMQ 5 clients on a broker's gRPC
	// port); empty with none online. A group of v5 consumers only has ConsumeType
	// CONSUME_ACTIVELY (SimpleConsumer) or CONSUME_PASSIVELY (PushConsumer) and
	// MessageModel CLUSTERING.
	Protocols []string
	// Lag is the messages not consumed yet on every topic but %DLQ% ones (whose offset is
	// the re-drive mark), and OldestUnconsumed the store time (unix ms) of the oldest of
	// them, 0 when nothing lags.
	Lag              int64
	OldestUnconsumed int64
	Topics           []GroupTopicLag // per topic, summed over brokers, sorted
	Brokers          []string        // brokers that know the group, sorted
	// LagUnknown: a broker that is not Sluice (Apache RocketMQ) holds the group; only its
	// config was read there (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), so Lag, OldestUnconsumed
	// and Clients leave that broker out.
	LagUnknown bool
}

// GroupTopicLag is a group's lag on one topic over all brokers.
type GroupTopicLag = wire.GroupTopicLag

// LagAge returns how long the oldest unconsumed message has waited at now (0 when
// nothing lags): the group's lag in time.
func (g GroupSummary) LagAge(now time.Time) time.Duration {
	if g.OldestUnconsumed == 0 {
		return 0
	}
	return max(now.Sub(time.UnixMilli(g.OldestUnconsumed)), 0)
}

// GroupSummaries lists every consumer group the master brokers know — configured, with
// committed offsets, or with clients online — with its lag (messages and the oldest
// unconsumed message's store time), clients and consume mode, sorted by group (Sluice
// request code 7004, wire.GroupSummaries, one request per broker). Errors as
// [Admin.ConsumerGroups] ([ErrNotSupported] wrapped for brokers that are not Sluice).
func (a *Admin) GroupSummaries(ctx context.Context) ([]GroupSummary, error) {
	byName := map[string]*GroupSummary{}
	topics := map[string]map[string]*GroupTopicLag{}
	err := a.eachMaster(ctx, func(b Broker) error {
		body, err := a.call(ctx, b, wire.GroupSummaries, nil)
		if errors.Is(err, ErrNotSupported) {
			return a.configuredGroupsOf(ctx, b, byName, topics)
		}
		if err != nil {
			return err
		}
		var w wire.GroupSummariesBody
		if err := json.Unmarshal(body, &w); err != nil {
			return brokerFailed(b.Name, b.Addr, fmt.Errorf("bad group summaries: %w", err))
		}
		for _, s := range w.Groups {
			g := byName[s.Group]
			if g == nil {
				g = &GroupSummary{Group: s.Group, ClientMaxReconsumeTimes: -1}
				byName[s.Group] = g
				topics[s.Group] = map[string]*GroupTopicLag{}
			}
			g.Brokers = append(g.Brokers, b.Name)
			if s.Configured && !g.Configured {
				g.Configured, g.RetryMaxTimes = true, s.RetryMaxTimes
			}
			if s.ClientMaxReconsumeTimes >= 0 {
				g.ClientMaxReconsumeTimes = int(s.ClientMaxReconsumeTimes)
			}
			if s.Clients > g.Clients {
				g.Clients, g.MessageModel, g.ConsumeType, g.ConsumeFromWhere = s.Clients, s.MessageModel, s.ConsumeType, s.ConsumeFromWhere
			}
			g.LastHeartbeat = max(g.LastHeartbeat, s.LastHeartbeat)
			for _, p := range s.Protocols {
				if !slices.Contains(g.Protocols, p) {
					g.Protocols = append(g.Protocols, p)
					sort.Strings(g.Protocols)
				}
			}
			for _, t := range s.Topics {
				cur := topics[s.Group][t.Topic]
				if cur == nil {
					cur = &GroupTopicLag{Topic: t.Topic}
					topics[s.Group][t.Topic] = cur
				}
				cur.Queues += t.Queues
				cur.Lag += t.Lag
				if t.OldestUnconsumed > 0 && (cur.OldestUnconsumed == 0 || t.OldestUnconsumed < cur.OldestUnconsumed) {
					cur.OldestUnconsumed = t.OldestUnconsumed
				}
			}
		}
		return nil
	})
	if err != nil && !isPartial(err) {
		return nil, err
	}
	out := make([]GroupSummary, 0, len(byName))
	for name, g := range byName {
		for _, t := range topics[name] {
			g.Topics = append(g.Topics, *t)
			if message.IsDLQTopic(t.Topic) {
				continue
			}
			g.Lag += t.Lag
			if t.OldestUnconsumed > 0 && (g.OldestUnconsumed == 0 || t.OldestUnconsumed < g.OldestUnconsumed) {
				g.OldestUnconsumed = t.OldestUnconsumed
			}
		}
		sort.Slice(g.Topics, func(i, j int) bool { return g.Topics[i].Topic < g.Topics[j].Topic })
		sort.Strings(g.Brokers)
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, err // err: nil or a *PartialError
}

// configuredGroupsOf adds the groups configured on b, a broker without GroupSummaries,
// marked LagUnknown.
func (a *Admin) configuredGroupsOf(ctx context.Context, b Broker, byName map[string]*GroupSummary, topics map[string]map[string]*GroupTopicLag) error {
	body, err := a.call(ctx, b, remoting.GetAllSubscriptionGroupConfig, nil)
	if err != nil {
		return err
	}
	var w struct {
		SubscriptionGroupTable map[string]*struct {
			RetryMaxTimes int `json:"retryMaxTimes"`
		} `json:"subscriptionGroupTable"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return brokerFailed(b.Name, b.Addr, fmt.Errorf("bad group table: %w", err))
	}
	for name, c := range w.SubscriptionGroupTable {
		g := byName[name]
		if g == nil {
			g = &GroupSummary{Group: name, ClientMaxReconsumeTimes: -1}
			byName[name] = g
			topics[name] = map[string]*GroupTopicLag{}
		}
		g.Brokers = append(g.Brokers, b.Name)
		g.LagUnknown = true
		if c != nil && !g.Configured {
			g.Configured, g.RetryMaxTimes = true, c.RetryMaxTimes
		}
	}
	return nil
}

// ErrGroupNotExist is wrapped when no broker knows a consumer group: no config, no
// committed offset, no client online.
var ErrGroupNotExist = errors.New("admin: consumer group does not exist")

// CheckGroup returns nil when some master broker knows group (a config, a committed
// offset or a client online), else an error wrapping [ErrGroupNotExist] — so that a
// typo does not leave offsets behind for a group nobody runs. Errors as
// [Admin.GroupSummaries].
func (a *Admin) CheckGroup(ctx context.Context, group string) error {
	if group == "" {
		return &config.Error{Package: "admin", Field: "group", Reason: "a consumer group is required"}
	}
	all, err := a.GroupSummaries(ctx)
	for _, g := range all {
		if g.Group == group {
			return nil // known to a broker that answered
		}
	}
	if err != nil { // a broker that did not answer may know it
		return err
	}
	return fmt.Errorf("%w: %q", ErrGroupNotExist, group)
}

// DeleteGroup deletes a consumer group from every master broker that knows it
// (DELETE_SUBSCRIPTIONGROUP, RocketMQ request code 207): its subscription group config and
// every offset it committed. Its %RETRY% and %DLQ% topics and their messages stay. A
// broker refuses while clients of the group are online. It returns the brokers that
// deleted it (those that answered that they do not know it are left out).
//
// Errors: a [*config.Error] for a bad name, [ErrGroupNotExist] (wrapped) when every
// broker answered and none knew it, and one error per broker that failed (a refusal is a
// *remoting.ResponseError): joined when none answered, else in a [*PartialError]
// returned with the brokers that deleted it (possibly none: then the brokers that
// answered did not know the group, and those that failed may still hold it).
func (a *Admin) DeleteGroup(ctx context.Context, group string) ([]Broker, error) {
	if group == "" {
		return nil, &config.Error{Package: "admin", Field: "group", Reason: "a consumer group is required"}
	}
	if err := message.ValidateGroupTopics(group); err != nil {
		return nil, &config.Error{Package: "admin", Field: "group", Reason: err.Error()}
	}
	ci, err := a.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	brokers := masters(ci, "")
	if len(brokers) == 0 {
		return nil, a.noBrokerError()
	}
	var errs []error
	var deleted []Broker
	for _, b := range brokers {
		resp, err := a.invoke(ctx, b.Name, b.Addr, remoting.DeleteSubscriptionGroup, map[string]string{"groupName": group}, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch resp.ResponseCode() {
		case remoting.Success:
			deleted = append(deleted, b)
		case remoting.SubscriptionGroupNotExist:
		default:
			errs = append(errs, resp.ResponseErrFor(remoting.DeleteSubscriptionGroup, b.Name, b.Addr))
		}
	}
	if err := partial(len(brokers)-len(errs), errs); err != nil {
		if isPartial(err) {
			return deleted, err
		}
		return nil, err
	}
	if len(deleted) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrGroupNotExist, group)
	}
	return deleted, nil
}
