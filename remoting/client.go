package remoting

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/sluicemq/sluice/config"
)

// ClientConfig configures a [Client]. The zero value is usable.
type ClientConfig struct {
	// DialTimeout bounds connecting to an address. Default: 3s.
	DialTimeout time.Duration
	// MaxFrameSize is the largest frame, in bytes counting the 4-byte length field, that
	// is accepted from or sent to a server; a larger incoming frame closes the
	// connection. Default: DefaultMaxFrameSize (16 MiB).
	MaxFrameSize int
	// WriteTimeout bounds one socket write and how long a caller waits for room in the
	// outgoing queue; when exceeded the connection is closed. Default: 10s.
	WriteTimeout time.Duration
	// WriteQueueSize is the number of encoded frames that may wait for the writer
	// goroutine per connection. Default: 1024.
	WriteQueueSize int
	// IdleTimeout closes a connection that received nothing and sent nothing for this
	// long while no call is pending. Default: 0 = never (the server closes idle
	// connections; TCP keepalive detects dead peers).
	IdleTimeout time.Duration
	// Logger receives connection events. Default: slog.Default().
	Logger *slog.Logger
	// OnConnect, if set, is called with the address each time a new connection to it is
	// established (the first one and every reconnect), from the dialing goroutine, before
	// any call can use that connection: it must not block. RocketMQ clients use it to heartbeat a broker that restarted, which
	// has forgotten their subscriptions and producer groups.
	OnConnect func(addr string)
	// TLS, when set, makes every connection TLS (crypto/tls) with this configuration; the
	// server name is the host of the address unless set. Default: nil (plain TCP). The
	// official Go client's WithTls(true) corresponds to {InsecureSkipVerify: true}.
	TLS *tls.Config
	// Credentials, when Enabled, sign every request this client sends (InvokeSync,
	// InvokeAsync, InvokeOneway) with RocketMQ plain ACL 1.0 (see [Credentials.Sign]).
	// Default: none (requests are not signed).
	Credentials Credentials
	// ExtListCodes lists request codes whose responses keep their ext fields in
	// RemotingCommand.ExtList (wire order, ExtFields nil) instead of a map: for hot calls
	// whose callers read the response with the accessors (RemotingCommand.Ext, ExtString,
	// ...), which then cost no map assignments. Callers of these codes that need the map
	// call RemotingCommand.ExtMap. Default: none (every response gets ExtFields).
	ExtListCodes []RequestCode
	// SerializeType is the header encoding of the requests this client sends:
	// SerializeJSON (the default, what RocketMQ clients send unless configured otherwise)
	// or SerializeRocketMQ, the binary header RocketMQ servers have decoded since 4.0
	// (Java clients: -Drocketmq.serialize.type=ROCKETMQ; docs/protocol.md §1.3), which costs
	// less to encode and to decode than JSON. Servers answer in the request's encoding.
	// Binary requests leave out ext fields whose value is empty: RocketMQ servers decode
	// an empty binary value as null (an absent field), and their ACL check would sign it
	// as "null". Any other value is refused by Validate.
	SerializeType SerializeType
}

