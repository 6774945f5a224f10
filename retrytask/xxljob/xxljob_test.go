package xxljob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/config"

	"github.com/redis/go-redis/v9"
	xxl "github.com/xxl-job/xxl-job-executor-go"
	"go.uber.org/goleak"

	"github.com/sluicemq/sluice/internal/redistest"
	"github.com/sluicemq/sluice/internal/testkit"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/retrytask"
)

// The XXL-JOB library's Init starts (*executor).registry, a loop with no way to stop
// it; it only ever POSTs to our stopped loopback relay (see the package doc). It is the
// one goroutine allowed to outlive Shutdown.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childNoIPv4())
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/xxl-job/xxl-job-executor-go.(*executor).registry"))
}

const token = "s3cret-token"

// fakeAdmin speaks the XXL-JOB admin API an executor calls: /api/registry,
// /api/registryRemove and /api/callback, each checking the access token.
type fakeAdmin struct {
	srv *httptest.Server

	mu        sync.Mutex
	registry  []xxl.Registry
	removed   []xxl.Registry
	callbacks []callbackItem
	badToken  int
}

func newFakeAdmin(t *testing.T) *fakeAdmin {
	a := &fakeAdmin{}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAdmin) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Header.Get(TokenHeader) != token {
		a.badToken++
		_, _ = w.Write([]byte(`{"code":500,"msg":"The access token is wrong."}`))
		return
	}
	var err error
	switch r.URL.Path {
	case "/xxl-job-admin/api/registry", "/xxl-job-admin/api/registryRemove":
		var reg xxl.Registry
		if err = json.Unmarshal(body, &reg); err == nil {
			if strings.HasSuffix(r.URL.Path, "Remove") {
				a.removed = append(a.removed, reg)
			} else {
				a.registry = append(a.registry, reg)
			}
		}
	case "/xxl-job-admin/api/callback":
		var items []callbackItem
		if err = json.Unmarshal(body, &items); err == nil {
			a.callbacks = append(a.callbacks, items...)
		}
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		_, _ = fmt.Fprintf(w, `{"code":500,"msg":%q}`, err.Error())
		return
	}
	_, _ = w.Write([]byte(`{"code":200,"msg":null}`))
}

func (a *fakeAdmin) url() string { return a.srv.URL + "/xxl-job-admin" }

func (a *fakeAdmin) callback(logID int64) (callbackItem, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.callbacks {
		if c.LogID == logID {
			return c, true
		}
	}
	return callbackItem{}, false
}

func (a *fakeAdmin) counts() (reg, removed, bad int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.registry), len(a.removed), a.badToken
}

