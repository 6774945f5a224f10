package remoting

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Connection internals shared by Client and Server.
//
// Goroutines of one Conn (all started through the owner's spawn helper and counted in the
// owner's WaitGroup, so Client.Close / Server.Shutdown wait for them):
//   - one reader (readLoop): reads frames, completes pending calls, dispatches requests;
//   - one writer (writeLoop): drains the bounded outgoing queue onto the socket;
//     frames that are likely alone (a sync call's request, a handler's answer, the
//     answers the reader produced for a burst of inline requests) are written by the
//     goroutine that has them when nothing is queued or being written (writeDirect), with
//     one non-blocking attempt whose rest, if any, the writer writes before anything else;
//   - one goroutine per incoming request being handled (bounded by maxInFlight on servers),
//     except for the codes a Server handles inline (Server.HandleInline, and
//     Server.HandleInlineGroup, whose requests the reader collects into runs and hands
//     over together): those run on the reader itself, and the codes of
//     Server.HandleAsync, which start on the reader and answer from whichever goroutine
//     calls their reply function;
//   - one goroutine per async-call callback (InvokeAsync), or, for calls of
//     Client.InvokeAsyncTimeout, at most one callback runner (runCallbacks) at a time,
//     running while answered callbacks are queued.
//
// Stop order of a Conn (closeWith, run once, by whoever notices first: reader, writer,
// a full outgoing queue, Conn.Close, or the owner's Close/Shutdown):
//  1. under mu: mark closed, record the cause, take the pending-call table;
//  2. cancel the conn context (handlers see ctx.Done, the writer and blocked senders return);
//  3. close the socket (unblocks the reader and a writer stuck in Write);
//  4. fail every taken pending call with a *ConnError wrapping the cause;
//  5. call the owner's onClose (Server: drop from the table, run OnConnClose listeners;
//     Client: drop from the connection cache so the next call re-dials).
//
// Locks: Conn.mu guards pending/closed/closeErr only and is never held while calling out
// (callbacks, socket I/O, owner locks). Conn.wmu is held only around a socket write
// (the writer's batch or one direct attempt) and takes no other lock. Owner locks (Client.mu, Server.mu) are never held
// while taking Conn.mu either, so there is no lock nesting.

// connOptions are the per-side settings and hooks of a Conn.
type connOptions struct {
	maxFrameSize int
	writeTimeout time.Duration
	idleTimeout  time.Duration // 0: no idle close
	queueLen     int
	maxInFlight  int // 0: unlimited
	// maxInFlightBytes bounds the body bytes of the requests being handled on one
	// connection (0: unlimited); one request is always let through.
	maxInFlightBytes int64
	// maxQueuedBytes bounds the bytes of encoded frames waiting to be written on one
	// connection (0: only the frame count, queueLen, bounds them); a sender waits for
	// room up to writeTimeout, then the connection is closed as not reading.
	maxQueuedBytes int64
	// frameTimeout bounds reading the rest of a frame once its first byte arrived
	// (0: idleTimeout, or none).
	frameTimeout time.Duration
	// handshakeTimeout bounds the TLS handshake of a server connection (0: the idle
	// timeout does, through the first read).
	handshakeTimeout time.Duration
	// readBufIdle is how long a connection's large read buffer may stay empty before
	// the reader swaps it for a small one (0: never).
	readBufIdle time.Duration
	log         *slog.Logger
	// spawn runs f in a goroutine owned by the Client/Server; false if the owner is stopping.
	spawn func(f func()) bool
	// route says how requests with a code are served on this side (Server.HandleInline,
	// Server.HandleAsync, Server.HandleInlineGroup); nil: each in a goroutine of its own.
	route func(code int16) codeRoute
	// before runs ahead of an async handler (ServerConfig.Before); nil: none.
	before Handler
	// serve handles an incoming request (in its own goroutine); nil result = no response.
	serve func(ctx context.Context, c *Conn, req *RemotingCommand) *RemotingCommand
	// onClose is called once after the conn closed (step 5 of the stop order).
	onClose func(c *Conn)
	// extListRequests: incoming requests with these codes keep their ext fields in
	// ExtList (ServerConfig.ExtListCodes); extListResponses: so do the responses to
	// outgoing requests with these codes (ClientConfig.ExtListCodes).
	extListRequests  codeSet
	extListResponses codeSet
	// serializeType is the header encoding of the requests this side sends
	// (ClientConfig.SerializeType; a server's calls to clients use JSON).
	serializeType SerializeType
}

