package admin

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// MaxFindMessages is how many messages [Admin.FindMessages] asks each broker for: 64
// (RocketMQ maxMsgsNumBatch, the broker's cap; Java's mqadmin queryMsgByKey asks for 64 too).
const MaxFindMessages = 64

// ViewMessage returns the message with an offset message id (the "msgId" of a send
// response, [message.MessageExt.OffsetMsgID]; docs/protocol.md §4.6): the id is decoded into the
// store host ip:port and commitlog offset, and that broker is asked with
// VIEW_MESSAGE_BY_ID (RocketMQ request code 33). The body is decompressed;
// BrokerName is left empty (the id names an address, not a broker).
//
// Errors: a [*config.Error] with Field "msgId" when the id does not decode (note that a
// client message id, UNIQ_KEY, is not an offset id: use [Admin.FindMessageByUniqKey]);
// an error naming the broker when it cannot be reached, or its *remoting.ResponseError
// with the broker's code and remark when it has no message there.
func (a *Admin) ViewMessage(ctx context.Context, offsetMsgID string) (*message.MessageExt, error) {
	host, offset, err := message.ParseOffsetMsgID(offsetMsgID)
	if err != nil {
		return nil, &config.Error{Package: "admin", Field: "msgId", Reason: fmt.Sprintf("%q is not an offset message id: %v", offsetMsgID, err)}
	}
	if !host.Addr().IsValid() || host.Addr().IsUnspecified() || host.Port() == 0 {
		return nil, &config.Error{Package: "admin", Field: "msgId", Reason: fmt.Sprintf("%q decodes to store host %s, not a broker address", offsetMsgID, host)}
	}
	addr := host.String()
	resp, err := a.invoke(ctx, "", addr, remoting.ViewMessageByID, map[string]string{"offset": strconv.FormatInt(offset, 10)}, nil)
	if err != nil {
		return nil, err
	}
	if err := resp.ResponseErrFor(remoting.ViewMessageByID, "", addr); err != nil {
		return nil, err
	}
	m, _, err := message.DecodeRecord(resp.Body, message.DecodeOptions{Decompress: true})
	if err != nil {
		return nil, brokerFailed("", addr, fmt.Errorf("VIEW_MESSAGE_BY_ID body: %w", err))
	}
	return m, nil
}

// FindMessages returns the messages of topic with key among their KEYS (or as their
// UNIQ_KEY), stored between begin and end (inclusive; a zero begin means the beginning of
// time, a zero end no upper bound), sorted by store time. Every master broker in the
// topic's route is asked with QUERY_MESSAGE (RocketMQ request code 12) for up to
// [MaxFindMessages] messages, its newest matches; a broker answering QUERY_NOT_FOUND (22)
// has none. Each answer is checked again here (topic, key, time), as Java's admin does,
// because a broker may return hash collisions. BrokerName is set on each message and the
// bodies are decompressed.
//
// Errors: a [*config.Error] for an invalid topic, an empty key or a key with a space (the
// KEYS separator), or end before begin; name-server errors (a topic without route wraps
// [ErrTopicNotExist]); and one error per failing broker (a refusal is a
// *remoting.ResponseError): joined when none answered, else in a [*PartialError]
// returned with the messages the others found.
func (a *Admin) FindMessages(ctx context.Context, topic, key string, begin, end time.Time) ([]*message.MessageExt, error) {
	if err := checkTopicKey(topic, key); err != nil {
		return nil, err
	}
	b, e := int64(0), int64(math.MaxInt64)
	if !begin.IsZero() {
		b = begin.UnixMilli()
	}
	if !end.IsZero() {
		e = end.UnixMilli()
	}
	if e < b {
		return nil, &config.Error{Package: "admin", Field: "end", Reason: fmt.Sprintf("%s is before begin %s", end.Format(time.RFC3339), begin.Format(time.RFC3339))}
	}
	ext := map[string]string{"topic": topic, "key": key, "maxNum": strconv.Itoa(MaxFindMessages),
		"beginTimestamp": strconv.FormatInt(b, 10), "endTimestamp": strconv.FormatInt(e, 10)}
	return a.queryMessages(ctx, topic, ext, func(m *message.MessageExt) bool {
		return m.StoreTimestamp >= b && m.StoreTimestamp <= e && (m.UniqKey() == key || slices.Contains(strings.Split(m.Property(message.PropertyKeys), " "), key))
	})
}

