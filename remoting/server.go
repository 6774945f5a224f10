package remoting

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/internal/addrkey"
)

// ServerConfig configures a [Server]. The zero value is usable.
type ServerConfig struct {
	// Addr is the TCP listen address. Default: "127.0.0.1:0" (a free loopback port).
	Addr string
	// MaxFrameSize is the largest frame accepted, in bytes counting the 4-byte length
	// field; a larger frame closes that connection. Default: DefaultMaxFrameSize (16 MiB).
	MaxFrameSize int
	// MaxInFlightPerConn is how many requests of one connection may be handled at once;
	// beyond it requests are answered SYSTEM_BUSY (2). Default: 1024.
	MaxInFlightPerConn int
	// WriteTimeout bounds one socket write and how long a response waits for room in the
	// connection's outgoing queue; a client that does not read is disconnected after it.
	// Default: 10s.
	WriteTimeout time.Duration
	// WriteQueueSize is the number of encoded frames that may wait for the writer
	// goroutine per connection. Default: 1024.
	WriteQueueSize int
	// IdleTimeout closes a connection with no traffic in either direction and no request
	// in flight for this long (Java serverChannelMaxIdleTimeSeconds). Default: 120s;
	// negative disables it.
	IdleTimeout time.Duration
	// MaxInFlightBytesPerConn bounds the body bytes of the requests of one connection
	// being handled at once (held pulls included, until answered); beyond it requests
	// are answered SYSTEM_BUSY (2) (one request is always let through). Default: 128 MiB
	// (the producer SDK's default async in-flight bytes); negative: unlimited.
	MaxInFlightBytesPerConn int64
	// MaxQueuedBytesPerConn bounds the bytes of answers and requests waiting to be
	// written to one connection; beyond it senders wait up to WriteTimeout, then the
	// connection is closed as not reading. Default: 64 MiB; negative: only
	// WriteQueueSize (frames) bounds the queue.
	MaxQueuedBytesPerConn int64
	// FrameReadTimeout bounds reading the rest of a frame once its first byte arrived; a
	// connection that stalls mid-frame is closed. Default: 30s, or IdleTimeout when that
	// is shorter; negative: IdleTimeout.
	FrameReadTimeout time.Duration
	// MaxConns bounds the open connections; a connection beyond it is closed at once
	// (logged at warn, at most once a second). Default: 10000; negative: unlimited.
	//
	// It also bounds the reading memory: each connection reads through an 8 KiB buffer
	// (64 KiB after a burst of input, back to 8 KiB once it has been quiet for a second)
	// into the frame being read, which gets its whole buffer (a recycled one) as soon as
	// its length arrives when that is 128 KiB or less, and grows with the bytes received
	// beyond (64 KiB first). A peer that announces a frame and stalls thus holds up to
	// 192 KiB on its connection until FrameReadTimeout closes it: at most about 1.9 GB at
	// the default 10000 connections (MaxConnsPerHost bounds one address's share).
	MaxConns int
	// MaxConnsPerHost bounds the open connections from one remote address: an IPv4
	// address, or an IPv6 /64 (one host or site usually holds a whole /64, so counting
	// single IPv6 addresses would leave a client holding one without a limit; an
	// IPv4-mapped IPv6 address counts as its IPv4 address). Default: MaxConns/10 (at
	// least 16; 1000 when MaxConns is unlimited); negative: unlimited.
	//
	// Fairness between addresses, with MaxConns: the last ReservedConns connections are
	// open only to addresses holding fewer than ReserveHostConns, and once the server is
	// full a connection from an address may take the place of a connection of an address
	// holding at least two more (which is closed, counted in ShedConns). The one closed
	// is, in this order: an idle one before an active one (ActiveWindow), one of the
	// address holding the most, the newest. An active connection of an address holding
	// ReserveHostConns or fewer is never closed. A flood from many addresses thus cannot
	// lock out a client that holds few, nor take the connections of a client that was
	// using them before the flood.
	MaxConnsPerHost int
	// ActiveWindow is how long after a request of a connection was served (passed
	// Before and reached its handler; a request Before refused does not count) the
	// connection counts as active, as it does while a request is in flight: connections
	// closed to make room for another address (MaxConnsPerHost) are idle ones first, and
	// never active ones of an address holding ReserveHostConns or fewer. Default: 60s
	// (twice a RocketMQ client's 30 s heartbeat interval); negative: no connection counts
	// as active.
	ActiveWindow time.Duration
	// ReservedConns is how many of MaxConns are kept for addresses holding fewer than
	// ReserveHostConns connections. Default: MaxConns/20 (at least 1); negative: none.
	ReservedConns int
	// FirstRequestTimeout closes a connection that has not sent one whole request this
	// long after it was accepted (a peer holding connections open without using them).
	// Default: 10s; negative: none (IdleTimeout still applies).
	FirstRequestTimeout time.Duration
	// TLS, when set, serves TLS (crypto/tls) with this configuration (it needs a
	// certificate); the handshake is bounded by HandshakeTimeout. Default: nil (plain TCP).
	TLS *tls.Config
	// HandshakeTimeout bounds a TLS connection's handshake, from the accept: a peer that
	// does not complete it in time is disconnected (logged at info) instead of holding
	// its connection, one of MaxConns, until IdleTimeout. Default: 10s (net/http's
	// Transport.TLSHandshakeTimeout); negative: IdleTimeout bounds it. Plain TCP: unused.
	HandshakeTimeout time.Duration
	// Logger receives connection events. Default: slog.Default().
	Logger *slog.Logger
	// Before, when set, runs before the handler of every request, on the request's
	// goroutine. A non-nil answer is sent instead of running the handler (one-way
	// requests get no answer either way). The broker and the name server use it for
	// name validation and access control. Default: none.
	Before Handler
	// ExtListCodes lists request codes whose requests reach Before and their handler
	// with the ext fields in RemotingCommand.ExtList (wire order, ExtFields nil) instead
	// of a map: for hot requests (SEND_MESSAGE_V2) whose handlers read the header with
	// the accessors (RemotingCommand.Ext, ExtString, ...) or in one pass over the list.
	// Code that needs the map calls RemotingCommand.ExtMap. Default: none (every request
	// gets ExtFields).
	ExtListCodes []RequestCode
}

