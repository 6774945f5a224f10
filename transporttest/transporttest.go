// Package transporttest is the conformance suite every Sluice transport runs: the
// RocketMQ-protocol producer and push consumer against an embedded Sluice broker (the
// suite is not run against Apache RocketMQ) and the Kafka producer and consumer against
// an in-process Kafka-protocol cluster. It drives both through the contract of package
// [github.com/sluicemq/sluice/transport]. A transport that passes it behaves the way the
// reliability middleware ([github.com/sluicemq/sluice/middleware]) assumes.
//
// # Implementing the harness
//
// A transport fills in a [Transport] and calls [Run] from one of its tests:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Transport{
//			Features:      transporttest.Features{Tags: true, ConsumeRetry: true, ...},
//			CreateTopic: func(t testing.TB, topic string, shards int) { ... },
//			NewProducer: func(t testing.TB) transport.Producer { ... },
//			NewConsumer: func(t testing.TB, cfg transporttest.ConsumerConfig) transport.Consumer { ... },
//			DeadLetters: func(ctx context.Context, group, topic string) ([]*message.MessageExt, error) { ... },
//		})
//	}
//
// The harness is transport-neutral: messages are [message.Message] on the way in and
// [message.MessageExt] on the way out, the producer is a [transport.Producer] and a
// consumer a [transport.Consumer] running a [middleware.ConsumeFunc]; the suite starts,
// subscribes and shuts them down itself. What the suite relies on, beyond the promises
// of package transport (checked by [TestLifecycle]):
//
//   - Names. The suite makes every topic and group name itself, unique per test and per
//     process, from ASCII letters, digits, '-' and '_', at most 100 bytes. It calls
//     CreateTopic once per topic before it sends to it or consumes it.
//   - Producer.Send stores one message and returns once it is stored (a nil error), with the
//     SendResult's MsgID set to an id the consumer sees again as the delivered message's
//     MsgID. Messages that carry a sharding key ([message.Message.ShardingKey]) must go to
//     one shard per key (RocketMQ: a hash selector over the queues, set up by NewProducer
//     as producer.Config.Selector; Kafka: the record key), so their order is kept. Tags ([message.Message.Tag]), keys
//     ([message.Message.Keys]) and user properties travel with the message.
//   - NewConsumer makes an unstarted consumer of [ConsumerConfig.Group] with the settings
//     of cfg (Orderly, MaxReconsumeTimes, BatchSize); the suite subscribes it to
//     [ConsumerConfig.Topic] (Subscribe with cfg.Tags, or SubscribeSQL with cfg.SQL) and
//     starts it. A group the
//     transport has not seen before starts at the beginning of the topic, so messages sent
//     before the consumer started are delivered too. A group that has committed offsets
//     resumes after them. The suite shuts every consumer it starts down itself (often in
//     the middle of a test) and again in the test's cleanup.
//   - Delivered messages carry Topic (the original topic, also for redeliveries), Body,
//     tag, keys, user properties, MsgID (as Send returned it), ReconsumeTimes (0 on the
//     first delivery, n on the n-th redelivery), QueueID (the shard) and QueueOffset (the
//     position in the shard).
//   - A handler result of [message.ConsumeSuccess] with a nil error commits the messages;
//     [message.ReconsumeLater] or a non-nil error has them delivered again
//     ([Features.ConsumeRetry]).
//   - Without failures, restarts or membership changes each message reaches a
//     consumer once (a transport that cannot promise this fails [TestSendReceive]).
//   - Consumer.Shutdown(ctx) stops fetching, waits (bounded by ctx) for the handler calls
//     that run, and commits what finished ([Features.GracefulShutdown]).
//   - Redeliveries come back quickly: the suite waits at most [Transport.Timeout] for the
//     whole of a test and redelivers up to three times. Shorten the transport's retry
//     delays in the test setup (Sluice: the broker's messageDelayLevel, e.g. "200ms" for
//     every level; orderly consumers: SuspendCurrentQueueTime), and its rebalance and
//     offset-commit intervals (well under a second).
//
// Switch off in [Features] what a transport does not offer; those tests are skipped,
// with the reason, not failed.
//
// # What the suite checks
//
// The life cycle of package transport (send before Start, Start twice, Shutdown twice,
// sends and subscriptions after Shutdown, one callback per async send), send and receive (all bodies, tags, keys and ids arrive, once), tag filters, SQL92
// filters, order per sharding key with an orderly consumer (also across a failed
// message), redelivery after a failure with ReconsumeTimes 1, 2, ..., dead letters after
// the maximum, batches of several messages per handler call, one group sharing the work
// between two consumers, resume after a consumer restart (no loss, committed messages
// not delivered again), graceful shutdown that finishes the handler calls in flight,
// transactional sends (committed delivered, rolled back never), and the reliability
// middleware over the transport: [middleware.Keys] on the send side and a deduplication
// middleware on the consume side ([Transport.Dedup], e.g. redismw.Dedup) give one
// business effect per key although every message is stored, and delivered, twice.
// The suite itself reaches no Redis module: the deduplication store comes from the
// transport's test.
package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/transport"
)

