package broker

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/message"
)

// Config configures a broker. Each field with a `conf` tag is the broker.conf key of the
// same name in Apache RocketMQ 4.x, with the same unit, so an existing broker.conf works;
// the zero value of a field means its documented default. Load a file with
// [LoadConfigFile] or [ParseConfig].
type Config struct {
	// BrokerClusterName is the cluster this broker registers under. Default "DefaultCluster".
	BrokerClusterName string `conf:"brokerClusterName"`
	// BrokerName names the broker in routes. Default "broker-a".
	BrokerName string `conf:"brokerName"`
	// BrokerID: 0 is the master. Sluice runs masters only; another value is an error.
	BrokerID int64 `conf:"brokerId"`
	// BrokerIP1 is the address the broker binds and advertises. Default "127.0.0.1".
	BrokerIP1 string `conf:"brokerIP1"`
	// ListenPort is the broker's TCP port. Default 10911; 0 picks a free port.
	ListenPort int `conf:"listenPort"`
	// ListenAddr, when set, overrides BrokerIP1:ListenPort (e.g. "127.0.0.1:0" in tests).
	ListenAddr string `conf:"listenAddr"`
	// NamesrvAddr lists name servers as "ip:port;ip:port". Empty: the broker starts an
	// embedded name server on NamesrvListenAddr and registers with it.
	NamesrvAddr string `conf:"namesrvAddr"`
	// NamesrvListenAddr is where the embedded name server listens when NamesrvAddr is
	// empty. Default "127.0.0.1:9876".
	NamesrvListenAddr string `conf:"namesrvListenAddr"`
	// StorePathRootDir is the data directory: commitlog, consume queues, checkpoint and
	// config/*.json (topics, offsets, groups). Required.
	StorePathRootDir string `conf:"storePathRootDir"`
	// MappedFileSizeCommitLog is the size of one commitlog segment in bytes. Default
	// 1073741824 (1 GiB).
	MappedFileSizeCommitLog int64 `conf:"mappedFileSizeCommitLog"`
	// FlushDiskType is ASYNC_FLUSH (fsync every FlushIntervalCommitLog ms) or SYNC_FLUSH
	// (a send is answered after fsync). Default "ASYNC_FLUSH".
	FlushDiskType string `conf:"flushDiskType"`
	// FlushIntervalCommitLog is the ASYNC_FLUSH fsync period in ms. Default 500.
	FlushIntervalCommitLog int64 `conf:"flushIntervalCommitLog"`
	// SyncFlushTimeout is how long a SYNC_FLUSH send waits for fsync, in ms, before it is
	// answered FLUSH_DISK_TIMEOUT (code 10). Default 5000.
	SyncFlushTimeout int64 `conf:"syncFlushTimeout"`
	// MaxMessageSize is the largest message body (and batch body) in bytes, counted as
	// the body arrives, i.e. after a client compressed it (a 4 MiB body of random bytes
	// grows a little when a client zlib-compresses it and is refused); larger sends get
	// MESSAGE_ILLEGAL (13). The Sluice producer checks body + encoded properties against
	// its own MaxMessageSize before sending. Default 4194304 (4 MiB).
	MaxMessageSize int `conf:"maxMessageSize"`
	// DefaultTopicQueueNums is the queue count of TBW102, the template auto-created topics
	// inherit (a producer asks for at most 4). Default 8.
	DefaultTopicQueueNums int `conf:"defaultTopicQueueNums"`
	// AutoCreateTopicEnable lets a send to an unknown topic create it. Default true; set
	// "false" in broker.conf to turn it off.
	AutoCreateTopicEnable *bool `conf:"autoCreateTopicEnable"`
	// AutoCreateSubscriptionGroup creates consumer group configs on first use. Default true.
	AutoCreateSubscriptionGroup *bool `conf:"autoCreateSubscriptionGroup"`
	// LongPollingEnable holds a pull that finds no message until one arrives or the
	// client's suspend timeout passes; off, it is held ShortPollingTimeMills. Default true.
	LongPollingEnable *bool `conf:"longPollingEnable"`
	// ShortPollingTimeMills is the hold time in ms when long polling is off. Default 1000.
	ShortPollingTimeMills int64 `conf:"shortPollingTimeMills"`
	// NotifyConsumerIdsChangedEnable pushes NOTIFY_CONSUMER_IDS_CHANGED (40) to a group's
	// consumers when its membership changes. Default true.
	NotifyConsumerIdsChangedEnable *bool `conf:"notifyConsumerIdsChangedEnable"`
	// RegionID is returned in send responses (MSG_REGION). Default "DefaultRegion".
	RegionID string `conf:"regionId"`
	// BrokerPermission is the broker's perm bits (4 read, 2 write). Default 6.
	BrokerPermission int `conf:"brokerPermission"`
	// RegisterNameServerPeriod is how often the broker re-registers, in ms. Default 30000.
	RegisterNameServerPeriod int64 `conf:"registerNameServerPeriod"`
	// ClientChannelExpiredTimeout drops a client whose last heartbeat is older than this,
	// in ms. Default 120000 (RocketMQ's CHANNEL_EXPIRED_TIMEOUT).
	ClientChannelExpiredTimeout int64 `conf:"clientChannelExpiredTimeout"`
	// RebalanceLockMaxLiveTime is how long an orderly consumer's queue lock
	// (LOCK_BATCH_MQ, 41) lives without renewal, in ms. Default 60000 (Java's
	// rocketmq.broker.rebalance.lockMaxLiveTime).
	RebalanceLockMaxLiveTime int64 `conf:"rebalanceLockMaxLiveTime"`
	// FlushConsumerOffsetInterval is how often consumer offsets are written to disk, in ms.
	// Default 5000.
	FlushConsumerOffsetInterval int64 `conf:"flushConsumerOffsetInterval"`
	// MessageDelayLevel is the delay table: space-separated durations with unit s, m, h or
	// d. Default message.DefaultMessageDelayLevel.
	MessageDelayLevel string `conf:"messageDelayLevel"`
	// DelayLevelOutOfRange is what a send whose DELAY property is not an integer in
	// 0..len(messageDelayLevel) gets: "refuse" (default), MESSAGE_ILLEGAL (13) naming the
	// property and the range; or "clamp", Apache RocketMQ's behaviour (a level above the
	// table is the last level; zero, negative or malformed is no delay). Sluice key.
	DelayLevelOutOfRange string `conf:"delayLevelOutOfRange"`
	// FileReservedTime is how long commitlog files are kept, in hours. Default 72.
	FileReservedTime int `conf:"fileReservedTime"`
	// DeleteWhen lists the hours of the day ("04", or "04;16") at which expired commitlog
	// files are deleted. Default "04".
	DeleteWhen string `conf:"deleteWhen"`
	// DiskMaxUsedSpaceRatio: above this disk usage, in percent, expired files are deleted
	// at once rather than at DeleteWhen, and 10 points above it (or at 95) even unexpired
	// files, oldest first. Default 75.
	DiskMaxUsedSpaceRatio int `conf:"diskMaxUsedSpaceRatio"`
	// DiskPressurePolicy decides what happens when the disk is almost full
	// (DiskMaxUsedSpaceRatio + 10 points, or 95 %) and the oldest unexpired files hold
	// messages a consumer group has not consumed: "refuseWrites" (default) keeps them and
	// refuses new sends until there is room; "deleteOldest" deletes them as Apache
	// RocketMQ does. Either way every deletion of unconsumed messages is logged per group
	// and queue and counted in [Broker.Stats]. A Sluice key (not in RocketMQ).
	DiskPressurePolicy string `conf:"diskPressurePolicy"`
	// MaxOpenFiles caps the consume-queue and key-index files the store keeps open:
	// they are opened on demand and the least recently used idle ones closed, so a broker
	// with many queues does not run out of file descriptors. Default 1000. A Sluice key.
	MaxOpenFiles int `conf:"maxOpenFiles"`
	// CleanResourceInterval is how often retention is considered, in ms. Default 10000.
	CleanResourceInterval int64 `conf:"cleanResourceInterval"`
	// MessageIndexEnable builds the key index (KEYS and UNIQ_KEY) that QUERY_MESSAGE (12)
	// reads. Default true.
	MessageIndexEnable *bool `conf:"messageIndexEnable"`
	// MaxHashSlotNum is the hash slot count of a new index file. Default 1000000
	// (RocketMQ: 5000000).
	MaxHashSlotNum int `conf:"maxHashSlotNum"`
	// MaxIndexNum is the entry count of a new index file. Default 4000000 (RocketMQ:
	// 20000000).
	MaxIndexNum int `conf:"maxIndexNum"`
	// BrokerRole must be ASYNC_MASTER (default) or SYNC_MASTER; Sluice has no slaves.
	BrokerRole string `conf:"brokerRole"`
	// TransactionTimeOut is how old a half message must be, in ms, before the broker
	// checks its state with the producer. Default 60000 (Sluice's seed; Apache RocketMQ
	// 4.9 defaults to 6000).
	TransactionTimeOut int64 `conf:"transactionTimeOut"`
	// TransactionCheckInterval is how often half messages are scanned for checks, in ms.
	// Default 60000.
	TransactionCheckInterval int64 `conf:"transactionCheckInterval"`
	// TransactionCheckMax is how many checks a half message gets before it is discarded
	// to TRANS_CHECK_MAX_TIME_TOPIC. Default 15.
	TransactionCheckMax int `conf:"transactionCheckMax"`
	// EnablePropertyFilter allows SQL92 subscriptions. Default false.
	EnablePropertyFilter bool `conf:"enablePropertyFilter"`

	// MaxConnections bounds the broker's open client connections; more are closed at
	// accept (logged). Sluice key. Default 10000; -1: unlimited.
	MaxConnections int `conf:"maxConnections"`
	// MaxConnectionsPerAddress bounds the open connections from one remote address: an
	// IPv4 address, or an IPv6 /64 (a client usually holds a whole /64; an IPv4-mapped
	// address counts as IPv4). Sluice key. Default maxConnections/10 (at least 16; 1000
	// with maxConnections=-1); -1: unlimited. Once the broker is full, a connection from
	// an address may take the place of a connection of an address holding at least two
	// more, which is closed: an idle one (no request served in the last 60 s and none in
	// flight) before an active one, then one of the address holding the most, then the
	// newest; an active connection of an address holding 4 or fewer is never closed. So
	// a flood from many addresses can neither lock others out nor take the connections
	// of a client using them.
	MaxConnectionsPerAddress int `conf:"maxConnectionsPerAddress"`
	// ReservedConnections are the last of maxConnections, open only to addresses holding
	// fewer than 4 connections. Sluice key. Default maxConnections/20 (at least 1); -1:
	// none.
	ReservedConnections int `conf:"reservedConnections"`
	// FirstRequestTimeoutMillis closes, in ms, a connection that has sent no whole
	// request this long after it was accepted. Sluice key. Default 10000; -1: none.
	FirstRequestTimeoutMillis int64 `conf:"firstRequestTimeoutMillis"`
	// MaxInFlightPerConnection bounds the requests of one connection handled at once,
	// held pulls included; more are answered SYSTEM_BUSY (2). Sluice key. Default 1024.
	MaxInFlightPerConnection int `conf:"maxInFlightPerConnection"`
	// MaxInFlightBytesPerConnection bounds the request body bytes of one connection held
	// at once (held pulls included); more are answered SYSTEM_BUSY (2). Sluice key.
	// Default 134217728 (128 MiB); -1: unlimited.
	MaxInFlightBytesPerConnection int64 `conf:"maxInFlightBytesPerConnection"`
	// MaxQueuedBytesPerConnection bounds the bytes of answers waiting to be written to
	// one connection; a client that stops reading is disconnected after 10 s. Sluice key.
	// Default 67108864 (64 MiB); -1: only the frame count (1024) bounds them.
	MaxQueuedBytesPerConnection int64 `conf:"maxQueuedBytesPerConnection"`
	// MaxRequestBodySize bounds the body of requests other than sends (heartbeats,
	// lock bodies, admin calls), in bytes; PULL_MESSAGE, which has no body in RocketMQ,
	// may carry at most 4096. Larger are refused with SYSTEM_ERROR (1) naming the limit.
	// Sends are bounded by maxMessageSize. Sluice key. Default 4194304 (4 MiB).
	MaxRequestBodySize int `conf:"maxRequestBodySize"`
	// MaxSubscriptionsPerGroup bounds the topics one consumer group subscribes, over its
	// members; a heartbeat that would take a group past it is refused for that group with
	// SYSTEM_ERROR naming the key (the client's other groups are registered). Sluice key.
	// Default 1000; -1: unlimited.
	MaxSubscriptionsPerGroup int `conf:"maxSubscriptionsPerGroup"`
	// MaxClientEntriesPerConnection bounds the producer and consumer groups one
	// connection registers by heartbeat. Sluice key. Default 1000; -1: unlimited.
	MaxClientEntriesPerConnection int `conf:"maxClientEntriesPerConnection"`
	// MaxClientEntries bounds the producer and consumer registrations the broker keeps
	// over all connections. Sluice key. Default 100000; -1: unlimited.
	MaxClientEntries int `conf:"maxClientEntries"`
	// MaxSubscriptions bounds the subscriptions the broker keeps over all clients (each
	// client's own plus each group's). Everything a connection registered is freed when
	// it closes. Sluice key. Default 200000; -1: unlimited.
	MaxSubscriptions int `conf:"maxSubscriptions"`
	// MaxClientEntriesPerAddress is one remote address's share of maxClientEntries (an
	// IPv4 address, or an IPv6 /64): past it that address's heartbeats are refused naming
	// the key, while other addresses still register. Sluice key. Default maxClientEntries/10,
	// at least min(maxClientEntries, 100); -1: unlimited (only maxClientEntries).
	MaxClientEntriesPerAddress int `conf:"maxClientEntriesPerAddress"`
	// MaxSubscriptionsPerAddress is one remote address's share of maxSubscriptions: the
	// subscriptions its connections' heartbeats carry (the broker may keep each group's
	// copy too, so an address makes it keep at most twice this). Sluice key. Default
	// maxSubscriptions/20, at least min(maxSubscriptions, 1000); -1: unlimited.
	MaxSubscriptionsPerAddress int `conf:"maxSubscriptionsPerAddress"`
	// FrameReadTimeoutMillis bounds, in ms, reading the rest of a frame once its first
	// byte arrived; a connection stalled mid-frame is closed. Sluice key. Default 30000.
	FrameReadTimeoutMillis int64 `conf:"frameReadTimeoutMillis"`

	// TLSEnable serves TLS on the broker port and on the embedded name server, and makes
	// the broker talk TLS to the name servers. Sluice key. Default false.
	TLSEnable bool `conf:"tlsEnable"`
	// TLSCertFile and TLSKeyFile are the PEM certificate (chain) and private key served
	// with TLSEnable. Sluice keys; required with tlsEnable.
	TLSCertFile string `conf:"tlsCertFile"`
	TLSKeyFile  string `conf:"tlsKeyFile"`
	// TLSCAFile is a PEM bundle the broker checks the name servers' certificates
	// against. Sluice key. Default: none, and then the name servers' certificates are not
	// verified (as the official Go client's WithTls does); set it in production.
	TLSCAFile string `conf:"tlsCAFile"`

	// GrpcListenAddr, when set, is where the sluice broker command serves the RocketMQ 5
	// gRPC MessagingService (package broker/grpcfront) on the same store, e.g.
	// "127.0.0.1:8081" ("127.0.0.1:0": a free port); with tlsEnable it serves TLS with the
	// same certificate, and with aclEnable it checks the RocketMQ 5 clients' signatures
	// against the same accounts and permissions. Sluice key. Default: none (the gRPC front
	// end is off).
	GrpcListenAddr string `conf:"grpcListenAddr"`

	// CompressedRegister sends REGISTER_BROKER bodies in RocketMQ's compressed form
	// (zlib; topicSysFlag and order are not carried). Unset: compressed only when the
	// JSON body would be over 1 MiB, so a large topic table still fits a frame; "false":
	// never. Default unset.
	CompressedRegister *bool `conf:"compressedRegister"`

	// AclEnable turns on RocketMQ plain ACL 1.0: every request must come from a
	// white-listed address or carry a valid signature of an account of AclFile, with the
	// permissions it needs (see package acl). Refusals are SYSTEM_ERROR (1), as in
	// RocketMQ. The embedded name server (no namesrvAddr) then also requires an admin
	// signature for its write operations. Default false.
	AclEnable bool `conf:"aclEnable"`
	// AclFile is the plain_acl.yml the broker reads when AclEnable is set; it is re-read
	// when it changes (checked every second). Sluice key; default
	// $ROCKETMQ_HOME/conf/plain_acl.yml (RocketMQ's location), required when
	// ROCKETMQ_HOME is unset.
	AclFile string `conf:"aclFile"`
	// AclSignatureSkewMillis is how far, in ms, a signature v2's time may be from the
	// broker's clock (Sluice's opt-in signature, see remoting.Credentials.SignatureV2).
	// Sluice key. Default 300000 (5 minutes).
	AclSignatureSkewMillis int64 `conf:"aclSignatureSkewMillis"`
	// AclSignatureNoncesPerAccount is one account's share of the signature v2 nonce store
	// (1,000,000 nonces, each kept twice aclSignatureSkewMillis): an account holding it is
	// refused until its nonces expire, so one signed account cannot fill the store for
	// all. Sluice key. Default 100000.
	AclSignatureNoncesPerAccount int `conf:"aclSignatureNoncesPerAccount"`
	// AclRefuseV1ForAdmin refuses admin-only request codes (topic and group changes,
	// offset resets, the name server's writes) signed with RocketMQ's signature v1, which
	// covers neither the request code nor a time; they need signature v2. The broker then
	// signs its own registrations with v2. Sluice key. Default false.
	AclRefuseV1ForAdmin bool `conf:"aclRefuseV1ForAdmin"`
	// AccessKey and SecretKey, when both set, sign the broker's own requests to the name
	// servers (registration, unregistration), for name servers that require it. Sluice
	// keys; default none.
	AccessKey string `conf:"accessKey"`
	SecretKey string `conf:"secretKey"`
	// MetricsPerQueueLag adds the per-queue series sluice_broker_consumer_queue_lag_messages
	// (group, topic, queue) to the metrics; by default only the per-group-and-topic
	// aggregates are exported (one group on 4,000 queues: a handful of series, not 4,000).
	// A Sluice key; default false.
	MetricsPerQueueLag bool `conf:"metricsPerQueueLag"`

	// Logger receives the broker's logs. Default slog.Default().
	Logger *slog.Logger

	listenPortSet bool              // listenPort was given in a file, so 0 means "a free port"
	ignored       []string          // keys accepted from a file that have no effect
	storePaths    map[string]string // storePath* keys from a file, checked against storePathRootDir
}

