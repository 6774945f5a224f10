package namesrv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/addrkey"
	"github.com/sluicemq/sluice/internal/lograte"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Defaults of [Config].
const (
	DefaultListenAddr   = "127.0.0.1:9876"
	DefaultBrokerExpiry = 120 * time.Second // Java BROKER_CHANNEL_EXPIRED_TIME
	DefaultScanInterval = 5 * time.Second
)

// ErrClosed is returned by [NameServer.Start] after Shutdown.
var ErrClosed = errors.New("namesrv: closed")

// Config configures a [NameServer]. The zero value is usable.
type Config struct {
	// ListenAddr is the TCP address to listen on, "ip:port". Use "127.0.0.1:0" for a
	// free port (see [NameServer.Addr]). Default: "127.0.0.1:9876".
	ListenAddr string
	// BrokerExpiry is how long a broker stays in the route table without
	// re-registering (a Java broker re-registers every 30 s). Default: 120 s.
	BrokerExpiry time.Duration
	// ScanInterval is how often expired brokers are looked for, so a silent broker
	// is dropped between BrokerExpiry and BrokerExpiry+ScanInterval after its last
	// registration. Must not exceed BrokerExpiry. Default: 5 s (or BrokerExpiry if smaller).
	ScanInterval time.Duration
	// KVConfigPath is a JSON file that persists the KV config (PUT_KV_CONFIG), in the
	// layout of Java's kvConfig.json: {"configTable":{namespace:{key:value}}}. It is
	// read by New and rewritten (temp file + rename) after every change. Default: ""
	// (KV config kept in memory only).
	KVConfigPath string
	// Logger receives registration and expiry events. Default: slog.Default().
	Logger *slog.Logger
	// TLS, when set, serves TLS with this configuration (it needs a certificate).
	// Default: nil (plain TCP).
	TLS *tls.Config
	// ACL, when set, guards the write operations (REGISTER_BROKER, UNREGISTER_BROKER,
	// DELETE_TOPIC_IN_NAMESRV, PUT_KV_CONFIG, DELETE_KV_CONFIG): each must come from a
	// globally white-listed address or be signed by an admin account of the ACL file,
	// else it is answered SYSTEM_ERROR (1) with the reason. Reads stay open, as in
	// RocketMQ 4.9 (where the name server checks nothing). Default: nil (no checks).
	ACL *acl.Validator
}

// writeCodes are the name-server request codes Config.ACL guards.
var writeCodes = map[remoting.RequestCode]bool{
	remoting.RegisterBroker: true, remoting.UnregisterBroker: true, remoting.DeleteTopicInNamesrv: true,
	remoting.PutKVConfig: true, remoting.DeleteKVConfig: true,
}

