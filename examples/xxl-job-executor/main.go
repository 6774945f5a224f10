// Command xxl-job-executor runs the parked-send retry task as an XXL-JOB executor
// (package retrytask/xxljob).
//
// With --admin it serves a real XXL-JOB admin until SIGINT/SIGTERM: create a job with
// JobHandler "sluiceRetryTask" (route strategy "sharding broadcast" to split the parked
// records between executors) for AppName --app, and set the same access token:
//
//	go run ./examples/xxl-job-executor --admin http://127.0.0.1:8080/xxl-job-admin \
//	    --token mytoken --listen :9999 --redis 127.0.0.1:6379 --namesrv 127.0.0.1:9876
//
// Without --admin it is a self-contained demo: an embedded Sluice broker, an embedded
// miniredis (unless --redis), a few parked sends, and a small in-process stand-in for the
// admin that waits for the executor's registration, triggers one run, prints the
// callback, and then stops everything through package lifecycle.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/lifecycle"
	"github.com/sluicemq/sluice/message"
	"github.com/sluicemq/sluice/middleware"
	"github.com/sluicemq/sluice/middleware/redismw"
	"github.com/sluicemq/sluice/producer"
	"github.com/sluicemq/sluice/retrytask"
	"github.com/sluicemq/sluice/retrytask/xxljob"
)

func main() {
	admin := flag.String("admin", "", "XXL-JOB admin URL (default: run the self-contained demo)")
	token := flag.String("token", "demo-token", "XXL-JOB access token")
	app := flag.String("app", "sluice-retrytask", "executor AppName")
	listen := flag.String("listen", "", "executor listen address (default :9999 with --admin, 127.0.0.1:0 in the demo)")
	redisAddr := flag.String("redis", "", "Redis address host:port (default: an embedded miniredis)")
	namesrv := flag.String("namesrv", "", "name server host:port (default: an embedded Sluice broker)")
	namespace := flag.String("namespace", "default", "park namespace (as redismw.Park writes it)")
	flag.Parse()
	if err := run(*admin, *token, *app, *listen, *redisAddr, *namesrv, *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "xxl-job-executor:", err)
		os.Exit(1)
	}
}

func run(adminURL, token, app, listen, redisAddr, namesrv, namespace string) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	demo := adminURL == ""
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		redisAddr = mr.Addr()
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	if namesrv == "" {
		dir, err := os.MkdirTemp("", "sluice-xxl-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b, err := broker.New(broker.Config{ListenAddr: "127.0.0.1:0", NamesrvListenAddr: "127.0.0.1:0", StorePathRootDir: dir, Logger: log})
		if err != nil {
			return err
		}
		if err := b.Start(); err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = b.Shutdown(ctx)
		}()
		namesrv = b.NamesrvAddr()
	}
	// The retry task resends through a middleware.SendFunc: any engine's producer fits
	// (transport.Producer's SendFunc; a kafka.Producer's as well).
	p, err := producer.New(producer.Config{NamesrvAddrs: []string{namesrv}, Logger: log})
	if err != nil {
		return err
	}
	if err := p.Start(context.Background()); err != nil {
		return err
	}
	minAge := time.Duration(0) // default 1 min
	if demo {
		minAge = -1 // the demo resends at once
	}
	task, err := retrytask.New(retrytask.Config{Client: rdb, Namespace: namespace, Send: p.SendFunc(), MinAge: minAge, Logger: log})
	if err != nil {
		return err
	}

	var fake *fakeAdmin
	if demo {
		if fake, err = startFakeAdmin(token); err != nil {
			return err
		}
		defer fake.close()
		adminURL = fake.url
		if listen == "" {
			listen = "127.0.0.1:0"
		}
		if err := parkSome(rdb, namespace, 6, log); err != nil {
			return err
		}
	}
	ex, err := xxljob.New(xxljob.Config{AdminAddrs: []string{adminURL}, AccessToken: token, AppName: app,
		ListenAddr: listen, Task: task, Logger: log})
	if err != nil {
		return err
	}
	if err := ex.Start(); err != nil {
		return err
	}
	fmt.Printf("executor %q serving on %s (registered as http://%s)\n", app, ex.Addr(), ex.AdvertiseAddr())

	g, err := lifecycle.New(lifecycle.Config{Logger: log})
	if err != nil {
		return err
	}
	_ = g.AddRetryTask("retry-task", task)
	_ = g.AddProducer("producer", p)
	_ = g.AddExecutor("xxl-executor", ex)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	demoErr := make(chan error, 1)
	if demo {
		go func() { defer cancel(); demoErr <- fake.script(ctx, ex.AdvertiseAddr(), token) }()
	} else {
		demoErr <- nil
	}
	shutdownErr := g.Run(ctx) // demo end or SIGINT/SIGTERM
	return errors.Join(<-demoErr, shutdownErr)
}