func (c *ServerConfig) setDefaults() {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:0"
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = DefaultMaxFrameSize
	}
	if c.MaxInFlightPerConn == 0 {
		c.MaxInFlightPerConn = 1024
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.WriteQueueSize == 0 {
		c.WriteQueueSize = 1024
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 120 * time.Second
	}
	if c.MaxInFlightBytesPerConn == 0 {
		c.MaxInFlightBytesPerConn = 128 << 20
	}
	if c.MaxQueuedBytesPerConn == 0 {
		c.MaxQueuedBytesPerConn = 64 << 20
	}
	if c.FrameReadTimeout == 0 {
		c.FrameReadTimeout = 30 * time.Second
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.MaxConns == 0 {
		c.MaxConns = 10000
	}
	if c.MaxConnsPerHost == 0 {
		c.MaxConnsPerHost = 1000
		if c.MaxConns > 0 {
			c.MaxConnsPerHost = max(16, c.MaxConns/10)
		}
	}
	if c.ReservedConns == 0 && c.MaxConns > 0 {
		c.ReservedConns = max(1, c.MaxConns/20)
	}
	if c.ActiveWindow == 0 {
		c.ActiveWindow = 60 * time.Second
	}
	if c.FirstRequestTimeout == 0 {
		c.FirstRequestTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field as a [*config.Error] naming it and the limit.
func (c *ServerConfig) Validate() error {
	switch {
	case c.MaxFrameSize < 0 || (c.MaxFrameSize > 0 && c.MaxFrameSize < 64):
		return &config.Error{Package: "remoting", Field: "MaxFrameSize", Value: c.MaxFrameSize, Reason: "must be 0 (default) or at least 64 bytes"}
	case c.MaxInFlightPerConn < 0:
		return &config.Error{Package: "remoting", Field: "MaxInFlightPerConn", Value: c.MaxInFlightPerConn, Reason: "must not be negative"}
	case c.WriteTimeout < 0:
		return &config.Error{Package: "remoting", Field: "WriteTimeout", Value: c.WriteTimeout, Reason: "must not be negative"}
	case c.WriteQueueSize < 0:
		return &config.Error{Package: "remoting", Field: "WriteQueueSize", Value: c.WriteQueueSize, Reason: "must not be negative"}
	case c.TLS != nil && len(c.TLS.Certificates) == 0 && c.TLS.GetCertificate == nil && c.TLS.GetConfigForClient == nil:
		return &config.Error{Package: "remoting", Field: "TLS", Reason: "has no certificate"}
	}
	return nil
}

// Handler processes one request. It runs in its own goroutine (so it may block, e.g.
// pull long polling); ctx is cancelled when the connection closes or the server shuts
// down. Returning nil sends no response. The server sets Opaque and the RESPONSE flag
// on the returned command and answers in the serialize type of the request; one-way
// requests get no response. A panic is answered with SYSTEM_ERROR (1) and the panic
// text as remark. Return a new command for every call (the server writes to it); the
// request, including its Body, belongs to the handler.
type Handler func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand

// Server is a remoting server: it accepts TCP connections, reads frames, runs the
// [Handler] registered for each request code and writes the responses. Requests from one
// connection are handled concurrently (up to MaxInFlightPerConn). A malformed or
// oversized frame closes only that connection, after the requests read whole before it
// that the reader handles itself (HandleInline, HandleInlineGroup) were handled and
// answered; a peer that closes its sending side gets those answers too.
//
// Lock order: Server.mu and Server.hmu are never held together, and neither is held while
// calling into a Conn or a handler/listener (see conn.go for Conn.mu).
//
// Stop order (Shutdown): mark stopping (no new conns or goroutines) → close the listener
// (the accept loop returns) → close every connection (handler contexts are cancelled,
// pending Conn.Invoke calls fail, OnConnClose listeners run) → wait for the accept loop,
// readers, writers and handlers, up to the Shutdown context.
type Server struct {
	cfg  ServerConfig
	log  *slog.Logger
	opts *connOptions

	state   atomic.Int32 // 0 new, 1 started, 2 shut down
	ln      net.Listener
	wg      sync.WaitGroup
	stopped chan struct{} // closed when wg reached zero after Shutdown began
	quit    chan struct{} // closed when Shutdown begins

	mu       sync.Mutex // guards stopping, conns, byHost, closeConns
	stopping bool
	conns    map[uint64]*Conn
	byHost   map[string]map[uint64]*Conn // open connections by remote address key (hostOf)

	refused     atomic.Int64 // connections refused by MaxConns / MaxConnsPerHost
	shed        atomic.Int64 // connections closed to make room for a smaller holder
	lastRefusal atomic.Int64 // unix ns of the last refusal logged
	// closeConns are the connections Shutdown is flushing and closing.
	closeConns []*Conn

	hmu       sync.RWMutex // guards handlers, inline, defaultH, listeners
	handlers  map[RequestCode]Handler
	inline    map[RequestCode]bool // codes whose handler runs on the reader (HandleInline)
	async     map[RequestCode]AsyncHandler
	group     map[RequestCode]GroupHandler // codes handled in runs on the reader (HandleInlineGroup)
	defaultH  Handler
	listeners []func(*Conn)
}

// NewServer returns a server with cfg (defaults applied); call Start to listen.
// It fails only if cfg is invalid.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		stopped:  make(chan struct{}),
		quit:     make(chan struct{}),
		conns:    make(map[uint64]*Conn),
		byHost:   make(map[string]map[uint64]*Conn),
		handlers: make(map[RequestCode]Handler),
		inline:   make(map[RequestCode]bool),
		async:    make(map[RequestCode]AsyncHandler),
		group:    make(map[RequestCode]GroupHandler),
	}
	idle := cfg.IdleTimeout
	if idle < 0 {
		idle = 0
	}
	s.opts = &connOptions{
		maxInFlightBytes: max(cfg.MaxInFlightBytesPerConn, 0),
		maxQueuedBytes:   max(cfg.MaxQueuedBytesPerConn, 0),
		frameTimeout:     max(cfg.FrameReadTimeout, 0),
		handshakeTimeout: max(cfg.HandshakeTimeout, 0),
		readBufIdle:      defaultReadBufIdle,
		maxFrameSize:     cfg.MaxFrameSize,
		writeTimeout:     cfg.WriteTimeout,
		idleTimeout:      idle,
		queueLen:         cfg.WriteQueueSize,
		maxInFlight:      cfg.MaxInFlightPerConn,
		log:              cfg.Logger,
		spawn:            s.spawn,
		route:            s.routeFor,
		before:           cfg.Before,
		serve:            s.serve,
		onClose:          s.onConnClose,
		extListRequests:  newCodeSet(cfg.ExtListCodes),
	}
	return s, nil
}

// Handle registers h for requests with code, replacing any earlier handler. A nil h
// removes it. Safe to call while serving.
func (s *Server) Handle(code RequestCode, h Handler) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.forgetLocked(code)
	if h != nil {
		s.handlers[code] = h
	}
}