// before checks write requests against Config.ACL and the names they carry.
func (n *NameServer) before(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	code := remoting.RequestCode(req.Code)
	if code == remoting.DeleteTopicInNamesrv {
		if err := message.ValidateTopic(req.ExtFields["topic"]); err != nil {
			return errorResponse(remoting.SystemError, "%v", err)
		}
	}
	if n.cfg.ACL == nil || !writeCodes[code] {
		return nil
	}
	if err := n.cfg.ACL.Check(conn.RemoteAddr(), req, true, nil); err != nil {
		// Logged at most once a minute per remote address (refusalLog): a client repeating
		// an unsigned registration must not fill the disk with log lines.
		if ok, suppressed := n.refusalLog.Allow(addrkey.Of(conn.RemoteAddr()), time.Now()); ok {
			n.log.Warn("write request refused by acl", "code", req.Code, "remote", conn.RemoteAddr(), "err", err, "suppressed", suppressed)
		}
		return errorResponse(remoting.SystemError, "%v", err)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	if c.BrokerExpiry == 0 {
		c.BrokerExpiry = DefaultBrokerExpiry
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = min(DefaultScanInterval, c.BrokerExpiry)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field of a defaulted Config as a [*config.Error].
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		return &config.Error{Package: "namesrv", Field: "ListenAddr", Value: c.ListenAddr, Reason: "want host:port: " + err.Error(), Err: err}
	}
	if c.BrokerExpiry <= 0 {
		return &config.Error{Package: "namesrv", Field: "BrokerExpiry", Value: c.BrokerExpiry, Reason: "must be > 0"}
	}
	if c.ScanInterval <= 0 || c.ScanInterval > c.BrokerExpiry {
		return &config.Error{Package: "namesrv", Field: "ScanInterval", Value: c.ScanInterval, Reason: fmt.Sprintf("must be > 0 and <= BrokerExpiry (%v)", c.BrokerExpiry)}
	}
	return nil
}

// NameServer is a RocketMQ 4.x compatible name server: brokers register their topics
// with it (REGISTER_BROKER, 103) and clients ask it for topic routes
// (GET_ROUTEINFO_BY_TOPIC, 105). It also serves UNREGISTER_BROKER (104),
// GET_BROKER_CLUSTER_INFO (106), GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206),
// DELETE_TOPIC_IN_NAMESRV (216), QUERY_DATA_VERSION (322) and PUT/GET/DELETE_KV_CONFIG
// (100–102); any other code gets REQUEST_CODE_NOT_SUPPORTED (3) from the remoting server.
//
// A broker is removed, with the queue data of its broker name once no address of that
// name is left, when it unregisters, when it has not registered for BrokerExpiry, or
// when the connection it last registered on closes.
//
// Lifecycle: New, Start, Shutdown. Shutdown stops the expiry scanner first, then the
// remoting server (which closes every connection and waits for running handlers).
type NameServer struct {
	cfg    Config
	log    *slog.Logger
	srv    *remoting.Server
	routes *routeTable
	stats  *nsStats // stats.go
	// refusalLog bounds the warn lines about refused writes per remote address (before):
	// one a minute, the next one carrying how many were left out ("suppressed").
	refusalLog *lograte.Limiter

	// persistMu serialises KV file writes. Lock order: persistMu before routes.mu.
	persistMu sync.Mutex

	started  atomic.Bool
	shutdown atomic.Bool
	stop     chan struct{}
	wg       sync.WaitGroup
}

// New validates cfg, loads the KV config file if one is set, and returns a name server
// that is not yet listening. Errors: an invalid Config field, an unreadable or
// malformed KVConfigPath file, or a remoting server config error.
func New(cfg Config) (*NameServer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &NameServer{}
	srv, err := remoting.NewServer(remoting.ServerConfig{Addr: cfg.ListenAddr, Logger: cfg.Logger, Before: n.before, TLS: cfg.TLS})
	if err != nil {
		return nil, fmt.Errorf("namesrv: %w", err)
	}
	*n = NameServer{
		cfg:        cfg,
		log:        cfg.Logger.With("component", "namesrv"),
		srv:        srv,
		routes:     newRouteTable(),
		stats:      newNSStats(),
		stop:       make(chan struct{}),
		refusalLog: lograte.New(time.Minute, 1024),
	}
	if cfg.KVConfigPath != "" {
		kv, err := loadKVFile(cfg.KVConfigPath)
		if err != nil {
			return nil, err
		}
		n.routes.kv = kv
	}
	srv.Handle(remoting.PutKVConfig, n.handlePutKV)
	srv.Handle(remoting.GetKVConfig, n.handleGetKV)
	srv.Handle(remoting.DeleteKVConfig, n.handleDeleteKV)
	srv.Handle(remoting.RegisterBroker, n.countRegister(n.handleRegister))
	srv.Handle(remoting.UnregisterBroker, n.handleUnregister)
	srv.Handle(remoting.GetRouteInfoByTopic, n.handleGetRoute)
	srv.Handle(remoting.GetBrokerClusterInfo, n.handleClusterInfo)
	srv.Handle(remoting.GetAllTopicListFromNameServer, n.handleTopicList)
	srv.Handle(remoting.DeleteTopicInNamesrv, n.handleDeleteTopic)
	srv.Handle(remoting.QueryDataVersion, n.handleQueryDataVersion)
	srv.OnConnClose(n.onConnClose)
	return n, nil
}

// Start listens on ListenAddr and starts the expiry scanner. It returns the listen
// error, [ErrClosed] after Shutdown, or an error if already started.
func (n *NameServer) Start() error {
	if n.shutdown.Load() {
		return ErrClosed
	}
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("namesrv: already started")
	}
	if err := n.srv.Start(); err != nil {
		return fmt.Errorf("namesrv: %w", err)
	}
	n.wg.Add(1)
	go n.scanLoop()
	n.log.Info("name server listening", "addr", n.srv.Addr())
	return nil
}

// Addr returns the listening address "ip:port" (useful with port 0), or the configured
// ListenAddr before Start.
func (n *NameServer) Addr() string {
	if !n.started.Load() {
		return n.cfg.ListenAddr
	}
	return n.srv.Addr()
}

