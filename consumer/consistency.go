package consumer

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// checkConsistency compares this consumer's subscriptions with those of the other
// clients of its group, as every known broker reports them from their heartbeats
// (Sluice request code 7002, wire.GroupSubscriptions), and logs a warning naming
// each client that subscribes differently — topics or tags — whenever the set of
// differences changes. Members that disagree lose messages: a broker filters a topic's
// pulls with one subscription per group. Brokers without the request (Apache RocketMQ)
// are skipped.
func (c *PushConsumer) checkConsistency(ctx context.Context) {
	me := wire.ClientSubscriptions{ClientID: c.cl.ClientID()}
	for _, sd := range c.subscriptionData() {
		me.Subscriptions = append(me.Subscriptions, wire.Subscription{Topic: sd.Topic, SubString: sd.SubString, ExpressionType: sd.ExpressionType, Tags: sd.TagsSet})
	}
	others := map[string]wire.ClientSubscriptions{}
	for _, name := range c.cl.BrokerNames() {
		resp, err := c.broker.invoke(ctx, name, wire.GroupSubscriptions, map[string]string{"consumerGroup": c.cfg.Group}, nil)
		if err != nil || resp.ResponseCode() != remoting.Success {
			continue // unreachable, or not a Sluice broker (3 REQUEST_CODE_NOT_SUPPORTED)
		}
		var body wire.GroupSubscriptionsBody
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			c.log.Debug("consumer: bad group subscriptions body", "broker", name, "err", err)
			continue
		}
		for _, cs := range body.Clients {
			if cs.ClientID == me.ClientID {
				continue
			}
			if cur, ok := others[cs.ClientID]; !ok || cs.LastHeartbeat > cur.LastHeartbeat {
				others[cs.ClientID] = cs
			}
		}
	}
	var lines []string
	var diffs [][]wire.Difference
	for _, o := range sortedClients(others) {
		if d := wire.Diff(me, o); len(d) > 0 {
			diffs = append(diffs, d)
			for _, x := range d {
				lines = append(lines, x.String())
			}
		}
	}
	fp := strings.Join(lines, "\n")
	if fp == c.consistencyLast {
		return
	}
	c.consistencyLast = fp
	for _, d := range diffs {
		parts := make([]string, len(d))
		for i, x := range d {
			parts[i] = x.String()
		}
		c.log.Warn("consumer: another client of the group subscribes differently; messages may be lost",
			"group", c.cfg.Group, "client", d[0].Other, "differences", strings.Join(parts, "; "))
	}
	if fp == "" {
		c.log.Info("consumer: the group's clients subscribe alike again", "group", c.cfg.Group)
	}
}

func sortedClients(m map[string]wire.ClientSubscriptions) []wire.ClientSubscriptions {
	out := make([]wire.ClientSubscriptions, 0, len(m))
	for _, cs := range m {
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClientID < out[j].ClientID })
	return out
}