// parkSome parks n sends as redismw.Park does after a failed send.
func parkSome(rdb redis.UniversalClient, namespace string, n int, log *slog.Logger) error {
	parker, err := redismw.NewParker(redismw.ParkConfig{Client: rdb, Namespace: namespace, Logger: log})
	if err != nil {
		return err
	}
	defer parker.Close()
	for i := 0; i < n; i++ {
		m := message.NewMessage("Orders", []byte("order #"+strconv.Itoa(i))).SetTag("Created")
		if err := parker.Park(context.Background(), m, errors.New("broker unreachable (demo)")); !errors.Is(err, middleware.ErrParked) {
			return fmt.Errorf("park: %v", err)
		}
	}
	fmt.Printf("parked %d sends\n", n)
	return nil
}

// fakeAdmin stands in for the XXL-JOB admin in the demo: it accepts registrations and
// callbacks (checking the token) and triggers runs.
type fakeAdmin struct {
	token string
	url   string
	srv   *http.Server
	done  chan struct{}

	mu         sync.Mutex
	registered bool
	callbacks  []json.RawMessage
}

func startFakeAdmin(token string) (*fakeAdmin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &fakeAdmin{token: token, url: "http://" + ln.Addr().String() + "/xxl-job-admin", done: make(chan struct{})}
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { defer close(a.done); _ = a.srv.Serve(ln) }()
	return a, nil
}

func (a *fakeAdmin) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	<-a.done
}

func (a *fakeAdmin) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if r.Header.Get(xxljob.TokenHeader) != a.token {
		_, _ = w.Write([]byte(`{"code":500,"msg":"The access token is wrong."}`))
		return
	}
	a.mu.Lock()
	switch r.URL.Path {
	case "/xxl-job-admin/api/registry":
		a.registered = true
	case "/xxl-job-admin/api/callback":
		a.callbacks = append(a.callbacks, body)
	}
	a.mu.Unlock()
	_, _ = w.Write([]byte(`{"code":200,"msg":null}`))
}

// script waits for the registration, triggers one broadcast run (shard 0 of 1), and
// prints its callback.
func (a *fakeAdmin) script(ctx context.Context, executor, token string) error {
	if err := a.wait(ctx, func() bool { return a.registered }); err != nil {
		return fmt.Errorf("waiting for the registration: %w", err)
	}
	fmt.Println("admin: executor registered; triggering a run")
	req, _ := json.Marshal(map[string]any{"jobId": 1, "executorHandler": xxljob.DefaultJobHandler,
		"executorBlockStrategy": "SERIAL_EXECUTION", "logId": 1001, "logDateTime": time.Now().UnixMilli(),
		"broadcastIndex": 0, "broadcastTotal": 1})
	hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+executor+"/run", bytes.NewReader(req))
	hr.Header.Set(xxljob.TokenHeader, token)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return err
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("admin: /run answered %s\n", answer)
	if err := a.wait(ctx, func() bool { return len(a.callbacks) > 0 }); err != nil {
		return fmt.Errorf("waiting for the callback: %w", err)
	}
	a.mu.Lock()
	fmt.Printf("admin: callback %s\n", a.callbacks[0])
	a.mu.Unlock()
	return nil
}

func (a *fakeAdmin) wait(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		a.mu.Lock()
		ok := cond()
		a.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