// Shutdown stops the expiry scanner, then the remoting server, waiting for running
// handlers until ctx ends (then it returns the context's error). Calling it again, or
// before Start, is safe and returns nil.
func (n *NameServer) Shutdown(ctx context.Context) error {
	if !n.shutdown.CompareAndSwap(false, true) {
		return nil
	}
	close(n.stop)
	n.wg.Wait()
	if !n.started.Load() {
		return nil
	}
	if err := n.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("namesrv: %w", err)
	}
	return nil
}

// LiveBrokers returns the addresses of the currently registered brokers, sorted.
func (n *NameServer) LiveBrokers() []string { return n.routes.liveBrokerAddrs() }

func (n *NameServer) scanLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			n.scanExpired(now)
		}
	}
}

// scanExpired drops brokers whose last registration is older than BrokerExpiry.
func (n *NameServer) scanExpired(now time.Time) {
	expiry := n.cfg.BrokerExpiry
	for _, rb := range n.routes.removeWhere(func(_ string, lb *liveBroker) bool {
		return now.Sub(lb.lastUpdate) > expiry
	}) {
		n.log.Warn("broker expired, removed", "broker", rb.name, "addr", rb.addr, "id", rb.id, "cluster", rb.cluster, "expiry", expiry)
	}
}

func (n *NameServer) onConnClose(c *remoting.Conn) {
	id := c.ID()
	for _, rb := range n.routes.removeWhere(func(_ string, lb *liveBroker) bool { return lb.connID == id }) {
		n.log.Info("broker connection closed, removed", "broker", rb.name, "addr", rb.addr, "id", rb.id, "cluster", rb.cluster)
	}
}

func errorResponse(code remoting.ResponseCode, format string, args ...any) *remoting.RemotingCommand {
	return remoting.NewResponse(code, fmt.Sprintf(format, args...))
}

func headerErr(err error) *remoting.RemotingCommand {
	return remoting.NewResponse(remoting.SystemError, err.Error())
}

func jsonResponse(v any) *remoting.RemotingCommand {
	b, err := json.Marshal(v)
	if err != nil {
		return errorResponse(remoting.SystemError, "namesrv: encode response: %v", err)
	}
	resp := remoting.NewResponse(remoting.Success, "")
	resp.Body = b
	return resp
}

