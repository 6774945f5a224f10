package producer

import (
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
	"github.com/sluicemq/sluice/transport"
)

var (
	// ErrNotStarted is returned by sends before Start; it matches transport.ErrNotStarted.
	ErrNotStarted = fmt.Errorf("producer: %w", transport.ErrNotStarted)
	// ErrClosed is returned by sends and Start after Shutdown; it matches
	// transport.ErrClosed.
	ErrClosed = fmt.Errorf("producer: %w", transport.ErrClosed)
	// ErrNoQueue is wrapped in a *SendError when a topic's route has no writable queue on
	// a broker with a master.
	ErrNoQueue = errors.New("producer: no writable message queue")
	// ErrTopicNotExist matches (errors.Is) a *SendError for a topic that does not exist:
	// the name servers have no route for it and none for TBW102 either (the brokers'
	// autoCreateTopicEnable is off), or a broker answered TOPIC_NOT_EXIST (17).
	ErrTopicNotExist = client.ErrTopicNotExist
	// ErrMiddlewaresUnsupported matches (errors.Is) a *MiddlewareError.
	ErrMiddlewaresUnsupported = errors.New("producer: Config.Middlewares cannot run on this send path")
)

// MiddlewareError reports a send path that cannot run Config.Middlewares, returned
// instead of skipping them silently: SendBatch (at the call, before anything is sent;
// WithoutMiddlewares sends the batch without them) and NewTransactionProducer (at
// construction). errors.Is(err, ErrMiddlewaresUnsupported) is true.
type MiddlewareError struct {
	// Path is the refusing call: "SendBatch" or "NewTransactionProducer".
	Path string
	// Reason says why the chain cannot run there and what to do instead.
	Reason string
}

// Error implements error.
func (e *MiddlewareError) Error() string {
	return fmt.Sprintf("producer: %s: Config.Middlewares cannot run here: %s", e.Path, e.Reason)
}

// Is reports whether target is ErrMiddlewaresUnsupported.
func (e *MiddlewareError) Is(target error) bool { return target == ErrMiddlewaresUnsupported }

// SendError reports a send that did not reach a stored state after all attempts.
// Either the broker answered with a code that is not a stored code (Code != 0, Remark
// set; Err nil), or there was no usable answer (Err set: transport failure, timeout,
// route lookup failure). Validation failures are *message.ValidationError instead and
// never reach the network.
type SendError struct {
	// Topic is the message's topic.
	Topic string
	// Queue is the message queue of the last attempt (zero if none was made).
	Queue message.MessageQueue
	// BrokerAddr is the "ip:port" of the last attempt's broker ("" if none was made).
	BrokerAddr string
	// Attempts is how many sends were made (0 when the route lookup failed).
	Attempts int
	// Code is the last response code from the broker (0 = no response; see Err).
	Code remoting.ResponseCode
	// Remark is the broker's error text for Code.
	Remark string
	// Err is the cause when the broker did not answer.
	Err error
}

// Error implements error.
func (e *SendError) Error() string {
	where := ""
	if e.BrokerAddr != "" {
		where = fmt.Sprintf("; last attempt %s at %s", e.Queue, e.BrokerAddr)
	}
	if e.Err != nil {
		return fmt.Sprintf("producer: send to topic %q failed after %d attempt(s)%s: %v", e.Topic, e.Attempts, where, e.Err)
	}
	return fmt.Sprintf("producer: send to topic %q failed after %d attempt(s)%s: broker answered %d %s: %s",
		e.Topic, e.Attempts, where, int16(e.Code), e.Code, e.Remark)
}

// Unwrap returns Err.
func (e *SendError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTopicNotExist) true when the broker answered
// TOPIC_NOT_EXIST (17); a route lookup failure matches through Err.
func (e *SendError) Is(target error) bool {
	return target == ErrTopicNotExist && e.Code == remoting.TopicNotExist
}

// Retryable reports whether the failure is one the producer itself retries: a
// transport failure or response code 1, 2, 14, 16 or 17 (remoting.ResponseCode.Retryable).
// A retry middleware may use it to decide whether to try again later.
func (e *SendError) Retryable() bool {
	if e.Code != 0 {
		return e.Code.Retryable()
	}
	return e.Err != nil
}