// Conn is one remoting TCP connection, on either side. A [Server] hands it to handlers so
// they can identify the client (RemoteAddr, ID), call back into the client
// ([Conn.Invoke], e.g. CHECK_TRANSACTION_STATE) and notice it closing ([Conn.Context]).
// All methods are safe for concurrent use.
type Conn struct {
	id     uint64
	nc     net.Conn
	remote string
	opts   *connOptions

	ctx    context.Context
	cancel context.CancelFunc
	out    chan []byte // bounded outgoing queue of encoded frames

	flushOnce sync.Once
	flushed   chan struct{} // closed by the writer when it wrote the flush marker

	inFlight atomic.Int32 // requests being handled
	timed    atomic.Int32 // pending calls with a deadline (the sweep skips conns without)

	cbMu      sync.Mutex      // guards the callback runner's fields below
	cbQueue   []asyncCallback // callbacks of serial async calls waiting to run
	cbHead    int             // index of the next callback to run in cbQueue
	cbRunners int             // runCallbacks goroutines running
	cbDone    atomic.Int64    // callbacks run so far (the sweep sees whether runners progress)
	cbSeen    int64           // cbDone at the previous sweep; only the sweep uses it
	inBytes   atomic.Int64    // body bytes of the requests being handled
	outBytes  atomic.Int64    // bytes of frames queued or being written
	room      chan struct{}   // (cap 1) signalled when the writer wrote a batch
	slotFree  chan struct{}   // (cap 1) signalled when a handler finishes
	lastWrite atomic.Int64    // unix nanoseconds of the last completed socket write
	readBuf   atomic.Int32    // size of the reader's buffer (tests)

	// Direct writes (writeDirect): a goroutine with a frame to send writes it to the
	// socket itself when nothing is queued or being written, instead of waking the
	// writer. wmu is held by whoever writes to the socket (the writer for a batch, a
	// direct writer for one attempt) and guards the fields below.
	wmu      sync.Mutex
	raw      *rawWriter    // non-blocking write attempts; nil: no direct writes (TLS, not Linux)
	one      [1][]byte     // the frame of a one-frame direct write (no slice allocation)
	leftover [][]byte      // what a direct write could not write at once; the writer writes it first
	kick     chan struct{} // (cap 1) tells the writer that leftover is waiting

	// answers are the encoded answers of the requests handled on the reader (inline
	// handlers, runs, SYSTEM_BUSY; answerOnReader), written in one go when the reader has
	// no complete frame left to handle (flushAnswers). Only the reader touches them.
	answers     [][]byte
	answersSize int
	// heldAnswers counts the frames in answers (Shutdown waits for them as for
	// requests in flight); the reader writes it, anyone reads it.
	heldAnswers atomic.Int32

	// run holds the requests of one code read in a row whose handler takes them
	// together (Server.HandleInlineGroup), until flushRun hands them over; each counts
	// in inFlight meanwhile. Only the reader touches these fields.
	run      []runReq
	runH     GroupHandler
	runBytes int
	runReqs  []*RemotingCommand // flushRun's scratch: the requests handed to runH
	runResps []*RemotingCommand // and their responses

	// sawRequest is set once the peer's first request was read (FirstRequestTimeout).
	sawRequest atomic.Bool
	// lastServed is the unix ns time of the last request of the peer that passed
	// ServerConfig.Before and reached its handler (0: none yet); see activeAt.
	lastServed atomic.Int64

	mu       sync.Mutex // guards the fields below
	pending  map[int32]*pendingCall
	closed   bool
	closeErr error
}

var connIDSeq atomic.Uint64

func newConn(nc net.Conn, remote string, opts *connOptions) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		id:       connIDSeq.Add(1),
		nc:       nc,
		remote:   remote,
		opts:     opts,
		ctx:      ctx,
		cancel:   cancel,
		out:      make(chan []byte, opts.queueLen),
		flushed:  make(chan struct{}),
		slotFree: make(chan struct{}, 1),
		room:     make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
		pending:  make(map[int32]*pendingCall),
		raw:      newRawWriter(nc),
	}
	c.lastWrite.Store(time.Now().UnixNano())
	return c
}

// ID returns a process-unique connection id (counter from 1).
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr returns the peer address "ip:port" (for client conns: the address dialed).
func (c *Conn) RemoteAddr() string { return c.remote }

// LocalAddr returns the local socket address "ip:port".
func (c *Conn) LocalAddr() string { return c.nc.LocalAddr().String() }

// Context returns a context that is done when the connection closes.
func (c *Conn) Context() context.Context { return c.ctx }

// Err returns why the connection closed, or nil while it is open.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}
