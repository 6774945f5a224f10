package consumer

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// requestError is a failed request to a broker that did not answer, or whose answer
// could not be read: the request and the broker ("name" or "name@ip:port") with the
// cause. A broker's refusal is a *remoting.ResponseError instead.
func requestError(req remoting.RequestCode, broker string, err error) error {
	return fmt.Errorf("consumer: %s to %s: %w", req, broker, err)
}

// pullRPCExtra is added to the long-polling suspend time to get the pull RPC timeout
// (20 s suspend → 30 s timeout, docs/protocol.md §3.4).
const pullRPCExtra = 10 * time.Second

// brokerAPI is the consumer side of the broker requests both consumers use, for one
// consumer group over one client.Client.
type brokerAPI struct {
	cl    *client.Client
	group string
	// maxBody is DecodeOptions.MaxDecompressedSize for pulled messages (0: default).
	maxBody int
}

// invoke sends a request to the master of brokerName, bounded by ctx and
// DefaultBrokerTimeout, and returns the response when its code is SUCCESS or one of
// accept; another code is a *remoting.ResponseError (the broker's refusal), and
// transport failures and an unknown broker are wrapped by requestError.
func (b *brokerAPI) invoke(ctx context.Context, brokerName string, code remoting.RequestCode, ext map[string]string, body []byte, accept ...remoting.ResponseCode) (*remoting.RemotingCommand, error) {
	addr, ok := b.cl.BrokerAddr(brokerName)
	if !ok {
		return nil, requestError(code, brokerName, fmt.Errorf("no master address known for broker %q", brokerName))
	}
	return b.invokeAt(ctx, brokerName, addr, code, ext, body, accept)
}

// invokeRead is invoke for requests that only read (stored offsets, queue offsets): sent
// to the master while one is listed, else to a slave (client.ReadAddr), which answers
// them from its copy while the master is down.
func (b *brokerAPI) invokeRead(ctx context.Context, brokerName string, code remoting.RequestCode, ext map[string]string, accept ...remoting.ResponseCode) (*remoting.RemotingCommand, error) {
	addr, _, ok := b.cl.ReadAddr(brokerName)
	if !ok {
		return nil, requestError(code, brokerName, fmt.Errorf("no address known for broker %q", brokerName))
	}
	return b.invokeAt(ctx, brokerName, addr, code, ext, nil, accept)
}

func (b *brokerAPI) invokeAt(ctx context.Context, brokerName, addr string, code remoting.RequestCode, ext map[string]string, body []byte, accept []remoting.ResponseCode) (*remoting.RemotingCommand, error) {
	cctx, cancel := context.WithTimeout(ctx, client.DefaultBrokerTimeout)
	defer cancel()
	resp, err := b.cl.InvokeSync(cctx, addr, remoting.NewRequest(code, ext, body))
	if err != nil {
		return nil, requestError(code, brokerName+"@"+addr, err)
	}
	if rc := resp.ResponseCode(); rc != remoting.Success && !slices.Contains(accept, rc) {
		return nil, resp.ResponseErrFor(code, brokerName, addr)
	}
	return resp, nil
}

// queryOffset asks the broker for the group's stored offset of mq
// (QUERY_CONSUMER_OFFSET, request code 14; docs/protocol.md §3.5): -1 when none (code 22).
func (b *brokerAPI) queryOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	ext := wire.ConsumerOffsetHeader{ConsumerGroup: b.group, Topic: mq.Topic, QueueID: int32(mq.QueueID)}.Ext(false)
	resp, err := b.invokeRead(ctx, mq.BrokerName, remoting.QueryConsumerOffset, ext, remoting.QueryNotFound)
	if err != nil {
		return 0, err
	}
	if resp.ResponseCode() == remoting.QueryNotFound {
		return -1, nil
	}
	return resp.ExtInt64("offset", true)
}

