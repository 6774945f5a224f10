// Package client is the client-side plumbing shared by Sluice's producer and consumer:
// one remoting connection pool per producer or consumer, the client id, name-server route
// lookup with a cache and periodic refresh, the broker address table built from routes,
// HEART_BEAT and UNREGISTER_CLIENT.
//
// Unlike the official Go client there is no process-wide client map and no global
// logger: every producer and consumer owns one [Client], and the Client owns its
// remoting.Client and goroutines, all stopped by [Client.Close].
package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/remoting"
)

// Defaults of Config (docs/protocol.md §7.1).
const (
	DefaultRouteRefreshInterval = 30 * time.Second
	DefaultHeartbeatInterval    = 30 * time.Second
	DefaultNamesrvTimeout       = 3 * time.Second
	DefaultBrokerTimeout        = 3 * time.Second
)

// ErrTopicNotExist is returned (wrapped) by route lookups when the name server has no
// route for the topic (response code 17 TOPIC_NOT_EXIST to GET_ROUTEINFO_BY_TOPIC). It
// is [wire.ErrTopicNotExist], so errors.Is matches whichever package a caller names.
var ErrTopicNotExist = wire.ErrTopicNotExist

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("client: closed")

// ErrNoNameServer is wrapped when no name server answered a route request.
var ErrNoNameServer = errors.New("client: no name server answered")

// Config configures a Client. NamesrvAddrs is required; everything else has a default.
type Config struct {
	// NamesrvAddrs are the name servers, each "host:port". Required, at least one.
	NamesrvAddrs []string
	// InstanceName distinguishes clients in one process; the client id is
	// "<ClientIP>@<InstanceName>". Default: "<pid>#<unix ns at creation>#<sequence>",
	// unique per Client, so two consumers of a group in one process are two members.
	InstanceName string
	// ClientIP is the IP put into the client id. Default: the first non-loopback IPv4
	// address of this host, else 127.0.0.1.
	ClientIP string
	// RouteRefreshInterval is how often the routes of all cached topics are fetched
	// again. Default: 30s.
	RouteRefreshInterval time.Duration
	// HeartbeatInterval is how often HEART_BEAT goes to every known broker. Default: 30s.
	HeartbeatInterval time.Duration
	// NamesrvTimeout bounds one GET_ROUTEINFO_BY_TOPIC request to one name server.
	// Default: 3s.
	NamesrvTimeout time.Duration
	// BrokerTimeout bounds heartbeats and UNREGISTER_CLIENT per broker. Default: 3s.
	BrokerTimeout time.Duration
	// Heartbeat builds the HEART_BEAT body; ClientID is filled in by the Client. Nil: no
	// heartbeats are sent.
	Heartbeat func() wire.HeartbeatData
	// Logger receives route, heartbeat and connection events. Default: slog.Default().
	Logger *slog.Logger
	// Credentials, when AccessKey and SecretKey are both set, sign every request with
	// RocketMQ plain ACL 1.0 (HMAC-SHA1 over the sorted ext-field values and the body),
	// for brokers and name servers with aclEnable. Default: none (unsigned).
	Credentials remoting.Credentials
	// TLS, when set, connects to name servers and brokers over TLS with this
	// configuration (crypto/tls; e.g. RootCAs with the servers' CA). Default: nil (plain
	// TCP).
	TLS *tls.Config
	// SerializeType is the header encoding of the requests sent
	// (remoting.ClientConfig.SerializeType). Default: JSON.
	SerializeType remoting.SerializeType
}

