package consumer

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

// MessageModel says how a consumer group shares messages.
type MessageModel int

const (
	// Clustering: each message goes to one consumer of the group; queues are split
	// between members (rebalance), offsets are stored on the brokers, failed messages are
	// retried through %RETRY%<group>. The default.
	Clustering MessageModel = iota
	// Broadcasting: every consumer of the group gets every message of every queue;
	// offsets are kept in a local file (Config.OffsetStoreDir); a failed message is
	// logged and not retried.
	Broadcasting
)

// String returns the RocketMQ name: "CLUSTERING" or "BROADCASTING".
func (m MessageModel) String() string {
	switch m {
	case Clustering:
		return wire.MessageModelClustering
	case Broadcasting:
		return wire.MessageModelBroadcasting
	}
	return fmt.Sprintf("MessageModel(%d)", int(m))
}

// ConsumeFromWhere says where a consumer group starts on a queue it has no stored offset
// for (QUERY_CONSUMER_OFFSET answered 22 QUERY_NOT_FOUND). A stored offset always wins.
type ConsumeFromWhere int

const (
	// ConsumeFromLastOffset starts at the queue's max offset: only new messages
	// (GET_MAX_OFFSET, request code 30). Retry topics start at 0. The default.
	ConsumeFromLastOffset ConsumeFromWhere = iota
	// ConsumeFromFirstOffset starts at offset 0 (everything still stored).
	ConsumeFromFirstOffset
	// ConsumeFromTimestamp starts at the first message stored at or near
	// Config.ConsumeTimestamp (SEARCH_OFFSET_BY_TIMESTAMP, request code 29). Retry topics
	// start at their max offset.
	ConsumeFromTimestamp
)

// String returns the RocketMQ name, e.g. "CONSUME_FROM_LAST_OFFSET".
func (w ConsumeFromWhere) String() string {
	switch w {
	case ConsumeFromLastOffset:
		return wire.ConsumeFromLastOffset
	case ConsumeFromFirstOffset:
		return wire.ConsumeFromFirstOffset
	case ConsumeFromTimestamp:
		return wire.ConsumeFromTimestamp
	}
	return fmt.Sprintf("ConsumeFromWhere(%d)", int(w))
}

// Defaults of Config (RocketMQ DefaultMQPushConsumer defaults; DESIGN "Seed defaults").
const (
	DefaultConsumeGoroutines          = 20 // handler goroutines (ConsumeThreadMin/Max)
	DefaultPullBatchSize              = 32 // messages per PULL_MESSAGE (pullBatchSize)
	DefaultConsumeMessageBatchMaxSize = 1  // messages per handler call (consumeMessageBatchMaxSize)
	// DefaultMaxReconsumeTimes is how often a failed message of a concurrent consumer is
	// redelivered through %RETRY%<group> before it goes to %DLQ%<group>.
	DefaultMaxReconsumeTimes     = 16
	DefaultSuspendCurrentQueue   = time.Second      // orderly: pause before a failed batch runs again
	DefaultPersistOffsetInterval = 5 * time.Second  // offsets stored every 5 s
	DefaultRebalanceInterval     = 20 * time.Second // queues re-allocated every 20 s
	DefaultHeartbeatInterval     = 30 * time.Second // HEART_BEAT every 30 s
	DefaultPullThresholdForQueue = 1000             // cached messages per queue before pulling pauses
	DefaultConsumeTimestampAgo   = 30 * time.Minute // ConsumeTimestamp default: 30 min before NewPushConsumer
	// DefaultPullThresholdSizeForQueue is 100 MiB of cached message bodies per queue.
	DefaultPullThresholdSizeForQueue = 100 << 20
	// DefaultLockRenewInterval is how often an orderly consumer renews the broker locks
	// of its queues (LOCK_BATCH_MQ; Java RebalanceLockInterval, 20 s).
	DefaultLockRenewInterval = 20 * time.Second
	// LockValidity is how long a queue lock counts as held on the client after it was
	// granted or renewed (Java REBALANCE_LOCK_MAX_LIVE_TIME, 30 s; brokers keep locks
	// 60 s). An orderly consumer stops consuming a queue whose lock is older.
	LockValidity = 30 * time.Second
)

