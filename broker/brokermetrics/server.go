package brokermetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"strings"
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

// Start registers cfg.Collectors (plus Go runtime, process and build-info metrics) in a
// new registry and serves it on cfg.Addr: GET /metrics in the Prometheus exposition
// formats, GET /healthz (200 while serving), GET /readyz (200 when every broker and name
// server collected is ready, else 503 with the reasons: see [broker.Broker.Ready]), and
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
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo()}, cfg.Collectors...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("brokermetrics: register collector: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelError)}))
	// Probes: /healthz answers 200 while the process serves; /readyz 200 only when every
	// broker and name server whose collector is registered is ready (503 with the reasons).
	var checks []func() error
	for _, c := range cfg.Collectors {
		if r, ok := c.(interface{ ready() error }); ok {
			checks = append(checks, r.ready)
		}
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var reasons []string
		for _, check := range checks {
			if err := check(); err != nil {
				reasons = append(reasons, err.Error())
			}
		}
		if len(reasons) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+strings.Join(reasons, "; ")+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
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

// buildInfo is sluice_build_info{version, revision, goversion} = 1, from the binary's
// build information (version "(devel)" for a build from a source tree).
func buildInfo() prometheus.Collector {
	version, revision, goVersion := "unknown", "unknown", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		version = bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				revision = s.Value
			}
		}
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_build_info", Help: "Always 1; the labels name the build.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion}}, func() float64 { return 1 })
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