func (c *Config) setDefaults() {
	if c.InstanceName == "" {
		c.InstanceName = fmt.Sprintf("%d#%d#%d", os.Getpid(), time.Now().UnixNano(), instanceSeq.Add(1))
	}
	if c.ClientIP == "" {
		c.ClientIP = LocalIP()
	}
	if c.RouteRefreshInterval == 0 {
		c.RouteRefreshInterval = DefaultRouteRefreshInterval
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.NamesrvTimeout == 0 {
		c.NamesrvTimeout = DefaultNamesrvTimeout
	}
	if c.BrokerTimeout == 0 {
		c.BrokerTimeout = DefaultBrokerTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks that there is at least one name server, each "host:port" with a
// numeric port, and that no duration is negative. Errors name the field.
func (c *Config) Validate() error {
	if len(c.NamesrvAddrs) == 0 {
		return &config.Error{Package: "client", Field: "NamesrvAddrs", Reason: `empty: need at least one name server "host:port"`}
	}
	for i, a := range c.NamesrvAddrs {
		field := fmt.Sprintf("NamesrvAddrs[%d]", i)
		h, p, err := net.SplitHostPort(a)
		if err != nil || h == "" {
			return &config.Error{Package: "client", Field: field, Value: a, Reason: `not "host:port"`}
		}
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return &config.Error{Package: "client", Field: field, Value: a, Reason: "port must be 1..65535"}
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"RouteRefreshInterval", c.RouteRefreshInterval}, {"HeartbeatInterval", c.HeartbeatInterval},
		{"NamesrvTimeout", c.NamesrvTimeout}, {"BrokerTimeout", c.BrokerTimeout},
	} {
		if f.d < 0 {
			return &config.Error{Package: "client", Field: f.name, Value: f.d, Reason: "must not be negative"}
		}
	}
	return nil
}

var instanceSeq atomic.Uint64

// LocalIP returns the first non-loopback IPv4 address of this host, or "127.0.0.1".
func LocalIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				if ip4 := n.IP.To4(); ip4 != nil {
					return ip4.String()
				}
			}
		}
	}
	return "127.0.0.1"
}

// Client is the shared plumbing of one producer or consumer; see the package doc.
// Safe for concurrent use.
//
// Lock order: Client.mu is never held while doing network I/O.
type Client struct {
	cfg Config
	log *slog.Logger
	rc  *remoting.Client
	id  string

	nsNext atomic.Uint32 // round-robin start among name servers

	mu          sync.Mutex
	routes      map[string]*wire.TopicRouteData // topic → last good route
	brokers     map[string]wire.BrokerData      // broker name → addresses, from all cached routes
	heartbeated map[string]bool                 // broker addresses that got a heartbeat since they appeared
	// hbEpoch counts the brokers forgotten: a heartbeat sent before a broker was forgotten
	// (and perhaps named again by a route) must not mark its address as greeted.
	hbEpoch uint64
	started bool
	closed  bool

	closeOnce sync.Once
	hbKick    chan struct{} // buffered 1: a broker appeared that has had no heartbeat yet

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Client for cfg (defaults applied) with its own remoting.Client. It
// starts no goroutine until Start. It fails if cfg is invalid.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	c := &Client{}
	// A new connection to a broker (first contact, or after it restarted and forgot us)
	// gets a heartbeat at once: without it a restarted broker refuses our pulls
	// (SUBSCRIPTION_NOT_EXIST) and sends no transaction checks until the next period.
	// Send responses stay in list form: ParseSendResponse reads them with the accessors,
	// and building a map per send was a measurable share of a producer's CPU time.
	rc, err := remoting.NewClient(remoting.ClientConfig{Logger: cfg.Logger, OnConnect: c.connected, Credentials: cfg.Credentials,
		TLS: cfg.TLS, SerializeType: cfg.SerializeType, ExtListCodes: []remoting.RequestCode{remoting.SendMessage, remoting.SendMessageV2, remoting.SendBatchMessage}})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	*c = Client{
		cfg:         cfg,
		log:         cfg.Logger,
		rc:          rc,
		id:          cfg.ClientIP + "@" + cfg.InstanceName,
		routes:      make(map[string]*wire.TopicRouteData),
		brokers:     make(map[string]wire.BrokerData),
		heartbeated: make(map[string]bool),
		hbKick:      make(chan struct{}, 1),
		ctx:         ctx,
		cancel:      cancel,
	}
	return c, nil
}

// connected marks a broker address that just got a new connection as needing a
// heartbeat and wakes the heartbeat loop. Name-server addresses are marked too, but the
// heartbeat only goes to brokers.
func (c *Client) connected(addr string) {
	c.mu.Lock()
	c.heartbeated[addr] = false
	c.mu.Unlock()
	select {
	case c.hbKick <- struct{}{}:
	default:
	}
}

// ClientID returns "<ClientIP>@<InstanceName>", the id sent in heartbeats and listed
// by GET_CONSUMER_LIST_BY_GROUP.
func (c *Client) ClientID() string { return c.id }

// Logger returns the configured logger.
func (c *Client) Logger() *slog.Logger { return c.log }

// Context returns a context cancelled when Close begins; background work started by the
// owner of the Client may use it.
func (c *Client) Context() context.Context { return c.ctx }

