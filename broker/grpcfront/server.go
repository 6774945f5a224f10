// Package grpcfront serves the RocketMQ 5 gRPC protocol (apache.rocketmq.v2.MessagingService,
// the protocol of the clients in apache/rocketmq-clients) over a Sluice broker's store:
// the same topics, groups, consume queues and dead-letter topics the 4.x remoting port
// serves, so a message sent by a v5 client is consumed by 4.x clients and the reverse.
// POP consumption (receipt handles, invisible durations, delivery attempts, DLQ) is
// package broker/pop. The message and service types are the generated stubs of the
// official Go client module (github.com/apache/rocketmq-clients/golang/v5/protocol/v2).
//
// The broker package does not import this one (it stays free of gRPC): the sluice broker
// command starts a [Server] beside the broker when grpcListenAddr (--grpc-listen) is set,
// and stops it before the broker. See docs/rocketmq5.md for what is served and what is not.
package grpcfront

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicemq/sluice/acl"
	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/broker/pop"
)

// Defaults and limits of the front end.
const (
	// DefaultMinInvisibleDuration is the shortest invisible duration a receive or a change
	// may ask for (Apache RocketMQ's proxy refuses below 10 s too).
	DefaultMinInvisibleDuration = 10 * time.Second
	// MaxInvisibleDuration is the longest.
	MaxInvisibleDuration = 12 * time.Hour
	// AutoRenewInvisibleDuration is the invisible duration of a receive with auto_renew
	// and no duration (push consumers). It is not renewed: a message held longer is
	// delivered again.
	AutoRenewInvisibleDuration = 60 * time.Second
	// MaxLongPollingTimeout bounds a receive's long polling.
	MaxLongPollingTimeout = 60 * time.Second
	// MaxBatchSize bounds the messages of one receive.
	MaxBatchSize = 32
	// MaxAckEntries bounds the entries of one AckMessage request.
	MaxAckEntries = 1024
	// MaxSendBatch bounds the messages of one SendMessage request.
	MaxSendBatch = 1024
)

// Config configures a Server.
type Config struct {
	// Broker is the started broker whose store the front end serves. Required.
	Broker *broker.Broker
	// Listen is the address to listen on ("127.0.0.1:0": a free port). Default: the
	// broker's grpcListenAddr.
	Listen string
	// TLS, when set, serves TLS; default: the broker's tlsEnable certificate, if any.
	TLS *tls.Config
	// Logger receives the front end's logs. Default slog.Default().
	Logger *slog.Logger
	// MinInvisibleDuration is the shortest invisible duration accepted. Default
	// DefaultMinInvisibleDuration.
	MinInvisibleDuration time.Duration
	// LongPollingTimeout is the long polling timeout consumers are told in their settings
	// (push consumers use it for every receive; a push consumer's graceful stop waits for
	// its held receive). Default 30 s.
	LongPollingTimeout time.Duration
	// Pop tunes the POP service (Dir, Backend and Logger are set by the front end).
	Pop pop.Config
}

// Server is the gRPC front end of one broker.
type Server struct {
	cfg  Config
	b    *broker.Broker
	log  *slog.Logger
	pop  *pop.Service
	grpc *grpc.Server
	lis  net.Listener
	ep   *v2.Endpoints
	acl  *acl.Validator // the broker's plain ACL (aclEnable); nil: calls are not checked

	ctx    context.Context // cancelled at Shutdown: ends telemetry streams and long polls
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	svc    *service

	producers producerSet // producers' telemetry streams, for transaction checks
}

