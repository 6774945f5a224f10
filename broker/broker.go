// Package broker is a message broker with Apache RocketMQ 4.x semantics that speaks the
// RocketMQ remoting protocol, so the official RocketMQ clients use it unchanged.
//
// A [Broker] owns a [store.Store] (commitlog + consume queues), a remoting server with one
// processor per request code, and a few tables persisted beside the store in
// <storePathRootDir>/config: topics.json, consumerOffset.json and subscriptionGroup.json.
// It registers with one or more name servers every registerNameServerPeriod (30 s) and
// whenever a topic changes; with no namesrvAddr it runs an embedded name server.
//
// Request flow, for the two codes that carry the traffic:
//
//   - SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320): validate the
//     header and size, find or auto-create the topic from TBW102, build the stored record
//     (born host = the client's address, store host = ours, property CLUSTER added) and
//     append it to the commitlog; the store dispatches it to its consume queue and wakes
//     held pulls. See send.go.
//   - PULL_MESSAGE (11): read up to maxMsgNums records from the consume queue at the
//     requested offset, filtered by the subscription's tags; when there is nothing yet,
//     hold the request (long polling) until a message arrives or the client's suspend
//     timeout passes. See pull.go.
//
// Clients are tracked by connection (clients.go): a consumer group's membership changes
// when a heartbeat brings a new client, when a connection closes, or when a client's
// heartbeats stop for clientChannelExpiredTimeout; the group's consumers are then told
// to rebalance with NOTIFY_CONSUMER_IDS_CHANGED (40).
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/broker/namesrv"
	"github.com/sluicemq/sluice/broker/store"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/filter"
	"github.com/sluicemq/sluice/internal/lograte"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// ErrClosed is returned by Start after Shutdown.
var ErrClosed = errors.New("broker: closed")

// Broker is a RocketMQ-compatible broker. Create it with New, then Start; Shutdown stops it.
type Broker struct {
	cfg          Config
	log          *slog.Logger
	delayLevels  []time.Duration
	namesrvAddrs []string

	store    *store.Store
	server   *remoting.Server
	client   *remoting.Client // to the name servers
	embedded *namesrv.NameServer

	topics   *topicTable
	offsets  *offsetTable
	groups   *groupTable
	clients  *clientManager
	arrivals *arrivals
	sched    *scheduler
	timer    *timerService // timer.go: timer messages (TIMER_DELIVER_MS, TIMER_DELAY_SEC/MS)
	// txnChecker asks a front end's producers about half messages (frontend.go)
	txnChecker atomic.Pointer[TransactionChecker]
	locks      *queueLocks
	txn        *txnService
	held       *heldPulls
	sqlCache   *filter.SQLCache
	pressure   diskPressure   // diskpressure.go: the disk-pressure policy's state and Stats counters
	acl        *acl.Validator // nil unless aclEnable
	counters   counters       // stats.go: refusals and registrations, exported through Stats
	traffic    *brokerStats   // statsnapshot.go: hot-path counters read by StatsSnapshot
	// refusalLog bounds the warn lines about refused heartbeats per remote address
	// (heartbeat.go, logRefusal)
	refusalLog *lograte.Limiter

	addr      string         // advertised "ip:port"
	storeHost netip.AddrPort // the same, as stored in records

	registerNow chan struct{} // a topic changed: register with the name servers soon
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	spawnMu     sync.Mutex // guards waiting and wg.Add against wg.Wait
	waiting     bool       // Shutdown is waiting for wg: spawn no more
	started     atomic.Bool
	stopped     atomic.Bool
}

