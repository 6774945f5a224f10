package console_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/console"
)

// TestLoginRateLimited (issue 26, finding 7): the console's sign-in had no rate limit
// (200 token guesses in 1.5 s). After 5 failures from one address it answers 429 with
// Retry-After, without checking the token (the right one included; the test's lockout
// is an hour so that it does not end during the test), while another
// address still signs in; wrong bearer tokens count too.
func TestLoginRateLimited(t *testing.T) {
	e := newEnv(t, func(c *console.Config) { c.Token = "s3cret"; c.LoginLockout = time.Hour }, broker.Config{})
	refused := 0
	for i := range 200 {
		code, _, hdr := do(t, "POST", e.base+"/login", url.Values{"token": {"guess"}}, nil)
		switch {
		case i < 5 && code != http.StatusUnauthorized:
			t.Fatalf("guess %d: %d, want 401", i, code)
		case i >= 5 && (code != http.StatusTooManyRequests || hdr.Get("Retry-After") == ""):
			t.Fatalf("guess %d: %d (Retry-After %q), want 429", i, code, hdr.Get("Retry-After"))
		case code == http.StatusTooManyRequests:
			refused++
		}
	}
	if code, _, _ := do(t, "POST", e.base+"/login", url.Values{"token": {"s3cret"}}, nil); code != http.StatusTooManyRequests {
		t.Fatalf("the right token from a locked-out address: %d, want 429", code)
	}
	if code, _, _ := do(t, "GET", e.base+"/topics", nil, map[string]string{"Authorization": "Bearer s3cret"}); code != http.StatusTooManyRequests {
		t.Fatalf("a bearer token from a locked-out address: %d, want 429", code)
	}
	// Another address (127.0.0.2, loopback on Linux) is not affected.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	other := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}}}
	resp, err := other.Post(e.base+"/login", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"token": {"s3cret"}}.Encode()))
	if err != nil {
		t.Skipf("needs 127.0.0.2 as a local address (Linux loopback): %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in from another address: %d", resp.StatusCode)
	}
	// Wrong bearer tokens from that address lock it out as well.
	for i := range 6 {
		req, _ := http.NewRequest("GET", e.base+"/topics", nil)
		req.Header.Set("Authorization", "Bearer wrong")
		resp, err := other.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: http.StatusSeeOther, false: http.StatusTooManyRequests}[i < 5]; resp.StatusCode != want {
			t.Fatalf("wrong bearer %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	t.Logf("%d of 200 guesses refused without a check", refused)
}
