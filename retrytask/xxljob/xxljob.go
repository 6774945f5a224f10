// Package xxljob runs the parked-send retry task ([retrytask.Task]) as an XXL-JOB job:
// an XXL-JOB admin triggers it (cron, broadcast sharding) and gets the result back by
// callback. It is built on github.com/xxl-job/xxl-job-executor-go v1.2.0 (the module
// proxy refuses @latest, so the version is pinned) and kept in its own package so that
// library stays out of the core packages' import graph.
//
// # What is contained
//
// The library has defects an embedded executor must not inherit; this package works
// around each of them:
//
//   - NewExecutor panics on a host without a non-loopback IPv4 address (it looks the
//     address up before applying options). The panic is recovered and New returns an
//     error; the address we register is our own ([Config.AdvertiseAddr] or a safe
//     lookup), never the library's.
//   - Executor.Run ignores a busy port and takes over SIGINT/SIGTERM. It is never
//     called: the library's exported handlers (RunTask, KillTask, TaskLog, Beat,
//     IdleBeat) are mounted on our own http.Server, on a listener we open (a busy port
//     is an error from Start), with our own lifecycle ([Executor.Shutdown]).
//   - No access-token check on incoming calls: every endpoint is wrapped by a guard that
//     compares the XXL-JOB-ACCESS-TOKEN header with [Config.AccessToken] in constant
//     time and refuses with HTTP 401 and {"code":500,"msg":"the access token is wrong"}.
//   - Its default logger prints every job's parameters: it gets a logger that passes
//     only the library's format strings, at Debug, to our slog.Logger, never the
//     arguments.
//   - Running one handler concurrently races (the library reuses one Task struct per
//     handler and mutates it per trigger), COVER_EARLY starts a new run beside the old
//     one, and a kill frees the job before its goroutine ends. Here one executor runs
//     one job handler, at most one run at a time (serial execution): a trigger while a
//     run is in progress is refused, whatever its block strategy, until the library has
//     handed over the previous run's callback.
//   - The library's callback always reports success (code 200) unless the handler
//     panicked, and its admin calls have no timeout. The library is pointed at a
//     loopback relay of ours instead of the admin: the relay rewrites the callback with
//     the run's real result (200, or 500 with the error) and forwards it to the admin
//     with our HTTP client ([Config.AdminTimeout]); registration and unregistration are
//     done by this package, with the same client.
//   - The library's Init starts a registry goroutine that never stops. It only ever
//     talks to our relay (answered and ignored, so it never re-registers a stopped
//     executor with the admin); it remains after Shutdown, one per Executor, idle but
//     for a failed loopback POST every 20 s. Tests ignore it by name.
//
// # Protocol
//
// Admin → executor (all POST, JSON, header XXL-JOB-ACCESS-TOKEN): /run (xxl.RunReq:
// jobId, executorHandler, executorParams, executorBlockStrategy, executorTimeout,
// logId, logDateTime, broadcastIndex, broadcastTotal, …), /kill ({"jobId"}), /log
// (xxl.LogReq), /beat, /idleBeat ({"jobId"}); answers {"code":200|500,"msg":…}.
// Executor → admin: /api/registry and /api/registryRemove (xxl.Registry:
// registryGroup "EXECUTOR", registryKey = AppName, registryValue = "http://ip:port"),
// /api/callback ([{logId, logDateTim, executeResult{code,msg}, handleCode,
// handleMsg}]). Registration repeats every RegistryInterval (XXL-JOB's beat: 30 s; the
// admin drops an executor silent for 90 s).
//
// broadcastIndex/broadcastTotal become the run's [retrytask.Shard] (total 0 means 1);
// executorParams are ignored (and never logged); a kill, an executorTimeout or Shutdown
// cancel the run, which stops between records.
package xxljob

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicemq/sluice/config"

	xxl "github.com/xxl-job/xxl-job-executor-go"

	"github.com/sluicemq/sluice/retrytask"
)

// Defaults of Config.
const (
	DefaultListenAddr       = ":9999"
	DefaultAppName          = "sluice-retrytask"
	DefaultJobHandler       = "sluiceRetryTask"
	DefaultAdminTimeout     = 3 * time.Second
	DefaultRegistryInterval = 30 * time.Second
)