// forgetLocked removes every registration of code (Handle, HandleInline, HandleAsync,
// HandleInlineGroup); the caller holds hmu.
func (s *Server) forgetLocked(code RequestCode) {
	delete(s.handlers, code)
	delete(s.inline, code)
	delete(s.async, code)
	delete(s.group, code)
}

// HandleInline is [Server.Handle] for handlers that finish quickly and never wait on the
// network, a timer or another request (a SEND_MESSAGE stored without waiting for an
// fsync, say): h runs on the connection's reader goroutine instead of a goroutine of its
// own, so requests of this code from one connection are handled one after another, in
// arrival order, while the reader does not read; their responses are written together
// once the reader has handled every complete request it holds: by the reader itself, in
// one non-blocking write, when nothing else is queued or being written on the
// connection, else through the connection's writer. This saves a goroutine start and
// the hand-offs to a handler and to the writer per request. A handler that blocks stalls its whole
// connection (every other request on it waits), and one that calls back into the same
// connection with [Conn.Invoke] deadlocks until the call times out: use Handle for those.
// Inline requests are not counted against MaxInFlightPerConn. A nil h removes the handler.
func (s *Server) HandleInline(code RequestCode, h Handler) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.forgetLocked(code)
	if h != nil {
		s.handlers[code] = h
		s.inline[code] = true
	}
}

