// Package console is Sluice's web console: cluster and brokers, topics, consumer groups
// and their lag, messages, dead letters, and throughput/lag charts, served as plain HTML
// (html/template, embedded with the binary; a vendored htmx and uPlot, no Node build).
//
// It reads and changes the cluster only through [admin.Admin], so it works against any
// Sluice name server (and the RocketMQ-compatible parts against Apache RocketMQ). Charts
// come from the brokers' Prometheus metrics (broker/brokermetrics), sampled every
// Config.SampleInterval from Config.Metrics.
//
// Access: the console is off unless a program starts it; it listens on loopback by
// default and refuses any other address unless a token or basic auth is set; without
// them it answers only requests whose Host is loopback (no DNS rebinding). With
// Config.ReadOnly every mutating route answers 403. Mutations are POST only, carry a
// per-process CSRF token, and cross-origin POSTs are refused (net/http
// CrossOriginProtection).
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/sluicemq/sluice/config"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/admin"
	"github.com/sluicemq/sluice/outbox"
	"github.com/sluicemq/sluice/retrytask"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Defaults of [Config].
const (
	DefaultListen         = "127.0.0.1:8080"
	DefaultPageSize       = 50
	DefaultSampleInterval = 5 * time.Second
	DefaultSamples        = 360 // 30 minutes at 5 s
)

// Config configures a [Console].
type Config struct {
	// Admin is the admin client the console reads and changes the cluster with. The
	// console never closes it. Required.
	Admin *admin.Admin
	// Listen is the address Start listens on, "ip:port". An address that is not loopback
	// needs Token or BasicAuthUser. Default: "127.0.0.1:8080".
	Listen string
	// Token, when set, is required on every request: as "Authorization: Bearer <token>"
	// or through the /login form (which sets an HttpOnly, SameSite=Strict cookie).
	Token string
	// BasicAuthUser and BasicAuthPassword, when the user is set, are accepted as HTTP basic
	// auth (alone, or besides Token).
	BasicAuthUser, BasicAuthPassword string
	// ReadOnly refuses every mutating route (create/delete topic, reset offset, re-drive
	// dead letters, resend a parked record, re-drive outbox rows) with 403 and hides their
	// forms.
	ReadOnly bool
	// PageSize is the number of rows of a listing page. Default: 50. At most 1000.
	PageSize int
	// Metrics are the brokers' metrics, sampled for the charts: each a
	// prometheus.Gatherer, e.g. [ScrapeURL] of a broker's --metrics endpoint, or a
	// registry holding brokermetrics.NewCollector in the broker's process. None: no charts.
	Metrics []prometheus.Gatherer
	// SampleInterval is how often Metrics are sampled. Default: 5 s.
	SampleInterval time.Duration
	// Samples is how many samples the charts keep. Default: 360.
	Samples int
	// Parked, when set, adds the "Parked sends" page: the records the Park middleware
	// (middleware/redismw) wrote to Redis in the task's namespace — scheduled, pending,
	// dead — with "resend now" (the task's RunOnce, so its Send must be a producer's raw
	// send). The console never shuts the task down.
	Parked *retrytask.Task
	// Outboxes, when set, adds the "Outbox" page (console/outbox.go): each transactional
	// outbox table's backlog (pending rows, age of the oldest) and its dead rows, page by
	// page, with re-drive (confirmed first; refused when ReadOnly). Tables must differ.
	// The console never closes their databases.
	Outboxes []*outbox.Outbox
	// Logger receives request errors. Default: slog.Default().
	Logger *slog.Logger
	// LoginLockout is how long an address is refused sign-ins (429) after 5 failed ones
	// (a wrong /login token, bearer token or basic-auth password), doubling with each
	// further failure up to 15 minutes; its credentials are not checked meanwhile.
	// Default 1s.
	LoginLockout time.Duration
	// LoginFailuresPerMinute bounds failed sign-ins from all addresses together: a
	// bucket of this many, refilled at this rate per minute; while it is empty every
	// address is answered 429, so holding many addresses does not buy more guesses.
	// Default 60; at most 1000000.
	LoginFailuresPerMinute int
}

