package consumer

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// BrokerError reports a broker request that failed: the request code, the broker, and
// either the response code and remark or the transport error.
type BrokerError struct {
	Request remoting.RequestCode  // the request that failed, e.g. QUERY_CONSUMER_OFFSET (14)
	Broker  string                // broker name and/or "ip:port"
	Code    remoting.ResponseCode // the broker's response code; 0 when it did not answer (see Err)
	Remark  string                // the broker's error text for Code
	Err     error                 // transport or decoding failure; nil when the broker answered
}

// Error implements error.
func (e *BrokerError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("consumer: %s to %s: %v", e.Request, e.Broker, e.Err)
	}
	return fmt.Sprintf("consumer: %s to %s: broker answered %d %s: %s", e.Request, e.Broker, int16(e.Code), e.Code, e.Remark)
}

// Unwrap returns Err.
func (e *BrokerError) Unwrap() error { return e.Err }

// invokeBroker sends a request to the master of brokerName with BrokerTimeout and returns
// the response, or a *BrokerError for transport failures and an unknown broker.
func (c *PushConsumer) invokeBroker(ctx context.Context, brokerName string, code remoting.RequestCode, ext map[string]string) (*remoting.RemotingCommand, error) {
	addr, ok := c.cl.BrokerAddr(brokerName)
	if !ok {
		return nil, &BrokerError{Request: code, Broker: brokerName, Err: fmt.Errorf("no master address known for broker %q", brokerName)}
	}
	cctx, cancel := context.WithTimeout(ctx, client.DefaultBrokerTimeout)
	defer cancel()
	resp, err := c.cl.InvokeSync(cctx, addr, remoting.NewRequest(code, ext, nil))
	if err != nil {
		return nil, &BrokerError{Request: code, Broker: brokerName + "@" + addr, Err: err}
	}
	return resp, nil
}

func mqExt(mq message.MessageQueue) map[string]string {
	return map[string]string{"topic": mq.Topic, "queueId": strconv.Itoa(mq.QueueID)}
}

// queryOffset asks the broker for the group's stored offset of mq
// (QUERY_CONSUMER_OFFSET, request code 14; PROTOCOL §3.5): -1 when none (code 22).
func (c *PushConsumer) queryOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	ext := mqExt(mq)
	ext["consumerGroup"] = c.cfg.Group
	resp, err := c.invokeBroker(ctx, mq.BrokerName, remoting.QueryConsumerOffset, ext)
	if err != nil {
		return 0, err
	}
	switch resp.ResponseCode() {
	case remoting.Success:
		return resp.ExtInt64("offset", true)
	case remoting.QueryNotFound:
		return -1, nil
	}
	return 0, &BrokerError{Request: remoting.QueryConsumerOffset, Broker: mq.BrokerName, Code: resp.ResponseCode(), Remark: resp.Remark}
}

// offsetCall runs GET_MAX_OFFSET (30) or SEARCH_OFFSET_BY_TIMESTAMP (29) and returns ext
// "offset".
func (c *PushConsumer) offsetCall(ctx context.Context, code remoting.RequestCode, mq message.MessageQueue, ext map[string]string) (int64, error) {
	resp, err := c.invokeBroker(ctx, mq.BrokerName, code, ext)
	if err != nil {
		return 0, err
	}
	if resp.ResponseCode() != remoting.Success {
		return 0, &BrokerError{Request: code, Broker: mq.BrokerName, Code: resp.ResponseCode(), Remark: resp.Remark}
	}
	return resp.ExtInt64("offset", true)
}

// startOffset is where a newly assigned queue starts: the stored offset, or else per
// ConsumeFromWhere (PROTOCOL §7.3).
func (c *PushConsumer) startOffset(ctx context.Context, mq message.MessageQueue) (int64, error) {
	off, err := c.queryOffset(ctx, mq)
	if err != nil || off >= 0 {
		return off, err
	}
	retry := message.IsRetryTopic(mq.Topic)
	switch c.cfg.ConsumeFromWhere {
	case ConsumeFromFirstOffset:
		return 0, nil
	case ConsumeFromTimestamp:
		if retry {
			return c.offsetCall(ctx, remoting.GetMaxOffset, mq, mqExt(mq))
		}
		ext := mqExt(mq)
		ext["timestamp"] = strconv.FormatInt(c.cfg.ConsumeTimestamp.UnixMilli(), 10)
		return c.offsetCall(ctx, remoting.SearchOffsetByTimestamp, mq, ext)
	default: // ConsumeFromLastOffset
		if retry {
			return 0, nil
		}
		return c.offsetCall(ctx, remoting.GetMaxOffset, mq, mqExt(mq))
	}
}

// updateOffset stores the group's offset of mq on its broker (UPDATE_CONSUMER_OFFSET,
// request code 15). It waits for the answer, unlike the official Go client's one-way
// send, so that Shutdown knows the offsets are stored.
func (c *PushConsumer) updateOffset(ctx context.Context, mq message.MessageQueue, offset int64) error {
	ext := mqExt(mq)
	ext["consumerGroup"] = c.cfg.Group
	ext["commitOffset"] = strconv.FormatInt(offset, 10)
	resp, err := c.invokeBroker(ctx, mq.BrokerName, remoting.UpdateConsumerOffset, ext)
	if err != nil {
		return err
	}
	if resp.ResponseCode() != remoting.Success {
		return &BrokerError{Request: remoting.UpdateConsumerOffset, Broker: mq.BrokerName, Code: resp.ResponseCode(), Remark: resp.Remark}
	}
	return nil
}