// Limits checked by Config.Validate.
const (
	MaxPullBatchSize = 1024 // largest PullBatchSize
	// MaxConsumeMessageBatchMaxSize is the largest ConsumeMessageBatchMaxSize: 32, one
	// pull's worth (brokers return at most 32 messages per pull).
	MaxConsumeMessageBatchMaxSize = 32
	MaxConsumeGoroutines          = 1000 // largest ConsumeGoroutines
)

// SuspendCurrentQueueAMoment is what an orderly handler returns to have its batch run
// again after Config.SuspendCurrentQueueTime, while later messages of the queue wait
// (RocketMQ ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT). An orderly consumer
// treats message.ReconsumeLater, an error and a panic the same way; a concurrent
// consumer treats it like message.ReconsumeLater.
const SuspendCurrentQueueAMoment = message.SuspendCurrentQueueAMoment

// Retries returns a pointer to n, for Config.MaxReconsumeTimes.
func Retries(n int) *int { return &n }

// Config configures a PushConsumer. NamesrvAddrs and Group are required; the rest has
// defaults.
type Config struct {
	// NamesrvAddrs are the name servers, each "host:port". Required.
	NamesrvAddrs []string
	// Group is the consumer group. Required; topic character rules, at most 127 bytes
	// minus the "%RETRY%" prefix.
	Group string
	// InstanceName distinguishes consumers in one process in the client id
	// ("<ip>@<InstanceName>"). Default: unique per PushConsumer, so two consumers in one
	// process are two group members. Broadcasting consumers also use it to name their
	// offset file, so give a broadcasting consumer a stable InstanceName if several of
	// the group run on one host.
	InstanceName string
	// MessageModel is Clustering (default) or Broadcasting.
	MessageModel MessageModel
	// Orderly consumes each queue in queue-offset order, one handler call at a time per
	// queue: in clustering mode the consumer locks its queues on the broker
	// (LOCK_BATCH_MQ, RocketMQ request code 41) and consumes only locked queues; a failed
	// batch is retried locally after SuspendCurrentQueueTime while the rest of its queue
	// waits. Default false: concurrent consumption by ConsumeGoroutines handlers.
	Orderly bool
	// ConsumeFromWhere applies to queues without a stored offset. Default:
	// ConsumeFromLastOffset.
	ConsumeFromWhere ConsumeFromWhere
	// ConsumeTimestamp is the start time for ConsumeFromTimestamp. Default: 30 minutes
	// before NewPushConsumer.
	ConsumeTimestamp time.Time
	// ConsumeGoroutines is the most handler calls running at once, shared by all queues
	// (orderly: at most one per queue). Default: 20; at most 1000.
	ConsumeGoroutines int
	// PullBatchSize is the most messages one PULL_MESSAGE asks for (maxMsgNums).
	// Default: 32; at most 1024 (brokers cap it at 32 anyway).
	PullBatchSize int
	// ConsumeMessageBatchMaxSize is the most messages one handler call gets, all from one
	// queue, consecutive. Default: 1; at most 32.
	ConsumeMessageBatchMaxSize int
	// MaxReconsumeTimes bounds redeliveries of a failed message before it goes to
	// %DLQ%<group>. Nil or -1: the default — 16 for concurrent consumers (delays 10s 30s
	// 1m ... 2h, delay level 3 + reconsume count), unlimited for orderly consumers.
	// 0: a failed message goes to the DLQ at once. N: after N redeliveries (concurrent:
	// through %RETRY%<group>; orderly: local retries) the next failure moves it to the
	// DLQ. Not used by broadcasting consumers, which never retry. Set with Retries(n).
	MaxReconsumeTimes *int
	// SuspendCurrentQueueTime is how long an orderly consumer waits before running a
	// failed batch again. Default: 1s.
	SuspendCurrentQueueTime time.Duration
	// PersistOffsetInterval is how often consumed offsets are stored
	// (UPDATE_CONSUMER_OFFSET, request code 15; or the local file in broadcasting
	// mode). Default: 5s.
	PersistOffsetInterval time.Duration
	// RebalanceInterval is how often queues are re-allocated among the group's members;
	// a NOTIFY_CONSUMER_IDS_CHANGED from a broker triggers one at once. Default: 20s.
	RebalanceInterval time.Duration
	// HeartbeatInterval is how often HEART_BEAT goes to every broker. Default: 30s.
	HeartbeatInterval time.Duration
	// PullThresholdForQueue pauses pulling a queue while this many of its messages are
	// cached and unfinished; pulling resumes when they drain. Default: 1000.
	PullThresholdForQueue int
	// PullThresholdSizeForQueue pauses pulling a queue while this many body bytes of its
	// messages are cached and unfinished. Default: 100 MiB.
	PullThresholdSizeForQueue int64
	// OffsetStoreDir is where a broadcasting consumer keeps its offsets: the file
	// <OffsetStoreDir>/<Group>/<InstanceName or "DEFAULT">/offsets.json, written
	// atomically (temporary file, fsync, rename). Default: $HOME/.sluice/offsets
	// (os.UserHomeDir). Unused in clustering mode.
	OffsetStoreDir string
	// Middlewares wrap every handler, the first listed outermost (middleware.ChainConsume).
	Middlewares []middleware.ConsumeMiddleware
	// Logger receives the consumer's logs. Default: slog.Default().
	Logger *slog.Logger
	// Credentials, when AccessKey and SecretKey are both set, sign every request with
	// RocketMQ plain ACL 1.0 (HMAC-SHA1 over the sorted ext-field values and the body),
	// for brokers and name servers with aclEnable. Default: none (unsigned).
	Credentials remoting.Credentials
	// TLS, when set, connects to name servers and brokers over TLS with this
	// configuration (crypto/tls; e.g. RootCAs with the servers' CA). Default: nil (plain
	// TCP).
	TLS *tls.Config
	// JSONHeaders makes the consumer send RocketMQ's JSON request headers instead of the
	// binary ones (serialize type ROCKETMQ, docs/protocol.md §1.3). Default false: binary
	// headers, which RocketMQ brokers and name servers have decoded since 4.0 (Java
	// clients send them with -Drocketmq.serialize.type=ROCKETMQ) and which cost less CPU
	// to encode and decode on both sides; servers answer in the request's encoding. Set it
	// for a server or proxy that reads only JSON headers.
	JSONHeaders bool
	// MaxDecompressedSize bounds one message body after decompression, in bytes. A body
	// flagged compressed that is larger, or not valid zlib, is never handed to a handler
	// (nor inflated past the limit): the push consumer moves it to %DLQ%<group> with an
	// error log; the pull consumer returns it with a nil Body and MessageExt.DecodeErr.
	// Default: message.DefaultMaxDecompressedSize (16 MiB).
	MaxDecompressedSize int

	// Test hooks, unexported: zero means the production default.
	routeRefreshInterval time.Duration // 30s
	pullErrorBackoff     time.Duration // 3s after a failed pull
	localRetryDelay      time.Duration // 5s before a message whose send-back failed runs again
	suspendTimeout       time.Duration // 20s long-polling suspend
	lockRenewInterval    time.Duration // DefaultLockRenewInterval
	handoverWait         time.Duration // 3s: how long a dropped queue waits for its running handlers
	onAssign             func(mq message.MessageQueue, start int64)
}

