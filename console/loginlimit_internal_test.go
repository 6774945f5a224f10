package console

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// TestLoginLimitPer64: IPv6 addresses of one /64 share a record (a client holds the
// whole /64 and could otherwise take a fresh address for every five guesses); another
// /64 and an IPv4 address are separate.
func TestLoginLimitPer64(t *testing.T) {
	l := newLoginLimiter(time.Hour, 1_000_000)
	for i := range 5 {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = "[2001:db8:1:2::" + strconv.FormatInt(int64(i+1), 16) + "]:4000"
		l.failed(r)
	}
	for remote, locked := range map[string]bool{
		"[2001:db8:1:2:ffff::9]:1": true,
		"[2001:db8:1:3::1]:1":      false,
		"192.0.2.1:1":              false,
	} {
		r := httptest.NewRequest("POST", "/login", nil)
		r.RemoteAddr = remote
		if got := l.lockedOut(r) > 0; got != locked {
			t.Errorf("%s locked out %v, want %v", remote, got, locked)
		}
	}
}

// TestLoginLimitFullTableStillLimited: with loginMaxAddresses live records held, a new
// address used to go untracked (unlimited guesses); the global bucket still stops it.
func TestLoginLimitFullTableStillLimited(t *testing.T) {
	l := newLoginLimiter(time.Hour, 100)
	now := time.Unix(1_000_000, 0)
	l.now = func() time.Time { return now }
	for i := range loginMaxAddresses {
		l.byIP["198.51."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)] = &loginRecord{failures: 1, last: now}
	}
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = "203.0.113.7:1"
	tries := 0
	for l.lockedOut(r) == 0 && tries < 1000 {
		l.failed(r)
		tries++
	}
	if tries != 100 {
		t.Fatalf("an untracked address got %d failures before the limit, want 100", tries)
	}
	if len(l.byIP) != loginMaxAddresses {
		t.Fatalf("%d records kept", len(l.byIP))
	}
	now = now.Add(3 * time.Second) // five tokens back
	if l.lockedOut(r) != 0 {
		t.Fatal("still refused after the bucket refilled")
	}
}
