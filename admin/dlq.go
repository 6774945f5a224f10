package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Limits of the DLQ calls.
const (
	DefaultDLQListMax = 100   // messages ListDLQ returns by default
	MaxDLQListMax     = 10000 // most messages one ListDLQ returns
	readBatch         = 32    // messages per READ_QUEUE request (a broker's pull cap)
)

// RedriveProducerGroup is the producer group ResendDLQ sends as.
const RedriveProducerGroup = "SLUICE_DLQ_REDRIVE"

// QueueRead is the answer of [Admin.ReadQueue].
type QueueRead struct {
	// Messages are the stored messages read, in queue order, bodies as stored
	// (compressed when SysFlag has message.SysFlagCompressed). BrokerName is set.
	Messages []*message.MessageExt
	// NextOffset is the queue offset to read from next.
	NextOffset int64
	// Min and Max are the queue's first available offset and next offset to be written.
	Min, Max int64
}

// ReadQueue reads up to maxNums (1..32) stored messages of mq from queue offset offset
// with Sluice's READ_QUEUE request (code 7001): no consumer group,
// no permission check (so %DLQ% topics, which refuse pulls, are readable), no offset
// commit. addr is the master address of mq's broker; "" looks it up in mq.Topic's
// route. An offset past the end gives no messages and NextOffset = Max. Errors: route
// errors, a *remoting.ResponseError (a broker that is not Sluice answers code 3
// REQUEST_CODE_NOT_SUPPORTED), transport and decode errors naming the broker.
func (a *Admin) ReadQueue(ctx context.Context, mq message.MessageQueue, addr string, offset int64, maxNums int) (*QueueRead, error) {
	if offset < 0 {
		return nil, &config.Error{Package: "admin", Field: "offset", Reason: fmt.Sprintf("%d is negative", offset)}
	}
	if maxNums < 1 || maxNums > readBatch {
		return nil, &config.Error{Package: "admin", Field: "maxNums", Reason: fmt.Sprintf("%d is outside 1..%d", maxNums, readBatch)}
	}
	if addr == "" {
		_, addrs, err := a.topicQueues(ctx, mq.Topic)
		if err != nil {
			return nil, err
		}
		if addr = addrs[mq.BrokerName]; addr == "" {
			return nil, fmt.Errorf("admin: broker %q is not in the route of %q", mq.BrokerName, mq.Topic)
		}
	}
	ext := wire.ReadQueueHeader{Topic: mq.Topic, QueueID: int32(mq.QueueID), Offset: offset, MaxMsgNums: int32(maxNums)}.Ext()
	resp, err := a.invoke(ctx, mq.BrokerName, addr, wire.ReadQueue, ext, nil)
	if err != nil {
		return nil, err
	}
	r := &QueueRead{}
	switch resp.ResponseCode() {
	case remoting.Success, remoting.PullNotFound, remoting.PullRetryImmediately, remoting.PullOffsetMoved:
	default:
		return nil, resp.ResponseErrFor(wire.ReadQueue, mq.BrokerName, addr)
	}
	rh, err := wire.ParsePullResponseHeader(resp)
	if err != nil {
		return nil, brokerFailed(mq.BrokerName, addr, err)
	}
	r.NextOffset, r.Min, r.Max = rh.NextBeginOffset, rh.MinOffset, rh.MaxOffset
	if resp.ResponseCode() == remoting.PullOffsetMoved && offset > r.Max {
		r.NextOffset = r.Max
	}
	if resp.ResponseCode() == remoting.Success {
		if r.Messages, err = message.DecodeRecords(resp.Body, message.DecodeOptions{}); err != nil {
			return nil, brokerFailed(mq.BrokerName, addr, fmt.Errorf("decode records: %w", err))
		}
		for _, m := range r.Messages {
			m.BrokerName = mq.BrokerName
		}
	}
	return r, nil
}

