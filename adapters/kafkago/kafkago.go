// Package kafkago puts a github.com/segmentio/kafka-go Writer behind Sluice's
// [middleware.SendFunc], so the producer-side reliability middleware (Keys, Park, …) works
// for teams that send to Kafka. It is a package of its own so kafka-go stays out of the
// core packages' import graph.
//
// Mapping (DESIGN "Kafka mapping"):
//
//	topic          → the Kafka topic (Message.Topic, or the Writer's Topic)
//	body           → the record value
//	tag            → header TAGS
//	keys           → header KEYS (space-separated, as the property)
//	sharding key   → the record key (and header SHARDING_KEY); give the Writer a
//	                 key-hashing Balancer (&kafka.Hash{}, kafka.Murmur2Balancer{}) so one
//	                 key keeps its order — kafka-go's default round-robin ignores keys
//	other property → a header of the same name (UNIQ_KEY included)
//	flag ≠ 0       → header FLAG (decimal)
//
// Give the Writer its own *kafka.Transport: with kafka-go's shared DefaultTransport its
// connection pools outlive the Writer. [Component] closes the Writer and that
// Transport's connections, for package lifecycle.
//
// What Kafka cannot do through a plain Writer fails with ErrUnsupported (a permanent
// error: redismw.Park returns it instead of parking): a delay level (DELAY), a timed
// delivery (TIMER_DELIVER_MS) and a transactional half message (TRAN_MSG).
package kafkago

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/segmentio/kafka-go"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
)

// Header names beyond the properties.
const (
	// HeaderFlag carries a non-zero message flag, in decimal.
	HeaderFlag = "FLAG"
)

// propertyTimerDeliverMs is RocketMQ 5.x's absolute delivery time property
// (redismw.PropertyTimerDeliverMs).
const propertyTimerDeliverMs = redismw.PropertyTimerDeliverMs

// ErrUnsupported is wrapped by an *UnsupportedError: the message needs a feature a plain
// Kafka writer does not have.
var ErrUnsupported = errors.New("kafkago: not supported by a kafka-go Writer")

// UnsupportedError names the message feature Kafka cannot honour. It is permanent:
// resending cannot fix it.
type UnsupportedError struct {
	Topic   string
	Feature string // "delay level 3", "timed delivery", "transactional half message", "topic mismatch"
}

// Error implements error.
func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("kafkago: send to topic %q: %s is not supported by a kafka-go Writer", e.Topic, e.Feature)
}

// Unwrap returns ErrUnsupported.
func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// Permanent reports true: redismw.DefaultRetriable then never parks it.
func (e *UnsupportedError) Permanent() bool { return true }

// SendFunc returns a [middleware.SendFunc] that writes each message synchronously with
// w.WriteMessages (so w.RequiredAcks decides when it counts as stored; w.Async must be
// false, or errors are not reported). Like Sluice's producer it sets property UNIQ_KEY
// on msg when missing, so a parked and resent message keeps its id.
//
// The result has Status SendOK, MsgID = UNIQ_KEY, Queue.Topic and Queue.BrokerName
// "kafka"; QueueID and QueueOffset are -1 because kafka-go's Writer does not report the
// partition and offset of a synchronous write. Errors: an *UnsupportedError (see the
// package doc; also when w.Topic is set and differs from msg.Topic), or kafka-go's error
// wrapped ("kafkago: send to topic T: …").
func SendFunc(w *kafka.Writer) middleware.SendFunc {
	return func(ctx context.Context, msg *message.Message) (*message.SendResult, error) {
		if msg.UniqKey() == "" {
			msg.SetProperty(message.PropertyUniqClientMessageIDKeyIdx, message.NewUniqID())
		}
		km, err := ToKafka(msg)
		if err != nil {
			return nil, err
		}
		if w.Topic != "" {
			if msg.Topic != w.Topic {
				return nil, &UnsupportedError{Topic: msg.Topic, Feature: fmt.Sprintf("topic mismatch (the Writer is bound to %q)", w.Topic)}
			}
			km.Topic = "" // kafka-go refuses a topic on both the Writer and the message
		}
		if err := w.WriteMessages(ctx, km); err != nil {
			return nil, fmt.Errorf("kafkago: send to topic %q: %w", msg.Topic, err)
		}
		return &message.SendResult{
			Status:      message.SendOK,
			MsgID:       msg.UniqKey(),
			Queue:       message.MessageQueue{Topic: msg.Topic, BrokerName: "kafka", QueueID: -1},
			QueueOffset: -1,
		}, nil
	}
}

// ToKafka converts msg to a kafka-go message (see the package doc for the mapping);
// headers are sorted by name so the output is deterministic. It returns an
// *UnsupportedError for a delay level, a timed delivery or a half message.
func ToKafka(msg *message.Message) (kafka.Message, error) {
	if lvl := msg.DelayLevel(); lvl > 0 {
		return kafka.Message{}, &UnsupportedError{Topic: msg.Topic, Feature: "delay level " + strconv.Itoa(lvl)}
	}
	if msg.Property(propertyTimerDeliverMs) != "" {
		return kafka.Message{}, &UnsupportedError{Topic: msg.Topic, Feature: "timed delivery (" + propertyTimerDeliverMs + ")"}
	}
	if msg.Property(message.PropertyTransactionPrepared) == "true" {
		return kafka.Message{}, &UnsupportedError{Topic: msg.Topic, Feature: "transactional half message"}
	}
	km := kafka.Message{Topic: msg.Topic, Value: msg.Body}
	if sk := msg.ShardingKey(); sk != "" {
		km.Key = []byte(sk)
	}
	names := make([]string, 0, len(msg.Properties))
	for k := range msg.Properties {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		km.Headers = append(km.Headers, kafka.Header{Key: k, Value: []byte(msg.Properties[k])})
	}
	if msg.Flag != 0 {
		km.Headers = append(km.Headers, kafka.Header{Key: HeaderFlag, Value: []byte(strconv.FormatInt(int64(msg.Flag), 10))})
	}
	return km, nil
}

// Component adapts w to Shutdown(ctx) error, as package lifecycle expects: it closes w
// (flushing pending writes) and then closes the idle connections of w.Transport when it
// is a *kafka.Transport. When ctx ends first it returns ctx's error and the close goes
// on in its goroutine until it returns.
func Component(w *kafka.Writer) interface {
	Shutdown(ctx context.Context) error
} {
	return writerComponent{w}
}

type writerComponent struct{ w *kafka.Writer }

func (c writerComponent) Shutdown(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		err := c.w.Close()
		if tr, ok := c.w.Transport.(*kafka.Transport); ok {
			tr.CloseIdleConnections()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("kafkago: close writer: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafkago: writer close still running: %w", ctx.Err())
	}
}