// GroupHandler handles a run of requests of one code that one connection's reader took
// from the socket together (see [Server.HandleInlineGroup]). It runs on the reader, so
// it must return quickly and never block, and it must set resps[i] to the response to
// reqs[i] (nil: no response), in any order; reqs and resps have the same length, at
// least 1. Before it returns it calls ReleaseBody on each request whose Body it no
// longer needs. The slices are the connection's: they must not be kept.
type GroupHandler func(ctx context.Context, conn *Conn, reqs []*RemotingCommand, resps []*RemotingCommand)

// maxRunFrames and maxRunBytes bound a run of requests for a GroupHandler: the reader
// hands the run over when it holds this many requests or request frame bytes.
const (
	maxRunFrames = 64
	maxRunBytes  = 1 << 20
)

// HandleInlineGroup is [Server.HandleInline] for requests whose work is cheaper done
// together: when a connection's reader holds several complete requests of this code in
// a row (a client with many sends in flight: one socket read brings dozens), it hands
// them to h in one call, in arrival order, instead of one call each. A run ends at the
// first request of another code (handled after the run), when the reader has no other
// complete request buffered (it would have to wait on the network), or at 64 requests
// or 1 MiB of frames; a lone request is a run of one. ServerConfig.Before runs for each
// request of the run first, in order; those it answers are left out of the run. A panic
// in h answers every request of the run that has no response with SYSTEM_ERROR. The
// responses are written as those of HandleInline. A nil h removes the handler.
func (s *Server) HandleInlineGroup(code RequestCode, h GroupHandler) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.forgetLocked(code)
	if h == nil {
		return
	}
	s.group[code] = h
	// A request that reaches the handler table (none does while the server runs, as
	// group codes are taken before it) is a run of one.
	s.handlers[code] = func(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
		resps := []*RemotingCommand{nil}
		h(ctx, conn, []*RemotingCommand{req}, resps)
		return resps[0]
	}
}

// AsyncHandler handles a request and answers it later: it starts on the connection's
// reader goroutine (as with [Server.HandleInline], it must return quickly and never block)
// and calls reply exactly once, from any goroutine, with the response (nil: no response).
// Calls after the first are ignored. The request keeps its in-flight slot
// (MaxInFlightPerConn, MaxInFlightBytesPerConn) until reply is called, and Shutdown
// gives unanswered requests the same grace as running handlers. reply never blocks: when
// the connection's outgoing queue is full the frame is handed to a goroutine that waits
// for room (bounded by WriteTimeout). A reply after the connection closed is dropped.
type AsyncHandler func(ctx context.Context, conn *Conn, req *RemotingCommand, reply func(*RemotingCommand))