// IgnoredConfKeys are Apache RocketMQ broker.conf keys Sluice accepts so an existing file
// loads, but that have no effect here (thread pools, JVM-side tuning, HA addresses). A
// broker logs a warning naming each one that is set. Keys for features Sluice lacks are
// not here: set to true they are an error (see UnsupportedConfKeys). Each call returns a
// fresh map.
func IgnoredConfKeys() map[string]bool { return maps.Clone(ignoredConfKeys) }

// UnsupportedConfKeys are Apache RocketMQ broker.conf switches for features Sluice does
// not have. Set to false they are accepted; set to true they are a *config.Error, so a
// file that relies on them fails loudly instead of running without them. Each call
// returns a fresh map.
func UnsupportedConfKeys() map[string]string { return maps.Clone(unsupportedConfKeys) }

var unsupportedConfKeys = map[string]string{
	"enableDLegerCommitLog":           "DLedger (Raft) commitlog replication is not supported",
	"fetchNamesrvAddrByAddressServer": "name-server discovery through an address server is not supported",
	"rejectTransactionMessage":        "rejecting transactional messages is not supported",
	"slaveReadEnable":                 "slaves are not supported",
	"transientStorePoolEnable":        "the transient store pool is not supported",
}

// confKeyAliases maps old RocketMQ spellings to the keys Sluice reads.
var confKeyAliases = map[string]string{"mapedFileSizeCommitLog": "mappedFileSizeCommitLog"}