// offsetCall runs GET_MAX_OFFSET (30), GET_MIN_OFFSET (31) or SEARCH_OFFSET_BY_TIMESTAMP
// (29) and returns ext "offset".
func (b *brokerAPI) offsetCall(ctx context.Context, code remoting.RequestCode, mq message.MessageQueue, ext map[string]string) (int64, error) {
	resp, err := b.invokeRead(ctx, mq.BrokerName, code, ext)
	if err != nil {
		return 0, err
	}
	return resp.ExtInt64("offset", true)
}

func (b *brokerAPI) maxOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	return b.offsetCall(ctx, remoting.GetMaxOffset, mq, wire.QueueHeader{Topic: mq.Topic, QueueID: int32(mq.QueueID)}.Ext(false))
}

func (b *brokerAPI) minOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	return b.offsetCall(ctx, remoting.GetMinOffset, mq, wire.QueueHeader{Topic: mq.Topic, QueueID: int32(mq.QueueID)}.Ext(false))
}

func (b *brokerAPI) searchOffset(ctx context.Context, mq message.MessageQueue, t time.Time) (int64, error) {
	ext := wire.QueueHeader{Topic: mq.Topic, QueueID: int32(mq.QueueID), Timestamp: t.UnixMilli()}.Ext(true)
	return b.offsetCall(ctx, remoting.SearchOffsetByTimestamp, mq, ext)
}

// updateOffset stores the group's offset of mq on its broker's master
// (UPDATE_CONSUMER_OFFSET, request code 15). It waits for the answer, unlike the official
// Go client's one-way send, so that callers know the offset is stored. When the cached
// route lists no master (it was down; the consumer read from a slave) the route of
// mq.Topic is fetched again first, so a master that came back is used at once rather
// than after the periodic refresh (the Java client does the same).
func (b *brokerAPI) updateOffset(ctx context.Context, mq message.MessageQueue, offset int64) error {
	if _, ok := b.cl.BrokerAddr(mq.BrokerName); !ok {
		_, _ = b.cl.FetchRoute(ctx, mq.Topic) // on failure invoke reports the missing master
	}
	ext := wire.ConsumerOffsetHeader{ConsumerGroup: b.group, Topic: mq.Topic, QueueID: int32(mq.QueueID), CommitOffset: offset}.Ext(true)
	_, err := b.invoke(ctx, mq.BrokerName, remoting.UpdateConsumerOffset, ext, nil)
	return err
}

// pullArgs is one PULL_MESSAGE request (docs/protocol.md §3.4).
type pullArgs struct {
	mq             message.MessageQueue
	offset         int64
	maxNums        int
	sysFlag        int
	commitOffset   int64
	suspend        time.Duration // long-polling hold; 0 = answer at once
	subscription   string        // with wire.PullFlagSubscription
	expressionType string
}

// pullReply is a PULL_MESSAGE answer with one of the codes a consumer accepts (0, 19,
// 20, 21).
type pullReply struct {
	code                            remoting.ResponseCode
	nextBegin, minOffset, maxOffset int64
	msgs                            []*message.MessageExt // decoded and decompressed (code 0)
}