// TokenHeader is the HTTP header XXL-JOB uses for the access token, both ways.
const TokenHeader = "XXL-JOB-ACCESS-TOKEN"

// XXL-JOB result codes (ReturnT.SUCCESS_CODE / FAIL_CODE).
const (
	codeSuccess = xxl.SuccessCode // 200
	codeFailure = xxl.FailureCode // 500
)

// maxBody bounds request bodies the executor reads (1 MiB).
const maxBody = 1 << 20

// Errors.
var (
	// ErrClosed is returned by Start after Shutdown.
	ErrClosed = errors.New("xxljob: executor closed")
	// ErrLibraryInit is wrapped when the XXL-JOB library panics while initialising (it
	// does on a host without a non-loopback IPv4 address).
	ErrLibraryInit = errors.New("xxljob: xxl-job-executor-go failed to initialise")
)

// Config configures an Executor. AdminAddrs and Task are required, and AccessToken
// unless AllowNoToken is set.
type Config struct {
	// AdminAddrs are the XXL-JOB admin base URLs, e.g.
	// "http://10.0.0.5:8080/xxl-job-admin". Registration goes to every one; a callback
	// goes to the first that accepts it. Required.
	AdminAddrs []string
	// AccessToken is the shared XXL-JOB access token: sent to the admin and required on
	// every incoming call. Required unless AllowNoToken.
	AccessToken string
	// AllowNoToken permits an empty AccessToken (then incoming calls are not checked).
	// Default: false.
	AllowNoToken bool
	// AppName is the executor's AppName (registry key) as configured in the admin.
	// Default: "sluice-retrytask".
	AppName string
	// JobHandler is the job handler name the admin's job uses (JobHandler field).
	// Default: "sluiceRetryTask".
	JobHandler string
	// ListenAddr is where the executor's HTTP server listens ("host:port"; port 0 picks
	// a free one). Default: ":9999" (XXL-JOB's default executor port).
	ListenAddr string
	// AdvertiseAddr is the "ip:port" registered with the admin, which the admin calls.
	// Default: the listener's address when it listens on one IP, else the first
	// non-loopback IPv4 address of the host with the listener's port (an error from
	// Start when there is none).
	AdvertiseAddr string
	// Task is the retry task a run calls (RunOnce with the run's shard). Required. The
	// executor does not shut it down.
	Task *retrytask.Task
	// AdminTimeout bounds each call to the admin (registry, callback). Default: 3s.
	AdminTimeout time.Duration
	// RegistryInterval is how often the executor registers with the admin. Default: 30s.
	RegistryInterval time.Duration
	// Logger receives the executor's logs (runs, registry failures) and the library's
	// messages at Debug. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.AppName == "" {
		c.AppName = DefaultAppName
	}
	if c.JobHandler == "" {
		c.JobHandler = DefaultJobHandler
	}
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	if c.AdminTimeout == 0 {
		c.AdminTimeout = DefaultAdminTimeout
	}
	if c.RegistryInterval == 0 {
		c.RegistryInterval = DefaultRegistryInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field: no AdminAddrs or one that is not an
// http(s) URL, an empty AccessToken without AllowNoToken, a nil Task, a negative
// AdminTimeout or RegistryInterval, an AdvertiseAddr that is not "ip:port".
func (c *Config) Validate() error {
	if len(c.AdminAddrs) == 0 {
		return &config.Error{Package: "xxljob", Field: "AdminAddrs", Reason: "empty: need the XXL-JOB admin URL"}
	}
	for i, a := range c.AdminAddrs {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &config.Error{Package: "xxljob", Field: fmt.Sprintf("AdminAddrs[%d]", i), Value: a, Reason: "not an http(s) URL"}
		}
	}
	if c.AccessToken == "" && !c.AllowNoToken {
		return &config.Error{Package: "xxljob", Field: "AccessToken", Reason: "empty: set the admin's xxl.job.accessToken (or AllowNoToken to accept unauthenticated calls)"}
	}
	if c.Task == nil {
		return &config.Error{Package: "xxljob", Field: "Task", Reason: "nil: need the retry task to run"}
	}
	if c.AdminTimeout < 0 {
		return &config.Error{Package: "xxljob", Field: "AdminTimeout", Value: c.AdminTimeout, Reason: "must not be negative"}
	}
	if c.RegistryInterval < 0 {
		return &config.Error{Package: "xxljob", Field: "RegistryInterval", Value: c.RegistryInterval, Reason: "must not be negative"}
	}
	if c.AdvertiseAddr != "" {
		host, port, err := net.SplitHostPort(c.AdvertiseAddr)
		if err != nil || net.ParseIP(host) == nil || port == "" {
			return &config.Error{Package: "xxljob", Field: "AdvertiseAddr", Value: c.AdvertiseAddr, Reason: `want "ip:port"`}
		}
	}
	return nil
}