// HandleAsync registers h for requests with code, replacing any earlier handler: the
// handler starts on the reader and answers through its reply function when its result is
// ready (a SEND_MESSAGE under SYNC_FLUSH answers when the group commit's fsync covers it),
// so no goroutine waits per request. ServerConfig.Before runs first, as for every handler.
// A handler that panics before replying is answered SYSTEM_ERROR. Async requests count
// against MaxInFlightPerConn like requests in goroutines (SYSTEM_BUSY past it). A nil h
// removes the handler.
func (s *Server) HandleAsync(code RequestCode, h AsyncHandler) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.forgetLocked(code)
	if h != nil {
		s.async[code] = h
	}
}

// codeRoute is how the requests of one code are served (Server.routeFor): in a run
// (group), on the reader (inline), answered later (async), or else in a goroutine.
type codeRoute struct {
	group  GroupHandler
	inline bool
	async  AsyncHandler
}

// routeFor returns how requests with code are served, read under one lock; the zero
// route (a goroutine each, whose spawn then fails) once Shutdown has begun, so that new
// requests are refused like any other.
func (s *Server) routeFor(code int16) codeRoute {
	select {
	case <-s.quit:
		return codeRoute{}
	default:
	}
	c := RequestCode(code)
	s.hmu.RLock()
	defer s.hmu.RUnlock()
	return codeRoute{group: s.group[c], inline: s.inline[c], async: s.async[c]}
}

// SetDefaultHandler sets the handler for codes without their own handler. Without one,
// such requests are answered REQUEST_CODE_NOT_SUPPORTED (3) with remark
// "request type N not supported", as the Java broker does.
func (s *Server) SetDefaultHandler(h Handler) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.defaultH = h
}

// OnConnClose adds a listener called once for every connection that closes, for any
// reason (peer gone, malformed input, idle, Shutdown). It runs on the goroutine that
// closed the connection and should return quickly.
func (s *Server) OnConnClose(f func(c *Conn)) {
	if f == nil {
		return
	}
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.listeners = append(s.listeners, f)
}

func (s *Server) serve(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
	if s.cfg.Before != nil {
		if resp := s.cfg.Before(ctx, conn, req); resp != nil {
			return resp
		}
	}
	if conn != nil { // nil: a request served in-process, not from a peer
		conn.markServed()
	}
	s.hmu.RLock()
	h := s.handlers[RequestCode(req.Code)]
	if h == nil {
		h = s.defaultH
	}
	s.hmu.RUnlock()
	if h == nil {
		return NewResponse(RequestCodeNotSupported, "request type "+strconv.Itoa(int(req.Code))+" not supported")
	}
	return h(ctx, conn, req)
}

func (s *Server) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *Server) onConnClose(c *Conn) {
	s.mu.Lock()
	if _, ok := s.conns[c.ID()]; ok {
		delete(s.conns, c.ID())
		h := hostOf(c.RemoteAddr())
		delete(s.byHost[h], c.ID())
		if len(s.byHost[h]) == 0 {
			delete(s.byHost, h)
		}
	}
	s.mu.Unlock()
	s.log.Debug("remoting: connection closed", "remote", c.RemoteAddr(), "conn", c.ID(), "cause", c.Err())
	s.hmu.RLock()
	ls := make([]func(*Conn), len(s.listeners))
	copy(ls, s.listeners)
	s.hmu.RUnlock()
	for _, f := range ls {
		f(c)
	}
}

// Start listens on cfg.Addr and serves in background goroutines owned by the server,
// then returns. Errors: listen failure, or a second Start / Start after Shutdown.
func (s *Server) Start() error { return s.StartWith(nil) }

// StartWith is [Server.Start] with ready called between listening and accepting, with
// the actual listen address "ip:port": whatever handlers read that depends on the address
// (a port-0 listener's port) can be set there before the first request is served. An
// error from ready closes the listener and is returned; the server may then be started
// again.
func (s *Server) StartWith(ready func(addr string) error) error {
	if !s.state.CompareAndSwap(0, 1) {
		return errors.New("remoting: server already started or shut down")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return ErrClosed
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		s.state.CompareAndSwap(1, 0) // allow another Start
		return fmt.Errorf("remoting: listen %s: %w", s.cfg.Addr, err)
	}
	if ready != nil {
		if err := ready(ln.Addr().String()); err != nil {
			ln.Close()
			s.state.CompareAndSwap(1, 0)
			return err
		}
	}
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	s.ln = ln
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.acceptLoop(ln)
	}()
	s.log.Info("remoting: server listening", "addr", ln.Addr().String())
	return nil
}