func (c *ClientConfig) setDefaults() {
	if c.DialTimeout == 0 {
		c.DialTimeout = 3 * time.Second
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = DefaultMaxFrameSize
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.WriteQueueSize == 0 {
		c.WriteQueueSize = 1024
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field (negative durations or sizes, or a
// MaxFrameSize below 64 bytes) as a [*config.Error] naming it.
func (c *ClientConfig) Validate() error {
	switch {
	case c.DialTimeout < 0:
		return &config.Error{Package: "remoting", Field: "DialTimeout", Value: c.DialTimeout, Reason: "must not be negative"}
	case c.MaxFrameSize < 0 || (c.MaxFrameSize > 0 && c.MaxFrameSize < 64):
		return &config.Error{Package: "remoting", Field: "MaxFrameSize", Value: c.MaxFrameSize, Reason: "must be 0 (default) or at least 64 bytes"}
	case c.WriteTimeout < 0:
		return &config.Error{Package: "remoting", Field: "WriteTimeout", Value: c.WriteTimeout, Reason: "must not be negative"}
	case c.WriteQueueSize < 0:
		return &config.Error{Package: "remoting", Field: "WriteQueueSize", Value: c.WriteQueueSize, Reason: "must not be negative"}
	case c.IdleTimeout < 0:
		return &config.Error{Package: "remoting", Field: "IdleTimeout", Value: c.IdleTimeout, Reason: "must not be negative"}
	case c.SerializeType != SerializeJSON && c.SerializeType != SerializeRocketMQ:
		return &config.Error{Package: "remoting", Field: "SerializeType", Value: c.SerializeType, Reason: "want JSON (0) or ROCKETMQ (1)"}
	}
	return nil
}

// RequestHandler serves a server-initiated request (e.g. NOTIFY_CONSUMER_IDS_CHANGED 40,
// CHECK_TRANSACTION_STATE 39) in its own goroutine. addr is the address the request came
// from (as dialed). ctx is done when that connection closes or the client is closed.
// Returning nil sends no response; otherwise the client sets the opaque and the
// RESPONSE flag and answers in the request's serialize type (not for one-way requests).
// A panic is answered with SYSTEM_ERROR (1). Return a new command for every call (the
// client writes to it).
type RequestHandler func(ctx context.Context, addr string, req *RemotingCommand) *RemotingCommand

// Client is a remoting client: one TCP connection per address, shared by all calls,
// requests matched to responses by opaque. A broken connection fails all its pending
// calls at once and is re-dialed on the next call. Safe for concurrent use.
//
// Lock order: Client.mu and Client.hmu are never held together, and neither is held
// while calling into a Conn (see conn.go).
type Client struct {
	cfg  ClientConfig
	log  *slog.Logger
	opts *connOptions

	ctx    context.Context // cancelled by Close; bounds dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the client

	mu     sync.Mutex // guards closed, conns
	closed bool
	conns  map[string]*clientEntry

	hmu      sync.RWMutex
	handlers map[RequestCode]RequestHandler

	sweepOnce sync.Once // starts the deadline sweep at the first InvokeAsyncTimeout
}

// asyncSweepInterval is how often the client fails InvokeAsyncTimeout calls whose
// timeout has passed: they fail between timeout and timeout + asyncSweepInterval.
const asyncSweepInterval = 10 * time.Millisecond

// runSweep fails expired InvokeAsyncTimeout calls every asyncSweepInterval until Close,
// and starts another callback runner on a connection whose runner is stuck in a callback.
func (c *Client) runSweep() {
	t := time.NewTicker(asyncSweepInterval)
	defer t.Stop()
	var conns []*Conn
	for {
		select {
		case <-c.ctx.Done():
			return
		case now := <-t.C:
			conns = conns[:0]
			c.mu.Lock()
			for _, e := range c.conns {
				select {
				case <-e.ready:
					if e.conn != nil {
						conns = append(conns, e.conn)
					}
				default:
				}
			}
			c.mu.Unlock()
			for _, conn := range conns {
				conn.sweepExpired(now.UnixNano())
				conn.unstickCallbacks()
			}
			clear(conns)
		}
	}
}

// clientEntry is a cached connection or a dial in progress.
type clientEntry struct {
	ready chan struct{} // closed when the dial finished
	conn  *Conn         // set before ready is closed on success
	err   error         // set before ready is closed on failure
}

// NewClient returns a client with cfg (defaults applied). It fails only if cfg is invalid.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg:      cfg,
		log:      cfg.Logger,
		ctx:      ctx,
		cancel:   cancel,
		conns:    make(map[string]*clientEntry),
		handlers: make(map[RequestCode]RequestHandler),
	}
	c.opts = &connOptions{
		maxFrameSize: cfg.MaxFrameSize,
		writeTimeout: cfg.WriteTimeout,
		idleTimeout:  cfg.IdleTimeout,
		readBufIdle:  defaultReadBufIdle,
		queueLen:     cfg.WriteQueueSize,
		log:          cfg.Logger,
		spawn:        c.spawn,
		serve:        c.serve,
		onClose:      c.onConnClose,

		extListResponses: newCodeSet(cfg.ExtListCodes),
		serializeType:    cfg.SerializeType,
	}
	return c, nil
}

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

// RegisterHandler sets the handler for server-initiated requests with this code,
// replacing any earlier one. Requests without a handler are answered with
// REQUEST_CODE_NOT_SUPPORTED (3) unless they are one-way.
func (c *Client) RegisterHandler(code RequestCode, h RequestHandler) {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if h == nil {
		delete(c.handlers, code)
		return
	}
	c.handlers[code] = h
}

func (c *Client) serve(ctx context.Context, conn *Conn, req *RemotingCommand) *RemotingCommand {
	c.hmu.RLock()
	h := c.handlers[RequestCode(req.Code)]
	c.hmu.RUnlock()
	if h == nil {
		return NewResponse(RequestCodeNotSupported, "request type "+strconv.Itoa(int(req.Code))+" not supported")
	}
	return h(ctx, conn.RemoteAddr(), req)
}

func (c *Client) onConnClose(conn *Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.conns[conn.RemoteAddr()]; e != nil && e.conn == conn {
		delete(c.conns, conn.RemoteAddr())
	}
}

// conn returns the open connection to addr, dialing it if needed. Concurrent callers
// share one dial. A cached connection that has closed is dropped and re-dialed at once
// (before its own close handler removes it). At most 3 dials are attempted.
func (c *Client) conn(ctx context.Context, addr string) (*Conn, error) {
	var e *clientEntry
	for attempt := 0; attempt < 3; attempt++ {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, &ConnError{Addr: addr, Op: "dial", Err: ErrClosed}
		}
		e = c.conns[addr]
		if e != nil && e.closedConn() {
			delete(c.conns, addr)
			e = nil
		}
		if e == nil {
			e = &clientEntry{ready: make(chan struct{})}
			c.conns[addr] = e
			c.wg.Add(1)
			go func(e *clientEntry) {
				defer c.wg.Done()
				c.dial(addr, e)
			}(e)
		}
		c.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: dial %s: %w", ErrTimeout, addr, ctx.Err())
		}
		if e.err != nil {
			return nil, e.err
		}
		if e.conn.ctx.Err() == nil {
			return e.conn, nil
		}
	}
	return e.conn, nil // closed again right after dialing; the call reports the ConnError
}