// New validates cfg (see [Config]) and prepares a broker; it opens nothing yet. Errors: a
// *config.Error naming the key, or an error reading the config/*.json files.
func New(cfg Config) (*Broker, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	levels, _ := message.ParseDelayLevels(cfg.MessageDelayLevel)
	b := &Broker{cfg: cfg, log: cfg.Logger.With("broker", cfg.BrokerName), delayLevels: levels,
		registerNow: make(chan struct{}, 1), arrivals: newArrivals(), held: newHeldPulls(), traffic: newBrokerStats(),
		refusalLog: lograte.New(refusalLogInterval, refusalLogKeys)}
	for _, k := range cfg.ignored {
		b.log.Warn("broker.conf key accepted but has no effect in Sluice", "key", k)
	}
	var err error
	if cfg.AclEnable {
		if b.acl, err = acl.Load(cfg.AclFile, b.log); err != nil {
			return nil, &config.Error{Package: "broker", Field: "aclFile", Value: cfg.AclFile, Reason: err.Error()}
		}
		floorFile := filepath.Join(cfg.StorePathRootDir, "config", "aclSignatureFloor")
		if err := b.acl.SetSignaturePolicy(acl.SignaturePolicy{Skew: time.Duration(cfg.AclSignatureSkewMillis) * time.Millisecond,
			RefuseV1ForAdmin: cfg.AclRefuseV1ForAdmin, MaxNoncesPerAccount: cfg.AclSignatureNoncesPerAccount, FloorFile: floorFile}); err != nil {
			return nil, fmt.Errorf("broker: %w (delete the file to restart with the start time as the floor)", err)
		}
		// The embedded name server takes only admin-signed writes; the broker signs its
		// own registrations with accessKey/secretKey, so they must be an admin account.
		// (Without them the name server's writes would be open to anyone.)
		if cfg.NamesrvAddr == "" {
			if err := b.acl.CheckAdmin(cfg.AccessKey, cfg.SecretKey); err != nil {
				return nil, &config.Error{Package: "broker", Field: "accessKey", Reason: "aclEnable=true with the embedded name server (no namesrvAddr) needs accessKey/secretKey " +
					"of an admin account of the acl file, which the broker signs its registrations with and the embedded name server requires for every write: " + err.Error()}
			}
		}
	}
	if b.topics, err = newTopicTable(cfg.StorePathRootDir, &b.cfg); err != nil {
		return nil, err
	}
	b.topics.onChange = b.requestRegister
	if b.topics.dropped > 0 {
		b.log.Warn("topics with invalid names dropped from topics.json", "count", b.topics.dropped)
	}
	if b.offsets, err = newOffsetTable(cfg.StorePathRootDir); err != nil {
		return nil, err
	}
	if b.groups, err = newGroupTable(cfg.StorePathRootDir, boolOr(cfg.AutoCreateSubscriptionGroup, true)); err != nil {
		return nil, err
	}
	if b.groups.dropped > 0 {
		b.log.Warn("groups with invalid names dropped from subscriptionGroup.json", "count", b.groups.dropped)
	}
	if b.sched, err = newScheduler(b); err != nil {
		return nil, err
	}
	if b.timer, err = newTimerService(b); err != nil {
		return nil, err
	}
	b.txn = newTxnService(b)
	b.locks = newQueueLocks(time.Duration(cfg.RebalanceLockMaxLiveTime) * time.Millisecond)
	b.sqlCache = filter.NewSQLCache(1024)
	b.clients = newClientManager(boolOr(cfg.NotifyConsumerIdsChangedEnable, true), b.log.Info, b.compiledFilter, clientLimits{
		subsPerGroup: cfg.MaxSubscriptionsPerGroup, entriesPerConn: cfg.MaxClientEntriesPerConnection,
		entries: cfg.MaxClientEntries, subs: cfg.MaxSubscriptions,
		entriesPerAddr: cfg.MaxClientEntriesPerAddress, subsPerAddr: cfg.MaxSubscriptionsPerAddress})
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// Start opens the store (recovering it after a crash), starts the embedded name server
// when namesrvAddr is empty, listens, registers with the name servers and starts the
// background tasks. On error everything started so far is stopped again.
func (b *Broker) Start() (err error) {
	if b.stopped.Load() {
		return ErrClosed
	}
	if !b.started.CompareAndSwap(false, true) {
		return errors.New("broker: already started")
	}
	defer func() {
		if err != nil {
			_ = b.Shutdown(context.Background())
		}
	}()
	flush, _ := store.ParseFlushDiskType(b.cfg.FlushDiskType)
	b.store, err = store.Open(store.Config{
		Dir:                  b.cfg.StorePathRootDir,
		CommitLogSegmentSize: b.cfg.MappedFileSizeCommitLog,
		FlushDiskType:        flush,
		FlushInterval:        time.Duration(b.cfg.FlushIntervalCommitLog) * time.Millisecond,
		SyncFlushTimeout:     time.Duration(b.cfg.SyncFlushTimeout) * time.Millisecond,
		MaxMessageSize:       b.cfg.MaxMessageSize,
		MaxOpenFiles:         b.cfg.MaxOpenFiles,
		Logger:               b.log,
		RecoverTagsCode:      b.recoverTagsCode,
		Index: store.IndexConfig{Disable: !boolOr(b.cfg.MessageIndexEnable, true),
			HashSlots: b.cfg.MaxHashSlotNum, Entries: b.cfg.MaxIndexNum},
	})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	if err = b.txn.load(); err != nil {
		return fmt.Errorf("load transaction state: %w", err)
	}
	if err = b.correctStoredState(); err != nil { // startcheck.go
		return err
	}
	b.store.OnDispatchEvent(b.arrivals.arrived)
	b.store.OnDispatch(func(topic string, _ int32, _ int64, _ int64) { b.traffic.dispatched(topic) })
	b.store.OnFlush(b.traffic.flush.observe)

	serverTLS, clientTLS, err := b.cfg.tlsConfigs()
	if err != nil {
		return err
	}
	if b.cfg.NamesrvAddr == "" {
		nsCfg := namesrv.Config{ListenAddr: b.cfg.NamesrvListenAddr, Logger: b.cfg.Logger,
			KVConfigPath: filepath.Join(b.cfg.StorePathRootDir, "config", "namesrv_kv.json"), TLS: serverTLS}
		if b.acl != nil {
			nsCfg.ACL = b.acl // the broker signs its registrations with accessKey/secretKey (checked in New)
		}
		b.embedded, err = namesrv.New(nsCfg)
		if err != nil {
			return err
		}
		if err = b.embedded.Start(); err != nil {
			return fmt.Errorf("start embedded name server: %w", err)
		}
		b.namesrvAddrs = []string{b.embedded.Addr()}
	} else {
		for _, a := range strings.Split(b.cfg.NamesrvAddr, ";") {
			if a = strings.TrimSpace(a); a != "" {
				b.namesrvAddrs = append(b.namesrvAddrs, a)
			}
		}
	}
	if b.client, err = remoting.NewClient(remoting.ClientConfig{Logger: b.log,
		Credentials: remoting.Credentials{AccessKey: b.cfg.AccessKey, SecretKey: b.cfg.SecretKey, SignatureV2: b.cfg.AclRefuseV1ForAdmin},
		TLS:         clientTLS}); err != nil {
		return err
	}

	b.server, err = remoting.NewServer(remoting.ServerConfig{Addr: b.cfg.ListenAddr, Logger: b.log,
		MaxFrameSize: max(remoting.DefaultMaxFrameSize, b.cfg.MaxMessageSize+1<<20), Before: b.beforeRequest,
		MaxConns: b.cfg.MaxConnections, MaxConnsPerHost: b.cfg.MaxConnectionsPerAddress, ReservedConns: b.cfg.ReservedConnections,
		FirstRequestTimeout: time.Duration(b.cfg.FirstRequestTimeoutMillis) * time.Millisecond,
		MaxInFlightPerConn:  b.cfg.MaxInFlightPerConnection, MaxInFlightBytesPerConn: b.cfg.MaxInFlightBytesPerConnection,
		MaxQueuedBytesPerConn: b.cfg.MaxQueuedBytesPerConnection,
		FrameReadTimeout:      time.Duration(b.cfg.FrameReadTimeoutMillis) * time.Millisecond, TLS: serverTLS,
		// Send requests keep their ext fields in a list: ParseSendHeader reads it in one
		// pass, and Before (access.go, acl) and statsnapshot.go use the accessors.
		ExtListCodes: []remoting.RequestCode{remoting.SendMessage, remoting.SendMessageV2, remoting.SendBatchMessage}})
	if err != nil {
		return err
	}
	b.registerProcessors()
	b.server.OnConnClose(func(c *remoting.Conn) {
		groups, gone := b.clients.removeConn(c.ID())
		for _, m := range gone {
			b.locks.releaseClient(m.group, m.clientID)
		}
		b.notifyLater(groups)
	})
	// The address (and the store host it gives every stored record) is set before the
	// first request is served: a client reconnecting at once to a restarted broker must
	// not have a send handled before it.
	err = b.server.StartWith(func(addr string) error {
		ap, perr := netip.ParseAddrPort(addr)
		if perr != nil {
			return fmt.Errorf("broker address %q: %w", addr, perr)
		}
		b.addr, b.storeHost = addr, ap
		return nil
	})
	if err != nil {
		return fmt.Errorf("listen %s: %w", b.cfg.ListenAddr, err)
	}

	regCtx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	b.registerAll(regCtx)
	cancel()
	b.spawn(b.registerLoop)
	b.spawn(b.offsetFlushLoop)
	b.spawn(b.clientExpiryLoop)
	b.sched.start()
	b.spawn(b.timer.loop)
	b.spawn(b.txn.checkLoop)
	b.spawn(b.retentionLoop)
	b.topics.writer.log, b.groups.writer.log = b.log, b.log
	b.spawn(func() { b.topics.writer.run(b.ctx) })
	b.spawn(func() { b.groups.writer.run(b.ctx) })
	if b.acl != nil {
		b.spawn(func() { b.acl.Watch(b.ctx, time.Second) })
	}
	b.log.Info("broker started", "addr", b.addr, "namesrv", strings.Join(b.namesrvAddrs, ";"),
		"store", b.cfg.StorePathRootDir, "flushDiskType", b.cfg.FlushDiskType)
	return nil
}

// recoverTagsCode is the consume-queue tag code of a record the store re-dispatches
// during recovery: the delivery time for delayed messages, else the tag hash.
func (b *Broker) recoverTagsCode(m *message.MessageExt) int64 {
	if m.Topic == message.ScheduleTopic {
		if level := m.DelayLevel(); level > 0 {
			return b.sched.deliverAt(b.sched.clampLevel(level), m.StoreTimestamp)
		}
	}
	return message.TagHashCode(m.Tag())
}

// spawn runs f in a goroutine the broker waits for on Shutdown and reports whether it
// did. Once Shutdown has begun waiting, f is not started.
func (b *Broker) spawn(f func()) bool {
	b.spawnMu.Lock()
	defer b.spawnMu.Unlock()
	if b.waiting {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// Addr returns the broker's advertised address "ip:port" (after Start).
func (b *Broker) Addr() string { return b.addr }

// NamesrvAddr returns the name servers the broker registers with, joined by ";" (the
// embedded one's address when it runs one).
func (b *Broker) NamesrvAddr() string { return strings.Join(b.namesrvAddrs, ";") }

// DataDir returns the broker's storePathRootDir.
func (b *Broker) DataDir() string { return b.cfg.StorePathRootDir }

// Name returns the broker name.
func (b *Broker) Name() string { return b.cfg.BrokerName }

// Shutdown stops the broker. Stop order: answer held pulls, unregister from the name
// servers (clients stop routing here), stop the remoting server (no new requests; held pulls are released by
// their connection contexts) and wait for in-flight requests, stop background tasks,
// persist offsets, close the store (final flush and checkpoint), stop the embedded name
// server, close the name-server client. It is idempotent and returns the first error;
// ctx bounds the waiting.
func (b *Broker) Shutdown(ctx context.Context) error {
	if !b.stopped.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	// Answer held pulls first (PULL_NOT_FOUND): a client whose pull was held would
	// otherwise wait out its 30 s RPC timeout before it notices the broker is gone.
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	b.held.release(rctx)
	rcancel()
	if b.client != nil && b.addr != "" {
		uctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		for _, ns := range b.namesrvAddrs {
			err := wire.UnregisterBroker(uctx, b.client, ns, wire.UnregisterBrokerRequest{
				ClusterName: b.cfg.BrokerClusterName, BrokerName: b.cfg.BrokerName, BrokerAddr: b.addr})
			if err != nil {
				b.log.Warn("unregister from name server failed", "namesrv", ns, "err", err)
			}
		}
		cancel()
	}
	if b.server != nil {
		if err := b.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remoting server: %w", err))
		}
	}
	b.cancel()
	b.spawnMu.Lock()
	b.waiting = true
	b.spawnMu.Unlock()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for background tasks: %w", ctx.Err()))
	}
	if err := b.offsets.persist(); err != nil {
		errs = append(errs, fmt.Errorf("persist offsets: %w", err))
	}
	if err := b.topics.writer.flush(); err != nil {
		errs = append(errs, fmt.Errorf("persist topics: %w", err))
	}
	if err := b.groups.writer.flush(); err != nil {
		errs = append(errs, fmt.Errorf("persist groups: %w", err))
	}
	if b.store != nil {
		if err := b.sched.persist(); err != nil {
			errs = append(errs, fmt.Errorf("persist delay offsets: %w", err))
		}
		if err := b.timer.close(); err != nil {
			errs = append(errs, fmt.Errorf("persist timer index: %w", err))
		}
	}
	if b.store != nil {
		if err := b.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
	}
	if b.embedded != nil {
		if err := b.embedded.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("embedded name server: %w", err))
		}
	}
	if b.acl != nil {
		if err := b.acl.SaveSignatureFloor(); err != nil {
			errs = append(errs, fmt.Errorf("persist signature v2 floor: %w", err))
		}
	}
	if b.client != nil {
		_ = b.client.Close()
	}
	b.log.Info("broker stopped")
	return errors.Join(errs...)
}