// New prepares a front end for a started broker and opens its POP state
// (<storePathRootDir>/pop). Start listens.
func New(cfg Config) (*Server, error) {
	if cfg.Broker == nil {
		return nil, errors.New("grpcfront: Config.Broker is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = cfg.Broker.GrpcListenAddr()
	}
	if cfg.Listen == "" {
		return nil, errors.New("grpcfront: no listen address (grpcListenAddr / --grpc-listen)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LongPollingTimeout <= 0 || cfg.LongPollingTimeout > MaxLongPollingTimeout {
		cfg.LongPollingTimeout = 30 * time.Second
	}
	if cfg.MinInvisibleDuration <= 0 {
		cfg.MinInvisibleDuration = DefaultMinInvisibleDuration
	}
	if cfg.TLS == nil {
		t, err := cfg.Broker.ServerTLS()
		if err != nil {
			return nil, err
		}
		cfg.TLS = t
	}
	s := &Server{cfg: cfg, b: cfg.Broker, log: cfg.Logger.With("frontend", "grpc"), acl: cfg.Broker.ACL()}
	pc := cfg.Pop
	pc.Dir = filepath.Join(cfg.Broker.DataDir(), "pop")
	pc.Backend = backend{cfg.Broker}
	pc.Logger = s.log
	var err error
	if s.pop, err = pop.Open(pc); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Start listens and serves.
func (s *Server) Start() error {
	lis, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		_ = s.pop.Close()
		return fmt.Errorf("grpcfront: listen %s: %w", s.cfg.Listen, err)
	}
	s.lis = lis
	s.ep = endpointsOf(lis.Addr().String(), s.b.StoreHost())
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(s.b.MaxMessageSize() + 1<<20),
		// the official clients ping every 30 s or so; allow it instead of GOAWAY
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if s.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.cfg.TLS)))
	}
	s.b.SetTransactionChecker(s.checkTransaction)
	s.grpc = grpc.NewServer(opts...)
	s.svc = &service{s: s}
	v2.RegisterMessagingServiceServer(s.grpc, s.svc)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("gRPC front end stopped serving", "err", err)
		}
	}()
	s.log.Info("gRPC MessagingService listening", "addr", lis.Addr().String(), "tls", s.cfg.TLS != nil, "acl", s.acl != nil)
	if s.acl != nil && s.cfg.TLS == nil {
		s.log.Warn("gRPC front end with aclEnable but without TLS: a RocketMQ 5 signature covers only its date-time, " +
			"so a header read off the network can be replayed for any request of its account while that time is within aclSignatureSkewMillis; set tlsEnable")
	}
	return nil
}

// Addr is the address the front end listens on (after Start).
func (s *Server) Addr() string {
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// Pop is the POP service (for tests and admin views).
func (s *Server) Pop() *pop.Service { return s.pop }

// Shutdown ends the telemetry streams and long polls, stops serving (waiting for
// requests in flight until ctx ends, then cutting them) and closes the POP state. Stop
// the front end before the broker.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		s.b.SetTransactionChecker(nil)
		s.cancel()
		if s.grpc != nil {
			done := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				s.grpc.Stop()
				<-done
			}
		}
		s.wg.Wait()
		err = s.pop.Close()
	})
	return err
}

// endpointsOf is the endpoint clients are routed to: the listener's address, with the
// broker's address when the listener is on an unspecified address (0.0.0.0, ::).
func endpointsOf(listen string, storeHost netip.AddrPort) *v2.Endpoints {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return &v2.Endpoints{Scheme: v2.AddressScheme_IPv4}
	}
	ip := ap.Addr()
	if ip.IsUnspecified() && storeHost.IsValid() {
		ip = storeHost.Addr()
	}
	scheme := v2.AddressScheme_IPv4
	if ip.Is6() && !ip.Is4In6() {
		scheme = v2.AddressScheme_IPv6
	}
	return &v2.Endpoints{Scheme: scheme, Addresses: []*v2.Address{{Host: ip.Unmap().String(), Port: int32(ap.Port())}}}
}

// backend adapts the broker to pop.Backend.
type backend struct{ *broker.Broker }

// MaxDeliveryAttempts is the group's retryMaxTimes + 1 (Apache RocketMQ 5: -r N gives N+1
// attempts).
func (b backend) MaxDeliveryAttempts(group string) int32 {
	g, err := b.GroupConfig(group)
	if err != nil {
		return 17
	}
	return int32(g.RetryMaxTimes) + 1
}
