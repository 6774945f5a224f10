package namesrv

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/sluicemq/sluice/remoting"
)

// RegisterBodyBounds returns the upper bounds, in bytes, of the buckets of
// [Stats].RegisterBodySize. Each call returns a fresh slice.
func RegisterBodyBounds() []int64 { return slices.Clone(registerBodyBounds) }

var registerBodyBounds = []int64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20}

// SizeHistogram is a snapshot of a byte-size histogram.
type SizeHistogram struct {
	// Bounds are the buckets' upper bounds in bytes (inclusive), ascending.
	Bounds []int64
	// Cumulative[i] counts the observations <= Bounds[i].
	Cumulative []uint64
	// Count is the number of observations (including those above the last bound).
	Count uint64
	// Sum is the sum of all observations in bytes.
	Sum int64
}

// Stats is a point-in-time view of a name server, read by [NameServer.Stats] (the
// Prometheus exporter in broker/brokermetrics reads it at scrape time).
type Stats struct {
	Connections int // open connections (brokers and clients)
	Brokers     int // live broker addresses in the route table
	Topics      int // topics with routes

	RegisterOK     int64         // REGISTER_BROKER requests answered SUCCESS since start
	RegisterFailed int64         // REGISTER_BROKER requests refused (bad header, CRC, JSON...)
	RegisterBody   SizeHistogram // body sizes of all REGISTER_BROKER requests
}

type nsStats struct {
	registerOK, registerFailed atomic.Int64
	bodyBuckets                []atomic.Uint64 // len(registerBodyBounds)+1
	bodySum                    atomic.Int64
}

func newNSStats() *nsStats {
	return &nsStats{bodyBuckets: make([]atomic.Uint64, len(registerBodyBounds)+1)}
}

// countRegister wraps the REGISTER_BROKER handler: it counts outcomes and body sizes.
func (n *NameServer) countRegister(h remoting.Handler) remoting.Handler {
	return func(ctx context.Context, conn *remoting.Conn, req *remoting.RemotingCommand) *remoting.RemotingCommand {
		size := int64(len(req.Body))
		i, _ := slices.BinarySearch(registerBodyBounds, size)
		n.stats.bodyBuckets[i].Add(1)
		n.stats.bodySum.Add(size)
		resp := h(ctx, conn, req)
		if resp != nil && resp.ResponseCode() == remoting.Success {
			n.stats.registerOK.Add(1)
		} else {
			n.stats.registerFailed.Add(1)
		}
		return resp
	}
}

// Stats returns the name server's statistics (see [Stats]); safe at any time.
func (n *NameServer) Stats() Stats {
	s := Stats{Connections: n.srv.Conns(), RegisterOK: n.stats.registerOK.Load(),
		RegisterFailed: n.stats.registerFailed.Load(),
		RegisterBody:   SizeHistogram{Bounds: RegisterBodyBounds(), Cumulative: make([]uint64, len(registerBodyBounds)), Sum: n.stats.bodySum.Load()}}
	var c uint64
	for i := range n.stats.bodyBuckets {
		c += n.stats.bodyBuckets[i].Load()
		if i < len(registerBodyBounds) {
			s.RegisterBody.Cumulative[i] = c
		}
	}
	s.RegisterBody.Count = c
	n.routes.mu.RLock()
	s.Brokers, s.Topics = len(n.routes.live), len(n.routes.topicQueues)
	n.routes.mu.RUnlock()
	return s
}