// run is the one run in progress.
type run struct {
	jobID, logID int64
	shard        retrytask.Shard
	started      time.Time
	cancel       context.CancelFunc // set by the job function; nil until it starts
	done         bool               // the job function returned: result is final
	code         int64
	msg          string
	callbackSent chan struct{} // closed when the callback went out (or could not)
}

// Executor is an XXL-JOB executor for one retry task. Create it with New, Start it,
// and Shutdown when done.
type Executor struct {
	cfg  Config
	log  *slog.Logger
	lib  xxl.Executor
	http *http.Client
	tr   *http.Transport

	relayToken string // the library's token towards our relay (not the admin's)

	mu        sync.Mutex
	started   bool
	closed    bool
	cur       *run
	history   []int64 // logIds of recent run summaries (for /log), oldest first
	historyBy map[int64]string
	ln, rln   net.Listener
	srv, rsrv *http.Server
	advertise string
	stopReg   chan struct{}

	wg sync.WaitGroup // serve loops and the registry loop
}

// libNew is the library constructor (a variable so a test can make it panic).
var libNew = xxl.NewExecutor

// New prepares an executor: it creates the library executor (recovering its panic on
// hosts without a non-loopback IPv4 address as an error wrapping ErrLibraryInit) and
// registers the job handler. It opens no port yet. Errors: cfg.Validate's,
// ErrLibraryInit.
func New(cfg Config) (*Executor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	e := &Executor{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "xxljob", "app", cfg.AppName),
		tr:        tr,
		http:      &http.Client{Timeout: cfg.AdminTimeout, Transport: tr},
		historyBy: map[int64]string{},
		stopReg:   make(chan struct{}),
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	e.relayToken = hex.EncodeToString(tok[:])
	return e, nil
}

// newLib creates and initialises the library executor pointed at our relay. The
// library's Init starts its registry goroutine (see the package doc).
func (e *Executor) newLib(relayAddr, advertise string) (lib xxl.Executor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w (it panics on a host without a non-loopback IPv4 address): %v", ErrLibraryInit, r)
		}
	}()
	host, port, _ := net.SplitHostPort(advertise)
	lib = libNew(
		xxl.ServerAddr("http://"+relayAddr),
		xxl.AccessToken(e.relayToken),
		xxl.ExecutorIp(host),
		xxl.ExecutorPort(port),
		xxl.RegistryKey(e.cfg.AppName),
		xxl.SetLogger(libLogger{e.log}),
		func(o *xxl.Options) { o.Timeout = 4 * e.cfg.AdminTimeout }, // the relay forwards with up to 3 tries
	)
	lib.Init()
	lib.LogHandler(e.logHandler)
	lib.RegTask(e.cfg.JobHandler, e.job)
	return lib, nil
}