// FindMessageByUniqKey returns the messages of topic whose client message id (property
// UNIQ_KEY, the MsgID a producer reports) is uniqKey, normally one, sorted by store time:
// QUERY_MESSAGE (12) with _UNIQUE_KEY_QUERY=true on every master broker of the topic's
// route, at most 32 per broker. Errors as [Admin.FindMessages].
func (a *Admin) FindMessageByUniqKey(ctx context.Context, topic, uniqKey string) ([]*message.MessageExt, error) {
	if err := checkTopicKey(topic, uniqKey); err != nil {
		return nil, err
	}
	ext := map[string]string{"topic": topic, "key": uniqKey, "maxNum": "32", "beginTimestamp": "0",
		"endTimestamp": strconv.FormatInt(math.MaxInt64, 10), "_UNIQUE_KEY_QUERY": "true"}
	return a.queryMessages(ctx, topic, ext, func(m *message.MessageExt) bool { return m.UniqKey() == uniqKey })
}

func checkTopicKey(topic, key string) error {
	if err := message.ValidateTopic(topic); err != nil {
		return &config.Error{Package: "admin", Field: "topic", Reason: err.Error()}
	}
	if key == "" {
		return &config.Error{Package: "admin", Field: "key", Reason: "empty"}
	}
	if strings.ContainsRune(key, ' ') {
		return &config.Error{Package: "admin", Field: "key", Reason: fmt.Sprintf("%q contains a space, the KEYS separator, so no message can have it", key)}
	}
	return nil
}

// queryMessages sends QUERY_MESSAGE with ext to every master of topic's route in
// parallel and keeps the decoded messages of topic that pass keep.
func (a *Admin) queryMessages(ctx context.Context, topic string, ext map[string]string, keep func(*message.MessageExt) bool) ([]*message.MessageExt, error) {
	r, err := a.TopicRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	brokers := sortedBrokers(r)
	found := make([][]*message.MessageExt, len(brokers))
	errs := make([]error, len(brokers))
	var wg sync.WaitGroup
	for i, bd := range brokers {
		addr := bd.MasterAddr()
		if addr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = a.queryOn(ctx, bd.BrokerName, addr, topic, ext, keep)
		}()
	}
	wg.Wait()
	var out []*message.MessageExt
	answered := 0
	for i, ms := range found {
		out = append(out, ms...)
		if errs[i] == nil && brokers[i].MasterAddr() != "" {
			answered++
		}
	}
	slices.SortStableFunc(out, func(x, y *message.MessageExt) int {
		if c := x.StoreTimestamp - y.StoreTimestamp; c != 0 {
			return int(max(min(c, 1), -1))
		}
		return strings.Compare(x.BrokerName, y.BrokerName)
	})
	return out, partial(answered, errs)
}

func (a *Admin) queryOn(ctx context.Context, brokerName, addr, topic string, ext map[string]string, keep func(*message.MessageExt) bool) ([]*message.MessageExt, error) {
	resp, err := a.invoke(ctx, brokerName, addr, remoting.QueryMessage, maps.Clone(ext), nil) // each request owns its ext map
	if err != nil {
		return nil, err
	}
	if resp.ResponseCode() == remoting.QueryNotFound {
		return nil, nil
	}
	if err := resp.ResponseErrFor(remoting.QueryMessage, brokerName, addr); err != nil {
		return nil, err
	}
	ms, err := message.DecodeRecords(resp.Body, message.DecodeOptions{Decompress: true})
	if err != nil {
		return nil, brokerFailed(brokerName, addr, fmt.Errorf("QUERY_MESSAGE body: %w", err))
	}
	var out []*message.MessageExt
	for _, m := range ms {
		if m.Topic == topic && keep(m) {
			m.BrokerName = brokerName
			out = append(out, m)
		}
	}
	return out, nil
}