// notifyLater tells the groups' consumers to rebalance, from a goroutine the broker owns.
// Nothing is sent once the broker is stopping.
func (b *Broker) notifyLater(groups []string) {
	if len(groups) == 0 || b.stopped.Load() {
		return
	}
	b.spawn(func() { b.clients.notify(b.ctx, groups) })
}

// requestRegister asks the register loop to register soon (after a topic change).
func (b *Broker) requestRegister() {
	select {
	case b.registerNow <- struct{}{}:
	default:
	}
}

// registerCompressAbove is the JSON registration body size above which the broker
// sends the compressed form instead (when compressedRegister is not set).
const registerCompressAbove = 1 << 20

// registerAll registers the whole topic table with every name server. The body is
// compressed (RocketMQ's compressed form) when compressedRegister=true, or when unset and
// the JSON body is over 1 MiB. A registration that fails, or cannot fit a frame, is
// logged at error with the body size and topic count and counted in Stats.RegisterFailed.
func (b *Broker) registerAll(ctx context.Context) {
	topics, version := b.topics.snapshot()
	b.register(ctx, topics, version, true)
}

// registerChanged registers, with every name server, the topics changed since the
// last such registration (the whole table when takeChanged says so), after a topic
// change. A registration that fails makes the next one carry the whole table.
func (b *Broker) registerChanged(ctx context.Context) {
	topics, version, all := b.topics.takeChanged()
	if topics == nil {
		return
	}
	if !b.register(ctx, topics, version, all) && !all {
		b.topics.markAllChanged()
	}
}

