package console_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/broker"
	"github.com/sluicemq/sluice/config"
	"github.com/sluicemq/sluice/console"
)

// fromAddr returns an HTTP client whose connections come from the local address ip.
func fromAddr(ip net.IP) *http.Client {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		}}}
}

// TestLoginGuessesFromManyAddressesLimited: the sign-in limit was per address only (and
// addresses past the 10,000 records kept went untracked), so a guesser holding many
// addresses got five free guesses from each: 30 addresses, 150 guesses checked. Failures
// from all addresses together are now limited (LoginFailuresPerMinute): once that
// bucket is empty every address is answered 429 with Retry-After, its token unchecked.
func TestLoginGuessesFromManyAddressesLimited(t *testing.T) {
	const perMinute = 20
	e := newEnv(t, func(c *console.Config) {
		c.Token, c.LoginLockout, c.LoginFailuresPerMinute = "s3cret", time.Hour, perMinute
	}, broker.Config{})
	start := time.Now()
	checked, refused := 0, 0
	for h := range 30 {
		c := fromAddr(net.IPv4(127, 0, 0, byte(2+h)))
		for range 5 {
			resp, err := c.Post(e.base+"/login", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"token": {"guess"}}.Encode()))
			if err != nil {
				t.Skipf("needs 127.0.0.2 … 127.0.0.31 as local addresses (Linux loopback): %v", err)
			}
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusUnauthorized:
				checked++
			case http.StatusTooManyRequests:
				if resp.Header.Get("Retry-After") == "" {
					t.Fatal("429 without Retry-After")
				}
				refused++
			default:
				t.Fatalf("guess: %d", resp.StatusCode)
			}
		}
	}
	// The bucket refills perMinute a minute while the test runs.
	allowed := perMinute + int(time.Since(start).Minutes()*perMinute) + 1
	t.Logf("%d of 150 guesses from 30 addresses checked, %d refused (allowed %d)", checked, refused, allowed)
	if checked > allowed {
		t.Fatalf("%d guesses checked from 30 addresses, want at most %d", checked, allowed)
	}
	if refused < 150-allowed {
		t.Fatalf("%d guesses refused, want at least %d", refused, 150-allowed)
	}
}

// TestLoginFailuresPerMinuteValidated: a negative or huge LoginFailuresPerMinute is a
// *config.Error naming the field.
func TestLoginFailuresPerMinuteValidated(t *testing.T) {
	e := newEnv(t, nil, broker.Config{})
	for _, v := range []int{-1, 1_000_001} {
		_, err := console.New(console.Config{Admin: e.a, Listen: "127.0.0.1:0", LoginFailuresPerMinute: v})
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != "LoginFailuresPerMinute" || !strings.Contains(err.Error(), "1..1000000") {
			t.Errorf("%d: %v", v, err)
		}
	}
}