// Start listens on ListenAddr (a busy port is an error) and on a loopback port for the
// library's relay, initialises the library, serves, and starts registering with the
// admins (at once, then every RegistryInterval). Errors: listen errors, no advertise
// address, ErrLibraryInit, ErrClosed. A second call does nothing.
func (e *Executor) Start() (err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if e.started {
		return nil
	}
	ln, err := net.Listen("tcp", e.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("xxljob: listen on %s: %w", e.cfg.ListenAddr, err)
	}
	rln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("xxljob: listen for the library relay: %w", err)
	}
	defer func() {
		if err != nil {
			_ = ln.Close()
			_ = rln.Close()
		}
	}()
	advertise := e.cfg.AdvertiseAddr
	if advertise == "" {
		if advertise, err = advertiseAddr(ln.Addr().(*net.TCPAddr)); err != nil {
			return err
		}
	}
	// The relay serves before the library starts, so its first registry POST is answered.
	e.rsrv = &http.Server{Handler: e.relayHandler(), ReadHeaderTimeout: 5 * time.Second}
	e.spawn(func() { _ = e.rsrv.Serve(rln) })
	if e.lib, err = e.newLib(rln.Addr().String(), advertise); err != nil {
		_ = e.rsrv.Close()
		return err
	}
	e.srv = &http.Server{Handler: e.publicHandler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}
	e.spawn(func() { _ = e.srv.Serve(ln) })
	e.ln, e.rln, e.advertise = ln, rln, advertise
	e.started = true
	e.spawn(e.registryLoop)
	e.log.Info("xxljob: executor serving", "listen", ln.Addr().String(), "advertise", advertise, "handler", e.cfg.JobHandler)
	return nil
}

func (e *Executor) spawn(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// Addr returns the address the executor listens on ("" before Start).
func (e *Executor) Addr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ln == nil {
		return ""
	}
	return e.ln.Addr().String()
}

// AdvertiseAddr returns the "ip:port" registered with the admin ("" before Start).
func (e *Executor) AdvertiseAddr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.advertise
}

// advertiseAddr picks the address to register: the listener's own IP when specific,
// else the first non-loopback IPv4 address of the host.
func advertiseAddr(a *net.TCPAddr) (string, error) {
	if a.IP != nil && !a.IP.IsUnspecified() {
		return a.String(), nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("xxljob: list interface addresses: %w", err)
	}
	for _, x := range addrs {
		if n, ok := x.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return net.JoinHostPort(n.IP.String(), strconv.Itoa(a.Port)), nil
		}
	}
	return "", errors.New("xxljob: no non-loopback IPv4 address to advertise; set Config.AdvertiseAddr")
}

// ---------------------------------------------------------------------------------
// Incoming calls from the admin.

func (e *Executor) publicHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/run", e.guard(e.handleRun))
	mux.HandleFunc("/kill", e.guard(func(w http.ResponseWriter, r *http.Request) { e.lib.KillTask(w, r) }))
	mux.HandleFunc("/log", e.guard(func(w http.ResponseWriter, r *http.Request) { e.lib.TaskLog(w, r) }))
	mux.HandleFunc("/beat", e.guard(func(w http.ResponseWriter, r *http.Request) { e.lib.Beat(w, r) }))
	mux.HandleFunc("/idleBeat", e.guard(e.handleIdleBeat))
	return mux
}

// guard checks method and access token and bounds the body before h runs.
func (e *Executor) guard(h http.HandlerFunc) http.HandlerFunc {
	want := []byte(e.cfg.AccessToken)
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeResult(w, http.StatusMethodNotAllowed, codeFailure, "only POST is accepted")
			return
		}
		if e.cfg.AccessToken != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(TokenHeader)), want) != 1 {
			e.log.Warn("xxljob: call refused: wrong access token", "path", r.URL.Path, "remote", r.RemoteAddr)
			writeResult(w, http.StatusUnauthorized, codeFailure, "the access token is wrong")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		w.Header().Set("Content-Type", "application/json;charset=UTF-8")
		h(w, r)
	}
}

func writeResult(w http.ResponseWriter, status int, code int64, msg string) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"code": code, "msg": msg})
	_, _ = w.Write(b)
}

