package admin

import (
	"context"
	"sort"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// QueueOffset is one message queue's offsets for a consumer group.
type QueueOffset struct {
	Queue      message.MessageQueue
	BrokerAddr string
	// Committed is the group's committed offset (the next message it will consume), -1
	// when the group has none for this queue (QUERY_NOT_FOUND).
	Committed int64
	// Min and Max are the queue's first available offset and next offset to be written.
	Min, Max int64
}

// Lag returns how many messages of the queue the group has not consumed yet (Max -
// Committed; Max - Min when nothing is committed).
func (q QueueOffset) Lag() int64 {
	if q.Committed < 0 {
		return q.Max - q.Min
	}
	return max(q.Max-q.Committed, 0)
}

// invoke sends one request to a broker, bounded by ctx and Config.Timeout; a
// transport error is wrapped by brokerFailed.
func (a *Admin) invoke(ctx context.Context, brokerName, addr string, code remoting.RequestCode, ext map[string]string, body []byte) (*remoting.RemotingCommand, error) {
	c, cancel, err := a.reqCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	resp, err := a.client.InvokeSync(c, addr, remoting.NewRequest(code, ext, body))
	if err != nil {
		return nil, brokerFailed(brokerName, addr, err)
	}
	return resp, nil
}

// int64Call runs a request whose answer is ext key on success.
func (a *Admin) int64Call(ctx context.Context, brokerName, addr string, code remoting.RequestCode, ext map[string]string, key string) (int64, error) {
	resp, err := a.invoke(ctx, brokerName, addr, code, ext, nil)
	if err != nil {
		return 0, err
	}
	if err := resp.ResponseErrFor(code, brokerName, addr); err != nil {
		return 0, err
	}
	return resp.ExtInt64(key, true)
}

// topicQueues returns the read queues of topic from its route, with their brokers'
// master addresses, sorted.
func (a *Admin) topicQueues(ctx context.Context, topic string) ([]message.MessageQueue, map[string]string, error) {
	r, err := a.TopicRoute(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	addrs := map[string]string{}
	for _, bd := range r.BrokerDatas {
		if addr := bd.MasterAddr(); addr != "" {
			addrs[bd.BrokerName] = addr
		}
	}
	var mqs []message.MessageQueue
	for _, qd := range r.QueueDatas {
		if addrs[qd.BrokerName] == "" {
			continue
		}
		n := max(qd.ReadQueueNums, qd.WriteQueueNums)
		for q := 0; q < n; q++ {
			mqs = append(mqs, message.MessageQueue{Topic: topic, BrokerName: qd.BrokerName, QueueID: q})
		}
	}
	sort.Slice(mqs, func(i, j int) bool { return mqs[i].Less(mqs[j]) })
	return mqs, addrs, nil
}

// ConsumerOffsets returns, for every queue of topic (from its route), the group's
// committed offset (QUERY_CONSUMER_OFFSET, RocketMQ request code 14) and the queue's
// min and max offsets (31, 30). Errors: a [*config.Error] for a bad group or topic name,
// route errors (wrapping [ErrTopicNotExist] for an unknown topic) and
// broker errors (a refusal is a *remoting.ResponseError): joined when no broker
// answered, else in a [*PartialError] returned with the queues of the brokers that did.
func (a *Admin) ConsumerOffsets(ctx context.Context, group, topic string) ([]QueueOffset, error) {
	if err := checkGroupTopic(group, topic); err != nil {
		return nil, err
	}
	mqs, addrs, err := a.topicQueues(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make([]QueueOffset, 0, len(mqs))
	failed := map[string]error{} // broker name → its first error: its other queues are skipped
	for _, mq := range mqs {
		if failed[mq.BrokerName] != nil {
			continue
		}
		qo, err := a.queueOffset(ctx, group, mq, addrs[mq.BrokerName])
		if err != nil {
			failed[mq.BrokerName] = err
			continue
		}
		out = append(out, qo)
	}
	var errs []error
	for _, name := range sortedKeys(failed) {
		errs = append(errs, failed[name])
	}
	err = partial(len(addrs)-len(failed), errs)
	if err != nil && !isPartial(err) {
		return nil, err
	}
	return out, err
}

// queueOffset reads one queue's max, min and the group's committed offset.
func (a *Admin) queueOffset(ctx context.Context, group string, mq message.MessageQueue, addr string) (QueueOffset, error) {
	ext := wire.QueueHeader{Topic: mq.Topic, QueueID: int32(mq.QueueID)}.Ext(false)
	qo := QueueOffset{Queue: mq, BrokerAddr: addr}
	var err error
	if qo.Max, err = a.int64Call(ctx, mq.BrokerName, addr, remoting.GetMaxOffset, ext, "offset"); err != nil {
		return qo, err
	}
	if qo.Min, err = a.int64Call(ctx, mq.BrokerName, addr, remoting.GetMinOffset, ext, "offset"); err != nil {
		return qo, err
	}
	off, found, err := a.committedOffset(ctx, group, mq, addr)
	if err != nil {
		return qo, err
	}
	qo.Committed = -1
	if found {
		qo.Committed = off
	}
	return qo, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func checkGroupTopic(group, topic string) error {
	if group == "" {
		return &config.Error{Package: "admin", Field: "group", Reason: "a consumer group is required"}
	}
	if err := message.ValidateGroupTopics(group); err != nil {
		return &config.Error{Package: "admin", Field: "group", Reason: err.Error()}
	}
	if err := message.ValidateTopic(topic); err != nil {
		return &config.Error{Package: "admin", Field: "topic", Reason: err.Error()}
	}
	return nil
}

// ResetResult reports a [Admin.ResetOffsetByTime].
type ResetResult struct {
	// Offsets are the group's new offsets, per queue.
	Offsets map[message.MessageQueue]int64
	// Offline lists the brokers (by name) that had no consumer of the group online to
	// tell; their offsets were reset all the same: by a Sluice broker itself, and for an
	// Apache RocketMQ broker (which answers CONSUMER_NOT_ONLINE, 206, and leaves them) by
	// this admin writing each queue's offset with UPDATE_CONSUMER_OFFSET (15), as Apache
	// RocketMQ's mqadmin falls back to doing.
	Offline []string
}

// ResetOffsetByTime moves consumer group's offsets of topic on every broker of the
// topic's route to the first message stored at or after t (the end of each queue
// when t is the zero time), with INVOKE_BROKER_TO_RESET_OFFSET (RocketMQ request code
// 222). The brokers store the new offsets and tell the group's running consumers to
// jump there (RESET_CONSUMER_CLIENT_OFFSET, 220). With force=false a queue only moves
// backwards (its committed offset is kept when the target lies ahead of it).
//
// Errors: a [*config.Error] for a bad group or topic; route errors; one error per
// failing broker (a refusal is a *remoting.ResponseError): joined when every broker
// failed, else in a [*PartialError] (the other brokers are reset, their offsets in the
// result).
func (a *Admin) ResetOffsetByTime(ctx context.Context, group, topic string, t time.Time, force bool) (*ResetResult, error) {
	if err := checkGroupTopic(group, topic); err != nil {
		return nil, err
	}
	r, err := a.TopicRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	ts := int64(-1)
	if !t.IsZero() {
		ts = t.UnixMilli()
	}
	ext := wire.ResetOffsetHeader{Topic: topic, Group: group, Timestamp: ts, IsForce: force}.Ext()
	res := &ResetResult{Offsets: map[message.MessageQueue]int64{}}
	var errs []error
	brokers := 0
	for _, bd := range sortedBrokers(r) {
		addr := bd.MasterAddr()
		if addr == "" {
			continue
		}
		brokers++
		resp, err := a.invoke(ctx, bd.BrokerName, addr, remoting.InvokeBrokerToResetOffset, ext, nil)
		if err != nil {
			errs = append(errs, err) // names the broker
			continue
		}
		if resp.ResponseCode() == remoting.ConsumerNotOnline {
			if err := a.resetOffline(ctx, bd.BrokerName, addr, r, group, topic, ts, force, res.Offsets); err != nil {
				errs = append(errs, err)
				continue
			}
			res.Offline = append(res.Offline, bd.BrokerName)
			continue
		}
		if err := resp.ResponseErrFor(remoting.InvokeBrokerToResetOffset, bd.BrokerName, addr); err != nil {
			errs = append(errs, err)
			continue
		}
		table, err := wire.DecodeResetOffsetBody(resp.Body)
		if err != nil {
			errs = append(errs, brokerFailed(bd.BrokerName, addr, err))
			continue
		}
		for mq, off := range table {
			res.Offsets[mq] = off
		}
		if resp.Remark != "" {
			res.Offline = append(res.Offline, bd.BrokerName)
		}
	}
	return res, partial(brokers-len(errs), errs)
}

// resetOffline resets group's offsets of topic on one broker that refused
// INVOKE_BROKER_TO_RESET_OFFSET with CONSUMER_NOT_ONLINE (Apache RocketMQ does when no
// consumer of the group is online): for each of the broker's queues it finds the target
// (GET_MAX_OFFSET for ts -1, else SEARCH_OFFSET_BY_TIMESTAMP), keeps the committed offset
// when !force and the target is not behind it, and otherwise writes the target with
// UPDATE_CONSUMER_OFFSET. The new offsets go into out.
func (a *Admin) resetOffline(ctx context.Context, brokerName, addr string, r *wire.TopicRouteData, group, topic string, ts int64, force bool, out map[message.MessageQueue]int64) error {
	for _, qd := range r.QueueDatas {
		if qd.BrokerName != brokerName {
			continue
		}
		for q := 0; q < max(qd.ReadQueueNums, qd.WriteQueueNums); q++ {
			mq := message.MessageQueue{Topic: topic, BrokerName: brokerName, QueueID: q}
			qh := wire.QueueHeader{Topic: topic, QueueID: int32(q), Timestamp: ts}
			var target int64
			var err error
			if ts == -1 {
				target, err = a.int64Call(ctx, brokerName, addr, remoting.GetMaxOffset, qh.Ext(false), "offset")
			} else {
				target, err = a.int64Call(ctx, brokerName, addr, remoting.SearchOffsetByTimestamp, qh.Ext(true), "offset")
			}
			if err != nil {
				return err
			}
			oh := wire.ConsumerOffsetHeader{ConsumerGroup: group, Topic: topic, QueueID: int32(q), CommitOffset: target}
			if !force {
				resp, err := a.invoke(ctx, brokerName, addr, remoting.QueryConsumerOffset, oh.Ext(false), nil)
				if err != nil {
					return err
				}
				if resp.ResponseCode() == remoting.Success {
					if cur, err := resp.ExtInt64("offset", true); err == nil && target >= cur {
						out[mq] = cur
						continue
					}
				}
			}
			resp, err := a.invoke(ctx, brokerName, addr, remoting.UpdateConsumerOffset, oh.Ext(true), nil)
			if err != nil {
				return err
			}
			if err := resp.ResponseErrFor(remoting.UpdateConsumerOffset, brokerName, addr); err != nil {
				return err
			}
			out[mq] = target
		}
	}
	return nil
}

func sortedBrokers(r *wire.TopicRouteData) []wire.BrokerData {
	out := append([]wire.BrokerData(nil), r.BrokerDatas...)
	sort.Slice(out, func(i, j int) bool { return out[i].BrokerName < out[j].BrokerName })
	return out
}