// DLQMessage is one dead letter of a consumer group.
type DLQMessage struct {
	// Queue is the %DLQ%<group> queue holding it and QueueOffset its offset there.
	Queue       message.MessageQueue
	QueueOffset int64
	// Resent reports whether the message lies below the group's re-drive mark, i.e. a
	// ResendDLQ already sent it back to its topic.
	Resent bool
	// OriginTopic is the topic the message was consumed from (property RETRY_TOPIC), ""
	// when unknown.
	OriginTopic string
	// Message is the stored dead letter with its body decompressed, tag, keys, MsgID
	// (the original UNIQ_KEY), ReconsumeTimes and StoreTimestamp.
	Message *message.MessageExt
}

// DLQListOptions select the dead letters ListDLQ returns.
type DLQListOptions struct {
	// FromOffset is the first DLQ queue offset to return (on every queue). Default 0:
	// from the oldest message still stored.
	FromOffset int64
	// Max bounds the number of messages returned, 1..MaxDLQListMax. Default:
	// DefaultDLQListMax.
	Max int
	// Skip leaves out the first Skip messages of the order (paging: page p of size n is
	// Skip (p-1)*n, Max n). Skip+Max is at most MaxDLQListMax. Default 0.
	Skip int
	// NewestFirst orders by store time from the newest dead letter back (what an
	// operator looks for first). Default false: from the oldest.
	NewestFirst bool
}

// dlqQueues returns the queues of %DLQ%<group> and their masters; none when the DLQ was
// never created (no dead letter yet). A stopped cluster is an error (see
// [Admin.TopicRoute]), never "no DLQ".
func (a *Admin) dlqQueues(ctx context.Context, group string) ([]message.MessageQueue, map[string]string, error) {
	if group == "" {
		return nil, nil, &config.Error{Package: "admin", Field: "group", Reason: "a consumer group is required"}
	}
	topic := message.DLQTopic(group)
	if err := message.ValidateTopic(topic); err != nil {
		return nil, nil, &config.Error{Package: "admin", Field: "group", Reason: err.Error()}
	}
	mqs, addrs, err := a.topicQueues(ctx, topic)
	if errors.Is(err, ErrTopicNotExist) {
		return nil, nil, nil
	}
	return mqs, addrs, err
}

// redriveMark returns the group's committed offset of a DLQ queue — how far ResendDLQ
// got — or 0 when there is none.
func (a *Admin) redriveMark(ctx context.Context, group string, mq message.MessageQueue, addr string) (int64, error) {
	ext := map[string]string{"consumerGroup": group, "topic": mq.Topic, "queueId": strconv.Itoa(mq.QueueID)}
	resp, err := a.invoke(ctx, mq.BrokerName, addr, remoting.QueryConsumerOffset, ext, nil)
	if err != nil {
		return 0, err
	}
	switch resp.ResponseCode() {
	case remoting.Success:
		return resp.ExtInt64("offset", true)
	case remoting.QueryNotFound:
		return 0, nil
	}
	return 0, resp.ResponseErrFor(remoting.QueryConsumerOffset, mq.BrokerName, addr)
}

// dlqQueue is one queue of a group's DLQ with its offsets.
type dlqQueue struct {
	mq             message.MessageQueue
	addr           string
	min, max, mark int64
}

// dlqState reads every DLQ queue's min and max offsets and re-drive mark. A broker that
// fails (unreachable, refusing) is skipped after its first error and put in failed (name
// → error): the queues of the others are returned, and brokersPartial(brokers, failed)
// is the [*PartialError] to return with what the caller makes of them; when no broker
// answers, err is the joined errors. brokers is how many brokers hold the DLQ.
func (a *Admin) dlqState(ctx context.Context, group string) (qs []dlqQueue, failed map[string]error, brokers int, err error) {
	mqs, addrs, err := a.dlqQueues(ctx, group)
	if err != nil {
		return nil, nil, 0, err
	}
	failed = map[string]error{} // broker name → its first error: its other queues are skipped
	out := make([]dlqQueue, 0, len(mqs))
	for _, mq := range mqs {
		if failed[mq.BrokerName] != nil {
			continue
		}
		q := dlqQueue{mq: mq, addr: addrs[mq.BrokerName]}
		if err := a.readDLQQueue(ctx, group, &q); err != nil {
			failed[mq.BrokerName] = err
			continue
		}
		out = append(out, q)
	}
	if len(failed) > 0 { // drop what a failing broker answered before it failed
		kept := out[:0]
		for _, q := range out {
			if failed[q.mq.BrokerName] == nil {
				kept = append(kept, q)
			}
		}
		out = kept
	}
	if err := brokersPartial(len(addrs), failed); err != nil && !isPartial(err) {
		return nil, nil, 0, err
	}
	return out, failed, len(addrs), nil
}