// validBrokerAddr checks an "ip:port" broker address. Commas and quotes are refused
// because the official Go client splits the raw brokerAddrs text on them.
func validBrokerAddr(field, addr string) error {
	if strings.ContainsAny(addr, `,"\`) {
		return &remoting.HeaderError{Field: field, Reason: "address " + strconv.Quote(addr) + " must not contain ',', '\"' or '\\'"}
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return &remoting.HeaderError{Field: field, Reason: "address " + strconv.Quote(addr) + " is not host:port", Err: err}
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return &remoting.HeaderError{Field: field, Reason: "port " + strconv.Quote(port) + " must be 1..65535"}
	}
	return nil
}

// brokerIdentity reads brokerName, brokerAddr, clusterName and brokerId (all required).
func brokerIdentity(req *remoting.RemotingCommand) (cluster, name, addr string, id int64, err error) {
	if name, err = req.ExtString("brokerName", true); err != nil {
		return
	}
	if name == "" {
		err = &remoting.HeaderError{Field: "brokerName", Reason: "must not be empty"}
		return
	}
	if addr, err = req.ExtString("brokerAddr", true); err != nil {
		return
	}
	if err = validBrokerAddr("brokerAddr", addr); err != nil {
		return
	}
	if cluster, err = req.ExtString("clusterName", true); err != nil {
		return
	}
	if cluster == "" {
		err = &remoting.HeaderError{Field: "clusterName", Reason: "must not be empty"}
		return
	}
	if id, err = req.ExtInt64("brokerId", true); err != nil {
		return
	}
	if id < 0 {
		err = &remoting.HeaderError{Field: "brokerId", Reason: "must be >= 0 (0 = master)"}
	}
	return
}

// handleRegister serves REGISTER_BROKER (103).
func (n *NameServer) handleRegister(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	cluster, name, addr, id, err := brokerIdentity(req)
	if err != nil {
		return headerErr(err)
	}
	ha, _ := req.ExtString("haServerAddr", false)
	compressed, err := req.ExtBool("compressed")
	if err != nil {
		return headerErr(err)
	}
	wantCRC, err := req.ExtInt64("bodyCrc32", false)
	if err != nil {
		return headerErr(err)
	}
	if wantCRC != 0 {
		if got := int64(crc32.ChecksumIEEE(req.Body) & 0x7FFFFFFF); got != wantCRC {
			n.log.Warn("register broker: body crc32 mismatch", "broker", name, "addr", addr, "want", wantCRC, "got", got)
			return errorResponse(remoting.SystemError, "crc32 not match")
		}
	}
	var body wire.RegisterBrokerBody
	switch {
	case compressed:
		b, err := wire.DecodeCompressedRegisterBody(req.Body)
		if err != nil {
			return errorResponse(remoting.SystemError, "%v", err)
		}
		body = *b
	case len(req.Body) > 0:
		if err := json.Unmarshal(req.Body, &body); err != nil {
			return errorResponse(remoting.SystemError, "namesrv: RegisterBrokerBody is not valid JSON: %v", err)
		}
	}
	// A topic whose name breaks the naming rules gets no route (the rest of the table
	// registers): one bad name must not take the broker off the map.
	bad := 0
	for t, tc := range body.TopicConfigSerializeWrapper.TopicConfigTable {
		if tc == nil || message.ValidateTopic(t) != nil || tc.TopicName != t {
			delete(body.TopicConfigSerializeWrapper.TopicConfigTable, t)
			bad++
		}
	}
	if bad > 0 {
		n.log.Warn("register broker: topics with invalid names left out", "broker", name, "addr", addr, "count", bad)
	}
	var connID uint64
	if conn != nil {
		connID = conn.ID()
	}
	res := n.routes.register(registration{
		clusterName: cluster, brokerName: name, brokerAddr: addr, haServerAddr: ha,
		brokerID: id, body: body, connID: connID,
	}, time.Now())
	if res.firstRegistration {
		n.log.Info("broker registered", "broker", name, "addr", addr, "id", id, "cluster", cluster,
			"topics", len(body.TopicConfigSerializeWrapper.TopicConfigTable))
	}
	resp := remoting.NewResponse(remoting.Success, "")
	if res.haServerAddr != "" {
		resp.SetExt("haServerAddr", res.haServerAddr)
	}
	if res.masterAddr != "" {
		resp.SetExt("masterAddr", res.masterAddr)
	}
	if len(res.orderTopicConf) > 0 {
		b, err := json.Marshal(wire.KVTable{Table: res.orderTopicConf})
		if err == nil {
			resp.Body = b
		}
	}
	return resp
}

// handleUnregister serves UNREGISTER_BROKER (104).
func (n *NameServer) handleUnregister(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	cluster, name, addr, id, err := brokerIdentity(req)
	if err != nil {
		return headerErr(err)
	}
	if n.routes.removeBroker(cluster, name, addr, id) {
		n.log.Info("broker unregistered", "broker", name, "addr", addr, "id", id, "cluster", cluster)
	}
	return remoting.NewResponse(remoting.Success, "")
}

// handleGetRoute serves GET_ROUTEINFO_BY_TOPIC (105).
func (n *NameServer) handleGetRoute(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	topic, err := req.ExtString("topic", true)
	if err != nil {
		return headerErr(err)
	}
	r, ok := n.routes.route(topic)
	if !ok {
		return errorResponse(remoting.TopicNotExist, "No topic route info in name server for the topic: %s", topic)
	}
	return jsonResponse(r)
}

// handleClusterInfo serves GET_BROKER_CLUSTER_INFO (106).
func (n *NameServer) handleClusterInfo(_ context.Context, _ *remoting.Conn, _ *remoting.RemotingCommand) *remoting.RemotingCommand {
	return jsonResponse(n.routes.clusterInfo())
}

// handleTopicList serves GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206).
func (n *NameServer) handleTopicList(_ context.Context, _ *remoting.Conn, _ *remoting.RemotingCommand) *remoting.RemotingCommand {
	return jsonResponse(wire.TopicList{TopicList: n.routes.topics()})
}

// handleDeleteTopic serves DELETE_TOPIC_IN_NAMESRV (216): ext topic (required),
// clusterName (optional: only that cluster's queue data is removed).
func (n *NameServer) handleDeleteTopic(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	topic, err := req.ExtString("topic", true)
	if err != nil {
		return headerErr(err)
	}
	cluster, _ := req.ExtString("clusterName", false)
	if n.routes.deleteTopic(topic, cluster) {
		n.log.Info("topic deleted", "topic", topic, "cluster", cluster)
	}
	return remoting.NewResponse(remoting.Success, "")
}

// handleQueryDataVersion serves QUERY_DATA_VERSION (322): ext brokerAddr (required),
// body = the broker's wire.DataVersion JSON. Response ext changed=true|false and, when the
// broker is live, body = the wire.DataVersion the name server holds. An unchanged version
// counts as a registration for expiry only when it comes from the broker itself: on the
// connection the broker last registered on and, with Config.ACL, signed by an admin
// account. Anyone else's query is answered but does not keep a silent broker alive.
func (n *NameServer) handleQueryDataVersion(_ context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	addr, err := req.ExtString("brokerAddr", true)
	if err != nil {
		return headerErr(err)
	}
	var v wire.DataVersion
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &v); err != nil {
			return errorResponse(remoting.SystemError, "namesrv: DataVersion body is not valid JSON: %v", err)
		}
	}
	var connID uint64
	if conn != nil {
		connID = conn.ID()
		if n.cfg.ACL != nil && n.cfg.ACL.Check(conn.RemoteAddr(), req, true, nil) != nil {
			connID = 0 // not the broker's signature: answer, do not refresh
		}
	}
	changed, stored := n.routes.queryDataVersion(addr, v, connID, time.Now())
	resp := remoting.NewResponse(remoting.Success, "")
	if stored != nil {
		resp = jsonResponse(stored)
	}
	resp.SetExt("changed", strconv.FormatBool(changed))
	return resp
}

func kvHeader(req *remoting.RemotingCommand) (ns, key string, err error) {
	if ns, err = req.ExtString("namespace", true); err != nil {
		return
	}
	key, err = req.ExtString("key", true)
	return
}

// handlePutKV serves PUT_KV_CONFIG (100): ext namespace, key, value (all required).
func (n *NameServer) handlePutKV(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	ns, key, err := kvHeader(req)
	if err != nil {
		return headerErr(err)
	}
	value, err := req.ExtString("value", true)
	if err != nil {
		return headerErr(err)
	}
	if ns == wire.NamespaceOrderTopicConfig {
		if !validOrderTopicConf(value) {
			return errorResponse(remoting.SystemError, "namesrv: value %q for namespace %s: want brokerName:queueNums[;...]", value, ns)
		}
	}
	return n.changeKV(func() bool { n.routes.putKV(ns, key, value); return true })
}

// validOrderTopicConf reports whether value is an orderTopicConf a name server stores:
// non-empty, in the canonical form [wire.FormatOrderTopicConf] writes (no empty item),
// every count ≥ 1. Readers ([wire.ParseOrderTopicConf]) are more lenient, as Java's.
func validOrderTopicConf(value string) bool {
	entries, err := wire.ParseOrderTopicConf(value)
	if err != nil || len(entries) == 0 || wire.FormatOrderTopicConf(entries) != value {
		return false
	}
	for _, e := range entries {
		if e.QueueNums < 1 {
			return false
		}
	}
	return true
}

// handleGetKV serves GET_KV_CONFIG (101): response ext value, or QUERY_NOT_FOUND (22).
func (n *NameServer) handleGetKV(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	ns, key, err := kvHeader(req)
	if err != nil {
		return headerErr(err)
	}
	v, ok := n.routes.getKV(ns, key)
	if !ok {
		return errorResponse(remoting.QueryNotFound, "No config item, Namespace: %s Key: %s", ns, key)
	}
	return remoting.NewResponse(remoting.Success, "").SetExt("value", v)
}

// handleDeleteKV serves DELETE_KV_CONFIG (102); deleting a missing key succeeds.
func (n *NameServer) handleDeleteKV(_ context.Context, _ *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
	ns, key, err := kvHeader(req)
	if err != nil {
		return headerErr(err)
	}
	return n.changeKV(func() bool { return n.routes.deleteKV(ns, key) })
}

// changeKV applies a KV change and persists the KV config if it changed and a file is
// configured; a write failure is answered with SYSTEM_ERROR (the in-memory change stays).
func (n *NameServer) changeKV(apply func() bool) *remoting.RemotingCommand {
	n.persistMu.Lock()
	defer n.persistMu.Unlock()
	if !apply() || n.cfg.KVConfigPath == "" {
		return remoting.NewResponse(remoting.Success, "")
	}
	if err := saveKVFile(n.cfg.KVConfigPath, n.routes.kvSnapshot()); err != nil {
		n.log.Error("persist kv config", "path", n.cfg.KVConfigPath, "err", err)
		return errorResponse(remoting.SystemError, "%v", err)
	}
	return remoting.NewResponse(remoting.Success, "")
}

// Ready reports whether the name server serves requests, for a readiness probe (the
// metrics listener's /readyz): nil between Start and Shutdown.
func (n *NameServer) Ready() error {
	switch {
	case n.shutdown.Load():
		return ErrClosed
	case !n.started.Load():
		return errors.New("namesrv: not started")
	}
	return nil
}