// handleRun validates a trigger, enforces one run at a time, and hands it to the
// library, which starts the job function.
func (e *Executor) handleRun(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeResult(w, http.StatusOK, codeFailure, "cannot read the run request: "+err.Error())
		return
	}
	var req xxl.RunReq
	if err := json.Unmarshal(body, &req); err != nil {
		writeResult(w, http.StatusOK, codeFailure, "invalid run request: "+err.Error())
		return
	}
	if req.ExecutorHandler != e.cfg.JobHandler {
		writeResult(w, http.StatusOK, codeFailure, fmt.Sprintf("job handler %q is not registered on this executor (it runs %q)", req.ExecutorHandler, e.cfg.JobHandler))
		return
	}
	shard := retrytask.Shard{Index: int(req.BroadcastIndex), Total: int(req.BroadcastTotal)}
	if shard.Total == 0 {
		shard.Total = 1
	}
	if err := shard.Validate(); err != nil {
		writeResult(w, http.StatusOK, codeFailure, err.Error())
		return
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		writeResult(w, http.StatusOK, codeFailure, "the executor is shutting down")
		return
	case e.cur != nil:
		busy := e.cur
		e.mu.Unlock()
		e.log.Info("xxljob: trigger refused: a run is in progress (serial execution)", "jobId", req.JobID, "logId", req.LogID, "running logId", busy.logID)
		writeResult(w, http.StatusOK, codeFailure, fmt.Sprintf("a run (logId %d) is still in progress; serial execution refuses this trigger", busy.logID))
		return
	}
	cur := &run{jobID: req.JobID, logID: req.LogID, shard: shard, started: time.Now(), callbackSent: make(chan struct{})}
	e.cur = cur
	e.mu.Unlock()

	// The library re-reads the body; capture its answer to learn whether it started.
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := &capture{header: http.Header{}}
	e.lib.RunTask(rec, r)
	var res struct {
		Code int64 `json:"code"`
	}
	if json.Unmarshal(rec.buf.Bytes(), &res) != nil || res.Code != codeSuccess {
		e.release(cur) // not started: no callback will come
	} else {
		e.log.Info("xxljob: run started", "jobId", req.JobID, "logId", req.LogID, "shard", shard.Index, "of", shard.Total)
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	_, _ = w.Write(rec.buf.Bytes())
}

// handleIdleBeat answers busy while our run is in progress (also after a kill, until
// its goroutine has ended), else asks the library.
func (e *Executor) handleIdleBeat(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	busy := e.cur != nil
	e.mu.Unlock()
	if busy {
		writeResult(w, http.StatusOK, codeFailure, "a run is in progress")
		return
	}
	e.lib.IdleBeat(w, r)
}

// job is the library's task function: one RunOnce of the retry task for the run's shard.
func (e *Executor) job(libCtx context.Context, param *xxl.RunReq) (msg string) {
	ctx, cancel := context.WithCancel(libCtx)
	defer cancel()
	e.mu.Lock()
	cur := e.cur
	closing := e.closed
	if cur != nil {
		cur.cancel = cancel
	}
	e.mu.Unlock()
	if cur == nil || cur.logID != param.LogID { // cannot happen: handleRun set it
		return "no run registered for this trigger"
	}
	if closing {
		cancel()
	}
	code, text := int64(codeSuccess), ""
	func() {
		defer func() {
			if r := recover(); r != nil {
				code, text = codeFailure, fmt.Sprintf("run panicked: %v", r)
			}
		}()
		st, err := e.cfg.Task.RunOnce(ctx, cur.shard)
		text = fmt.Sprintf("shard %d/%d: %s", cur.shard.Index, cur.shard.Total, st.String())
		if err != nil {
			code = codeFailure
			if libCtx.Err() != nil && ctx.Err() != nil && !errors.Is(err, retrytask.ErrClosed) {
				text += "; stopped (killed or timed out): " + err.Error()
			} else {
				text += "; error: " + err.Error()
			}
		}
	}()
	e.mu.Lock()
	cur.done, cur.code, cur.msg = true, code, text
	e.mu.Unlock()
	e.log.Info("xxljob: run finished", "jobId", cur.jobID, "logId", cur.logID, "code", code, "result", text, "took", time.Since(cur.started))
	return text
}

// release ends run r: the slot is free for the next trigger.
func (e *Executor) release(r *run) {
	e.mu.Lock()
	if e.cur == r {
		e.cur = nil
	}
	e.mu.Unlock()
	select {
	case <-r.callbackSent:
	default:
		close(r.callbackSent)
	}
}