// register sends one registration of topics at version to every name server; it
// reports whether every name server took it. whole says topics is the whole table (the
// registrations Stats.LastRegisterTopics and LastRegisterBodyBytes describe).
func (b *Broker) register(ctx context.Context, topics map[string]*wire.TopicConfig, version wire.DataVersion, whole bool) bool {
	req := wire.RegisterBrokerRequest{
		ClusterName: b.cfg.BrokerClusterName, BrokerName: b.cfg.BrokerName, BrokerAddr: b.addr,
		BrokerID: b.cfg.BrokerID, HAServerAddr: b.addr,
		Topics:   wire.TopicConfigSerializeWrapper{TopicConfigTable: topics, DataVersion: version},
		Compress: boolOr(b.cfg.CompressedRegister, false),
	}
	body, err := wire.EncodeRegisterBody(req)
	if err == nil && b.cfg.CompressedRegister == nil && len(body) > registerCompressAbove {
		req.Compress = true
		body, err = wire.EncodeRegisterBody(req)
	}
	if whole {
		b.counters.LastRegisterTopics.Store(int64(len(topics)))
		b.counters.LastRegisterBodyBytes.Store(int64(len(body)))
	}
	if err != nil {
		b.counters.RegisterFailed.Add(int64(len(b.namesrvAddrs)))
		b.log.Error("cannot encode the registration: the broker is not registered", "topics", len(topics), "err", err)
		return false
	}
	// The frame also carries the header (about 300 bytes).
	if limit := remoting.DefaultMaxFrameSize - 4096; len(body) > limit {
		b.counters.RegisterFailed.Add(int64(len(b.namesrvAddrs)))
		b.log.Error("registration body too large for a frame: the name servers will drop this broker and clients lose its routes",
			"bytes", len(body), "limit", limit, "topics", len(topics), "compressed", req.Compress)
		return false
	}
	ok := true
	for _, ns := range b.namesrvAddrs {
		if _, err := wire.RegisterBrokerEncoded(ctx, b.client, ns, req, body); err != nil {
			b.counters.RegisterFailed.Add(1)
			b.log.Error("register with name server failed", "namesrv", ns, "bytes", len(body), "topics", len(topics),
				"compressed", req.Compress, "err", err)
			ok = false
			continue
		}
		b.counters.RegisterOK.Add(1)
	}
	return ok
}

