package broker

import (
	"context"

	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// handleResetOffset serves INVOKE_BROKER_TO_RESET_OFFSET (RocketMQ request code 222;
// Java AdminBrokerProcessor.resetOffset / Broker2Client.resetOffset): move a consumer
// group's offsets of one topic on this broker to a point in time, and tell the group's
// running consumers to jump there.
//
// Request ext: topic, group, timestamp (unix ms; -1 = the end of every queue), isForce
// (default true). For every read queue of the topic the new offset is the first message
// stored at or after timestamp (the queue's max offset when there is none). With
// isForce=false a queue only moves backwards (Java's rule: a target at or beyond the
// committed offset keeps the committed offset).
//
// Unlike Java, which only asks the clients, the broker commits the new offsets itself,
// so a group with no consumer online is reset too. The running consumers get
// RESET_CONSUMER_CLIENT_OFFSET (220, one-way; ext topic, group, timestamp, isForce; body
// ResetOffsetBody in the gson layout, docs/protocol.md §3.13) and drop the queues, then re-read
// the offsets.
//
// Response: code 0 with the same ResetOffsetBody; remark "no consumer online" when no
// client was told. Errors: 1 for a bad header, 17 for an unknown topic, 26 for an
// unknown group that may not be auto-created.
func (b *Broker) handleResetOffset(ctx context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	h, err := wire.ParseResetOffsetHeader(req)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	topic, group, ts, force := h.Topic, h.Group, h.Timestamp, h.IsForce
	tc := b.topics.get(topic)
	if tc == nil {
		return errResponse(remoting.TopicNotExist, "topic[%s] not exist", topic)
	}
	if b.groups.find(group) == nil {
		return errResponse(remoting.SubscriptionGroupNotExist, "subscription group [%s] does not exist", group)
	}
	table := make(map[message.MessageQueue]int64, tc.ReadQueueNums)
	for q := int32(0); q < int32(tc.ReadQueueNums); q++ {
		target := b.store.MaxOffset(topic, q)
		if ts >= 0 {
			target = b.offsetStoredAtOrAfter(topic, q, ts)
		}
		cur, ok := b.offsets.query(group, topic, q)
		next := target
		if ok && !force && target >= cur {
			next = cur
		}
		b.offsets.commit(group, topic, q, next)
		table[message.MessageQueue{Topic: topic, BrokerName: b.cfg.BrokerName, QueueID: int(q)}] = next
	}
	if err := b.offsets.persist(); err != nil {
		b.log.Error("persist consumer offsets after reset", "err", err)
	}
	body := wire.EncodeResetOffsetBody(table)
	conns := b.clients.groupConns(group)
	for _, c := range conns {
		push := remoting.NewRequest(remoting.ResetConsumerClientOffset, h.Ext(), body)
		if err := c.InvokeOneway(ctx, push); err != nil {
			b.log.Warn("reset offset: telling a consumer failed", "group", group, "remote", c.RemoteAddr(), "err", err)
		}
	}
	b.log.Info("consumer offsets reset", "group", group, "topic", topic, "timestamp", ts, "force", force, "clients", len(conns))
	remark := ""
	if len(conns) == 0 {
		remark = "no consumer online"
	}
	r := remoting.NewResponse(remoting.Success, remark)
	r.Body = body
	return r
}

// offsetStoredAtOrAfter returns the queue offset of the first message of topic/queue
// stored at or after ts (unix ms), or the queue's max offset when every message is
// older. SEARCH_OFFSET_BY_TIMESTAMP's answer is the nearest message by time, which may
// be one stored just before ts; this steps from there to the exact boundary.
func (b *Broker) offsetStoredAtOrAfter(topic string, q int32, ts int64) int64 {
	minOff, maxOff := b.store.MinOffset(topic, q), b.store.MaxOffset(topic, q)
	if maxOff <= minOff {
		return maxOff
	}
	off := max(min(b.store.OffsetByTimestamp(topic, q, ts), maxOff), minOff)
	// Step back over messages stored at or after ts (bounded: the search is off by at
	// most one in a queue whose store times never decrease).
	for i := 0; i < 4 && off > minOff; i++ {
		if st, ok := b.storeTimeAt(topic, q, off-1); !ok || st < ts {
			break
		}
		off--
	}
	for i := 0; i < 4 && off < maxOff; i++ {
		if st, ok := b.storeTimeAt(topic, q, off); !ok || st >= ts {
			break // never skip a message whose time cannot be read
		}
		off++
	}
	return off
}

// storeTimeAt returns the store timestamp (unix ms) of the message at a queue offset.
func (b *Broker) storeTimeAt(topic string, q int32, off int64) (int64, bool) {
	res, err := b.store.GetMessage(topic, q, off, 1, 0, nil)
	if err != nil || len(res.Records) == 0 {
		return 0, false
	}
	m, _, err := message.DecodeRecord(res.Records[0], message.DecodeOptions{SkipBody: true})
	if err != nil || m.QueueOffset != off {
		return 0, false
	}
	return m.StoreTimestamp, true
}

// groupConns returns one connection per live client of a consumer group.
func (m *clientManager) groupConns(group string) []*remoting.Conn {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.consumers[group]
	if g == nil {
		return nil
	}
	out := make([]*remoting.Conn, 0, len(g.channels))
	for _, ch := range g.channels {
		out = append(out, ch.conn)
	}
	return out
}
