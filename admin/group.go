package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/sluicemq/sluice/internal/wire"
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
// Errors: a [*ConfigError] for an empty group, [ErrNoBroker], [ErrNotSupported]
// (wrapped) when no broker knows the request, a [*BrokerError] per broker that failed
// otherwise (joined) when none answered.
func (a *Admin) GroupConsistency(ctx context.Context, group string) (*SubscriptionReport, error) {
	if group == "" {
		return nil, &ConfigError{Field: "group", Reason: "a consumer group is required"}
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
			errs = append(errs, &BrokerError{BrokerName: b.Name, BrokerAddr: b.Addr, Err: fmt.Errorf("%w: %v", ErrNotSupported, resp.ResponseErr())})
			continue
		}
		if err := resp.ResponseErr(); err != nil {
			errs = append(errs, &BrokerError{BrokerName: b.Name, BrokerAddr: b.Addr, Err: err})
			continue
		}
		var body wire.GroupSubscriptionsBody
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			errs = append(errs, &BrokerError{BrokerName: b.Name, BrokerAddr: b.Addr, Err: fmt.Errorf("bad body: %w", err)})
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
	return &r, nil
}