func (c *Config) setDefaults() {
	if c.LoginLockout <= 0 {
		c.LoginLockout = time.Second
	}
	if c.LoginFailuresPerMinute == 0 {
		c.LoginFailuresPerMinute = 60
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultPageSize
	}
	if c.SampleInterval == 0 {
		c.SampleInterval = DefaultSampleInterval
	}
	if c.Samples == 0 {
		c.Samples = DefaultSamples
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field: no Admin, a PageSize outside 1..1000, a
// LoginFailuresPerMinute outside 0..1000000, a negative SampleInterval or Samples, an unparsable Listen, or a Listen address that is
// not loopback without Token or BasicAuthUser.
func (c *Config) Validate() error {
	if c.Admin == nil {
		return &config.Error{Package: "console", Field: "Admin", Reason: "an admin client is required"}
	}
	if c.PageSize < 1 || c.PageSize > 1000 {
		return &config.Error{Package: "console", Field: "PageSize", Reason: fmt.Sprintf("%d is outside 1..1000", c.PageSize)}
	}
	if c.LoginFailuresPerMinute < 0 || c.LoginFailuresPerMinute > 1_000_000 {
		return &config.Error{Package: "console", Field: "LoginFailuresPerMinute", Reason: fmt.Sprintf("%d is outside 1..1000000 (0: the default 60)", c.LoginFailuresPerMinute)}
	}
	if c.SampleInterval < 0 || c.Samples < 0 {
		return &config.Error{Package: "console", Field: "SampleInterval", Reason: "SampleInterval and Samples must not be negative"}
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return &config.Error{Package: "console", Field: "Listen", Reason: fmt.Sprintf("%q is not ip:port: %v", c.Listen, err)}
	}
	if c.Token == "" && c.BasicAuthUser == "" && !isLoopback(host) {
		return &config.Error{Package: "console", Field: "Listen", Reason: fmt.Sprintf("%q is not a loopback address: set a token or basic auth to serve it beyond this machine", c.Listen)}
	}
	return validateOutboxes(c.Outboxes)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Console is the web console. Create it with New; serve it with Start (its own
// listener) or mount Handler in a server of yours; Shutdown stops both the listener and
// the metrics sampler.
type Console struct {
	cfg     Config
	log     *slog.Logger
	tmpl    map[string]*template.Template
	csrf    string // per-process CSRF token
	cookie  string // value of the login cookie (an HMAC of the token)
	logins  *loginLimiter
	handler http.Handler
	series  *series

	mu       sync.Mutex
	ln       net.Listener
	srv      *http.Server
	stop     chan struct{}
	wg       sync.WaitGroup
	started  bool
	shutdown bool
}

// New validates cfg and prepares the console (templates parsed, routes set). It starts
// nothing: call Start, or use Handler and StartSampler.
func New(cfg Config) (*Console, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("console: random secret: %w", err)
	}
	mac := func(s string) string {
		h := hmac.New(sha256.New, secret)
		h.Write([]byte(s))
		return hex.EncodeToString(h.Sum(nil))
	}
	c := &Console{cfg: cfg, log: cfg.Logger.With("component", "console"), csrf: mac("csrf"), cookie: mac("login:" + cfg.Token),
		series: newSeries(cfg.Samples), stop: make(chan struct{}), logins: newLoginLimiter(cfg.LoginLockout, cfg.LoginFailuresPerMinute)}
	var err error
	if c.tmpl, err = parseTemplates(); err != nil {
		return nil, err
	}
	c.handler = c.routes()
	return c, nil
}

// Handler returns the console's HTTP handler (authentication, CSRF and read-only checks
// included), to mount in a server of yours.
func (c *Console) Handler() http.Handler { return c.handler }

// Start listens on Config.Listen, serves the console and starts the metrics sampler.
// Errors: the listen error, or a second Start.
func (c *Console) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shutdown {
		return errors.New("console: shut down")
	}
	if c.started {
		return errors.New("console: already started")
	}
	ln, err := net.Listen("tcp", c.cfg.Listen)
	if err != nil {
		return fmt.Errorf("console: listen %s: %w", c.cfg.Listen, err)
	}
	c.started = true
	c.ln = ln
	c.srv = &http.Server{Handler: c.handler, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(c.log.Handler(), slog.LevelWarn)}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := c.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("console listener stopped", "err", err)
		}
	}()
	c.startSamplerLocked()
	return nil
}

// StartSampler starts sampling Config.Metrics for the charts without a listener (when
// Handler is mounted elsewhere). Start does it itself. Idempotent.
func (c *Console) StartSampler() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.shutdown {
		c.startSamplerLocked()
	}
}

func (c *Console) startSamplerLocked() {
	if c.series.running || len(c.cfg.Metrics) == 0 {
		return
	}
	c.series.running = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.sampleLoop()
	}()
}

// Addr returns the address the console listens on (after Start), "" before.
func (c *Console) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ln == nil {
		return ""
	}
	return c.ln.Addr().String()
}

// Shutdown stops the listener (waiting up to ctx for requests in progress, then closing
// them) and the sampler. Idempotent.
func (c *Console) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	if c.shutdown {
		c.mu.Unlock()
		return nil
	}
	c.shutdown = true
	close(c.stop)
	srv := c.srv
	c.mu.Unlock()
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	}
	c.wg.Wait()
	return err
}