// Features says what a transport offers. A test that needs a feature the transport
// switches off is skipped with a message naming the feature.
type Features struct {
	// Tags: a consumer subscribed with a tag expression ("A || B") gets only the
	// messages whose tag is listed; "" or "*" gets all.
	Tags bool
	// SQL92: a consumer subscribed with [ConsumerConfig.SQL] gets only the messages whose
	// user properties match the expression (RocketMQ SQL92 syntax, package filter).
	SQL92 bool
	// OrderPerShardingKey: an orderly consumer ([ConsumerConfig.Orderly]) handles the
	// messages of one sharding key in the order they were sent, one at a time, and a
	// failed message is retried before any later message of its shard.
	OrderPerShardingKey bool
	// ConsumeRetry: a failed message (ReconsumeLater or an error) is delivered again
	// with ReconsumeTimes one higher, the same MsgID, topic, tag and keys.
	ConsumeRetry bool
	// DeadLetter: a message that failed on its delivery with ReconsumeTimes equal to
	// [ConsumerConfig.MaxReconsumeTimes] is not delivered again but listed by
	// [Transport.DeadLetters].
	DeadLetter bool
	// BatchConsume: [ConsumerConfig.BatchSize] > 1 hands up to that many messages of one
	// shard to one handler call.
	BatchConsume bool
	// ConsumerGroups: two consumers of one group share the topic's shards; each message
	// reaches one of them (at least once).
	ConsumerGroups bool
	// Restart: a new consumer of a group resumes after the offsets the group's previous
	// consumer committed when it shut down: nothing lost, nothing committed delivered
	// again.
	Restart bool
	// GracefulShutdown: Consumer.Shutdown waits for the handler calls in flight (until
	// its ctx ends) and commits them, without cancelling their context.
	GracefulShutdown bool
	// Transactions: [Transport.SendInTransaction] is set; a committed message is
	// delivered, a rolled-back one never.
	Transactions bool
}

// ConsumerConfig is one consumer the suite asks a transport to start.
type ConsumerConfig struct {
	// Topic is the one topic to consume (created with [Transport.CreateTopic]).
	Topic string
	// Group is the consumer group; see the package doc for where a new group starts.
	Group string
	// Tags is a tag expression: "" or "*" for all messages, else tags joined by "||".
	// Used only with [Features.Tags]; never set together with SQL.
	Tags string
	// SQL is a SQL92 expression over user properties ("a >= 5"); "" means none. Used only
	// with [Features.SQL92].
	SQL string
	// Handler handles the delivered messages. Run it as given: the suite's middlewares
	// are already inside.
	Handler middleware.ConsumeFunc
	// Orderly asks for consumption in shard order, one handler call at a time per shard
	// ([Features.OrderPerShardingKey]); false is concurrent consumption.
	Orderly bool
	// MaxReconsumeTimes is how often a failed message is delivered again before it becomes
	// a dead letter: -1 means the transport's default (the suite never relies on it), 0
	// means a failed message is a dead letter at once.
	MaxReconsumeTimes int
	// BatchSize is the most messages one handler call gets; 0 means 1.
	BatchSize int
}

// Transport is what a transport gives the suite. CreateTopic, NewProducer and NewConsumer
// are required; the others go with a feature.
type Transport struct {
	// Features switches the tests of optional behaviour on.
	Features Features
	// CreateTopic makes topic ready for sends and consumers, with shards shards (RocketMQ
	// queues, Kafka partitions), and returns when a producer can route to it. It fails t
	// itself on an error.
	CreateTopic func(t testing.TB, topic string, shards int)
	// NewProducer returns a new, unstarted producer (it fails t itself on an error). Run
	// makes one, starts it and sends every test's messages through it; [TestLifecycle]
	// makes its own. The suite shuts every producer down.
	NewProducer func(t testing.TB) transport.Producer
	// NewConsumer returns a new, unstarted consumer for cfg; see the package doc. It
	// fails t itself on an error.
	NewConsumer func(t testing.TB, cfg ConsumerConfig) transport.Consumer
	// DeadLetters lists the dead letters group has for messages of topic, each with the
	// message's Body, MsgID, tag and keys. Required with [Features.DeadLetter].
	DeadLetters func(ctx context.Context, group, topic string) ([]*message.MessageExt, error)
	// SendInTransaction sends msg as a transactional message and commits it (commit true)
	// or rolls it back; it returns once the decision reached the broker. Required with
	// [Features.Transactions].
	SendInTransaction func(ctx context.Context, msg *message.Message, commit bool) error
	// Dedup runs fn once per deduplication store the reliability-middleware test should
	// use (each run a subtest of t, with its dedup middleware, e.g. redismw.Dedup over a
	// Redis); nil skips that test.
	Dedup func(t *testing.T, fn func(t *testing.T, dedup middleware.ConsumeMiddleware))
	// Timeout bounds each wait of a test (a delivery, a redelivery chain, a dead letter).
	// Default: 30 s.
	Timeout time.Duration
	// Serial runs the tests one after another; by default they run in parallel (each
	// uses its own topics and groups).
	Serial bool

	producer transport.Producer // started by Run, shared by its tests
}