// readDLQQueue fills q's min and max offsets and re-drive mark.
func (a *Admin) readDLQQueue(ctx context.Context, group string, q *dlqQueue) (err error) {
	ext := wire.QueueHeader{Topic: q.mq.Topic, QueueID: int32(q.mq.QueueID)}.Ext(false)
	if q.min, err = a.int64Call(ctx, q.mq.BrokerName, q.addr, remoting.GetMinOffset, ext, "offset"); err != nil {
		return err
	}
	if q.max, err = a.int64Call(ctx, q.mq.BrokerName, q.addr, remoting.GetMaxOffset, ext, "offset"); err != nil {
		return err
	}
	q.mark, err = a.redriveMark(ctx, group, q.mq, q.addr)
	return err
}

// brokersPartial is partial over brokers of which failed (broker name → error) did
// not answer, the errors in broker-name order.
func brokersPartial(brokers int, failed map[string]error) error {
	var errs []error
	for _, name := range sortedKeys(failed) {
		errs = append(errs, failed[name])
	}
	return partial(brokers-len(failed), errs)
}

// DLQCount is how many dead letters a group's DLQ holds ([Admin.CountDLQ]).
type DLQCount struct {
	Total   int64 // stored dead letters, on every DLQ queue
	Pending int64 // of those, not re-driven yet (at or past the re-drive mark)
}

// CountDLQ counts the dead letters of a consumer group from its DLQ queues' offsets
// (GET_MIN_OFFSET, GET_MAX_OFFSET and the re-drive mark: three requests per queue, no
// message read). A group without a DLQ has none. Errors as [Admin.ListDLQ]; with a
// [*PartialError] the count is that of the brokers that answered.
func (a *Admin) CountDLQ(ctx context.Context, group string) (DLQCount, error) {
	qs, failed, brokers, err := a.dlqState(ctx, group)
	if err != nil {
		return DLQCount{}, err
	}
	var c DLQCount
	for _, q := range qs {
		c.Total += q.max - q.min
		c.Pending += q.max - max(q.min, q.mark)
	}
	return c, brokersPartial(brokers, failed)
}