// connWithin is conn with the dial, when addr has no usable connection yet, also bounded
// by timeout: the timeout of a call covers connecting too. A ready connection costs no
// derived context. waited reports that it was not ready (the call may have waited for a
// dial).
func (c *Client) connWithin(ctx context.Context, addr string, timeout time.Duration) (_ *Conn, waited bool, _ error) {
	c.mu.Lock()
	e := c.conns[addr]
	c.mu.Unlock()
	if e != nil {
		select {
		case <-e.ready:
			if e.err == nil && e.conn.ctx.Err() == nil {
				return e.conn, false, nil
			}
		default:
		}
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := c.conn(dctx, addr)
	return conn, true, err
}

// deadlineFrom returns the unix-ns time timeout (positive) after the clock reading t,
// saturated at the largest int64 (a timeout of centuries must not wrap around into the
// past) and, for a t long past (the zero time.Time, say), at 1: a deadline already
// passed, never 0 (no deadline).
func deadlineFrom(t time.Time, timeout time.Duration) int64 {
	switch sec := t.Unix(); {
	case sec < math.MinInt64/int64(time.Second): // before 1678, beyond UnixNano: t+timeout is before 1970
		return 1
	case sec > math.MaxInt64/int64(time.Second): // after 2262
		return math.MaxInt64
	}
	now := t.UnixNano()
	if now > 0 && timeout >= time.Duration(math.MaxInt64-now) {
		return math.MaxInt64
	}
	return max(now+int64(timeout), 1)
}

// closedConn reports whether the entry holds a dialed connection that has closed.
func (e *clientEntry) closedConn() bool {
	select {
	case <-e.ready:
		return e.conn != nil && e.conn.ctx.Err() != nil
	default:
		return false
	}
}

func (c *Client) dial(addr string, e *clientEntry) {
	d := net.Dialer{Timeout: c.cfg.DialTimeout}
	var nc net.Conn
	var err error
	if c.cfg.TLS != nil {
		td := tls.Dialer{NetDialer: &d, Config: c.cfg.TLS}
		nc, err = td.DialContext(c.ctx, "tcp", addr) // includes the handshake, bounded by DialTimeout
	} else {
		nc, err = d.DialContext(c.ctx, "tcp", addr)
	}
	var conn *Conn
	if err == nil {
		conn = newConn(nc, addr, c.opts)
	}
	c.mu.Lock()
	switch {
	case err != nil:
		if c.closed {
			err = ErrClosed
		}
		e.err = &ConnError{Addr: addr, Op: "dial", Err: err}
	case c.closed:
		_ = nc.Close()
		e.err = &ConnError{Addr: addr, Op: "dial", Err: ErrClosed}
	default:
		e.conn = conn
	}
	if e.err != nil && c.conns[addr] == e {
		delete(c.conns, addr)
	}
	failed := e.err != nil
	if failed {
		close(e.ready)
	}
	c.mu.Unlock()
	if failed {
		c.log.Debug("remoting: dial failed", "addr", addr, "err", e.err)
		return
	}
	// OnConnect runs before the calls waiting for this dial are released, so whatever it
	// marks (a broker needing a heartbeat) is in place before any call on the new
	// connection can answer (a heartbeat that would clear the mark).
	if conn.start() {
		c.log.Debug("remoting: connected", "addr", addr, "conn", conn.ID(), "local", conn.LocalAddr())
		if c.cfg.OnConnect != nil {
			c.cfg.OnConnect(addr)
		}
	}
	close(e.ready)
}

// InvokeSync sends req to addr and waits for the response. ctx's deadline is the call
// timeout; on expiry the pending entry is removed and the error wraps [ErrTimeout] and
// ctx.Err(). Transport failures (dial, write, connection lost while waiting) are
// [*ConnError]s; after Close they wrap [ErrClosed]. req.Opaque is assigned and the flag
// bits cleared. A non-success response code is not an error here: check
// resp.ResponseCode() (or [RemotingCommand.ResponseErr]).
func (c *Client) InvokeSync(ctx context.Context, addr string, req *RemotingCommand) (*RemotingCommand, error) {
	conn, err := c.conn(ctx, addr)
	if err != nil {
		return nil, err
	}
	c.cfg.Credentials.Sign(req)
	return conn.Invoke(ctx, req)
}

// InvokeSyncTimeout is [Client.InvokeSync] with a timeout that costs no timer and no
// derived context per call: the client's deadline sweep (see
// [Client.InvokeAsyncTimeout]) fails the call with an error wrapping [ErrTimeout] and
// context.DeadlineExceeded between timeout and timeout + 10 ms after it was sent. ctx
// ending first fails it at once with an error wrapping [ErrTimeout] and ctx.Err().
// timeout must be positive (one of centuries means no deadline). The dial, when addr has
// no connection yet, is bounded by timeout too, and by ctx and DialTimeout.
func (c *Client) InvokeSyncTimeout(ctx context.Context, addr string, req *RemotingCommand, timeout time.Duration) (*RemotingCommand, error) {
	return c.InvokeSyncTimeoutSince(ctx, addr, req, time.Now(), timeout)
}

// InvokeSyncTimeoutSince is [Client.InvokeSyncTimeout] with the timeout counted from
// since, a reading of the clock (time.Now) the caller took just before the call, as
// [Client.InvokeAsyncTimeoutSince] counts it (from after the dial when addr had no
// ready connection). Same errors as InvokeSyncTimeout.
func (c *Client) InvokeSyncTimeoutSince(ctx context.Context, addr string, req *RemotingCommand, since time.Time, timeout time.Duration) (*RemotingCommand, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("remoting: InvokeSyncTimeout: timeout %v: must be positive", timeout)
	}
	conn, waited, err := c.connWithin(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	if waited {
		since = time.Now() // the call's timeout counts from after a dial, as ever
	}
	c.sweepOnce.Do(func() { c.spawn(c.runSweep) })
	c.cfg.Credentials.Sign(req)
	return conn.invoke(ctx, deadlineFrom(since, timeout), req)
}

// InvokeAsync sends req to addr and returns once it is queued; cb is then called exactly
// once, in its own goroutine, with the response or an error (ErrTimeout when ctx
// expires, *ConnError on connection loss, ErrClosed on Close). If InvokeAsync itself
// returns an error (dial failure, encoding error, ctx expired before sending), cb is
// never called. cb must not call Client.Close.
func (c *Client) InvokeAsync(ctx context.Context, addr string, req *RemotingCommand, cb func(*RemotingCommand, error)) error {
	if cb == nil {
		return errors.New("remoting: InvokeAsync needs a callback")
	}
	conn, err := c.conn(ctx, addr)
	if err != nil {
		return err
	}
	c.cfg.Credentials.Sign(req)
	return conn.invokeAsync(ctx, req, cb)
}

// InvokeAsyncTimeout is [Client.InvokeAsync] with a timeout that costs no timer per
// call, and callbacks run one after another (in the order the calls completed) by a
// goroutine of the client per connection, started when the first answer of a burst
// arrives and ended when none is left, instead of a goroutine per call. A callback that
// blocks does not block its connection's reader, and delays the later callbacks of that
// connection by about 10 ms: the sweep then starts another runner for them. cb gets an
// error wrapping [ErrTimeout] and context.DeadlineExceeded when no response arrived
// within timeout, or wrapping ctx's error when ctx ends first; both are detected by one
// sweep per client every 10 ms (so between timeout and timeout + 10 ms, and within
// 10 ms of ctx ending, plus the wait behind the connection's earlier callbacks and for
// a CPU on a loaded machine), which costs no timer and no context registration per call.
// timeout must be positive (one of centuries means no deadline). The dial, when addr has
// no connection yet, is bounded by timeout too, and by ctx and DialTimeout.
func (c *Client) InvokeAsyncTimeout(ctx context.Context, addr string, req *RemotingCommand, timeout time.Duration, cb func(*RemotingCommand, error)) error {
	return c.InvokeAsyncTimeoutSince(ctx, addr, req, time.Now(), timeout, cb)
}

// InvokeAsyncTimeoutSince is [Client.InvokeAsyncTimeout] with the timeout counted from
// since, a reading of the clock (time.Now) the caller took just before the call, for
// instance to measure the call's latency: on a ready connection the call then reads the
// clock no more (a clock read costs tens of nanoseconds, a noticeable part of a small
// send). A since in the past shortens the timeout by that much. When addr had no ready
// connection, the timeout counts from after the dial, as InvokeAsyncTimeout's does.
// Same errors as InvokeAsyncTimeout.
func (c *Client) InvokeAsyncTimeoutSince(ctx context.Context, addr string, req *RemotingCommand, since time.Time, timeout time.Duration, cb func(*RemotingCommand, error)) error {
	if cb == nil {
		return errors.New("remoting: InvokeAsyncTimeout needs a callback")
	}
	if timeout <= 0 {
		return fmt.Errorf("remoting: InvokeAsyncTimeout: timeout %v: must be positive", timeout)
	}
	conn, waited, err := c.connWithin(ctx, addr, timeout)
	if err != nil {
		return err
	}
	if waited {
		since = time.Now() // the call's timeout counts from after a dial, as ever
	}
	c.sweepOnce.Do(func() { c.spawn(c.runSweep) })
	c.cfg.Credentials.Sign(req)
	return conn.invokeAsyncWith(ctx, deadlineFrom(since, timeout), true, req, cb)
}

// InvokeOneway sends req to addr with the ONEWAY flag bit (bit1) set and waits for
// nothing but the dial and queueing (a Java server sends no response to it).
// req.Opaque is assigned. Errors as for InvokeSync.
func (c *Client) InvokeOneway(ctx context.Context, addr string, req *RemotingCommand) error {
	conn, err := c.conn(ctx, addr)
	if err != nil {
		return err
	}
	c.cfg.Credentials.Sign(req)
	return conn.InvokeOneway(ctx, req)
}

// CloseConn closes the cached connection to addr, if any; its pending calls fail with a
// [*ConnError] wrapping [ErrClosed]. The next call to addr dials again.
func (c *Client) CloseConn(addr string) {
	c.mu.Lock()
	e := c.conns[addr]
	c.mu.Unlock()
	if e == nil {
		return
	}
	select {
	case <-e.ready:
		if e.conn != nil {
			e.conn.closeWith(ErrClosed)
		}
	default: // still dialing; nothing to close yet
	}
}

// Close closes all connections, fails pending calls with errors wrapping [ErrClosed]
// and waits for every goroutine of the client (readers, writers, request handlers,
// async callbacks) to return. Frames already queued (e.g. a one-way
// UPDATE_CONSUMER_OFFSET sent just before Close) are written first, waiting at most
// WriteTimeout per connection (connections are flushed in parallel). Later calls fail
// with ErrClosed. Idempotent; returns nil.
//
// Stop order: mark closed (no new goroutines or dials) → cancel dials → flush queued
// frames → close every connection (see conn.go) → wait for goroutines.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.wg.Wait()
		return nil
	}
	c.closed = true
	entries := make([]*clientEntry, 0, len(c.conns))
	for _, e := range c.conns {
		entries = append(entries, e)
	}
	c.mu.Unlock()
	c.cancel()
	var flush sync.WaitGroup
	for _, e := range entries {
		<-e.ready // dials finish promptly: their context is cancelled
		if e.conn != nil {
			flush.Add(1)
			go func(conn *Conn) {
				defer flush.Done()
				conn.flushQueued()
				conn.closeWith(ErrClosed)
			}(e.conn)
		}
	}
	flush.Wait()
	c.wg.Wait()
	return nil
}

var _ io.Closer = (*Client)(nil)
