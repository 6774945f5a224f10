package producer

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/remoting"
)

// Defaults of Config (RocketMQ DefaultMQProducer defaults; DESIGN "Seed defaults").
const (
	// DefaultGroup is the producer group when Config.Group is empty.
	DefaultGroup = "DEFAULT_PRODUCER"
	// DefaultSendTimeout bounds one send attempt (Java sendMsgTimeout, 3000 ms).
	DefaultSendTimeout = 3 * time.Second
	// DefaultRetryTimesWhenSendFailed is how many more sync attempts follow a failed one
	// (Java retryTimesWhenSendFailed 2: 3 attempts in all).
	DefaultRetryTimesWhenSendFailed = 2
	// DefaultRetryTimesWhenSendAsyncFailed is how many more async attempts follow a
	// failed one, on the same broker (Java retryTimesWhenSendAsyncFailed 2).
	DefaultRetryTimesWhenSendAsyncFailed = 2
	// DefaultMaxMessageSize is the largest message or encoded batch in bytes: 4 MiB
	// (4194304), the broker's default maxMessageSize.
	DefaultMaxMessageSize = message.DefaultMaxMessageSize
	// DefaultCompressMsgBodyOverHowmuch is the body size in bytes from which bodies are
	// zlib-compressed (Java compressMsgBodyOverHowmuch 4096).
	DefaultCompressMsgBodyOverHowmuch = 4096
	// DefaultCompressLevel is the zlib level RocketMQ clients use.
	DefaultCompressLevel = 5
	// DefaultFaultIsolationDuration is how long a broker whose send attempt failed is
	// avoided when latency fault tolerance is on. Java 4.x charges a failure as 30 s of
	// latency, which its table turns into 600 s; Sluice isolates for 30 s (the table's
	// shortest non-zero window) so a restarted broker is used again soon. A failure that
	// also took long gets the longer of the two windows.
	DefaultFaultIsolationDuration = 30 * time.Second
	// DefaultMaxAsyncInflight bounds async sends in progress per producer (count): below
	// the 1024 requests a Sluice broker handles at once per connection
	// (remoting.ServerConfig.MaxInFlightPerConn), beyond which it answers SYSTEM_BUSY.
	DefaultMaxAsyncInflight = 1000
	// DefaultMaxAsyncInflightBytes bounds the body bytes of async sends in progress per
	// producer: 128 MiB.
	DefaultMaxAsyncInflightBytes = 128 << 20
)

// LatencyFaultRule is one row of the latency fault tolerance table: a send attempt that
// took at least Latency makes its broker not available for NotAvailable. The rule with
// the largest Latency not above the measured latency applies; below every rule the
// broker stays available.
type LatencyFaultRule struct {
	// Latency is the threshold, measured from sending the request to its response.
	Latency time.Duration
	// NotAvailable is how long the broker is then avoided.
	NotAvailable time.Duration
}

// DefaultLatencyFaultRules returns RocketMQ's table (Java MQFaultStrategy latencyMax /
// notAvailableDuration): at least 550 ms → 30 s, 1 s → 60 s, 2 s → 120 s, 3 s → 180 s,
// 15 s → 600 s. Faster answers (Java's 50 ms and 100 ms rows map to 0) keep the broker
// available. Each call returns a fresh slice.
func DefaultLatencyFaultRules() []LatencyFaultRule {
	return []LatencyFaultRule{
		{550 * time.Millisecond, 30 * time.Second},
		{1 * time.Second, 60 * time.Second},
		{2 * time.Second, 120 * time.Second},
		{3 * time.Second, 180 * time.Second},
		{15 * time.Second, 600 * time.Second},
	}
}