// registerLoop re-registers the whole table every registerNameServerPeriod and the
// changed topics soon after topic changes.
func (b *Broker) registerLoop() {
	period := time.Duration(b.cfg.RegisterNameServerPeriod) * time.Millisecond
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
			b.registerAll(ctx)
			cancel()
		case <-b.registerNow:
			ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
			b.registerChanged(ctx)
			cancel()
		}
	}
}

// offsetFlushLoop writes consumer offsets every flushConsumerOffsetInterval.
func (b *Broker) offsetFlushLoop() {
	t := time.NewTicker(time.Duration(b.cfg.FlushConsumerOffsetInterval) * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			if err := b.offsets.persist(); err != nil {
				b.log.Error("persist consumer offsets", "err", err)
			}
		}
	}
}

// clientExpiryLoop drops clients whose heartbeats stopped (every 10 s, or a tenth of the
// expiry when that is shorter).
func (b *Broker) clientExpiryLoop() {
	maxAge := time.Duration(b.cfg.ClientChannelExpiredTimeout) * time.Millisecond
	t := time.NewTicker(min(10*time.Second, max(maxAge/10, 50*time.Millisecond)))
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case now := <-t.C:
			b.clients.notify(b.ctx, b.clients.expire(now, maxAge))
		}
	}
}

// randomQueue picks a queue id in [0, n).
func randomQueue(n int) int32 { return int32(rand.IntN(max(n, 1))) }

// hostOf parses a remote "ip:port" into a netip.AddrPort (zero on failure).
func hostOf(addr string) netip.AddrPort {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap
	}
	if h, p, err := net.SplitHostPort(addr); err == nil {
		if a, err := netip.ParseAddr(h); err == nil {
			var port uint16
			fmt.Sscan(p, &port)
			return netip.AddrPortFrom(a, port)
		}
	}
	return netip.AddrPort{}
}

// EmbeddedNameServer returns the name server the broker runs in-process (namesrvAddr
// empty), or nil when it registers with external ones or has not started.
func (b *Broker) EmbeddedNameServer() *namesrv.NameServer { return b.embedded }
