// Package admin is an administration client for Sluice and Apache RocketMQ 4.x
// clusters: it creates topics on brokers and reads topics, routes and cluster
// information from name servers, over the RocketMQ remoting protocol. The sluice CLI
// (`sluice admin ...`) and tests use it.
//
// Unlike the official Go client's admin, every call reports the broker's or name
// server's refusal as the one typed answer error, *remoting.ResponseError (code, remark,
// Retryable, the request and the broker: find it with errors.As), or [ErrTopicNotExist].
// A broker that did not answer, or whose answer could not be read, gives an error naming
// the broker and wrapping the cause (e.g. a *remoting.ConnError).
package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/wire"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/remoting"
)

// Defaults and limits.
const (
	DefaultTimeout = 5 * time.Second // per request
	DefaultQueues  = 8               // read and write queue count of a new topic (Java mqadmin updateTopic)
	DefaultPerm    = PermRead | PermWrite
	MaxQueues      = 1024 // largest queue count CreateTopic accepts
)

// ErrClosed is returned by calls on a closed [Admin].
var ErrClosed = errors.New("admin: closed")

// ErrNoBroker is returned (wrapped, naming the name servers) when the name servers know
// no master broker (in the requested cluster): by [Admin.CreateTopic], the listings, and
// route lookups that find no route while no broker is registered.
var ErrNoBroker = errors.New("admin: no master broker")

// Config configures an [Admin].
type Config struct {
	// NamesrvAddrs are the name servers, "ip:port" each; required. Reads go to the
	// first that answers (in order); writes (KV config) go to all.
	NamesrvAddrs []string
	// Timeout bounds each request (on top of the caller's context). Default: 5 s.
	Timeout time.Duration
	// Logger receives connection events of the underlying remoting client.
	// Default: slog.Default().
	Logger *slog.Logger
	// Credentials, when AccessKey and SecretKey are both set, sign every request with
	// RocketMQ plain ACL 1.0 (HMAC-SHA1 over the sorted ext-field values and the body),
	// for brokers and name servers with aclEnable. Default: none (unsigned).
	Credentials remoting.Credentials
	// TLS, when set, connects to name servers and brokers over TLS with this
	// configuration (crypto/tls; e.g. RootCAs with the servers' CA). Default: nil (plain
	// TCP).
	TLS *tls.Config
}

func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field: no name server, a name server address
// that is not host:port, or a negative Timeout.
func (c *Config) Validate() error {
	if len(c.NamesrvAddrs) == 0 {
		return &config.Error{Package: "admin", Field: "NamesrvAddrs", Reason: "at least one name server address is required"}
	}
	for i, a := range c.NamesrvAddrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return &config.Error{Package: "admin", Field: "NamesrvAddrs[" + strconv.Itoa(i) + "]", Reason: strconv.Quote(a) + " is not host:port"}
		}
	}
	if c.Timeout < 0 {
		return &config.Error{Package: "admin", Field: "Timeout", Reason: "must not be negative"}
	}
	return nil
}

// brokerFailed is one broker's failure other than a refusal: a transport error or an
// answer that could not be read, wrapped with the broker's name (when known) and
// address. A refusal (*remoting.ResponseError) names its broker itself and is returned
// as it is.
func brokerFailed(name, addr string, err error) error {
	if _, ok := err.(*remoting.ResponseError); ok {
		return err
	}
	return &brokerFailure{name: name, addr: addr, err: err}
}

// brokerFailure is what brokerFailed wraps: unexported, since callers look for the
// cause (a *remoting.ConnError, remoting.ErrTimeout, a decoding error) with errors.As
// or errors.Is; [PartialError.FailedBrokers] reads the broker from it.
type brokerFailure struct {
	name, addr string
	err        error
}

func (e *brokerFailure) Error() string {
	if e.name == "" { // known only by address (e.g. from an offset message id)
		return fmt.Sprintf("admin: broker at %s: %v", e.addr, e.err)
	}
	return fmt.Sprintf("admin: broker %s (%s): %v", e.name, e.addr, e.err)
}

func (e *brokerFailure) Unwrap() error { return e.err }