// pull sends PULL_MESSAGE (request code 11) and decodes the answer. It goes to the
// broker's master, or to a slave while the route lists no master (client.ReadAddr; the
// commit-offset flag is then cleared, as slaves do not store offsets: the Java client
// does the same). The RPC timeout is the suspend time plus 10 s (and at least
// DefaultBrokerTimeout). Codes other than 0, 19, 20, 21 are a *remoting.ResponseError;
// transport failures and undecodable answers are wrapped by requestError.
func (b *brokerAPI) pull(ctx context.Context, a pullArgs) (*pullReply, error) {
	addr, slave, ok := b.cl.ReadAddr(a.mq.BrokerName)
	if !ok {
		return nil, requestError(remoting.PullMessage, a.mq.BrokerName, fmt.Errorf("no address known for broker %q", a.mq.BrokerName))
	}
	if slave {
		a.sysFlag &^= wire.PullFlagCommitOffset
		a.commitOffset = 0
	}
	ext := wire.PullHeader{
		ConsumerGroup:        b.group,
		Topic:                a.mq.Topic,
		QueueID:              int32(a.mq.QueueID),
		QueueOffset:          a.offset,
		MaxMsgNums:           int32(a.maxNums),
		SysFlag:              int32(a.sysFlag),
		CommitOffset:         a.commitOffset,
		SuspendTimeoutMillis: a.suspend.Milliseconds(),
		Subscription:         a.subscription,
		ExpressionType:       a.expressionType,
	}.Ext()
	timeout := client.DefaultBrokerTimeout
	if a.suspend > 0 {
		timeout = a.suspend + pullRPCExtra
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := b.cl.InvokeSync(pctx, addr, remoting.NewRequest(remoting.PullMessage, ext, nil))
	cancel()
	if err != nil {
		return nil, requestError(remoting.PullMessage, a.mq.BrokerName+"@"+addr, err)
	}
	r := &pullReply{code: resp.ResponseCode()}
	switch r.code {
	case remoting.Success, remoting.PullNotFound, remoting.PullRetryImmediately, remoting.PullOffsetMoved:
	default:
		return nil, resp.ResponseErrFor(remoting.PullMessage, a.mq.BrokerName, addr)
	}
	rh, err := wire.ParsePullResponseHeader(resp)
	if err != nil {
		return nil, requestError(remoting.PullMessage, a.mq.BrokerName+"@"+addr, err)
	}
	r.nextBegin, r.minOffset, r.maxOffset = rh.NextBeginOffset, rh.MinOffset, rh.MaxOffset
	if r.code == remoting.Success {
		// The response frame is this call's own (never reused): bodies stay in it.
		opts := message.DecodeOptions{Decompress: true, MaxDecompressedSize: b.maxBody, ShareBody: true}
		if r.msgs, err = message.DecodeRecords(resp.Body, opts); err != nil {
			return nil, requestError(remoting.PullMessage, a.mq.BrokerName+"@"+addr, fmt.Errorf("decode pulled messages at offset %d: %w", a.offset, err))
		}
		for _, m := range r.msgs {
			m.BrokerName = a.mq.BrokerName
		}
	}
	return r, nil
}

// lock asks brokerName to lock mqs for this client (LOCK_BATCH_MQ, request code 41) and
// returns the queues this client holds now.
func (b *brokerAPI) lock(ctx context.Context, brokerName string, mqs []message.MessageQueue) (map[message.MessageQueue]bool, error) {
	body, _ := json.Marshal(wire.LockBatchBody{ConsumerGroup: b.group, ClientID: b.cl.ClientID(), MQSet: mqs})
	resp, err := b.invoke(ctx, brokerName, remoting.LockBatchMQ, nil, body)
	if err != nil {
		return nil, err
	}
	ok, err := wire.ParseLockBatchResult(resp.Body)
	if err != nil {
		return nil, requestError(remoting.LockBatchMQ, brokerName, err)
	}
	held := make(map[message.MessageQueue]bool, len(ok.LockOKMQSet))
	for _, mq := range ok.LockOKMQSet {
		held[mq] = true
	}
	return held, nil
}

// unlock releases mqs on brokerName (UNLOCK_BATCH_MQ, request code 42).
func (b *brokerAPI) unlock(ctx context.Context, brokerName string, mqs []message.MessageQueue) error {
	body, _ := json.Marshal(wire.LockBatchBody{ConsumerGroup: b.group, ClientID: b.cl.ClientID(), MQSet: mqs})
	_, err := b.invoke(ctx, brokerName, remoting.UnlockBatchMQ, nil, body)
	return err
}

// byBroker groups queues by broker name, each group sorted.
func byBroker(mqs []message.MessageQueue) map[string][]message.MessageQueue {
	out := map[string][]message.MessageQueue{}
	for _, mq := range mqs {
		out[mq.BrokerName] = append(out[mq.BrokerName], mq)
	}
	for _, l := range out {
		sort.Slice(l, func(i, j int) bool { return l[i].Less(l[j]) })
	}
	return out
}