func (c *Config) setDefaults() {
	if c.ConsumeTimestamp.IsZero() {
		c.ConsumeTimestamp = time.Now().Add(-DefaultConsumeTimestampAgo)
	}
	if c.ConsumeGoroutines == 0 {
		c.ConsumeGoroutines = DefaultConsumeGoroutines
	}
	if c.PullBatchSize == 0 {
		c.PullBatchSize = DefaultPullBatchSize
	}
	if c.ConsumeMessageBatchMaxSize == 0 {
		c.ConsumeMessageBatchMaxSize = DefaultConsumeMessageBatchMaxSize
	}
	if c.SuspendCurrentQueueTime == 0 {
		c.SuspendCurrentQueueTime = DefaultSuspendCurrentQueue
	}
	if c.PersistOffsetInterval == 0 {
		c.PersistOffsetInterval = DefaultPersistOffsetInterval
	}
	if c.RebalanceInterval == 0 {
		c.RebalanceInterval = DefaultRebalanceInterval
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.PullThresholdForQueue == 0 {
		c.PullThresholdForQueue = DefaultPullThresholdForQueue
	}
	if c.PullThresholdSizeForQueue == 0 {
		c.PullThresholdSizeForQueue = DefaultPullThresholdSizeForQueue
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.pullErrorBackoff == 0 {
		c.pullErrorBackoff = 3 * time.Second
	}
	if c.localRetryDelay == 0 {
		c.localRetryDelay = 5 * time.Second
	}
	if c.suspendTimeout == 0 {
		c.suspendTimeout = 20 * time.Second
	}
	if c.lockRenewInterval == 0 {
		c.lockRenewInterval = DefaultLockRenewInterval
	}
	if c.handoverWait == 0 {
		c.handoverWait = 3 * time.Second
	}
}

// maxReconsume returns the effective redelivery limit: -1 = unlimited.
func (c *Config) maxReconsume() int {
	if c.MaxReconsumeTimes == nil || *c.MaxReconsumeTimes < 0 {
		if c.Orderly {
			return -1
		}
		return DefaultMaxReconsumeTimes
	}
	return *c.MaxReconsumeTimes
}

// Validate reports the first invalid field as an error naming it and the limit.
func (c *Config) Validate() error {
	bad := func(field string, value any, reason string) error {
		return &config.Error{Package: "consumer", Field: field, Value: value, Reason: reason}
	}
	if len(c.NamesrvAddrs) == 0 {
		return bad("NamesrvAddrs", nil, `empty: need at least one name server "host:port"`)
	}
	if c.Group == "" {
		return bad("Group", nil, "empty: a consumer group is required")
	}
	if err := message.ValidateGroupTopics(c.Group); err != nil {
		return &config.Error{Package: "consumer", Field: "Group", Value: fmt.Sprintf("%.64s", c.Group), Reason: err.Error(), Err: err}
	}
	switch {
	case c.MessageModel != Clustering && c.MessageModel != Broadcasting:
		return bad("MessageModel", int(c.MessageModel), "unknown: want Clustering or Broadcasting")
	case c.ConsumeFromWhere < ConsumeFromLastOffset || c.ConsumeFromWhere > ConsumeFromTimestamp:
		return bad("ConsumeFromWhere", int(c.ConsumeFromWhere), "unknown")
	case c.ConsumeGoroutines < 0 || c.ConsumeGoroutines > MaxConsumeGoroutines:
		return bad("ConsumeGoroutines", c.ConsumeGoroutines, fmt.Sprintf("must be 1..%d (0 = default %d)", MaxConsumeGoroutines, DefaultConsumeGoroutines))
	case c.PullBatchSize < 0 || c.PullBatchSize > MaxPullBatchSize:
		return bad("PullBatchSize", c.PullBatchSize, fmt.Sprintf("must be 1..%d (0 = default %d)", MaxPullBatchSize, DefaultPullBatchSize))
	case c.ConsumeMessageBatchMaxSize < 0 || c.ConsumeMessageBatchMaxSize > MaxConsumeMessageBatchMaxSize:
		return bad("ConsumeMessageBatchMaxSize", c.ConsumeMessageBatchMaxSize,
			fmt.Sprintf("must be 1..%d (0 = default %d)", MaxConsumeMessageBatchMaxSize, DefaultConsumeMessageBatchMaxSize))
	case c.MaxReconsumeTimes != nil && *c.MaxReconsumeTimes < -1:
		return bad("MaxReconsumeTimes", *c.MaxReconsumeTimes, "must be -1 (default), 0 (straight to the DLQ) or more")
	case c.PullThresholdForQueue < 0:
		return bad("PullThresholdForQueue", c.PullThresholdForQueue, "must not be negative")
	case c.PullThresholdSizeForQueue < 0:
		return bad("PullThresholdSizeForQueue", c.PullThresholdSizeForQueue, "must not be negative")
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"PersistOffsetInterval", c.PersistOffsetInterval}, {"RebalanceInterval", c.RebalanceInterval},
		{"HeartbeatInterval", c.HeartbeatInterval}, {"SuspendCurrentQueueTime", c.SuspendCurrentQueueTime},
	} {
		if f.d < 0 {
			return bad(f.name, f.d, "must not be negative")
		}
	}
	return withPackage("consumer", (&client.Config{NamesrvAddrs: c.NamesrvAddrs}).Validate())
}

// withPackage makes a *config.Error of the shared client's check say which package's
// configuration it is.
func withPackage(pkg string, err error) error {
	if ce, ok := err.(*config.Error); ok {
		cp := *ce
		cp.Package = pkg
		return &cp
	}
	return err
}