// ListDLQ returns the dead letters of a consumer group — the messages in %DLQ%<group>
// on every broker of its route — ordered by store time (oldest first, or newest first
// with NewestFirst), from Skip on, at most Max, with their original topic and whether a
// ResendDLQ already re-drove them. A group without a DLQ has none (nil, nil); use
// [Admin.CountDLQ] for the total. The DLQ is read with READ_QUEUE (see
// [Admin.ReadQueue]); normal consumers cannot read it. Each queue is read for at most
// Skip+Max messages from the chosen end.
//
// Errors: a [*config.Error] for bad options, route errors (a stopped cluster is an
// error, never "no dead letters"), and one error per failing broker (a refusal is a
// *remoting.ResponseError): joined when no broker answered, else in a [*PartialError]
// returned with the dead letters of the brokers that did (the order and paging are
// then those of their dead letters alone).
func (a *Admin) ListDLQ(ctx context.Context, group string, opt DLQListOptions) ([]DLQMessage, error) {
	if opt.Max == 0 {
		opt.Max = DefaultDLQListMax
	}
	if opt.Max < 1 || opt.Max > MaxDLQListMax {
		return nil, &config.Error{Package: "admin", Field: "Max", Reason: fmt.Sprintf("%d is outside 1..%d", opt.Max, MaxDLQListMax)}
	}
	if opt.Skip < 0 || opt.Skip+opt.Max > MaxDLQListMax {
		return nil, &config.Error{Package: "admin", Field: "Skip", Reason: fmt.Sprintf("%d: Skip must not be negative and Skip+Max (%d) at most %d", opt.Skip, opt.Skip+opt.Max, MaxDLQListMax)}
	}
	if opt.FromOffset < 0 {
		return nil, &config.Error{Package: "admin", Field: "FromOffset", Reason: fmt.Sprintf("%d is negative", opt.FromOffset)}
	}
	qs, failed, brokers, err := a.dlqState(ctx, group)
	if err != nil {
		return nil, err
	}
	want := int64(opt.Skip + opt.Max)
	var out []DLQMessage
	for _, q := range qs {
		if failed[q.mq.BrokerName] != nil {
			continue
		}
		from, to := max(q.min, opt.FromOffset), q.max
		if opt.NewestFirst {
			from = max(from, to-want)
		} else {
			to = min(to, from+want)
		}
		for off := from; off < to; {
			r, err := a.ReadQueue(ctx, q.mq, q.addr, off, int(min(readBatch, to-off)))
			if err != nil {
				failed[q.mq.BrokerName] = err
				break
			}
			for _, m := range r.Messages {
				if m.QueueOffset < to {
					out = append(out, dlqMessage(q.mq, m, q.mark))
				}
			}
			if r.NextOffset <= off || (len(r.Messages) == 0 && r.NextOffset >= r.Max) {
				break
			}
			off = r.NextOffset
		}
	}
	perr := brokersPartial(brokers, failed)
	if perr != nil && !isPartial(perr) {
		return nil, perr
	}
	if perr != nil { // drop what a failing broker returned before it failed
		out = slices.DeleteFunc(out, func(d DLQMessage) bool { return failed[d.Queue.BrokerName] != nil })
	}
	sort.SliceStable(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if x.Message.StoreTimestamp != y.Message.StoreTimestamp {
			return (x.Message.StoreTimestamp < y.Message.StoreTimestamp) != opt.NewestFirst
		}
		if x.Queue != y.Queue {
			return x.Queue.Less(y.Queue) != opt.NewestFirst
		}
		return (x.QueueOffset < y.QueueOffset) != opt.NewestFirst
	})
	if opt.Skip >= len(out) {
		return nil, perr
	}
	return out[opt.Skip:min(len(out), opt.Skip+opt.Max)], perr
}

func dlqMessage(mq message.MessageQueue, m *message.MessageExt, mark int64) DLQMessage {
	shown := *m
	if m.SysFlag&message.SysFlagCompressed != 0 {
		if body, err := message.Inflate(m.Body); err == nil {
			shown.Body = body
		}
	}
	return DLQMessage{Queue: mq, QueueOffset: m.QueueOffset, Resent: m.QueueOffset < mark,
		OriginTopic: m.Property(message.PropertyRetryTopic), Message: &shown}
}

// DLQResendOptions select the dead letters ResendDLQ sends back.
type DLQResendOptions struct {
	// FromOffset is the first DLQ queue offset considered (on every queue). Default 0.
	FromOffset int64
	// IncludeResent resends messages below the group's re-drive mark too (already
	// resent once). Default false: only dead letters not resent yet.
	IncludeResent bool
	// Max bounds the number of messages resent; 0 = all.
	Max int
	// ToOriginalTopic sends each dead letter to its original topic, where EVERY consumer
	// group subscribed to it gets it again. Default false: it goes to %RETRY%<group> with
	// its original topic in RETRY_TOPIC, so only this group's consumers get it (shown under
	// the original topic, with a reconsume count of 0) and other groups, which already
	// consumed it, are not made to apply it twice.
	ToOriginalTopic bool
	// Progress, when set, is called after each dead letter tried, with the numbers resent
	// and failed so far (for a progress bar; [Admin.CountDLQ]'s Pending is the total).
	Progress func(resent, failed int)
}

