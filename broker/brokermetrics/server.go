package brokermetrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures the metrics listener started by [Start].
type Config struct {
	// Addr is the TCP address to listen on, "ip:port" ("127.0.0.1:0" for a free port).
	// Required: metrics are off unless an address is given. Bind to loopback unless a
	// scraper elsewhere needs it: the endpoint has no authentication.
	Addr string
	// Collectors are registered besides the Go runtime and process collectors, typically
	// [NewCollector] and/or [NewNameServerCollector].
	Collectors []prometheus.Collector
	// Pprof also serves net/http/pprof under /debug/pprof/. Default: false.
	Pprof bool
	// Logger receives HTTP server errors. Default: slog.Default().
	Logger *slog.Logger
}

// Server is a running metrics listener. Shutdown stops it.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	once sync.Once
}

// Start registers cfg.Collectors (plus Go runtime and process metrics) in a new registry
// and serves it on cfg.Addr: GET /metrics in the Prometheus exposition formats, and
// /debug/pprof/ when cfg.Pprof. Errors: an empty Addr, a collector that fails to
// register (a duplicate metric), or the listen error.
func Start(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		return nil, errors.New("brokermetrics: Config.Addr is empty")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	cs := append([]prometheus.Collector{collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})}, cfg.Collectors...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("brokermetrics: register collector: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelError)}))
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("brokermetrics: listen %s: %w", cfg.Addr, err)
	}
	s := &Server{ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("metrics listener stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	return s, nil
}

// Addr returns the address the listener is bound to ("ip:port").
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting scrapes, waits (up to ctx) for those in progress, then closes
// the rest. Idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		err = s.srv.Shutdown(ctx)
		if err != nil {
			_ = s.srv.Close()
		}
		<-s.done
	})
	return err
}