// routes builds the handler tree: static files, pages, and the access checks around them.
func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	mux.HandleFunc("GET /{$}", c.page(c.overview))
	mux.HandleFunc("GET /topics", c.page(c.topics))
	mux.HandleFunc("POST /topics", c.mutate(c.createTopic))
	mux.HandleFunc("GET /topics/{topic}", c.page(c.topic))
	mux.HandleFunc("GET /topics/{topic}/delete", c.page(c.confirmDeleteTopic))
	mux.HandleFunc("POST /topics/{topic}/delete", c.mutate(c.deleteTopic))
	mux.HandleFunc("GET /groups", c.page(c.groups))
	mux.HandleFunc("GET /groups/{group}", c.page(c.group))
	mux.HandleFunc("GET /groups/{group}/lag", c.page(c.groupLag))
	mux.HandleFunc("POST /groups/{group}/reset", c.mutate(c.resetOffset))
	mux.HandleFunc("GET /groups/{group}/delete", c.page(c.confirmDeleteGroup))
	mux.HandleFunc("POST /groups/{group}/delete", c.mutate(c.deleteGroup))
	mux.HandleFunc("GET /messages", c.page(c.messages))
	mux.HandleFunc("GET /messages/view", c.page(c.viewMessage))
	mux.HandleFunc("GET /dlq", c.page(c.dlq))
	mux.HandleFunc("POST /dlq/{group}/resend", c.mutate(c.resendDLQ))
	if c.cfg.Parked != nil {
		mux.HandleFunc("GET /parked", c.page(c.parked))
		mux.HandleFunc("POST /parked/resend", c.mutate(c.resendParked))
	}
	c.outboxRoutes(mux)
	mux.HandleFunc("GET /api/series", c.apiSeries)
	mux.HandleFunc("GET /login", c.loginForm)
	mux.HandleFunc("POST /login", c.login)

	var h http.Handler = mux
	h = c.authenticate(h)
	h = http.NewCrossOriginProtection().Handler(h)
	return securityHeaders(h)
}

// cacheStatic lets browsers keep the vendored files (their names carry the version).
func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// securityHeaders sets headers that keep the pages out of frames and scripts to ours.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}

const cookieName = "sluice_console"

// authenticate lets a request through when no credentials are configured and it is
// addressed to a loopback host (Host "localhost" or a loopback IP: any other name means a
// web page whose name was rebound to this machine, answered 421), or when it carries the
// token (bearer header or login cookie) or the basic-auth user. Otherwise a browser page
// request is sent to /login (token mode) or asked for basic auth.
func (c *Console) authenticate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.Token == "" && c.cfg.BasicAuthUser == "" {
			host := r.Host
			if hh, _, err := net.SplitHostPort(host); err == nil {
				host = hh
			} else if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
				host = host[1 : len(host)-1]
			}
			if !isLoopback(host) {
				http.Error(w, "this console without a token answers only requests to a loopback host (localhost, 127.0.0.1, [::1])", http.StatusMisdirectedRequest)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/login" || (len(r.URL.Path) > 8 && r.URL.Path[:8] == "/static/") {
			h.ServeHTTP(w, r)
			return
		}
		_, _, hasBasic := r.BasicAuth()
		presented := r.Header.Get("Authorization") != "" || hasBasic
		if presented {
			if wait := c.logins.lockedOut(r); wait > 0 {
				tooMany(w, wait)
				return
			}
		}
		if c.cfg.Token != "" {
			if auth := r.Header.Get("Authorization"); len(auth) > 7 && auth[:7] == "Bearer " && equal(auth[7:], c.cfg.Token) {
				h.ServeHTTP(w, r)
				return
			}
			if ck, err := r.Cookie(cookieName); err == nil && equal(ck.Value, c.cookie) {
				h.ServeHTTP(w, r)
				return
			}
		}
		if c.cfg.BasicAuthUser != "" {
			if u, p, ok := r.BasicAuth(); ok && equal(u, c.cfg.BasicAuthUser) && equal(p, c.cfg.BasicAuthPassword) {
				h.ServeHTTP(w, r)
				return
			}
		}
		if presented {
			c.logins.failed(r) // wrong bearer token or basic-auth credentials
		}
		if c.cfg.Token != "" && r.Method == http.MethodGet {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		if c.cfg.BasicAuthUser != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="sluice console", charset="UTF-8"`)
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", &view{Title: "Sign in"})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if wait := c.logins.lockedOut(r); wait > 0 {
		tooMany(w, wait)
		return
	}
	if c.cfg.Token == "" || !equal(r.PostFormValue("token"), c.cfg.Token) {
		c.logins.failed(r)
		c.render(w, r, http.StatusUnauthorized, "login", &view{Title: "Sign in", Error: "wrong token"})
		return
	}
	c.logins.succeeded(r)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: c.cookie, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