// ResentMessage is one dead letter ResendDLQ sent back to its topic.
type ResentMessage struct {
	DLQ         message.MessageQueue // the DLQ queue it came from
	DLQOffset   int64                // its offset there
	MsgID       string               // its message id (UNIQ_KEY, kept)
	Topic       string               // the topic it was sent to
	Keys        []string             // its keys (kept)
	Destination message.MessageQueue // the queue it was stored in
	QueueOffset int64                // its offset there
}

// DLQResendResult reports a ResendDLQ: the messages sent back, and those that could
// not be — the re-drive of each one's DLQ queue stopped there, and the queue's re-drive
// mark stays at it.
type DLQResendResult struct {
	Resent []ResentMessage
	Failed []DLQResendError
}

// DLQResendError is a dead letter ResendDLQ could not send back.
type DLQResendError struct {
	DLQ       message.MessageQueue
	DLQOffset int64
	MsgID     string
	Err       error
}

// Error implements error.
func (e *DLQResendError) Error() string {
	return fmt.Sprintf("admin: resend dead letter %s offset %d (msgId %s): %v", e.DLQ, e.DLQOffset, e.MsgID, e.Err)
}

// Unwrap returns the cause.
func (e *DLQResendError) Unwrap() error { return e.Err }

// ResendDLQ re-drives the dead letters of a consumer group: every message of
// %DLQ%<group> from the group's re-drive mark on (see DLQResendOptions) is sent back, as a
// new message, to its original topic (property RETRY_TOPIC) with SEND_MESSAGE_V2 as
// producer group RedriveProducerGroup: body, flag, tag, keys, UNIQ_KEY and user
// properties kept; reconsume count reset to 0; the retry and delay properties dropped.
// The consumers of the group then consume it like a new message (with the full retry
// budget). Queues of the topic are used round-robin (ordered topics lose the original
// queue).
//
// After each resent message the mark (the group's consumer offset of the DLQ queue,
// UPDATE_CONSUMER_OFFSET) moves past it — never backwards — so running ResendDLQ again
// sends nothing twice unless IncludeResent asks for it.
// A message that cannot be sent (no RETRY_TOPIC, no route, a refused send) stops the
// re-drive of its DLQ queue and is reported in Failed; the returned error joins those
// failures. A broker whose DLQ queues cannot be read or marked (unreachable, refusing)
// is skipped after its first error and the others are re-driven: the returned error
// then holds a [*PartialError] naming it (with the resend failures, if any). Route
// errors, and every broker failing, are returned with no result.
func (a *Admin) ResendDLQ(ctx context.Context, group string, opt DLQResendOptions) (*DLQResendResult, error) {
	if opt.FromOffset < 0 {
		return nil, &config.Error{Package: "admin", Field: "FromOffset", Reason: fmt.Sprintf("%d is negative", opt.FromOffset)}
	}
	if opt.Max < 0 {
		return nil, &config.Error{Package: "admin", Field: "Max", Reason: fmt.Sprintf("%d is negative", opt.Max)}
	}
	mqs, addrs, err := a.dlqQueues(ctx, group)
	if err != nil {
		return nil, err
	}
	res := &DLQResendResult{}
	s := &resender{a: a, next: map[string]int{}, group: group, toOriginal: opt.ToOriginalTopic}
	var errs []error
	failed := map[string]error{} // broker name → its first error: its other DLQ queues are skipped
	for _, mq := range mqs {
		if failed[mq.BrokerName] != nil {
			continue
		}
		if err := a.resendQueue(ctx, s, mq, addrs[mq.BrokerName], opt, res, &errs); err != nil {
			failed[mq.BrokerName] = err
		}
	}
	perr := brokersPartial(len(addrs), failed)
	if perr != nil && !isPartial(perr) && len(res.Resent) == 0 && len(res.Failed) == 0 {
		return nil, perr
	}
	return res, errors.Join(append([]error{perr}, errs...)...)
}