// Config configures a Producer. The zero value is usable apart from NamesrvAddrs; every
// field documents its default.
type Config struct {
	// NamesrvAddrs are the name servers, each "host:port". Required.
	NamesrvAddrs []string
	// Group is the producer group, sent in every send header and heartbeat.
	// Default: "DEFAULT_PRODUCER".
	Group string
	// InstanceName distinguishes producers in one process in the client id
	// ("<ip>@<InstanceName>"). Default: unique per Producer.
	InstanceName string
	// SendTimeout bounds one send attempt (route lookup excluded); the caller's context
	// bounds the whole send with its retries. An expired attempt is noticed by the
	// remoting client's deadline sweep, within 10 ms after the timeout. Default: 3s.
	SendTimeout time.Duration
	// RetryTimesWhenSendFailed is how many more attempts SendSync and SendBatch make
	// after a failed one (transport error or a retryable response code: 1, 2, 14, 16,
	// 17), each on another broker when there is one. Never after MESSAGE_ILLEGAL (13) or
	// another non-retryable code. Default: 2 (3 attempts in all). Negative: no retries.
	RetryTimesWhenSendFailed int
	// RetryTimesWhenSendAsyncFailed is how many more attempts SendAsync makes after a
	// failed one, on the same broker and message queue. Default: 2. Negative: no retries.
	RetryTimesWhenSendAsyncFailed int
	// RetryAnotherBrokerWhenNotStoreOK makes SendSync and SendBatch treat a stored
	// answer other than SEND_OK (FLUSH_DISK_TIMEOUT 10, SLAVE_NOT_AVAILABLE 11,
	// FLUSH_SLAVE_TIMEOUT 12) as a reason to try again on another broker while retries
	// remain. The first copy was stored, so consumers may see the message twice. When
	// every attempt is not OK the last result is returned with a nil error.
	// Default: false (such results reach the caller at once).
	RetryAnotherBrokerWhenNotStoreOK bool
	// SendLatencyFaultEnable turns latency fault tolerance on: a broker whose send
	// attempt failed (transport error, or SYSTEM_ERROR 1 / SYSTEM_BUSY 2 /
	// SERVICE_NOT_AVAILABLE 14) or stored a message without its slave
	// (SLAVE_NOT_AVAILABLE 11, FLUSH_SLAVE_TIMEOUT 12) is avoided for
	// FaultIsolationDuration, and a broker that
	// answered slowly is avoided for the window LatencyFaultRules gives its latency.
	// The round-robin selector skips avoided brokers while an available one has a queue
	// (when none has, it takes the broker whose window ends first); order-preserving
	// selectors (hash, manual) ignore it. Default: true (nil); Java's default is false,
	// the official Go client has no such feature. Set a pointer to false to turn it off.
	SendLatencyFaultEnable *bool
	// LatencyFaultRules is the latency → not-available table, sorted by Latency
	// ascending. Default: DefaultLatencyFaultRules().
	LatencyFaultRules []LatencyFaultRule
	// FaultIsolationDuration is how long a broker whose attempt failed is avoided.
	// Default: 30s (DefaultFaultIsolationDuration).
	FaultIsolationDuration time.Duration
	// Selector picks the message queue of each send unless the send passes
	// WithSelector or WithQueue. Default: RoundRobinSelector() (one per Producer).
	Selector MessageQueueSelector
	// MaxMessageSize is the largest body + encoded properties of one message, and the
	// largest encoded batch, in bytes; larger ones fail with a *message.ValidationError
	// before any network traffic. Default: 4 MiB (4194304), the broker's default
	// maxMessageSize.
	MaxMessageSize int
	// CompressMsgBodyOverHowmuch: bodies of at least this many bytes are zlib-compressed
	// (level CompressLevel) and sent with sysFlag bit0 when that makes them smaller (an
	// incompressible body goes as it is); batches are never compressed.
	// Default: 4096. Negative: never.
	CompressMsgBodyOverHowmuch int
	// CompressLevel is the zlib level (1..9). Default: 5, as RocketMQ clients use.
	CompressLevel int
	// MaxAsyncInflight bounds SendAsync calls whose result is not delivered yet; a
	// further SendAsync waits (bounded by its context) for one to finish.
	// Default: 1000 (see DefaultMaxAsyncInflight).
	MaxAsyncInflight int
	// MaxAsyncInflightBytes bounds the body bytes of those sends the same way (a single
	// larger message is still let through alone). Default: 128 MiB.
	MaxAsyncInflightBytes int64
	// Middlewares wrap every Send, SendSync, SendAsync, SendAsyncWith, SendAsyncChan and SendOneway (and
	// SendFunc), the first listed outermost (middleware.ChainSend); a send with the
	// WithoutMiddlewares option skips them. Where they cannot run, the path refuses
	// instead of skipping them: SendBatch fails with a *MiddlewareError unless called
	// with WithoutMiddlewares, and NewTransactionProducer refuses a Config that sets
	// them. Default: none.
	Middlewares []middleware.SendMiddleware
	// Logger receives the producer's logs. Default: slog.Default().
	Logger *slog.Logger
	// Credentials, when AccessKey and SecretKey are both set, sign every request with
	// RocketMQ plain ACL 1.0 (HMAC-SHA1 over the sorted ext-field values and the body),
	// for brokers and name servers with aclEnable. Default: none (unsigned).
	Credentials remoting.Credentials
	// TLS, when set, connects to name servers and brokers over TLS with this
	// configuration (crypto/tls; e.g. RootCAs with the servers' CA). Default: nil (plain
	// TCP).
	TLS *tls.Config
	// JSONHeaders makes the producer send RocketMQ's JSON request headers instead of the
	// binary ones (serialize type ROCKETMQ, docs/protocol.md §1.3). Default false: binary
	// headers, which RocketMQ brokers and name servers have decoded since 4.0 (Java
	// clients send them with -Drocketmq.serialize.type=ROCKETMQ) and which cost less CPU
	// to encode and decode on both sides; servers answer in the request's encoding. Set it
	// for a server or proxy that reads only JSON headers.
	JSONHeaders bool

	// AutoBatch turns on automatic batching of SendAsync (without middlewares): records
	// bound for the same message queue while a request of that queue is in flight (or
	// within AutoBatchLinger of the first) leave together as one SEND_BATCH_MESSAGE
	// request (RocketMQ code 320), at most AutoBatchMaxCount records and
	// AutoBatchMaxBytes encoded bytes; a record alone still goes as SEND_MESSAGE_V2.
	// Each record keeps its own callback, error and SendResult (its UNIQ_KEY as MsgID, its
	// offset message id, the queue, and its own queue offset). Records that cannot be in a
	// batch go alone: compressed bodies (CompressMsgBodyOverHowmuch), transactional or
	// delayed messages (delay level or timer properties), retry and DLQ topics, and
	// records larger than AutoBatchMaxBytes. One request per queue is in flight at a
	// time, so a queue's records are stored in the order SendAsync was called, retries
	// included. SendSync, SendBatch and SendOneway are unchanged. Default: false (see
	// docs/performance.md "Automatic batching" for why it is opt-in).
	AutoBatch bool
	// AutoBatchLinger is how long a queue's first pending record may wait for others
	// when no request of its queue is in flight. 0 (the default): it leaves at once, and
	// records coalesce only while a request of their queue is in flight. At most 1s.
	AutoBatchLinger time.Duration
	// AutoBatchMaxCount bounds the records of one automatic batch. Default: 256; at most
	// 4096 (MaxAutoBatchCount).
	AutoBatchMaxCount int
	// AutoBatchMaxBytes bounds the encoded size of one automatic batch (per record 22
	// bytes + body + encoded properties, message.BatchRecordSize). Default: 256 KiB; at
	// most MaxMessageSize.
	AutoBatchMaxBytes int

	// Test hooks (zero = production default).
	routeRefreshInterval time.Duration                            // 30s
	heartbeatInterval    time.Duration                            // 30s
	attemptHook          func(mq message.MessageQueue, err error) // after every send attempt
}