// storePathKeys are RocketMQ keys that move parts of the store; Sluice keeps them under
// storePathRootDir, so each is accepted only with that value.
var storePathKeys = map[string]string{
	"storePathCommitLog":    "commitlog",
	"storePathConsumeQueue": "consumequeue",
	"storePathIndex":        "index",
}

var ignoredConfKeys = map[string]bool{
	"brokerIP2": true, "serverWorkerThreads": true, "clientWorkerThreads": true,
	"serverSelectorThreads": true, "serverCallbackExecutorThreads": true, "clientCallbackExecutorThreads": true,
	"adminBrokerThreadPoolNums": true, "queryMessageThreadPoolNums": true, "heartbeatThreadPoolNums": true,
	"endTransactionThreadPoolNums": true, "consumerManageThreadPoolNums": true,
	"sendMessageThreadPoolNums": true,
	"pullMessageThreadPoolNums": true, "useReentrantLockWhenPutMessage": true,
	"waitTimeMillsInSendQueue": true, "osPageCacheBusyTimeOutMills": true,
	"mapedFileSizeConsumeQueue": true, "mappedFileSizeConsumeQueue": true,
	"flushConsumeQueueLeastPages": true, "flushCommitLogLeastPages": true,
	"traceTopicEnable": true, "storeCheckpoint": true,
	"abortFile": true, "maxTransferCountOnMessageInMemory": true,
	"haListenPort": true, "fastListenPort": true,
}