// spawn runs f in a goroutine counted by c.wg; false once Close has begun.
func (c *Client) spawn(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// Start begins the periodic route refresh and heartbeat. It returns ErrClosed after
// Close; a second call does nothing.
func (c *Client) Start() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.started {
		c.mu.Unlock()
		return nil
	}
	c.started = true
	c.mu.Unlock()
	c.spawn(func() { c.every(c.cfg.RouteRefreshInterval, c.refreshAllRoutes) })
	if c.cfg.Heartbeat != nil {
		c.spawn(c.heartbeatLoop)
	}
	return nil
}

// heartbeatLoop sends HEART_BEAT to all brokers every HeartbeatInterval, and to newly
// seen brokers as soon as a route names them.
func (c *Client) heartbeatLoop() {
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			_ = c.SendHeartbeat(c.ctx)
		case <-c.hbKick:
			_ = c.EnsureHeartbeat(c.ctx)
		}
	}
}

// every runs f each interval until Close.
func (c *Client) every(interval time.Duration, f func(ctx context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			f(c.ctx)
		}
	}
}

// InvokeSync sends req to addr and waits for the response, bounded by ctx (see
// remoting.Client.InvokeSync). A non-success response code is not an error.
func (c *Client) InvokeSync(ctx context.Context, addr string, req *remoting.RemotingCommand) (*remoting.RemotingCommand, error) {
	return c.rc.InvokeSync(ctx, addr, req)
}

// InvokeSyncTimeout is InvokeSync failing the call with remoting.ErrTimeout after
// timeout, detected by the remoting client's sweep instead of a timer and a derived
// context per call (see remoting.Client.InvokeSyncTimeout).
func (c *Client) InvokeSyncTimeout(ctx context.Context, addr string, req *remoting.RemotingCommand, timeout time.Duration) (*remoting.RemotingCommand, error) {
	return c.rc.InvokeSyncTimeout(ctx, addr, req, timeout)
}

// InvokeSyncTimeoutSince is InvokeSyncTimeout with the timeout counted from since, a
// clock reading the caller took just before (see remoting.Client.InvokeSyncTimeoutSince).
func (c *Client) InvokeSyncTimeoutSince(ctx context.Context, addr string, req *remoting.RemotingCommand, since time.Time, timeout time.Duration) (*remoting.RemotingCommand, error) {
	return c.rc.InvokeSyncTimeoutSince(ctx, addr, req, since, timeout)
}

// InvokeAsync sends req to addr and returns once it is queued; cb then gets the response
// or an error exactly once, in a goroutine of the remoting client (see
// remoting.Client.InvokeAsync: ctx bounds the wait, and when InvokeAsync returns an
// error cb is never called). A non-success response code is not an error.
func (c *Client) InvokeAsync(ctx context.Context, addr string, req *remoting.RemotingCommand, cb func(*remoting.RemotingCommand, error)) error {
	return c.rc.InvokeAsync(ctx, addr, req, cb)
}

// InvokeAsyncTimeout is InvokeAsync failing the call with remoting.ErrTimeout after
// timeout, detected by the remoting client's sweep instead of a timer per call (see
// remoting.Client.InvokeAsyncTimeout).
func (c *Client) InvokeAsyncTimeout(ctx context.Context, addr string, req *remoting.RemotingCommand, timeout time.Duration, cb func(*remoting.RemotingCommand, error)) error {
	return c.rc.InvokeAsyncTimeout(ctx, addr, req, timeout, cb)
}

// InvokeAsyncTimeoutSince is InvokeAsyncTimeout with the timeout counted from since, a
// clock reading the caller took just before (see
// remoting.Client.InvokeAsyncTimeoutSince): the call reads the clock no more.
func (c *Client) InvokeAsyncTimeoutSince(ctx context.Context, addr string, req *remoting.RemotingCommand, since time.Time, timeout time.Duration, cb func(*remoting.RemotingCommand, error)) error {
	return c.rc.InvokeAsyncTimeoutSince(ctx, addr, req, since, timeout, cb)
}

// InvokeOneway sends req to addr with the ONEWAY flag and waits for no response.
func (c *Client) InvokeOneway(ctx context.Context, addr string, req *remoting.RemotingCommand) error {
	return c.rc.InvokeOneway(ctx, addr, req)
}

// RegisterHandler sets the handler for broker-initiated requests with this code (for
// example NOTIFY_CONSUMER_IDS_CHANGED, 40). The handler must not block for long: Close
// waits for it.
func (c *Client) RegisterHandler(code remoting.RequestCode, h remoting.RequestHandler) {
	c.rc.RegisterHandler(code, h)
}