// call POSTs body to the executor's path with tok and decodes {"code","msg"}.
func call(t *testing.T, addr, path, tok string, body any) (int, int64, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(b))
	if tok != "" {
		req.Header.Set(TokenHeader, tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var res struct {
		Code    int64           `json:"code"`
		Msg     any             `json:"msg"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("%s answered %q: %v", path, raw, err)
	}
	msg := fmt.Sprint(res.Msg)
	if len(res.Content) > 0 {
		msg += string(res.Content)
	}
	return resp.StatusCode, res.Code, msg
}

// gatedSend records successful sends by record id (property rid) and can block sends.
type gatedSend struct {
	mu      sync.Mutex
	sent    map[string]int
	gate    chan struct{} // when non-nil, sends wait for it
	inSend  chan struct{}
	blocked bool
}

func (g *gatedSend) Send(ctx context.Context, m *message.Message) (*message.SendResult, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.inSend <- struct{}{}
		<-gate
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sent[m.Property("rid")]++
	return &message.SendResult{Status: message.SendOK}, nil
}

func (g *gatedSend) snapshot() map[string]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]int{}
	for k, v := range g.sent {
		out[k] = v
	}
	return out
}

// parkN parks n records and returns their ids.
func parkN(t *testing.T, c redis.UniversalClient, ns string, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		m := message.NewMessage("Orders", []byte("o"+strconv.Itoa(i)))
		r := redismw.NewParkedRecord(m, errors.New("broker down"), time.Now(), nil)
		r.Properties = map[string]string{"rid": r.ID}
		b, _ := json.Marshal(r)
		if err := c.RPush(context.Background(), redismw.NewParkKeys(ns).Pending, b).Err(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// The XXL path end to end against an httptest admin: registry, wrong token refused,
// a trigger with sharding 1/3 resends exactly shard 1's records and the callback
// carries the result, a second trigger during a run is refused (serial execution),
// kill cancels the run (callback with failure), /log returns the summary, Shutdown
// unregisters.
func TestExecutorAgainstAdmin(t *testing.T) {
	redistest.Each(t, func(t *testing.T, c redis.UniversalClient) {
		ns := redistest.NS(t)
		admin := newFakeAdmin(t)
		gs := &gatedSend{sent: map[string]int{}, inSend: make(chan struct{}, 10)}
		task, err := retrytask.New(retrytask.Config{Client: c, Namespace: ns, Send: gs.Send, MinAge: -1, Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = task.Shutdown(context.Background()) }()
		ids := parkN(t, c, ns, 60)

		ex, err := New(Config{AdminAddrs: []string{admin.url()}, AccessToken: token, AppName: "orders-retry",
			ListenAddr: "127.0.0.1:0", Task: task, RegistryInterval: 50 * time.Millisecond, Logger: testkit.Quiet()})
		if err != nil {
			t.Fatal(err)
		}
		if err := ex.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = ex.Shutdown(context.Background()) }()
		addr := ex.Addr()

		// Registry, repeated.
		testkit.WaitFor(t, 10*time.Second, func() bool { n, _, _ := admin.counts(); return n >= 2 }, "two registrations")
		admin.mu.Lock()
		reg := admin.registry[0]
		admin.mu.Unlock()
		if reg.RegistryGroup != "EXECUTOR" || reg.RegistryKey != "orders-retry" || reg.RegistryValue != "http://"+addr {
			t.Fatalf("registry %+v", reg)
		}

		// Wrong or missing token: refused, nothing runs.
		for _, tok := range []string{"", "wrong"} {
			for _, path := range []string{"/run", "/kill", "/beat", "/idleBeat", "/log"} {
				status, code, msg := call(t, addr, path, tok, map[string]any{"jobId": 1, "executorHandler": DefaultJobHandler})
				if status != http.StatusUnauthorized || code != 500 || !strings.Contains(msg, "token") {
					t.Fatalf("%s with token %q: HTTP %d code %d %q", path, tok, status, code, msg)
				}
			}
		}
		if status, code, _ := call(t, addr, "/beat", token, map[string]any{}); status != 200 || code != 200 {
			t.Fatalf("beat: %d %d", status, code)
		}

		// Trigger with sharding 1/3.
		shard1 := retrytask.Shard{Index: 1, Total: 3}
		want := 0
		for _, id := range ids {
			if shard1.Owns(id) {
				want++
			}
		}
		runReq := func(logID, index, total int64) map[string]any {
			return map[string]any{"jobId": 7, "executorHandler": DefaultJobHandler, "executorParams": "secret=do-not-log",
				"executorBlockStrategy": "SERIAL_EXECUTION", "logId": logID, "logDateTime": time.Now().UnixMilli(),
				"glueType": "BEAN", "broadcastIndex": index, "broadcastTotal": total}
		}
		if _, code, msg := call(t, addr, "/run", token, runReq(101, 1, 3)); code != 200 {
			t.Fatalf("run: %d %s", code, msg)
		}
		var cb callbackItem
		testkit.WaitFor(t, 10*time.Second, func() bool { var ok bool; cb, ok = admin.callback(101); return ok }, "callback for logId 101")
		if cb.HandleCode != 200 || cb.ExecuteResult.Code != 200 || !strings.Contains(cb.HandleMsg, fmt.Sprintf("sent=%d ", want)) ||
			!strings.Contains(cb.HandleMsg, "shard 1/3") {
			t.Fatalf("callback %+v, want success with sent=%d", cb, want)
		}
		sent := gs.snapshot()
		if len(sent) != want {
			t.Fatalf("sent %d records, want %d", len(sent), want)
		}
		for id, n := range sent {
			if !shard1.Owns(id) || n != 1 {
				t.Fatalf("record %s (shard 1 owns it: %v) sent %d times", id, shard1.Owns(id), n)
			}
		}
		if _, code, msg := call(t, addr, "/log", token, map[string]any{"logId": 101, "logDateTim": 0, "fromLineNum": 1}); code != 200 || !strings.Contains(msg, "sent=") {
			t.Fatalf("log: %d %s", code, msg)
		}

		// A run of shard 0/3 whose first send hangs: a second trigger is refused, the
		// executor is busy, and a kill cancels the run.
		gs.mu.Lock()
		gs.gate = make(chan struct{})
		gs.mu.Unlock()
		if _, code, msg := call(t, addr, "/run", token, runReq(102, 0, 3)); code != 200 {
			t.Fatalf("run 102: %d %s", code, msg)
		}
		<-gs.inSend
		if _, code, msg := call(t, addr, "/run", token, runReq(103, 2, 3)); code != 500 || !strings.Contains(msg, "in progress") {
			t.Fatalf("concurrent trigger: %d %s, want refused", code, msg)
		}
		if _, code, _ := call(t, addr, "/idleBeat", token, map[string]any{"jobId": 7}); code != 500 {
			t.Fatalf("idleBeat during a run: %d, want busy", code)
		}
		if _, code, msg := call(t, addr, "/kill", token, map[string]any{"jobId": 7}); code != 200 {
			t.Fatalf("kill: %d %s", code, msg)
		}
		gs.mu.Lock()
		close(gs.gate) // the send in flight finishes; the run stops before the next record
		gs.gate = nil
		gs.mu.Unlock()
		testkit.WaitFor(t, 10*time.Second, func() bool { var ok bool; cb, ok = admin.callback(102); return ok }, "callback for logId 102")
		if cb.HandleCode != 500 || !strings.Contains(cb.HandleMsg, "sent=1 ") || !strings.Contains(cb.HandleMsg, "context canceled") {
			t.Fatalf("callback after kill %+v, want a failure after one send", cb)
		}
		if _, ok := admin.callback(103); ok {
			t.Fatal("the refused trigger 103 got a callback")
		}
		if _, code, _ := call(t, addr, "/idleBeat", token, map[string]any{"jobId": 7}); code != 200 {
			t.Fatalf("idleBeat after the run: %d, want idle", code)
		}

		// An unknown handler and a bad shard are refused without a run.
		bad := runReq(104, 0, 1)
		bad["executorHandler"] = "other"
		if _, code, _ := call(t, addr, "/run", token, bad); code != 500 {
			t.Fatalf("unknown handler accepted")
		}
		if _, code, _ := call(t, addr, "/run", token, runReq(105, 3, 3)); code != 500 {
			t.Fatalf("shard 3/3 accepted")
		}

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := ex.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if _, removed, bad := admin.counts(); removed != 1 || bad != 0 {
			t.Fatalf("after Shutdown: %d unregistrations, %d calls with a bad token", removed, bad)
		}
		if err := ex.Start(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Start after Shutdown: %v", err)
		}
	})
}

// Shutdown during a run cancels it and still sends its callback.
func TestShutdownCancelsRun(t *testing.T) {
	c := redistest.New(t)
	ns := redistest.NS(t)
	admin := newFakeAdmin(t)
	gs := &gatedSend{sent: map[string]int{}, inSend: make(chan struct{}, 10), gate: make(chan struct{})}
	task, err := retrytask.New(retrytask.Config{Client: c, Namespace: ns, Send: gs.Send, MinAge: -1, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = task.Shutdown(context.Background()) }()
	parkN(t, c, ns, 5)
	ex, err := New(Config{AdminAddrs: []string{admin.url()}, AccessToken: token, ListenAddr: "127.0.0.1:0", Task: task, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(); err != nil {
		t.Fatal(err)
	}
	if _, code, msg := call(t, ex.Addr(), "/run", token, map[string]any{"jobId": 1, "executorHandler": DefaultJobHandler, "logId": 9}); code != 200 {
		t.Fatalf("run: %d %s", code, msg)
	}
	<-gs.inSend
	go func() {
		// Release the send once Shutdown has cancelled the run.
		testkit.WaitFor(t, 10*time.Second, func() bool {
			ex.mu.Lock()
			defer ex.mu.Unlock()
			return ex.closed
		}, "shutdown started")
		close(gs.gate)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ex.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cb, ok := admin.callback(9)
	if !ok || cb.HandleCode != 500 || !strings.Contains(cb.HandleMsg, "sent=1 ") {
		t.Fatalf("callback %+v (found %v), want a cancelled run after one send", cb, ok)
	}
}

func TestConfigValidate(t *testing.T) {
	task, err := retrytask.New(retrytask.Config{Client: redistest.New(t), Send: (&gatedSend{}).Send})
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		cfg   Config
		field string
	}{
		{Config{AccessToken: token, Task: task}, "AdminAddrs"},
		{Config{AdminAddrs: []string{"ftp://x"}, AccessToken: token, Task: task}, "AdminAddrs[0]"},
		{Config{AdminAddrs: []string{"http://x"}, Task: task}, "AccessToken"},
		{Config{AdminAddrs: []string{"http://x"}, AccessToken: token}, "Task"},
		{Config{AdminAddrs: []string{"http://x"}, AccessToken: token, Task: task, AdvertiseAddr: "host-without-port"}, "AdvertiseAddr"},
	}
	for i, c := range bad {
		var ce *config.Error
		if _, err := New(c.cfg); !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("config %d: %v, want a *config.Error naming %s", i, err, c.field)
		}
	}
	if _, err := New(Config{AdminAddrs: []string{"http://x"}, Task: task, AllowNoToken: true}); err != nil {
		t.Errorf("AllowNoToken: %v", err)
	}
}

// A busy port is an error from Start (the library's Run would ignore it).
func TestBusyPort(t *testing.T) {
	task, _ := retrytask.New(retrytask.Config{Client: redistest.New(t), Send: (&gatedSend{}).Send})
	admin := newFakeAdmin(t)
	first, _ := New(Config{AdminAddrs: []string{admin.url()}, AccessToken: token, ListenAddr: "127.0.0.1:0", Task: task, Logger: testkit.Quiet()})
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Shutdown(context.Background()) }()
	second, _ := New(Config{AdminAddrs: []string{admin.url()}, AccessToken: token, ListenAddr: first.Addr(), Task: task, Logger: testkit.Quiet()})
	if err := second.Start(); err == nil {
		t.Fatal("Start on a busy port succeeded")
	}
	_ = second.Shutdown(context.Background())
}

// The library panics while initialising on a host without a non-loopback IPv4 address;
// Start returns an error wrapping ErrLibraryInit instead.
func TestLibraryPanicBecomesError(t *testing.T) {
	old := libNew
	libNew = func(...xxl.Option) xxl.Executor { panic("runtime error: index out of range [0] with length 0") }
	defer func() { libNew = old }()
	task, _ := retrytask.New(retrytask.Config{Client: redistest.New(t), Send: (&gatedSend{}).Send})
	ex, err := New(Config{AdminAddrs: []string{"http://127.0.0.1:1"}, AccessToken: token, ListenAddr: "127.0.0.1:0", Task: task, Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(); !errors.Is(err, ErrLibraryInit) {
		t.Fatalf("Start: %v, want ErrLibraryInit", err)
	}
	_ = ex.Shutdown(context.Background())
}

const childEnv = "SLUICE_XXLJOB_NOIPV4_CHILD"

// The same on a real host without a non-loopback IPv4 address: this test binary runs
// again in a fresh network namespace that has only loopback (unshare -n, needs root).
func TestNoIPv4HostInNamespace(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not available")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip not available")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-n", "sh", "-c", `ip link set lo up && exec "$0" -test.run=^$`, os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "unshare failed") {
		t.Skipf("cannot create a network namespace here: %s", out)
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ErrLibraryInit as expected") {
		t.Fatalf("child output:\n%s", out)
	}
}

// childNoIPv4 runs inside the namespace: Start must fail with ErrLibraryInit.
func childNoIPv4() int {
	gs := &gatedSend{}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never used
	defer c.Close()
	task, err := retrytask.New(retrytask.Config{Client: c, Send: gs.Send})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ex, err := New(Config{AdminAddrs: []string{"http://127.0.0.1:1"}, AccessToken: token, ListenAddr: "127.0.0.1:0",
		AdvertiseAddr: "127.0.0.1:9999", Task: task, Logger: testkit.Quiet()})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	err = ex.Start()
	_ = ex.Shutdown(context.Background())
	if !errors.Is(err, ErrLibraryInit) {
		fmt.Println("Start:", err)
		return 1
	}
	fmt.Println("ErrLibraryInit as expected:", err)
	return 0
}
