package consumer

import (
	"context"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// handleResetOffset serves RESET_CONSUMER_CLIENT_OFFSET (RocketMQ request code 220,
// broker → client, one-way; docs/protocol.md §3.13), sent after an admin reset the group's
// offsets of a topic by time (INVOKE_BROKER_TO_RESET_OFFSET, 222). Ext: topic, group,
// timestamp, isForce (wire.ResetOffsetHeader); body: ResetOffsetBody (gson or fastjson
// layout). The reset is queued for the rebalance goroutine (see applyResets), which
// runs at once. Requests for another group or with an unreadable header or body are
// logged and ignored. No response.
func (c *PushConsumer) handleResetOffset(_ context.Context, addr string, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseResetOffsetHeader(req)
	if err != nil {
		c.log.Warn("consumer: reset offset request with a bad header ignored", "broker", addr, "err", err)
		return nil
	}
	topic, group := h.Topic, h.Group
	if group != c.cfg.Group || topic == "" {
		c.log.Warn("consumer: reset offset request for another group or without topic ignored", "group", group, "topic", topic, "broker", addr)
		return nil
	}
	table, err := wire.DecodeResetOffsetBody(req.Body)
	if err != nil {
		c.log.Warn("consumer: reset offset request ignored", "broker", addr, "err", err)
		return nil
	}
	c.log.Info("consumer: reset offset requested", "group", group, "topic", topic, "timestamp", h.Timestamp, "broker", addr, "queues", len(table))
	c.mu.Lock()
	c.resets = append(c.resets, pendingReset{topic: topic, table: table})
	c.mu.Unlock()
	c.kickRebalance()
	return nil
}