// Addr returns the actual listen address "ip:port" after Start, or "" before.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// RefusedConns returns how many connections were closed at accept because of MaxConns
// or MaxConnsPerHost.
func (s *Server) RefusedConns() int64 { return s.refused.Load() }

// ShedConns returns how many open connections were closed to make room for a connection
// from an address holding fewer (see ServerConfig.MaxConnsPerHost).
func (s *Server) ShedConns() int64 { return s.shed.Load() }

// ReserveHostConns is the number of connections below which an address may use the
// ServerConfig.ReservedConns.
const ReserveHostConns = 4

// admitLocked decides whether a connection from host may open: why is the refusal ("":
// admitted), shed a connection to close to make room (nil: none).
func (s *Server) admitLocked(host string) (shed *Conn, why string) {
	held := len(s.byHost[host])
	if s.cfg.MaxConnsPerHost > 0 && held >= s.cfg.MaxConnsPerHost {
		return nil, fmt.Sprintf("%d connections open from %s (limit %d)", held, host, s.cfg.MaxConnsPerHost)
	}
	n := len(s.conns)
	if s.cfg.MaxConns <= 0 || n < s.cfg.MaxConns-max(s.cfg.ReservedConns, 0) {
		return nil, ""
	}
	if n < s.cfg.MaxConns && held < ReserveHostConns {
		return nil, "" // the reserve
	}
	if shed = s.shedCandidateLocked(held); shed != nil {
		return shed, ""
	}
	if n < s.cfg.MaxConns {
		return nil, fmt.Sprintf("%d connections open, the last %d kept for addresses holding fewer than %d (%s holds %d)",
			n, s.cfg.ReservedConns, ReserveHostConns, host, held)
	}
	return nil, fmt.Sprintf("%d connections open (limit %d)", n, s.cfg.MaxConns)
}

// shedCandidateLocked returns the connection to close so that an address holding held
// connections may open one more (nil: none may be closed): among the connections of
// addresses holding at least held+2, an idle one before an active one (ActiveWindow),
// then one of the address holding the most, then the newest. Active connections of an
// address holding ReserveHostConns or fewer are never chosen. The addresses are looked
// at from the largest holder down, and once shedScanBudget connections were looked at
// the best found so far is taken, so that an accept under a flood costs the same
// whatever the number of connections. The caller holds mu.
func (s *Server) shedCandidateLocked(held int) *Conn {
	type holder struct {
		n   int
		key string
	}
	var eligible []holder
	for key, cs := range s.byHost {
		if len(cs) >= held+2 {
			eligible = append(eligible, holder{len(cs), key})
		}
	}
	if len(eligible) == 0 {
		return nil
	}
	slices.SortFunc(eligible, func(a, b holder) int { return cmp.Compare(b.n, a.n) })
	now := time.Now().UnixNano()
	var (
		best     *Conn
		bestIdle bool
		bestHeld int
		looked   int
	)
	for _, h := range eligible {
		if looked >= shedScanBudget {
			break
		}
		for _, c := range s.byHost[h.key] {
			looked++
			idle := !c.activeAt(now, s.cfg.ActiveWindow)
			if !idle && h.n <= ReserveHostConns {
				continue // a client using its few connections keeps them
			}
			switch {
			case best == nil, idle && !bestIdle:
			case idle != bestIdle, h.n < bestHeld, h.n == bestHeld && c.ID() < best.ID():
				continue
			}
			best, bestIdle, bestHeld = c, idle, h.n
		}
	}
	return best
}

// shedScanBudget bounds the connections shedCandidateLocked looks at for one accept.
const shedScanBudget = 2048

// hostOf returns the key remote counts under for the per-address limits: its IPv4
// address, or its IPv6 /64 (addrkey.Of).
func hostOf(remote string) string { return addrkey.Of(remote) }

// Conns returns the number of open connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *Server) acceptLoop(ln net.Listener) {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping || errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary failure (e.g. too many open files): back off 5ms..1s.
			delay = max(5*time.Millisecond, min(2*delay, time.Second))
			s.log.Warn("remoting: accept failed", "err", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-s.quit:
				t.Stop()
				return
			}
			continue
		}
		delay = 0
		s.serveConn(nc)
	}
}

