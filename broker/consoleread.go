package broker

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/sluicemq/sluice/broker/acl"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// Whole-table reads for admin tools and the web console: one round trip per broker, so a
// page over 10,000 topics or 1,000 groups does not cost one request per row.

// handleAllTopicConfig serves GET_ALL_TOPIC_CONFIG (RocketMQ request code 21): the
// broker's topic table as TopicConfigSerializeWrapper JSON
// ({"topicConfigTable":{name:config},"dataVersion":{...}}), as the Java broker answers.
// With aclEnable it lists only the topics the caller has a permission on (PUB or SUB;
// a %RETRY% topic through its group): an admin account without entries sees them all.
// (RocketMQ 4.9 lists every topic to any signed account.)
func (b *Broker) handleAllTopicConfig(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	topics, version := b.topics.snapshot()
	if b.acl != nil {
		may, err := b.acl.Permits(conn.RemoteAddr(), req)
		if err != nil {
			return errResponse(remoting.SystemError, "%v", err)
		}
		for name := range topics {
			res := acl.Topic(name, acl.Any)
			if g, ok := cutRetry(name); ok {
				res = acl.Group(g, acl.Any)
			}
			if !may(res) {
				delete(topics, name)
			}
		}
	}
	r := remoting.NewResponse(remoting.Success, "")
	r.Body, _ = json.Marshal(wire.TopicConfigSerializeWrapper{TopicConfigTable: topics, DataVersion: version})
	return r
}

// handleGroupOffsets serves Sluice's GroupOffsets (request code 7003,
// wire.GroupOffsets): every committed offset of ext consumerGroup with each
// queue's min and max offsets.
func (b *Broker) handleGroupOffsets(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	group, err := req.ExtString("consumerGroup", true)
	if err != nil {
		return errResponse(remoting.SystemError, "%v", err)
	}
	body := wire.GroupOffsetsBody{Group: group, Queues: []wire.GroupQueueOffset{}}
	b.offsets.mu.Lock()
	for k, qs := range b.offsets.table {
		i := strings.LastIndexByte(k, '@')
		if i < 0 || k[i+1:] != group {
			continue
		}
		for q, off := range qs {
			body.Queues = append(body.Queues, wire.GroupQueueOffset{Topic: k[:i], QueueID: q, Committed: off})
		}
	}
	b.offsets.mu.Unlock()
	for i := range body.Queues {
		q := &body.Queues[i]
		q.Min, q.Max = b.store.MinOffset(q.Topic, q.QueueID), b.store.MaxOffset(q.Topic, q.QueueID)
	}
	sort.Slice(body.Queues, func(i, j int) bool {
		x, y := body.Queues[i], body.Queues[j]
		if x.Topic != y.Topic {
			return x.Topic < y.Topic
		}
		return x.QueueID < y.QueueID
	})
	r := remoting.NewResponse(remoting.Success, "")
	r.Body, _ = json.Marshal(body)
	return r
}
