// Package redistest gives tests a Redis to talk to: an embedded miniredis
// (github.com/alicebob/miniredis/v2) always, and a real Redis when the environment variable
// SLUICE_REDIS_ADDR ("host:port") is set.
//
// [Each] runs a subtest once per available target ("miniredis", then "redis"). A real
// Redis may be shared (CI, other engineers' tests): nothing here ever runs FLUSHALL or
// FLUSHDB. Instead every subtest gets a namespace ([NS]) that is unique per process and
// per test; tests put it into every key they write (key prefixes, park namespaces), and
// the subtest's cleanup deletes the keys whose names contain it (SCAN MATCH + DEL).
//
// miniredis does not expire keys on its own (TTLs only move with FastForward); the
// servers started here run a small clock goroutine that fast-forwards miniredis by the
// real time elapsed every few milliseconds, so lock expiry and marker TTLs behave as on a
// real Redis. The goroutine stops in the test's cleanup.
//
// Outages: [Unreachable] returns a client pointed at a closed port; [Target.Outage]
// returns a client that talks through a TCP relay which can be cut ([Switch.Down]) and
// restored ([Switch.Up]) on the same address, which works against both targets without
// stopping a shared Redis.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// EnvAddr is the environment variable naming a real Redis ("host:port") for [Each].
const EnvAddr = "SLUICE_REDIS_ADDR"

// Target is one Redis a subtest runs against.
type Target struct {
	// Name is "miniredis" or "redis" (the real one), also the subtest name.
	Name string
	// Addr is the server's "host:port".
	Addr string
	// Client is a client to Addr, closed in the subtest's cleanup. Never close it yourself.
	Client redis.UniversalClient
	// NS is the subtest's namespace (see [NS]); put it into every key you write.
	NS string
	// Mini is the embedded server for the "miniredis" target, nil for a real Redis.
	Mini *miniredis.Miniredis
}

// Each runs fn as a subtest against miniredis and, when SLUICE_REDIS_ADDR is set, again
// against that real Redis. fn gets the subtest's t and a client; use [NS](t) inside fn for
// key prefixes. A real Redis that does not answer PING fails the subtest (it was asked
// for explicitly).
func Each(t *testing.T, fn func(t *testing.T, client redis.UniversalClient)) {
	t.Helper()
	EachTarget(t, func(t *testing.T, tg *Target) { fn(t, tg.Client) })
}

// EachTarget is [Each] with the whole [Target] (address, namespace, embedded server).
func EachTarget(t *testing.T, fn func(t *testing.T, tg *Target)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		s := NewServer(t)
		fn(t, &Target{Name: "miniredis", Addr: s.Addr(), Client: s.Client(t), NS: NS(t), Mini: s.Mini})
	})
	addr := os.Getenv(EnvAddr)
	if addr == "" {
		return
	}
	t.Run("redis", func(t *testing.T) {
		c := Dial(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatalf("redistest: %s=%s does not answer PING: %v", EnvAddr, addr, err)
		}
		ns := NS(t)
		t.Cleanup(func() { DeleteNamespace(t, c, ns) })
		fn(t, &Target{Name: "redis", Addr: addr, Client: c, NS: ns})
	})
}

// New returns a client to a fresh miniredis (with the expiry clock running); both are
// closed in t's cleanup.
func New(t testing.TB) redis.UniversalClient {
	t.Helper()
	return NewServer(t).Client(t)
}

// Dial returns a client to addr with short timeouts (dial 1 s, one dial attempt, read/write
// 2 s, no command retries, no CLIENT SETINFO or maintenance notifications), closed in t's
// cleanup.
func Dial(t testing.TB, addr string) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                     addr,
		DialTimeout:              time.Second,
		ReadTimeout:              2 * time.Second,
		WriteTimeout:             2 * time.Second,
		MaxRetries:               -1,
		DialerRetries:            1,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var (
	runID   = newRunID()
	nsSeq   atomic.Uint64
	nsByT   sync.Map // testing.TB -> string
	nsClean = strings.NewReplacer("/", "_", " ", "_", "*", "_", "?", "_", "[", "_", "]", "_", "{", "_", "}", "_", "\\", "_", ":", "_")
)

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NS returns t's namespace: "t<run>-<seq>-<test name>" with a random per-process run id, a
// per-test sequence number, and the test name cleaned of glob and hash-tag characters. It
// is the same string for every call with the same t, and unique across tests and
// processes, so it can be put into keys on a shared Redis and matched on cleanup.
func NS(t testing.TB) string {
	if v, ok := nsByT.Load(t); ok {
		return v.(string)
	}
	name := nsClean.Replace(t.Name())
	if len(name) > 60 {
		name = name[len(name)-60:]
	}
	ns := fmt.Sprintf("t%s-%d-%s", runID, nsSeq.Add(1), name)
	v, _ := nsByT.LoadOrStore(t, ns)
	t.Cleanup(func() { nsByT.Delete(t) })
	return v.(string)
}

// DeleteNamespace deletes every key whose name contains ns (SCAN MATCH *ns* in pages of
// 1000, each page deleted with one pipeline of DELs), within 60 s. It reports failures
// with t.Errorf; it never flushes a database.
func DeleteNamespace(t testing.TB, c redis.UniversalClient, ns string) {
	t.Helper()
	if ns == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var cursor uint64
	for i := 0; i < 1_000_000; i++ { // bounded: a million scan pages
		keys, next, err := c.Scan(ctx, cursor, "*"+ns+"*", 1000).Result()
		if err != nil {
			t.Errorf("redistest: cleanup of namespace %q: %v", ns, err)
			return
		}
		if len(keys) > 0 {
			p := c.Pipeline()
			for _, k := range keys {
				p.Del(ctx, k)
			}
			if _, err := p.Exec(ctx); err != nil {
				t.Errorf("redistest: cleanup of namespace %q: %v", ns, err)
				return
			}
		}
		if next == 0 {
			return
		}
		cursor = next
	}
}

// Server is an embedded miniredis whose key TTLs follow the wall clock.
type Server struct {
	// Mini is the embedded server. Stop it with Mini.Close and start it again on the same
	// address with Mini.Restart (data is kept) to simulate an outage.
	Mini *miniredis.Miniredis

	stop chan struct{}
	done chan struct{}
}

// NewServer starts a miniredis on 127.0.0.1 (a free port) and its expiry clock; both stop
// in t's cleanup.
func NewServer(t testing.TB) *Server {
	t.Helper()
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatalf("redistest: start miniredis: %v", err)
	}
	s := &Server{Mini: mr, stop: make(chan struct{}), done: make(chan struct{})}
	go s.clock()
	t.Cleanup(func() {
		close(s.stop)
		<-s.done
		mr.Close()
	})
	return s
}

// clock fast-forwards miniredis by the real time elapsed, every 5 ms, until stop.
func (s *Server) clock() {
	defer close(s.done)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-tick.C:
			s.Mini.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr returns the server's "127.0.0.1:port".
func (s *Server) Addr() string { return s.Mini.Addr() }

// Client returns a new client to the server (see [Dial]), closed in t's cleanup.
func (s *Server) Client(t testing.TB) redis.UniversalClient { return Dial(t, s.Addr()) }