// logHandler answers the admin's /log with the run's summary.
func (e *Executor) logHandler(req *xxl.LogReq) *xxl.LogRes {
	e.mu.Lock()
	text, ok := e.historyBy[req.LogID]
	e.mu.Unlock()
	if !ok {
		text = "no result recorded for this logId on this executor (still running, or too old)"
	}
	return &xxl.LogRes{Code: codeSuccess, Content: xxl.LogResContent{
		FromLineNum: req.FromLineNum, ToLineNum: req.FromLineNum + 1, LogContent: text, IsEnd: true}}
}

func (e *Executor) remember(logID int64, text string) {
	const keep = 128
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.historyBy[logID]; !ok {
		e.history = append(e.history, logID)
	}
	e.historyBy[logID] = text
	if len(e.history) > keep {
		delete(e.historyBy, e.history[0])
		e.history = e.history[1:]
	}
}

// ---------------------------------------------------------------------------------
// The relay: the library's "admin" on loopback.

// callbackItem is one element of an XXL-JOB callback body (the library's type is
// unexported; the field names are the admin API's).
type callbackItem struct {
	LogID         int64 `json:"logId"`
	LogDateTim    int64 `json:"logDateTim"`
	ExecuteResult struct {
		Code int64 `json:"code"`
		Msg  any   `json:"msg"`
	} `json:"executeResult"`
	HandleCode int    `json:"handleCode"`
	HandleMsg  string `json:"handleMsg"`
}

func (e *Executor) relayHandler() http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter) { writeResult(w, http.StatusOK, codeSuccess, "") }
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get(TokenHeader)), []byte(e.relayToken)) != 1 {
				writeResult(w, http.StatusUnauthorized, codeFailure, "the access token is wrong")
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
			h(w, r)
		}
	}
	// Registration is ours (registryLoop); the library's own loop is answered and ignored.
	mux.HandleFunc("/api/registry", auth(func(w http.ResponseWriter, r *http.Request) { ok(w) }))
	mux.HandleFunc("/api/registryRemove", auth(func(w http.ResponseWriter, r *http.Request) { ok(w) }))
	mux.HandleFunc("/api/callback", auth(e.relayCallback))
	return mux
}

// relayCallback receives the library's callback (sent after the job function returned
// and the library forgot the run), puts the real result in, forwards it to the admin
// and frees the run slot.
func (e *Executor) relayCallback(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var items []callbackItem
	if err == nil {
		err = json.Unmarshal(body, &items)
	}
	if err != nil {
		writeResult(w, http.StatusOK, codeFailure, "invalid callback: "+err.Error())
		return
	}
	e.mu.Lock()
	cur := e.cur
	e.mu.Unlock()
	for i := range items {
		it := &items[i]
		if cur != nil && cur.done && it.LogID == cur.logID {
			it.ExecuteResult.Code, it.ExecuteResult.Msg = cur.code, cur.msg
			it.HandleCode, it.HandleMsg = int(cur.code), cur.msg
		}
		e.remember(it.LogID, fmt.Sprintf("code %d: %s", it.HandleCode, it.HandleMsg))
	}
	// The library has finished with the run (its callback body is in hand): free the run
	// slot before the admin hears of the result, so a trigger the admin sends as soon as
	// it gets the callback is not refused as "still in progress".
	if cur != nil {
		for _, it := range items {
			if it.LogID == cur.logID {
				e.release(cur)
				break
			}
		}
	}
	out, _ := json.Marshal(items)
	ferr := e.callback(r.Context(), out)
	if ferr != nil {
		e.log.Error("xxljob: callback to the admin failed; the admin will show this run as unfinished", "err", ferr)
	}
	if ferr != nil {
		writeResult(w, http.StatusOK, codeFailure, ferr.Error())
		return
	}
	writeResult(w, http.StatusOK, codeSuccess, "")
}