// Route returns the cached route of topic, fetching it from the name servers when it is
// not cached (see FetchRoute). The returned value must not be modified.
func (c *Client) Route(ctx context.Context, topic string) (*wire.TopicRouteData, error) {
	c.mu.Lock()
	rd := c.routes[topic]
	c.mu.Unlock()
	if rd != nil {
		return rd, nil
	}
	return c.FetchRoute(ctx, topic)
}

// CachedRoute returns the cached route of topic, nil if none.
func (c *Client) CachedRoute(topic string) *wire.TopicRouteData {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.routes[topic]
}

// FetchRoute asks the name servers for the route of topic (GET_ROUTEINFO_BY_TOPIC,
// RocketMQ request code 105; docs/protocol.md §3.1), trying each name server once, round-robin,
// NamesrvTimeout each. On success the route is cached (and refreshed from then on) and
// the broker address table updated. Errors: ErrTopicNotExist (wrapped) when a name server
// answered 17 TOPIC_NOT_EXIST; a *wire.RouteError (wrapping wire.ErrBadRouteData) for an
// unusable body; ErrNoNameServer
// (wrapped, with the last transport error) when none answered; ErrClosed after Close.
func (c *Client) FetchRoute(ctx context.Context, topic string) (*wire.TopicRouteData, error) {
	n := len(c.cfg.NamesrvAddrs)
	start := int(c.nsNext.Add(1))
	var lastErr error
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if c.ctx.Err() != nil {
			return nil, ErrClosed
		}
		addr := c.cfg.NamesrvAddrs[(start+i)%n]
		cctx, cancel := context.WithTimeout(ctx, c.cfg.NamesrvTimeout)
		rd, err := wire.GetRouteInfo(cctx, c.rc, addr, topic)
		cancel()
		var respErr *remoting.ResponseError
		switch {
		case err == nil:
			c.SetRoute(topic, rd)
			return rd, nil
		case errors.Is(err, ErrTopicNotExist), errors.Is(err, wire.ErrBadRouteData):
			return nil, err
		case errors.As(err, &respErr):
			lastErr = err // another code: try the next name server
		default:
			lastErr = err
			c.log.Debug("client: route request failed", "namesrv", addr, "topic", topic, "err", err)
		}
	}
	return nil, fmt.Errorf("%w for topic %q: %w", ErrNoNameServer, topic, lastErr)
}

// SetRoute caches rd as the route of topic (used by producers for the TBW102 fallback of
// topics that do not exist yet) and rebuilds the broker address table. The periodic
// refresh keeps it until the name server returns a real route.
func (c *Client) SetRoute(topic string, rd *wire.TopicRouteData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.routes[topic]
	c.routes[topic] = rd
	// Rebuilding walks every cached route: with 10,000 topics, each route a producer's
	// first sends cached cost that walk. Only a route that drops a broker address the
	// old one had can make an address unused; any other merges into the table.
	if old != nil && !routeCovers(rd, old) {
		c.rebuildBrokersLocked()
		return
	}
	c.mergeBrokersLocked(rd)
}

// routeCovers reports whether every broker address of old (name, id, address) is also
// in rd.
func routeCovers(rd, old *wire.TopicRouteData) bool {
	for _, ob := range old.BrokerDatas {
		nb, ok := rd.Broker(ob.BrokerName)
		if !ok {
			return false
		}
		for id, a := range ob.BrokerAddrs {
			if nb.BrokerAddrs[id] != a {
				return false
			}
		}
	}
	return true
}

// mergeBrokersLocked adds rd's broker addresses to the broker table (an address of the
// same broker name and id is replaced; a broker's address map is copied, not changed in
// place) and wakes the heartbeat loop for an address not heartbeated yet.
func (c *Client) mergeBrokersLocked(rd *wire.TopicRouteData) {
	kick := false
	for _, b := range rd.BrokerDatas {
		cur, ok := c.brokers[b.BrokerName]
		same := ok
		for id, a := range b.BrokerAddrs {
			if same && cur.BrokerAddrs[id] != a {
				same = false
			}
			if !c.heartbeated[a] {
				kick = true
			}
		}
		if same {
			continue
		}
		next := wire.BrokerData{Cluster: b.Cluster, BrokerName: b.BrokerName, BrokerAddrs: make(map[int64]string, len(cur.BrokerAddrs)+len(b.BrokerAddrs))}
		for id, a := range cur.BrokerAddrs {
			next.BrokerAddrs[id] = a
		}
		for id, a := range b.BrokerAddrs {
			next.BrokerAddrs[id] = a
		}
		if c.brokers == nil {
			c.brokers = make(map[string]wire.BrokerData)
		}
		c.brokers[b.BrokerName] = next
	}
	if kick {
		select {
		case c.hbKick <- struct{}{}:
		default:
		}
	}
}

