// Package remoting implements the RocketMQ 4.x remoting protocol: the frame codec,
// [RemotingCommand], the request and response codes, a [Client] and a [Server].
//
// # Wire format (docs/protocol.md §1)
//
// Every frame is [4-byte length][4-byte serializeType<<24 | headerLength][header][body],
// big-endian, where length counts everything after itself. The header is JSON
// (serialize type 0; what the official Go client always sends and what this package
// sends) or the ROCKETMQ binary layout (type 1; decoded, and used to answer binary
// requests). A response echoes its request's opaque and has flag bit0 set; flag bit1
// marks one-way requests, which get no response.
//
// # Client and server
//
// A [Client] keeps one TCP connection per address, shared by all calls and matched by
// opaque; a broken connection fails its pending calls at once and is re-dialed on the
// next call. A [Server] runs the [Handler] registered for a request code, each request
// in its own goroutine, and answers in the request's serialize type. Both sides can
// receive requests from the peer: a server handler calls back into the client with
// [Conn.Invoke], and the client answers with a [RequestHandler] registered by code.
//
// Each connection has one reader goroutine, one writer goroutine draining a bounded
// outgoing queue (WriteTimeout bounds a peer that does not read), and one goroutine per
// request being handled. Client.Close and Server.Shutdown wait for all of them.
//
// # Errors
//
// Codec problems are [*FrameError] (frame layout, sizes) and [*HeaderError] (header
// contents, ext fields); transport problems are [*ConnError]; an expired call context
// gives an error wrapping [ErrTimeout] and the context's error; closed clients, servers
// and connections report [ErrClosed]. A non-success response code is not an error of
// the transport: check [RemotingCommand.ResponseCode] or use [RemotingCommand.ResponseErr].
package remoting