// callback forwards a callback body to the first admin that accepts it, up to 3 rounds.
func (e *Executor) callback(ctx context.Context, body []byte) error {
	var errs []error
	for round := 0; round < 3; round++ {
		for _, admin := range e.cfg.AdminAddrs {
			err := e.post(ctx, admin, "/api/callback", body)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
		t := time.NewTimer(time.Duration(round+1) * 200 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return errors.Join(errs...)
}

// post sends body to admin+path with the access token and checks the admin's
// {"code":200} answer.
func (e *Executor) post(ctx context.Context, admin, path string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(admin, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json;charset=UTF-8")
	req.Header.Set(TokenHeader, e.cfg.AccessToken)
	resp, err := e.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s%s: %w", admin, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%s%s: read answer: %w", admin, path, err)
	}
	var res struct {
		Code int64 `json:"code"`
		Msg  any   `json:"msg"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &res) != nil || res.Code != codeSuccess {
		return fmt.Errorf("%s%s: admin answered HTTP %d: %.200s", admin, path, resp.StatusCode, b)
	}
	return nil
}

// ---------------------------------------------------------------------------------
// Registration.

func (e *Executor) registryBody() []byte {
	b, _ := json.Marshal(xxl.Registry{RegistryGroup: "EXECUTOR", RegistryKey: e.cfg.AppName, RegistryValue: "http://" + e.advertise})
	return b
}

func (e *Executor) registryLoop() {
	body := e.registryBody()
	t := time.NewTimer(0)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-e.stopReg:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.AdminTimeout)
		var errs []error
		for _, admin := range e.cfg.AdminAddrs {
			if err := e.post(ctx, admin, "/api/registry", body); err != nil {
				errs = append(errs, err)
			}
		}
		cancel()
		switch {
		case len(errs) > 0:
			e.log.Warn("xxljob: registry failed", "err", errors.Join(errs...))
			failing = true
		case failing:
			e.log.Info("xxljob: registry succeeded again")
			failing = false
		}
		t.Reset(e.cfg.RegistryInterval)
	}
}

// Shutdown stops the executor: new triggers are refused, the run in progress is
// cancelled (it stops between records) and its callback is sent, the executor
// unregisters from every admin (/api/registryRemove), and both HTTP servers stop, all
// bounded by ctx. It does not shut down the retry task. It returns the failures joined
// (ctx's error when the run or the servers did not finish in time). Idempotent.
//
// Stop order: refuse triggers → cancel the run → wait for its callback → stop
// registering → unregister → stop the public server → stop the relay.
func (e *Executor) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	started := e.started
	cur := e.cur
	if cur != nil && cur.cancel != nil {
		cur.cancel()
	}
	e.mu.Unlock()
	if !started {
		e.tr.CloseIdleConnections()
		return nil
	}
	var errs []error
	if cur != nil {
		select {
		case <-cur.callbackSent:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("xxljob: run logId %d still in progress at shutdown: %w", cur.logID, ctx.Err()))
		}
	}
	close(e.stopReg)
	body := e.registryBody()
	for _, admin := range e.cfg.AdminAddrs {
		rctx, cancel := context.WithTimeout(ctx, e.cfg.AdminTimeout)
		if err := e.post(rctx, admin, "/api/registryRemove", body); err != nil {
			errs = append(errs, fmt.Errorf("xxljob: unregister: %w", err))
		}
		cancel()
	}
	if err := e.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("xxljob: stop server: %w", err))
		_ = e.srv.Close()
	}
	if err := e.rsrv.Shutdown(ctx); err != nil {
		_ = e.rsrv.Close()
	}
	e.wg.Wait()
	e.tr.CloseIdleConnections()
	e.log.Info("xxljob: executor stopped")
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------------

// libLogger gives the library a quiet logger, at Debug: only the fixed text of its
// messages, cut before the first ':' or '%', because the rest (arguments, and text the
// library concatenates into the format) carries job parameters and request bodies.
type libLogger struct{ l *slog.Logger }

func (l libLogger) Info(format string, _ ...any) { l.l.Debug("xxl-job library", "msg", clip(format)) }
func (l libLogger) Error(format string, _ ...any) {
	l.l.Debug("xxl-job library error", "msg", clip(format))
}

func clip(s string) string {
	if i := strings.IndexAny(s, ":%"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// capture is a minimal http.ResponseWriter that keeps the library's answer.
type capture struct {
	header http.Header
	status int
	buf    bytes.Buffer
}

func (c *capture) Header() http.Header         { return c.header }
func (c *capture) Write(b []byte) (int, error) { return c.buf.Write(b) }
func (c *capture) WriteHeader(status int)      { c.status = status }
