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

// SendError reports a send that did not reach a stored state after all attempts, with
// what only a send knows (topic, queue, attempts). Err is the cause of the last
// attempt: a *remoting.ResponseError when the broker answered with a code that is not a
// stored code (find it with errors.As for its Code, Remark and Retryable), otherwise a
// transport failure, a timeout, a route lookup failure or an unreadable answer.
// Validation failures are *message.ValidationError instead and never reach the network.
type SendError struct {
	// Topic is the message's topic.
	Topic string
	// Queue is the message queue of the last attempt (zero if none was made).
	Queue message.MessageQueue
	// BrokerAddr is the "ip:port" of the last attempt's broker ("" if none was made).
	BrokerAddr string
	// Attempts is how many sends were made (0 when the route lookup failed).
	Attempts int
	// Err is the last attempt's cause: the broker's *remoting.ResponseError, or why
	// there was no usable answer. Never nil.
	Err error
	// stored: the broker answered a stored code but its answer could not be read (Err
	// says why); sending again would store the message twice.
	stored bool
}

// Error implements error.
func (e *SendError) Error() string {
	where := ""
	if e.BrokerAddr != "" {
		where = fmt.Sprintf("; last attempt %s at %s", e.Queue, e.BrokerAddr)
	}
	return fmt.Sprintf("producer: send to topic %q failed after %d attempt(s)%s: %v", e.Topic, e.Attempts, where, e.Err)
}

// Unwrap returns Err.
func (e *SendError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTopicNotExist) true when the broker answered
// TOPIC_NOT_EXIST (17); a route lookup failure matches through Err.
func (e *SendError) Is(target error) bool {
	return target == ErrTopicNotExist && e.answer() != nil && e.answer().Code == remoting.TopicNotExist
}

// answer returns the broker's refusal in Err, nil when there is none.
func (e *SendError) answer() *remoting.ResponseError {
	var re *remoting.ResponseError
	if errors.As(e.Err, &re) {
		return re
	}
	return nil
}

// Retryable reports whether the failure is one the producer itself retries: a
// transport failure, or an answer whose [remoting.ResponseError.Retryable] is true
// (codes 1, 2, 14, 16, 17). A stored message whose answer could not be read is not
// retryable. A retry middleware may use it to decide whether to try again later.
func (e *SendError) Retryable() bool {
	if re := e.answer(); re != nil {
		return re.Retryable()
	}
	return e.Err != nil && !e.stored
}