// boolPtr returns a pointer to v, for the *bool fields of Config.
func boolPtr(v bool) *bool { return &v }

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

// setDefaults fills zero fields with their documented defaults.
func (c *Config) setDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.BrokerClusterName, "DefaultCluster")
	def(&c.BrokerName, "broker-a")
	def(&c.BrokerIP1, "127.0.0.1")
	def(&c.NamesrvListenAddr, "127.0.0.1:9876")
	def(&c.FlushDiskType, "ASYNC_FLUSH")
	def(&c.RegionID, "DefaultRegion")
	def(&c.MessageDelayLevel, message.DefaultMessageDelayLevel)
	def(&c.BrokerRole, "ASYNC_MASTER")
	def(&c.DeleteWhen, "04")
	def(&c.DiskPressurePolicy, DiskPressureRefuseWrites)
	def(&c.DelayLevelOutOfRange, DelayLevelRefuse)
	if c.DiskMaxUsedSpaceRatio == 0 {
		c.DiskMaxUsedSpaceRatio = 75
	}
	if c.CleanResourceInterval == 0 {
		c.CleanResourceInterval = 10000
	}
	if c.ListenAddr == "" {
		port := c.ListenPort
		if port == 0 && !c.listenPortSet {
			port = 10911
		}
		c.ListenAddr = net.JoinHostPort(c.BrokerIP1, strconv.Itoa(port))
	}
	if c.MappedFileSizeCommitLog == 0 {
		c.MappedFileSizeCommitLog = 1 << 30
	}
	if c.FlushIntervalCommitLog == 0 {
		c.FlushIntervalCommitLog = 500
	}
	if c.SyncFlushTimeout == 0 {
		c.SyncFlushTimeout = 5000
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 4 << 20
	}
	if c.DefaultTopicQueueNums == 0 {
		c.DefaultTopicQueueNums = 8
	}
	if c.ShortPollingTimeMills == 0 {
		c.ShortPollingTimeMills = 1000
	}
	if c.BrokerPermission == 0 {
		c.BrokerPermission = permRead | permWrite
	}
	if c.RegisterNameServerPeriod == 0 {
		c.RegisterNameServerPeriod = 30000
	}
	if c.ClientChannelExpiredTimeout == 0 {
		c.ClientChannelExpiredTimeout = 120000
	}
	if c.RebalanceLockMaxLiveTime == 0 {
		c.RebalanceLockMaxLiveTime = DefaultRebalanceLockMaxLiveTime
	}
	if c.FlushConsumerOffsetInterval == 0 {
		c.FlushConsumerOffsetInterval = 5000
	}
	if c.TransactionTimeOut == 0 {
		c.TransactionTimeOut = 60000
	}
	if c.TransactionCheckInterval == 0 {
		c.TransactionCheckInterval = 60000
	}
	if c.TransactionCheckMax == 0 {
		c.TransactionCheckMax = 15
	}
	if c.FileReservedTime == 0 {
		c.FileReservedTime = 72
	}
	if c.MaxRequestBodySize == 0 {
		c.MaxRequestBodySize = 4 << 20
	}
	for _, d := range []struct {
		v   *int
		def int
	}{{&c.MaxSubscriptionsPerGroup, 1000}, {&c.MaxClientEntriesPerConnection, 1000}, {&c.MaxClientEntries, 100000}, {&c.MaxSubscriptions, 200000}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.AclSignatureNoncesPerAccount == 0 {
		c.AclSignatureNoncesPerAccount = 100000
	}
	if c.MaxClientEntriesPerAddress == 0 {
		c.MaxClientEntriesPerAddress = addressShare(c.MaxClientEntries, 10, 100)
	}
	if c.MaxSubscriptionsPerAddress == 0 {
		c.MaxSubscriptionsPerAddress = addressShare(c.MaxSubscriptions, 20, 1000)
	}
	if c.AclEnable && c.AclFile == "" {
		if home := os.Getenv("ROCKETMQ_HOME"); home != "" {
			c.AclFile = filepath.Join(home, "conf", "plain_acl.yml")
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// addressShare is the default per-address share of a global limit: total/div, at least
// min(total, floor); -1 (unlimited) when the total is unlimited.
func addressShare(total, div, floor int) int {
	if total <= 0 {
		return -1
	}
	return max(total/div, min(total, floor))
}

// Validate checks the config after defaults are applied. It returns a *config.Error naming
// the key.
func (c *Config) Validate() error {
	cp := *c
	cp.setDefaults()
	return cp.validate()
}

func (c *Config) validate() error {
	if c.StorePathRootDir == "" {
		return &config.Error{Package: "broker", Field: "storePathRootDir", Reason: "required"}
	}
	for key, val := range c.storePaths {
		if want := filepath.Join(c.StorePathRootDir, storePathKeys[key]); filepath.Clean(val) != want {
			return &config.Error{Package: "broker", Field: key, Value: val, Reason: fmt.Sprintf("Sluice keeps this under storePathRootDir: remove the key or set it to %s", want)}
		}
	}
	for _, a := range strings.Split(c.NamesrvAddr, ";") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return &config.Error{Package: "broker", Field: "namesrvAddr", Value: c.NamesrvAddr, Reason: fmt.Sprintf("%q is not ip:port", a)}
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return &config.Error{Package: "broker", Field: "namesrvAddr", Value: c.NamesrvAddr, Reason: fmt.Sprintf("%q has no valid port", a)}
		}
	}
	if c.AclEnable && c.AclFile == "" {
		return &config.Error{Package: "broker", Field: "aclFile", Reason: "required with aclEnable=true (or set ROCKETMQ_HOME to use $ROCKETMQ_HOME/conf/plain_acl.yml)"}
	}
	if c.TLSEnable && (c.TLSCertFile == "" || c.TLSKeyFile == "") {
		return &config.Error{Package: "broker", Field: "tlsCertFile", Reason: "tlsCertFile and tlsKeyFile are required with tlsEnable=true"}
	}
	for key, v := range map[string]int{"maxSubscriptionsPerGroup": c.MaxSubscriptionsPerGroup, "maxClientEntriesPerConnection": c.MaxClientEntriesPerConnection,
		"maxClientEntries": c.MaxClientEntries, "maxSubscriptions": c.MaxSubscriptions} {
		if v < -1 {
			return &config.Error{Package: "broker", Field: key, Value: strconv.Itoa(v), Reason: "must be at least 1 (-1: unlimited)"}
		}
	}
	if v := c.AclSignatureNoncesPerAccount; v < 1 || v > 1_000_000 {
		return &config.Error{Package: "broker", Field: "aclSignatureNoncesPerAccount", Value: strconv.Itoa(v), Reason: "must be between 1 and 1000000 (the nonce store's size)"}
	}
	for _, s := range []struct {
		key, totalKey string
		v, total      int
	}{{"maxClientEntriesPerAddress", "maxClientEntries", c.MaxClientEntriesPerAddress, c.MaxClientEntries},
		{"maxSubscriptionsPerAddress", "maxSubscriptions", c.MaxSubscriptionsPerAddress, c.MaxSubscriptions}} {
		switch {
		case s.v < -1:
			return &config.Error{Package: "broker", Field: s.key, Value: strconv.Itoa(s.v), Reason: "must be at least 1 (-1: unlimited)"}
		case s.total > 0 && s.v > s.total:
			return &config.Error{Package: "broker", Field: s.key, Value: strconv.Itoa(s.v), Reason: fmt.Sprintf("an address's share must be at most %s (%d)", s.totalKey, s.total)}
		}
	}
	if c.DelayLevelOutOfRange != DelayLevelRefuse && c.DelayLevelOutOfRange != DelayLevelClamp {
		return &config.Error{Package: "broker", Field: "delayLevelOutOfRange", Value: c.DelayLevelOutOfRange, Reason: "must be refuse or clamp"}
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return &config.Error{Package: "broker", Field: "secretKey", Reason: "accessKey and secretKey are set together or not at all"}
	}
	if c.BrokerID != 0 {
		return &config.Error{Package: "broker", Field: "brokerId", Value: strconv.FormatInt(c.BrokerID, 10), Reason: "only masters (0) are supported"}
	}
	if c.BrokerRole != "ASYNC_MASTER" && c.BrokerRole != "SYNC_MASTER" {
		return &config.Error{Package: "broker", Field: "brokerRole", Value: c.BrokerRole, Reason: "must be ASYNC_MASTER or SYNC_MASTER; Sluice has no slaves"}
	}
	if _, err := store.ParseFlushDiskType(c.FlushDiskType); err != nil {
		return &config.Error{Package: "broker", Field: "flushDiskType", Value: c.FlushDiskType, Reason: "must be ASYNC_FLUSH or SYNC_FLUSH"}
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		return &config.Error{Package: "broker", Field: "listenAddr", Value: c.ListenAddr, Reason: err.Error()}
	}
	if c.MaxMessageSize < 0 || c.MaxMessageSize > 64<<20 {
		return &config.Error{Package: "broker", Field: "maxMessageSize", Value: strconv.Itoa(c.MaxMessageSize), Reason: "must be between 1 and 67108864 bytes"}
	}
	if c.MappedFileSizeCommitLog < 64<<10 {
		return &config.Error{Package: "broker", Field: "mappedFileSizeCommitLog", Value: strconv.FormatInt(c.MappedFileSizeCommitLog, 10), Reason: "must be at least 65536 bytes"}
	}
	if c.MappedFileSizeCommitLog < int64(c.MaxMessageSize)+64<<10 {
		return &config.Error{Package: "broker", Field: "mappedFileSizeCommitLog", Value: strconv.FormatInt(c.MappedFileSizeCommitLog, 10), Reason: "must exceed maxMessageSize by at least 65536 bytes so a largest message fits a segment"}
	}
	if c.DefaultTopicQueueNums < 1 || c.DefaultTopicQueueNums > 1024 {
		return &config.Error{Package: "broker", Field: "defaultTopicQueueNums", Value: strconv.Itoa(c.DefaultTopicQueueNums), Reason: "must be 1..1024"}
	}
	if _, err := deleteHours(c.DeleteWhen); err != nil {
		return err
	}
	if c.MaxOpenFiles < 0 {
		return &config.Error{Package: "broker", Field: "maxOpenFiles", Value: strconv.Itoa(c.MaxOpenFiles), Reason: "must be at least 1 (0: the default, 1000)"}
	}
	if c.DiskPressurePolicy != DiskPressureRefuseWrites && c.DiskPressurePolicy != DiskPressureDeleteOldest {
		return &config.Error{Package: "broker", Field: "diskPressurePolicy", Value: c.DiskPressurePolicy, Reason: "must be refuseWrites or deleteOldest"}
	}
	if c.DiskMaxUsedSpaceRatio < 10 || c.DiskMaxUsedSpaceRatio > 95 {
		return &config.Error{Package: "broker", Field: "diskMaxUsedSpaceRatio", Value: strconv.Itoa(c.DiskMaxUsedSpaceRatio), Reason: "must be 10..95 (percent)"}
	}
	if _, err := message.ParseDelayLevels(c.MessageDelayLevel); err != nil {
		return &config.Error{Package: "broker", Field: "messageDelayLevel", Value: c.MessageDelayLevel, Reason: err.Error()}
	}
	return nil
}

// LoadConfigFile reads a RocketMQ-style broker.conf (see ParseConfig).
func LoadConfigFile(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	c, err := ParseConfig(f)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig reads broker.conf text: one "key=value" (or "key: value", or "key value",
// as Java properties allow) per line, "#" and
// "!" start comments, blank lines ignored. Keys are matched exactly as Apache RocketMQ
// spells them. An unknown key, a duplicate key or a value of the wrong type is a
// *config.Error naming the key and line. Keys RocketMQ knows that have no effect in Sluice
// are accepted (see the package docs).
func ParseConfig(r io.Reader) (Config, error) {
	var c Config
	fields := confFields()
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' || text[0] == '!' {
			continue
		}
		// Java properties: the key ends at the first '=', ':' or white space.
		i := strings.IndexAny(text, "=: \t")
		if i <= 0 {
			return Config{}, &config.Error{Package: "broker", Field: text, Reason: fmt.Sprintf("line %d is not key=value", line)}
		}
		key, val := text[:i], strings.TrimSpace(text[i:])
		if val != "" && (val[0] == '=' || val[0] == ':') {
			val = strings.TrimSpace(val[1:])
		}
		if alias, ok := confKeyAliases[key]; ok {
			key = alias
		}
		if prev, dup := seen[key]; dup {
			return Config{}, &config.Error{Package: "broker", Field: key, Reason: fmt.Sprintf("set twice (lines %d and %d)", prev, line)}
		}
		seen[key] = line
		if ignoredConfKeys[key] {
			c.ignored = append(c.ignored, key)
			continue
		}
		if why, ok := unsupportedConfKeys[key]; ok {
			if on, err := strconv.ParseBool(val); err != nil || on {
				return Config{}, &config.Error{Package: "broker", Field: key, Value: val, Reason: why + " (only false is accepted)"}
			}
			continue
		}
		if _, ok := storePathKeys[key]; ok {
			if c.storePaths == nil {
				c.storePaths = map[string]string{}
			}
			c.storePaths[key] = val
			continue
		}
		idx, ok := fields[key]
		if !ok {
			return Config{}, &config.Error{Package: "broker", Field: key, Reason: fmt.Sprintf("unknown key (line %d)", line)}
		}
		if err := setField(reflect.ValueOf(&c).Elem().Field(idx), val); err != nil {
			return Config{}, &config.Error{Package: "broker", Field: key, Value: val, Reason: err.Error()}
		}
		if key == "listenPort" {
			c.listenPortSet = true
		}
	}
	if err := sc.Err(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// confFields maps broker.conf keys to Config field indexes.
func confFields() map[string]int {
	t := reflect.TypeOf(Config{})
	m := make(map[string]int)
	for i := 0; i < t.NumField(); i++ {
		if k := t.Field(i).Tag.Get("conf"); k != "" {
			m[k] = i
		}
	}
	return m
}

func setField(v reflect.Value, s string) error {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		v.SetInt(n)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("not true or false")
		}
		v.SetBool(b)
	case reflect.Pointer:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("not true or false")
		}
		v.Set(reflect.ValueOf(&b))
	default:
		return fmt.Errorf("unsupported field kind %s", v.Kind())
	}
	return nil
}

// tlsConfigs returns the server and client TLS configurations of TLSEnable (nil, nil
// without it). Errors: *config.Error for unreadable or invalid files.
func (c *Config) tlsConfigs() (server, client *tls.Config, err error) {
	if !c.TLSEnable {
		return nil, nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, nil, &config.Error{Package: "broker", Field: "tlsCertFile", Value: c.TLSCertFile, Reason: err.Error()}
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	client = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, nil, &config.Error{Package: "broker", Field: "tlsCAFile", Value: c.TLSCAFile, Reason: err.Error()}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, &config.Error{Package: "broker", Field: "tlsCAFile", Value: c.TLSCAFile, Reason: "no PEM certificate in the file"}
		}
		client = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	return server, client, nil
}