// resendQueue re-drives one DLQ queue for ResendDLQ, adding to res (and a send failure
// to errs). It returns the error of a request to the DLQ queue's broker (reading the
// mark, the max offset or the messages, moving the mark): that broker failed.
func (a *Admin) resendQueue(ctx context.Context, s *resender, mq message.MessageQueue, addr string, opt DLQResendOptions, res *DLQResendResult, errs *[]error) error {
	mark, err := a.redriveMark(ctx, s.group, mq, addr)
	if err != nil {
		return err
	}
	off := opt.FromOffset
	if !opt.IncludeResent {
		off = max(off, mark)
	}
	advance := func(to int64) error {
		if to <= mark {
			return nil // never move the mark backwards
		}
		if err := a.commitMark(ctx, s.group, mq, addr, to); err != nil {
			return err
		}
		mark = to
		return nil
	}
	// Only the dead letters present now: a re-driven message that fails again and
	// comes back to the DLQ during this run is left for the next one.
	end, err := a.int64Call(ctx, mq.BrokerName, addr, remoting.GetMaxOffset,
		wire.QueueHeader{Topic: mq.Topic, QueueID: int32(mq.QueueID)}.Ext(false), "offset")
	if err != nil {
		return err
	}
	for (opt.Max == 0 || len(res.Resent) < opt.Max) && off < end {
		n := readBatch
		if opt.Max > 0 {
			n = min(n, opt.Max-len(res.Resent))
		}
		r, err := a.ReadQueue(ctx, mq, addr, off, n)
		if err != nil {
			return err
		}
		for _, m := range r.Messages {
			if m.QueueOffset >= end {
				break
			}
			rm, err := s.resend(ctx, m)
			if err != nil {
				e := &DLQResendError{DLQ: mq, DLQOffset: m.QueueOffset, MsgID: m.MsgID, Err: err}
				res.Failed = append(res.Failed, *e)
				*errs = append(*errs, e)
				if opt.Progress != nil {
					opt.Progress(len(res.Resent), len(res.Failed))
				}
				return nil // the re-drive of this queue stops at the failed message
			}
			rm.DLQ = mq
			res.Resent = append(res.Resent, *rm)
			if opt.Progress != nil {
				opt.Progress(len(res.Resent), len(res.Failed))
			}
			if err := advance(m.QueueOffset + 1); err != nil {
				return err
			}
		}
		if r.NextOffset <= off || (len(r.Messages) == 0 && r.NextOffset >= r.Max) {
			break
		}
		if len(r.Messages) == 0 {
			// Entries skipped (no message): move the mark past them too.
			if err := advance(r.NextOffset); err != nil {
				return err
			}
		}
		off = r.NextOffset
	}
	return nil
}

// commitMark stores the re-drive mark of a DLQ queue (UPDATE_CONSUMER_OFFSET, 15).
func (a *Admin) commitMark(ctx context.Context, group string, mq message.MessageQueue, addr string, off int64) error {
	ext := wire.ConsumerOffsetHeader{ConsumerGroup: group, Topic: mq.Topic, QueueID: int32(mq.QueueID), CommitOffset: off}.Ext(true)
	resp, err := a.invoke(ctx, mq.BrokerName, addr, remoting.UpdateConsumerOffset, ext, nil)
	if err != nil {
		return err
	}
	if err := resp.ResponseErrFor(remoting.UpdateConsumerOffset, mq.BrokerName, addr); err != nil {
		return err
	}
	return nil
}

// resender sends dead letters back to their topics, round-robin over each topic's
// writable queues.
type resender struct {
	a          *Admin
	next       map[string]int // topic → next queue index
	group      string         // the consumer group whose DLQ is re-driven
	toOriginal bool           // DLQResendOptions.ToOriginalTopic
}