func (s *Server) serveConn(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	remote := nc.RemoteAddr().String()
	host := hostOf(remote)
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	shed, why := s.admitLocked(host)
	if shed != nil {
		// Out of the tables now, so the slot is free at once; closed below.
		delete(s.conns, shed.ID())
		sh := hostOf(shed.RemoteAddr())
		delete(s.byHost[sh], shed.ID())
		if len(s.byHost[sh]) == 0 {
			delete(s.byHost, sh)
		}
	}
	if why != "" {
		s.mu.Unlock()
		n := s.refused.Add(1) // counted before the close, so a peer that saw it sees the count
		_ = nc.Close()
		now := time.Now().UnixNano()
		if last := s.lastRefusal.Load(); now-last > int64(time.Second) && s.lastRefusal.CompareAndSwap(last, now) {
			s.log.Warn("remoting: connection refused", "remote", remote, "reason", why, "refused_total", n)
		}
		return
	}
	conn := newConn(nc, remote, s.opts)
	s.conns[conn.ID()] = conn
	if s.byHost[host] == nil {
		s.byHost[host] = map[uint64]*Conn{}
	}
	s.byHost[host][conn.ID()] = conn
	s.mu.Unlock()
	if shed != nil {
		n := s.shed.Add(1)
		shed.closeWith(fmt.Errorf("%w: closed to make room for a connection from %s, an address holding fewer", ErrClosed, host))
		now := time.Now().UnixNano()
		if last := s.lastRefusal.Load(); now-last > int64(time.Second) && s.lastRefusal.CompareAndSwap(last, now) {
			s.log.Warn("remoting: connection shed for an address holding fewer", "shed", shed.RemoteAddr(), "for", remote, "shed_total", n)
		}
	}
	if conn.start() {
		s.log.Debug("remoting: accepted connection", "remote", conn.RemoteAddr(), "conn", conn.ID())
		if d := s.cfg.FirstRequestTimeout; d > 0 {
			t := time.AfterFunc(d, func() {
				if !conn.sawRequest.Load() {
					conn.closeWith(fmt.Errorf("%w: no request within %v of connecting", ErrClosed, d))
				}
			})
			context.AfterFunc(conn.Context(), func() { t.Stop() })
		}
	}
}

// shutdownGrace bounds how long Shutdown waits for in-flight handlers to answer
// before it closes connections.
const shutdownGrace = time.Second

// waitHandlers waits until no request is being handled on conns, at most grace (or
// until ctx ends), polling every 5 ms.
func waitHandlers(ctx context.Context, conns []*Conn, grace time.Duration) {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		busy := false
		for _, c := range conns {
			if c.inFlight.Load() > 0 || c.heldAnswers.Load() > 0 {
				busy = true
				break
			}
		}
		if !busy {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Shutdown stops accepting, gives handlers in flight up to 1 s to answer, writes out
// queued answers, closes all connections (cancelling handler contexts) and
// waits until every server goroutine has returned or ctx is done, whichever is first;
// it returns ctx.Err() in the latter case (handlers that ignore their ctx are then still
// running). Idempotent (compare-and-swap guard): later calls just wait again. A server
// that was never started shuts down at once.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.state.CompareAndSwap(0, 2) {
		close(s.stopped)
		return nil
	}
	if s.state.CompareAndSwap(1, 2) {
		s.mu.Lock()
		s.stopping = true
		close(s.quit)
		ln := s.ln
		conns := make([]*Conn, 0, len(s.conns))
		for _, c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		if ln != nil {
			_ = ln.Close()
		}
		// Let handlers that are finishing (e.g. held pulls the owner released just before
		// shutting down) hand over their answers: up to shutdownGrace while any request
		// is in flight, then write out what each connection has queued, each bounded by
		// WriteTimeout and all at once, then close; ctx expiring closes them at once.
		waitHandlers(ctx, conns, shutdownGrace)
		s.mu.Lock()
		s.closeConns = conns
		s.mu.Unlock()
		go func() { // ends when the last server goroutine ends
			var flushing sync.WaitGroup
			for _, c := range conns {
				flushing.Add(1)
				go func() {
					defer flushing.Done()
					c.flushQueued()
					c.closeWith(ErrClosed)
				}()
			}
			flushing.Wait()
			s.wg.Wait()
			close(s.stopped)
		}()
	}
	select {
	case <-s.stopped:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		conns := s.closeConns
		s.mu.Unlock()
		for _, c := range conns {
			c.closeWith(ErrClosed)
		}
		return fmt.Errorf("remoting: shutdown: waiting for handlers: %w", ctx.Err())
	}
}