func (c *Config) setDefaults() {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	c.RetryTimesWhenSendFailed = retries(c.RetryTimesWhenSendFailed, DefaultRetryTimesWhenSendFailed)
	c.RetryTimesWhenSendAsyncFailed = retries(c.RetryTimesWhenSendAsyncFailed, DefaultRetryTimesWhenSendAsyncFailed)
	if c.SendLatencyFaultEnable == nil {
		on := true
		c.SendLatencyFaultEnable = &on
	}
	if c.LatencyFaultRules == nil {
		c.LatencyFaultRules = DefaultLatencyFaultRules()
	}
	if c.FaultIsolationDuration == 0 {
		c.FaultIsolationDuration = DefaultFaultIsolationDuration
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = DefaultMaxMessageSize
	}
	if c.CompressMsgBodyOverHowmuch == 0 {
		c.CompressMsgBodyOverHowmuch = DefaultCompressMsgBodyOverHowmuch
	}
	if c.CompressLevel == 0 {
		c.CompressLevel = DefaultCompressLevel
	}
	if c.MaxAsyncInflight == 0 {
		c.MaxAsyncInflight = DefaultMaxAsyncInflight
	}
	if c.MaxAsyncInflightBytes == 0 {
		c.MaxAsyncInflightBytes = DefaultMaxAsyncInflightBytes
	}
	if c.AutoBatchMaxCount == 0 {
		c.AutoBatchMaxCount = DefaultAutoBatchMaxCount
	}
	if c.AutoBatchMaxBytes == 0 {
		c.AutoBatchMaxBytes = min(DefaultAutoBatchMaxBytes, c.MaxMessageSize)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// retries maps the documented retry-count convention: 0 → def, negative → none.
func retries(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// MaxRetryTimes bounds RetryTimesWhenSendFailed and RetryTimesWhenSendAsyncFailed.
const MaxRetryTimes = 32

// Validate reports the first invalid field as an error naming it: no name server or a
// malformed "host:port", a Group that breaks the topic character rules (RocketMQ group
// names follow them), a negative SendTimeout, MaxMessageSize, FaultIsolationDuration,
// MaxAsyncInflight or MaxAsyncInflightBytes, a retry count above MaxRetryTimes, a
// CompressLevel outside 0..9, LatencyFaultRules that are not sorted by Latency or
// have a negative duration, or an auto-batching setting out of range (a *config.Error:
// AutoBatchLinger 0..1s, AutoBatchMaxCount 0..4096, AutoBatchMaxBytes 0..MaxMessageSize). Zero values are fine: they mean the documented defaults.
func (c *Config) Validate() error {
	bad := func(field string, value any, reason string) error {
		return &config.Error{Package: "producer", Field: field, Value: value, Reason: reason}
	}
	if len(c.NamesrvAddrs) == 0 {
		return bad("NamesrvAddrs", nil, `empty: need at least one name server "host:port"`)
	}
	if c.Group != "" {
		if err := message.ValidateGroupTopics(c.Group); err != nil {
			return &config.Error{Package: "producer", Field: "Group", Value: fmt.Sprintf("%.64s", c.Group), Reason: err.Error(), Err: err}
		}
	}
	switch {
	case c.SendTimeout < 0:
		return bad("SendTimeout", c.SendTimeout, "must not be negative")
	case c.MaxMessageSize < 0:
		return bad("MaxMessageSize", c.MaxMessageSize, "must not be negative")
	case c.CompressLevel < 0 || c.CompressLevel > 9:
		return bad("CompressLevel", c.CompressLevel, "must be 1..9 (0 = default 5)")
	case c.RetryTimesWhenSendFailed > MaxRetryTimes:
		return bad("RetryTimesWhenSendFailed", c.RetryTimesWhenSendFailed, fmt.Sprintf("exceeds %d", MaxRetryTimes))
	case c.RetryTimesWhenSendAsyncFailed > MaxRetryTimes:
		return bad("RetryTimesWhenSendAsyncFailed", c.RetryTimesWhenSendAsyncFailed, fmt.Sprintf("exceeds %d", MaxRetryTimes))
	case c.FaultIsolationDuration < 0:
		return bad("FaultIsolationDuration", c.FaultIsolationDuration, "must not be negative")
	case c.MaxAsyncInflight < 0:
		return bad("MaxAsyncInflight", c.MaxAsyncInflight, "must not be negative")
	case c.MaxAsyncInflightBytes < 0:
		return bad("MaxAsyncInflightBytes", c.MaxAsyncInflightBytes, "must not be negative")
	}
	if err := c.validateAutoBatch(); err != nil {
		return err
	}
	for i, r := range c.LatencyFaultRules {
		field := fmt.Sprintf("LatencyFaultRules[%d]", i)
		if r.Latency < 0 || r.NotAvailable < 0 {
			return bad(field, fmt.Sprintf("%+v", r), "durations must not be negative")
		}
		if i > 0 && r.Latency <= c.LatencyFaultRules[i-1].Latency {
			return bad(field, fmt.Sprintf("%+v", r), fmt.Sprintf("Latency must be above the previous rule's %v (sorted ascending)", c.LatencyFaultRules[i-1].Latency))
		}
	}
	return withPackage("producer", (&client.Config{NamesrvAddrs: c.NamesrvAddrs}).Validate())
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
