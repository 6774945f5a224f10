package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/message"
)

// LockBatchBody is the body of LOCK_BATCH_MQ and UNLOCK_BATCH_MQ (RocketMQ request
// codes 41 and 42; Java LockBatchRequestBody / UnlockBatchRequestBody, docs/protocol.md §3.11):
// the queues a client of a consumer group wants to lock or release.
type LockBatchBody struct {
	ConsumerGroup string                 `json:"consumerGroup"`
	ClientID      string                 `json:"clientId"`
	MQSet         []message.MessageQueue `json:"mqSet"`
}

// ErrBadLockBody is wrapped by [ParseLockBatchBody] and [ParseLockBatchResult].
var ErrBadLockBody = errors.New("wire: bad lock body")

// ParseLockBatchBody decodes a LOCK_BATCH_MQ / UNLOCK_BATCH_MQ body. Errors (wrapping
// [ErrBadLockBody]): a body that is not JSON {consumerGroup, clientId, mqSet}, or one
// without consumerGroup or clientId.
func ParseLockBatchBody(body []byte) (*LockBatchBody, error) {
	var b LockBatchBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, fmt.Errorf("%w: lock body is not JSON {consumerGroup, clientId, mqSet}: %v", ErrBadLockBody, err)
	}
	if b.ConsumerGroup == "" || b.ClientID == "" {
		return nil, fmt.Errorf("%w: lock body needs consumerGroup and clientId", ErrBadLockBody)
	}
	return &b, nil
}

// LockBatchResult is the response body of LOCK_BATCH_MQ (Java LockBatchResponseBody):
// {"lockOKMQSet":[...]}, the queues the client holds now.
type LockBatchResult struct {
	LockOKMQSet []message.MessageQueue `json:"lockOKMQSet"`
}

// ParseLockBatchResult decodes a LOCK_BATCH_MQ response body; an empty body holds no
// queue. Errors (wrapping [ErrBadLockBody]): a body that is not that JSON.
func ParseLockBatchResult(body []byte) (*LockBatchResult, error) {
	var r LockBatchResult
	if len(body) == 0 {
		return &r, nil
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadLockBody, err)
	}
	return &r, nil
}

// ConsumerIDList is the response body of GET_CONSUMER_LIST_BY_GROUP (RocketMQ request
// code 38; Java GetConsumerListByGroupResponseBody): the client ids of a group's live
// consumers, sorted by a Sluice broker.
type ConsumerIDList struct {
	ConsumerIDList []string `json:"consumerIdList"`
}
