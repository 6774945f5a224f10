package acl

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNonceQuotaPerAccount: an account holding its share of the nonce store is refused
// with a *NonceQuotaError while another account still adds nonces; its nonces expire in
// order and free its share.
func TestNonceQuotaPerAccount(t *testing.T) {
	var c nonceCache
	now := time.Unix(1_000_000, 0)
	ttl := time.Minute
	for i := range 3 {
		if err := c.add("a", "n"+strconv.Itoa(i), now.Add(time.Duration(i)*time.Second), ttl, 100, 3); err != nil {
			t.Fatal(err)
		}
	}
	var qe *NonceQuotaError
	if err := c.add("a", "n9", now.Add(3*time.Second), ttl, 100, 3); !errors.As(err, &qe) || qe.Held != 3 || qe.Limit != 3 {
		t.Fatalf("over the quota: %v", err)
	}
	if err := c.add("b", "n9", now.Add(3*time.Second), ttl, 100, 3); err != nil {
		t.Fatalf("another account: %v", err)
	}
	if err := c.add("a", "n0", now.Add(30*time.Second), ttl, 100, 3); err == nil || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("replay within ttl: %v", err)
	}
	// The first nonce of a expired: one more fits, and n0 is no longer remembered.
	later := now.Add(ttl + 500*time.Millisecond)
	if err := c.add("a", "n10", later, ttl, 100, 3); err != nil {
		t.Fatalf("after one expired: %v", err)
	}
	if c.perAcct["a"] != 3 || len(c.seen) != 4 {
		t.Fatalf("held %d by a, %d in all", c.perAcct["a"], len(c.seen))
	}
	if c.refusedQuota() != 1 {
		t.Fatalf("refusedQuota = %d", c.refusedQuota())
	}
	// The total still bounds the store.
	if err := c.add("c", "x", later, ttl, 4, 3); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("total limit: %v", err)
	}
}

// TestSigFloorSurvivesCrash: the floor file is moved past every time before it is
// accepted, so a process that stops without SaveSignatureFloor (a crash) still leaves a
// floor at or above every accepted time; a clean save leaves exactly the highest.
func TestSigFloorSurvivesCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config", "aclSignatureFloor")
	start := time.UnixMilli(5_000_000)
	f, err := openFloor(path, start)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.admit(start.UnixMilli(), start); err == nil {
		t.Fatal("a time at the start was accepted on the first start")
	}
	accepted := start.UnixMilli() + 250
	if err := f.admit(accepted, start); err != nil {
		t.Fatal(err)
	}
	// "Crash": reopen without save.
	g, err := openFloor(path, start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if g.floor < accepted {
		t.Fatalf("floor after a crash %d is below an accepted time %d", g.floor, accepted)
	}
	if err := g.admit(accepted, start); err == nil {
		t.Fatal("a time accepted before the crash was accepted again")
	}
	if err := f.save(); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if strings.TrimSpace(string(data)) != strconv.FormatInt(accepted, 10) {
		t.Fatalf("saved floor %q, want %d", data, accepted)
	}
	if err := os.WriteFile(path, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openFloor(path, start); err == nil || !strings.Contains(err.Error(), "not a unix time") {
		t.Fatalf("junk floor file: %v", err)
	}
}