// ForgetRoute removes topic from the cache and refresh.
func (c *Client) ForgetRoute(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.routes, topic)
	c.rebuildBrokersLocked()
}

// rebuildBrokersLocked recomputes the broker table from the cached routes, dropping
// brokers no route mentions any more (Go's cleanOfflineBroker) and forgetting their
// heartbeat state.
func (c *Client) rebuildBrokersLocked() {
	brokers := make(map[string]wire.BrokerData)
	for _, rd := range c.routes {
		for _, b := range rd.BrokerDatas {
			cur, ok := brokers[b.BrokerName]
			if !ok {
				cur = wire.BrokerData{Cluster: b.Cluster, BrokerName: b.BrokerName, BrokerAddrs: make(map[int64]string)}
			}
			for id, a := range b.BrokerAddrs {
				cur.BrokerAddrs[id] = a
			}
			brokers[b.BrokerName] = cur
		}
	}
	c.brokers = brokers
	live := make(map[string]bool)
	for _, b := range brokers {
		for _, a := range b.BrokerAddrs {
			live[a] = true
		}
	}
	for a := range c.heartbeated {
		if !live[a] {
			delete(c.heartbeated, a)
			c.hbEpoch++
		}
	}
	for a := range live {
		if !c.heartbeated[a] {
			select {
			case c.hbKick <- struct{}{}:
			default:
			}
			break
		}
	}
}

// refreshAllRoutes fetches the routes of every cached topic again. A failed fetch keeps
// the old route (a TBW102 stand-in stays until the real topic exists).
func (c *Client) refreshAllRoutes(ctx context.Context) {
	c.mu.Lock()
	topics := make([]string, 0, len(c.routes))
	for t := range c.routes {
		topics = append(topics, t)
	}
	c.mu.Unlock()
	sort.Strings(topics)
	for _, t := range topics {
		if ctx.Err() != nil {
			return
		}
		if _, err := c.FetchRoute(ctx, t); err != nil && !errors.Is(err, ErrTopicNotExist) {
			c.log.Warn("client: route refresh failed", "topic", t, "err", err)
		}
	}
}

// BrokerAddr returns the master address (broker id 0) of brokerName from the broker
// table, and whether one is known.
func (c *Client) BrokerAddr(brokerName string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.brokers[brokerName]
	if !ok {
		return "", false
	}
	a := b.MasterAddr()
	return a, a != ""
}

// ReadAddr returns the address to read brokerName's queues from: its master (broker id
// 0) while the broker table lists one, else the slave with the lowest id (slave true), so
// consumers keep reading a broker's messages from its slave while the master is down, as
// the Java client's findBrokerAddressInSubscribe falls back to any listed address.
// ok is false when neither is known.
func (c *Client) ReadAddr(brokerName string) (addr string, slave, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, known := c.brokers[brokerName]
	if !known {
		return "", false, false
	}
	if a := b.MasterAddr(); a != "" {
		return a, false, true
	}
	best := int64(-1)
	for id, a := range b.BrokerAddrs {
		if a != "" && id != wire.MasterID && (best < 0 || id < best) {
			best, addr = id, a
		}
	}
	return addr, best >= 0, best >= 0
}

// BrokerNames returns the names of all known brokers, sorted.
func (c *Client) BrokerNames() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.brokers))
	for n := range c.brokers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// brokerTargets returns the addresses heartbeats go to: every master, and slaves too
// when withSlaves (consumers read from slaves; docs/protocol.md §7.1).
func (c *Client) brokerTargets(withSlaves bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, b := range c.brokers {
		for id, a := range b.BrokerAddrs {
			if a != "" && (id == wire.MasterID || withSlaves) {
				out = append(out, a)
			}
		}
	}
	sort.Strings(out)
	return out
}

// SendHeartbeat sends HEART_BEAT (RocketMQ request code 34; docs/protocol.md §3.6) with the body
// built by Config.Heartbeat to every known broker master, and to slaves too when the
// body has consumer data. Each broker gets BrokerTimeout. It returns the errors of the
// brokers that failed, joined; nil when there is nothing to send.
func (c *Client) SendHeartbeat(ctx context.Context) error {
	return c.sendHeartbeat(ctx, false)
}