// dropOnResend are the properties a re-driven message loses: retry and delay
// bookkeeping, and what the broker adds on every store.
var dropOnResend = []string{
	message.PropertyRetryTopic, message.PropertyOriginMessageID, message.PropertyMaxReconsumeTimes,
	message.PropertyReconsumeTime, message.PropertyDelayTimeLevel, message.PropertyRealTopic, message.PropertyRealQueueID,
	message.PropertyCluster, message.PropertyMinOffset, message.PropertyMaxOffset, message.PropertyConsumeStartTimestamp,
	message.PropertyTransactionPrepared, message.PropertyProducerGroup, message.PropertyWaitStoreMsgOK,
}

func (s *resender) resend(ctx context.Context, m *message.MessageExt) (*ResentMessage, error) {
	original := m.Property(message.PropertyRetryTopic)
	if original == "" {
		return nil, errors.New("the dead letter has no RETRY_TOPIC property: its original topic is unknown")
	}
	topic := original
	if !s.toOriginal {
		topic = message.RetryTopic(s.group) // only this group gets it again
	}
	r, err := s.a.TopicRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	var queues []message.MessageQueue
	addrs := map[string]string{}
	for _, bd := range sortedBrokers(r) {
		if addr := bd.MasterAddr(); addr != "" {
			addrs[bd.BrokerName] = addr
		}
	}
	for _, bd := range sortedBrokers(r) {
		for _, qd := range r.QueueDatas {
			if qd.BrokerName != bd.BrokerName || qd.Perm&wire.PermWrite == 0 || addrs[qd.BrokerName] == "" {
				continue
			}
			for q := 0; q < qd.WriteQueueNums; q++ {
				queues = append(queues, message.MessageQueue{Topic: topic, BrokerName: qd.BrokerName, QueueID: q})
			}
		}
	}
	if len(queues) == 0 {
		return nil, fmt.Errorf("topic %q has no writable queue", topic)
	}
	mq := queues[s.next[topic]%len(queues)]
	s.next[topic]++
	props := make(map[string]string, len(m.Properties))
	for k, v := range m.Properties {
		props[k] = v
	}
	for _, k := range dropOnResend {
		delete(props, k)
	}
	if !s.toOriginal {
		props[message.PropertyRetryTopic] = original // consumers show it under its original topic
	}
	maxTimes := int32(16) // RocketMQ's default retry budget
	if n, err := strconv.Atoi(m.Property(message.PropertyMaxReconsumeTimes)); err == nil && n > 0 {
		maxTimes = int32(n) // the budget the group's consumer gave it
	}
	h := wire.SendHeader{
		MaxReconsumeTimes:     maxTimes, // a %RETRY% send with 0 would go straight back to the DLQ
		ProducerGroup:         RedriveProducerGroup,
		Topic:                 topic,
		DefaultTopic:          message.AutoCreateTopicKey,
		DefaultTopicQueueNums: client.DefaultTopicQueueNums,
		QueueID:               int32(mq.QueueID),
		SysFlag:               m.SysFlag & message.SysFlagCompressed,
		BornTimestamp:         time.Now().UnixMilli(),
		Flag:                  m.Flag,
		Properties:            message.MarshalProperties(props),
		BrokerName:            mq.BrokerName,
	}
	addr := addrs[mq.BrokerName]
	resp, err := s.a.invoke(ctx, mq.BrokerName, addr, remoting.SendMessageV2, h.Ext(), m.Body)
	if err != nil {
		return nil, err
	}
	if !client.SendStored(resp.ResponseCode()) {
		return nil, resp.ResponseErrFor(remoting.SendMessageV2, mq.BrokerName, addr)
	}
	sr, err := client.ParseSendResponse(resp, mq, m.UniqKey())
	if err != nil {
		return nil, err
	}
	return &ResentMessage{DLQOffset: m.QueueOffset, MsgID: m.MsgID, Topic: topic, Keys: m.Keys(), Destination: sr.Queue, QueueOffset: sr.QueueOffset}, nil
}
