package producer

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicemq/sluice/internal/client"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
)

// Defaults of Config (RocketMQ DefaultMQProducer defaults; DESIGN "Seed defaults").
const (
	DefaultGroup                      = "DEFAULT_PRODUCER"
	DefaultSendTimeout                = 3 * time.Second
	DefaultRetryTimesWhenSendFailed   = 2
	DefaultMaxMessageSize             = message.DefaultMaxMessageSize // 4 MiB
	DefaultCompressMsgBodyOverHowmuch = 4096
	DefaultCompressLevel              = 5
)

// Config configures a Producer. The zero value is usable apart from NamesrvAddrs.
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
	// bounds the whole SendSync. Default: 3s.
	SendTimeout time.Duration
	// RetryTimesWhenSendFailed is how many more attempts SendSync makes after a failed one
	// (transport error or a retryable response code), each on another broker when there
	// is one. Default: 2 (3 attempts in all). Set to a negative value for no retries.
	RetryTimesWhenSendFailed int
	// MaxMessageSize is the largest body + encoded properties accepted, in bytes; larger
	// messages fail with a *message.ValidationError before any network traffic.
	// Default: 4 MiB (4194304), the broker's default maxMessageSize.
	MaxMessageSize int
	// CompressMsgBodyOverHowmuch: bodies of at least this many bytes are zlib-compressed
	// (level CompressLevel) and sent with sysFlag bit0. Default: 4096. Negative: never.
	CompressMsgBodyOverHowmuch int
	// CompressLevel is the zlib level (1..9). Default: 5, as RocketMQ clients use.
	CompressLevel int
	// Middlewares wrap every SendSync, the first listed outermost (middleware.ChainSend).
	Middlewares []middleware.SendMiddleware
	// Logger receives the producer's logs. Default: slog.Default().
	Logger *slog.Logger

	// routeRefreshInterval and heartbeatInterval are test hooks (defaults 30s).
	routeRefreshInterval time.Duration
	heartbeatInterval    time.Duration
}

func (c *Config) setDefaults() {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.RetryTimesWhenSendFailed == 0 {
		c.RetryTimesWhenSendFailed = DefaultRetryTimesWhenSendFailed
	} else if c.RetryTimesWhenSendFailed < 0 {
		c.RetryTimesWhenSendFailed = 0
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
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field as an error naming it: no name server or a
// malformed "host:port", a Group that breaks the topic character rules (RocketMQ group
// names follow them), a negative SendTimeout or MaxMessageSize, or a CompressLevel
// outside 0..9.
func (c Config) Validate() error {
	if len(c.NamesrvAddrs) == 0 {
		return errors.New("producer: Config.NamesrvAddrs is empty: need at least one name server \"host:port\"")
	}
	if c.Group != "" {
		if err := message.ValidateTopic(c.Group); err != nil {
			return fmt.Errorf("producer: Config.Group %q: %w", c.Group, err)
		}
	}
	switch {
	case c.SendTimeout < 0:
		return fmt.Errorf("producer: Config.SendTimeout %v must not be negative", c.SendTimeout)
	case c.MaxMessageSize < 0:
		return fmt.Errorf("producer: Config.MaxMessageSize %d must not be negative", c.MaxMessageSize)
	case c.CompressLevel < 0 || c.CompressLevel > 9:
		return fmt.Errorf("producer: Config.CompressLevel %d must be 1..9 (0 = default 5)", c.CompressLevel)
	}
	return client.Config{NamesrvAddrs: c.NamesrvAddrs}.Validate()
}