// Admin is an administration client. It is safe for concurrent use; Close releases its
// connections.
type Admin struct {
	cfg    Config
	client *remoting.Client
	closed atomic.Bool
}

// New validates cfg and returns an Admin. It does not connect until the first call.
func New(cfg Config) (*Admin, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.NamesrvAddrs = append([]string(nil), cfg.NamesrvAddrs...)
	c, err := remoting.NewClient(remoting.ClientConfig{Logger: cfg.Logger, Credentials: cfg.Credentials, TLS: cfg.TLS})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return &Admin{cfg: cfg, client: c}, nil
}

// Close closes all connections. Calls after Close return [ErrClosed]; a second Close
// returns nil.
func (a *Admin) Close() error {
	if !a.closed.CompareAndSwap(false, true) {
		return nil
	}
	return a.client.Close()
}

// NamesrvAddrs returns the configured name server addresses.
func (a *Admin) NamesrvAddrs() []string { return append([]string(nil), a.cfg.NamesrvAddrs...) }

func (a *Admin) reqCtx(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if a.closed.Load() {
		return nil, nil, ErrClosed
	}
	c, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	return c, cancel, nil
}

// fromNamesrv runs f against the name servers in order until one answers (f returns
// nil or an error that is not a transport error); it returns the last error.
func (a *Admin) fromNamesrv(ctx context.Context, f func(ctx context.Context, addr string) error) error {
	var errs []error
	for _, addr := range a.cfg.NamesrvAddrs {
		c, cancel, err := a.reqCtx(ctx)
		if err != nil {
			return err
		}
		err = f(c, addr)
		cancel()
		if err == nil || !isTransport(err) {
			return err
		}
		errs = append(errs, fmt.Errorf("name server %s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("admin: no name server answered: %w", errors.Join(errs...))
}

// isTransport reports whether err is a connection-level failure (worth trying another
// name server) rather than an answer.
func isTransport(err error) bool {
	var ce *remoting.ConnError
	return errors.As(err, &ce) || errors.Is(err, remoting.ErrTimeout) || errors.Is(err, remoting.ErrClosed)
}

// ListTopics returns every topic the name server has a route for, sorted
// (GET_ALL_TOPIC_LIST_FROM_NAMESERVER, RocketMQ request code 206). No topic while no
// broker is registered is an error wrapping [ErrNoBroker], not an empty list.
func (a *Admin) ListTopics(ctx context.Context) ([]string, error) {
	var out []string
	err := a.fromNamesrv(ctx, func(ctx context.Context, addr string) error {
		l, err := wire.GetAllTopicList(ctx, a.client, addr)
		out = l
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		// Routes come from brokers: none at all may mean none is registered.
		if err := a.checkBrokers(ctx); err != nil {
			return nil, err
		}
	}
	sort.Strings(out)
	return out, nil
}

// TopicRoute returns the topic's route (GET_ROUTEINFO_BY_TOPIC, RocketMQ request code
// 105). A topic without route gives an error wrapping [ErrTopicNotExist].
func (a *Admin) TopicRoute(ctx context.Context, topic string) (*TopicRouteData, error) {
	var out *wire.TopicRouteData
	err := a.fromNamesrv(ctx, func(ctx context.Context, addr string) error {
		r, err := wire.GetRouteInfo(ctx, a.client, addr, topic)
		out = r
		return err
	})
	if errors.Is(err, ErrTopicNotExist) {
		// No route can also mean no broker at all (stopped brokers unregister): then the
		// answer is "cannot know", not "no such topic".
		if nerr := a.checkBrokers(ctx); nerr != nil {
			return nil, fmt.Errorf("%w: cannot tell whether topic %q exists", nerr, topic)
		}
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkBrokers returns an error wrapping [ErrNoBroker] and naming the name servers when
// they know no master broker, or the name-server error; nil when a master is registered.
func (a *Admin) checkBrokers(ctx context.Context) error {
	ci, err := a.ClusterInfo(ctx)
	if err != nil {
		return err
	}
	if len(masters(ci, "")) == 0 {
		return a.noBrokerError()
	}
	return nil
}

// noBrokerError is [ErrNoBroker] with the name servers asked.
func (a *Admin) noBrokerError() error {
	return fmt.Errorf("%w registered with name server %s (brokers stopped or unreachable)", ErrNoBroker, strings.Join(a.cfg.NamesrvAddrs, ";"))
}

// ClusterInfo returns the brokers and clusters the name server knows
// (GET_BROKER_CLUSTER_INFO, RocketMQ request code 106).
func (a *Admin) ClusterInfo(ctx context.Context) (*ClusterInfo, error) {
	var out *wire.ClusterInfo
	err := a.fromNamesrv(ctx, func(ctx context.Context, addr string) error {
		ci, err := wire.GetBrokerClusterInfo(ctx, a.client, addr)
		out = ci
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TopicSpec describes a topic to create or update with [Admin.CreateTopic].
type TopicSpec struct {
	// Topic is the topic name: 1..127 characters of [%|a-zA-Z0-9_-].
	Topic string
	// Queues is the read and write queue count on each broker, 1..MaxQueues.
	// Default: 8 (DefaultQueues).
	Queues int
	// Order marks the topic ordered: brokers get order=true and every name server gets
	// the KV entry ORDER_TOPIC_CONFIG/<topic> = "brokerName:queues;..." so that
	// producers use exactly those queues (orderTopicConf). Order=false leaves an
	// existing KV entry alone (as Java's mqadmin does).
	Order bool
	// Perm is the topic permission, a combination of [PermRead] (4), [PermWrite] (2)
	// and [PermInherit] (1). Default: 6 (read|write).
	Perm int
	// Cluster limits the topic to the master brokers of one cluster. Default: "" =
	// the masters of every cluster the name server knows.
	Cluster string
}

func (s *TopicSpec) setDefaults() {
	if s.Queues == 0 {
		s.Queues = DefaultQueues
	}
	if s.Perm == 0 {
		s.Perm = DefaultPerm
	}
}

// Validate reports the first invalid field of a defaulted spec as a [*config.Error].
func (s *TopicSpec) Validate() error {
	if err := message.ValidateTopic(s.Topic); err != nil {
		return &config.Error{Package: "admin", Field: "Topic", Reason: err.Error()}
	}
	if s.Queues < 1 || s.Queues > MaxQueues {
		return &config.Error{Package: "admin", Field: "Queues", Reason: fmt.Sprintf("%d is outside 1..%d", s.Queues, MaxQueues)}
	}
	const allowed = PermRead | PermWrite | PermInherit
	if s.Perm < 0 || s.Perm&^allowed != 0 {
		return &config.Error{Package: "admin", Field: "Perm", Reason: fmt.Sprintf("%d has bits outside read(4)|write(2)|inherit(1)", s.Perm)}
	}
	return nil
}

// Broker is one broker a topic was created on.
type Broker struct {
	Cluster string
	Name    string // broker name
	Addr    string // master address
}

// CreateTopicResult reports where a topic was created.
type CreateTopicResult struct {
	Brokers        []Broker // the masters that accepted the topic, sorted by name
	OrderTopicConf string   // the value put into ORDER_TOPIC_CONFIG, "" unless Order
}

// CreateTopic creates or updates a topic on every master broker of the spec's
// cluster (all clusters by default), found with GET_BROKER_CLUSTER_INFO. Each master
// gets UPDATE_AND_CREATE_TOPIC (RocketMQ request code 17) with ext topic,
// defaultTopic=TBW102, readQueueNums=writeQueueNums=Queues, perm, topicFilterType=
// SINGLE_TAG, topicSysFlag=0 and order (docs/protocol.md §3.12). With Order, every name
// server then gets PUT_KV_CONFIG (100) ORDER_TOPIC_CONFIG/<topic> = "brokerName:Queues;..."
// over the brokers, sorted by name.
//
// The brokers register the new topic with the name servers themselves; use
// [Admin.WaitTopicRoute] to wait until the route shows it.
//
// Errors: a [*config.Error] for a bad spec; [ErrNoBroker] (wrapped) if there is no
// master; name-server errors; and one error per failing broker (a refusal is a
// *remoting.ResponseError): joined when every broker failed, else in a [*PartialError]
// returned with the brokers that accepted the topic (no order config is written then).
func (a *Admin) CreateTopic(ctx context.Context, spec TopicSpec) (*CreateTopicResult, error) {
	spec.setDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	ci, err := a.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	brokers := masters(ci, spec.Cluster)
	if len(brokers) == 0 {
		if spec.Cluster != "" {
			return nil, fmt.Errorf("%w in cluster %q", ErrNoBroker, spec.Cluster)
		}
		return nil, a.noBrokerError()
	}
	ext := map[string]string{
		"topic":           spec.Topic,
		"defaultTopic":    message.AutoCreateTopicKey,
		"readQueueNums":   strconv.Itoa(spec.Queues),
		"writeQueueNums":  strconv.Itoa(spec.Queues),
		"perm":            strconv.Itoa(spec.Perm),
		"topicFilterType": "SINGLE_TAG",
		"topicSysFlag":    "0",
		"order":           strconv.FormatBool(spec.Order),
	}
	errs := make([]error, len(brokers))
	var wg sync.WaitGroup
	for i, b := range brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.createOn(ctx, b, ext)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		var ok []Broker
		for i, b := range brokers {
			if errs[i] == nil {
				ok = append(ok, b)
			}
		}
		if len(ok) == 0 {
			return nil, err
		}
		return &CreateTopicResult{Brokers: ok}, partial(len(ok), errs)
	}
	res := &CreateTopicResult{Brokers: brokers}
	if spec.Order {
		entries := make([]wire.OrderTopicEntry, 0, len(brokers))
		for _, b := range brokers {
			entries = append(entries, wire.OrderTopicEntry{BrokerName: b.Name, QueueNums: spec.Queues})
		}
		res.OrderTopicConf = wire.FormatOrderTopicConf(entries)
		if err := a.putKVAll(ctx, wire.NamespaceOrderTopicConfig, spec.Topic, res.OrderTopicConf); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (a *Admin) createOn(ctx context.Context, b Broker, ext map[string]string) error {
	c, cancel, err := a.reqCtx(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	e := make(map[string]string, len(ext))
	for k, v := range ext {
		e[k] = v
	}
	resp, err := a.client.InvokeSync(c, b.Addr, remoting.NewRequest(remoting.UpdateAndCreateTopic, e, nil))
	if err == nil {
		err = resp.ResponseErrFor(remoting.UpdateAndCreateTopic, b.Name, b.Addr)
	}
	if err != nil {
		return brokerFailed(b.Name, b.Addr, err)
	}
	return nil
}

// putKVAll writes a KV entry to every name server; every failure is reported.
func (a *Admin) putKVAll(ctx context.Context, ns, key, value string) error {
	var errs []error
	for _, addr := range a.cfg.NamesrvAddrs {
		c, cancel, err := a.reqCtx(ctx)
		if err != nil {
			return err
		}
		if err := wire.PutKVConfig(c, a.client, addr, ns, key, value); err != nil {
			errs = append(errs, fmt.Errorf("admin: put kv config %s/%s on name server %s: %w", ns, key, addr, err))
		}
		cancel()
	}
	return errors.Join(errs...)
}

// masters lists the master brokers (id 0) of cluster ("" = all), sorted by name.
func masters(ci *wire.ClusterInfo, cluster string) []Broker {
	var out []Broker
	for name, bd := range ci.BrokerAddrTable {
		if bd == nil || (cluster != "" && bd.Cluster != cluster) {
			continue
		}
		if addr := bd.MasterAddr(); addr != "" {
			out = append(out, Broker{Cluster: bd.Cluster, Name: name, Addr: addr})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// WaitTopicRoute polls the topic's route every 50 ms until it contains queue data of
// every broker in brokerNames (of at least one broker if brokerNames is empty), and
// returns it. It returns ctx's error (wrapping the last lookup error, if any) when ctx
// ends first; name-server errors other than "no route" end the wait at once.
func (a *Admin) WaitTopicRoute(ctx context.Context, topic string, brokerNames ...string) (*TopicRouteData, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		r, err := a.TopicRoute(ctx, topic)
		switch {
		case err == nil && routeHas(r, brokerNames):
			return r, nil
		case err != nil && !errors.Is(err, ErrTopicNotExist) && !errors.Is(err, ErrNoBroker): // brokers may still be registering
			return nil, err
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("route of %q lacks some of brokers %v", topic, brokerNames)
			}
			return nil, fmt.Errorf("admin: wait for route of %q: %w (%v)", topic, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func routeHas(r *wire.TopicRouteData, names []string) bool {
	have := make(map[string]bool, len(r.QueueDatas))
	for _, q := range r.QueueDatas {
		have[q.BrokerName] = true
	}
	if len(names) == 0 {
		return len(have) > 0
	}
	for _, n := range names {
		if !have[n] {
			return false
		}
	}
	return true
}

// DeleteTopic deletes a topic: DELETE_TOPIC_IN_BROKER (RocketMQ request code 215) on
// every master in the topic's route, then DELETE_TOPIC_IN_NAMESRV (216) and
// DELETE_KV_CONFIG of its order config (102) on every name server. It returns the
// brokers that deleted it. A topic without a route is deleted from the name servers
// only when some broker still holds it (no broker is returned); a topic no broker holds
// gives an error wrapping [ErrTopicNotExist] and changes nothing.
//
// Errors: one per failing broker (a refusal is a *remoting.ResponseError), joined when
// no broker deleted the topic, else in a [*PartialError] returned with the brokers that
// did; in both cases the route and order config stay on the name servers (a broker
// still holds the topic: delete it again once that broker answers). Name-server errors
// are joined.
func (a *Admin) DeleteTopic(ctx context.Context, topic string) ([]Broker, error) {
	if err := message.ValidateTopic(topic); err != nil {
		return nil, &config.Error{Package: "admin", Field: "Topic", Reason: err.Error()}
	}
	if message.IsSystemTopic(topic) {
		return nil, &config.Error{Package: "admin", Field: "Topic", Reason: fmt.Sprintf("%s is a system topic and cannot be deleted", topic)}
	}
	r, err := a.TopicRoute(ctx, topic)
	if err != nil && !errors.Is(err, ErrTopicNotExist) {
		return nil, err
	}
	if r == nil {
		// No route: delete only what some broker still holds (a route not registered
		// yet); a topic nobody knows is a typo, refused rather than "deleted".
		all, terr := a.TopicConfigs(ctx)
		if !slices.ContainsFunc(all, func(t TopicInfo) bool { return t.Topic == topic }) {
			if terr != nil { // a broker that did not answer may hold it
				return nil, terr
			}
			return nil, fmt.Errorf("admin: delete topic %q: %w (no route and no broker holds it)", topic, ErrTopicNotExist)
		}
	}
	var errs []error
	var deleted []Broker
	if r != nil {
		for _, bd := range sortedBrokers(r) {
			addr := bd.MasterAddr()
			if addr == "" {
				continue
			}
			resp, err := a.invoke(ctx, bd.BrokerName, addr, remoting.DeleteTopicInBroker, map[string]string{"topic": topic}, nil)
			if err == nil {
				err = resp.ResponseErrFor(remoting.DeleteTopicInBroker, bd.BrokerName, addr)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			deleted = append(deleted, Broker{Cluster: bd.Cluster, Name: bd.BrokerName, Addr: addr})
		}
	}
	if len(errs) > 0 {
		// A broker kept the topic: keep its route too, so the topic stays usable.
		if err := partial(len(deleted), errs); isPartial(err) {
			return deleted, err
		}
		return nil, errors.Join(errs...)
	}
	for _, addr := range a.cfg.NamesrvAddrs {
		c, cancel, err := a.reqCtx(ctx)
		if err != nil {
			return deleted, err
		}
		if err := wire.DeleteTopic(c, a.client, addr, topic, ""); err != nil {
			errs = append(errs, fmt.Errorf("admin: delete topic on name server %s: %w", addr, err))
		}
		if err := wire.DeleteKVConfig(c, a.client, addr, wire.NamespaceOrderTopicConfig, topic); err != nil {
			errs = append(errs, fmt.Errorf("admin: delete order config on name server %s: %w", addr, err))
		}
		cancel()
	}
	return deleted, errors.Join(errs...)
}