// EnsureHeartbeat sends HEART_BEAT only to brokers that have not had a successful one
// since they appeared in a route (or since a failure). Consumers call it before
// rebalancing so a broker knows their subscription before the first pull.
func (c *Client) EnsureHeartbeat(ctx context.Context) error {
	return c.sendHeartbeat(ctx, true)
}

func (c *Client) sendHeartbeat(ctx context.Context, onlyNew bool) error {
	if c.cfg.Heartbeat == nil {
		return nil
	}
	hb := c.cfg.Heartbeat()
	hb.ClientID = c.id
	if hb.ProducerDataSet == nil {
		hb.ProducerDataSet = []wire.ProducerData{}
	}
	if hb.ConsumerDataSet == nil {
		hb.ConsumerDataSet = []wire.ConsumerData{}
	}
	if len(hb.ProducerDataSet) == 0 && len(hb.ConsumerDataSet) == 0 {
		return nil
	}
	body, err := json.Marshal(hb)
	if err != nil {
		return fmt.Errorf("client: encode heartbeat: %w", err)
	}
	var errs []error
	for _, addr := range c.brokerTargets(len(hb.ConsumerDataSet) > 0) {
		c.mu.Lock()
		done, epoch := c.heartbeated[addr], c.hbEpoch
		c.mu.Unlock()
		if onlyNew && done {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.BrokerTimeout)
		resp, err := c.rc.InvokeSync(cctx, addr, remoting.NewRequest(remoting.HeartBeat, nil, body))
		cancel()
		if err == nil {
			err = resp.ResponseErr()
		}
		c.mu.Lock()
		// A broker forgotten while this heartbeat was on its way may be back already, its
		// return having kicked the loop: marking it greeted here would swallow that
		// greeting. (A forget of another broker costs at most one extra heartbeat.)
		if c.hbEpoch == epoch && c.knownLocked(addr) {
			c.heartbeated[addr] = err == nil
		}
		c.mu.Unlock()
		if err != nil {
			c.log.Warn("client: heartbeat failed", "broker", addr, "err", err)
			errs = append(errs, fmt.Errorf("heartbeat to %s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}

// knownLocked reports whether addr is an address of a broker in the table.
func (c *Client) knownLocked(addr string) bool {
	for _, b := range c.brokers {
		for _, a := range b.BrokerAddrs {
			if a == addr {
				return true
			}
		}
	}
	return false
}

// Unregister sends UNREGISTER_CLIENT (RocketMQ request code 35; docs/protocol.md §3.6) with this
// client id and the given producer and/or consumer group ("" leaves a group out) to every
// known broker master, BrokerTimeout each. It returns the failures joined.
func (c *Client) Unregister(ctx context.Context, producerGroup, consumerGroup string) error {
	var errs []error
	for _, addr := range c.brokerTargets(false) {
		ext := map[string]string{"clientID": c.id}
		if producerGroup != "" {
			ext["producerGroup"] = producerGroup
		}
		if consumerGroup != "" {
			ext["consumerGroup"] = consumerGroup
		}
		cctx, cancel := context.WithTimeout(ctx, c.cfg.BrokerTimeout)
		resp, err := c.rc.InvokeSync(cctx, addr, remoting.NewRequest(remoting.UnregisterClient, ext, nil))
		cancel()
		if err == nil {
			err = resp.ResponseErr()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("unregister from %s: %w", addr, err))
		}
	}
	return errors.Join(errs...)
}

// Close stops the route refresh and heartbeat goroutines, closes the remoting client
// (failing pending calls) and waits for all of the Client's goroutines. Idempotent;
// returns nil.
//
// Stop order: mark closed → cancel the context (loops and in-flight calls end) → wait
// for the loops → close the remoting client.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		c.wg.Wait()
		_ = c.rc.Close()
	})
	return nil
}

// HeaderEncoding is the request header encoding of an SDK client whose configuration
// says jsonHeaders (producer.Config.JSONHeaders and the consumers' equivalents): JSON
// when set, the binary ROCKETMQ encoding otherwise.
func HeaderEncoding(jsonHeaders bool) remoting.SerializeType {
	if jsonHeaders {
		return remoting.SerializeJSON
	}
	return remoting.SerializeRocketMQ
}
